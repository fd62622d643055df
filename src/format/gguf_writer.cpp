#include "format/gguf_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <type_traits>

namespace sluice {
namespace {

constexpr uint32_t kGgufVersion = 3;

// Little-endian byte sink for the header.
class Encoder {
 public:
  template <typename T>
  void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const size_t at = out_.size();
    out_.resize(at + sizeof(T));
    std::memcpy(out_.data() + at, &v, sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    out_.insert(out_.end(), s.begin(), s.end());
  }
  std::vector<uint8_t>& bytes() { return out_; }

 private:
  std::vector<uint8_t> out_;
};

bool int_fits(GgufType t, int64_t v) {
  switch (t) {
    case GgufType::kUint8: return v >= 0 && v <= 0xff;
    case GgufType::kInt8: return v >= -128 && v <= 127;
    case GgufType::kUint16: return v >= 0 && v <= 0xffff;
    case GgufType::kInt16: return v >= -32768 && v <= 32767;
    case GgufType::kUint32: return v >= 0 && v <= 0xffffffffLL;
    case GgufType::kInt32: return v >= INT32_MIN && v <= INT32_MAX;
    case GgufType::kBool: return v == 0 || v == 1;
    default: return true;  // 64-bit types hold any int64 bit pattern
  }
}

// Writes integer `v` (already range-checked, or a 64-bit bit pattern) as type t.
void put_int(Encoder* e, GgufType t, int64_t v) {
  switch (t) {
    case GgufType::kUint8: e->put(static_cast<uint8_t>(v)); break;
    case GgufType::kInt8: e->put(static_cast<int8_t>(v)); break;
    case GgufType::kUint16: e->put(static_cast<uint16_t>(v)); break;
    case GgufType::kInt16: e->put(static_cast<int16_t>(v)); break;
    case GgufType::kUint32: e->put(static_cast<uint32_t>(v)); break;
    case GgufType::kInt32: e->put(static_cast<int32_t>(v)); break;
    case GgufType::kBool: e->put(static_cast<uint8_t>(v != 0)); break;
    case GgufType::kUint64: e->put(static_cast<uint64_t>(v)); break;
    case GgufType::kInt64: e->put(v); break;
    default: break;
  }
}

bool is_int_type(GgufType t) {
  return t != GgufType::kFloat32 && t != GgufType::kFloat64 && t != GgufType::kString &&
         t != GgufType::kArray;
}

Status encode_array(Encoder* e, const std::string& key, const MetaArray& a, int depth);

Status encode_value(Encoder* e, const std::string& key, const MetaValue& v, int depth) {
  const GgufType t = v.type;
  auto mismatch = [&]() {
    return invalid_argument("metadata '{}': declared type {} does not match its value", key,
                            gguf_type_name(t));
  };
  if (t == GgufType::kString) {
    const auto* s = std::get_if<std::string>(&v.value);
    if (!s) return mismatch();
    e->put_string(*s);
    return Status::ok_status();
  }
  if (t == GgufType::kFloat32 || t == GgufType::kFloat64) {
    const auto* d = std::get_if<double>(&v.value);
    if (!d) return mismatch();
    if (t == GgufType::kFloat32) e->put(static_cast<float>(*d));
    else e->put(*d);
    return Status::ok_status();
  }
  if (t == GgufType::kArray) {
    const auto* a = std::get_if<MetaArray>(&v.value);
    if (!a) return mismatch();
    return encode_array(e, key, *a, depth + 1);
  }
  if (!is_int_type(t)) {
    return invalid_argument("metadata '{}': unknown type {}", key, static_cast<uint32_t>(t));
  }
  int64_t iv = 0;
  if (const auto* i = std::get_if<int64_t>(&v.value)) iv = *i;
  else if (const auto* u = std::get_if<uint64_t>(&v.value)) {
    if (t != GgufType::kUint64 && *u > static_cast<uint64_t>(INT64_MAX)) {
      return invalid_argument("metadata '{}': value {} does not fit {}", key, *u,
                              gguf_type_name(t));
    }
    iv = static_cast<int64_t>(*u);
  } else if (const auto* b = std::get_if<bool>(&v.value)) {
    iv = *b ? 1 : 0;
  } else {
    return mismatch();
  }
  if (t == GgufType::kUint64 && iv < 0 && std::holds_alternative<int64_t>(v.value)) {
    return invalid_argument("metadata '{}': negative value {} for type u64", key, iv);
  }
  if (!int_fits(t, iv)) {
    return invalid_argument("metadata '{}': value {} does not fit {}", key, iv, gguf_type_name(t));
  }
  put_int(e, t, iv);
  return Status::ok_status();
}

Status encode_array(Encoder* e, const std::string& key, const MetaArray& a, int depth) {
  if (depth > kGgufMaxArrayDepth) {
    return invalid_argument("metadata '{}': arrays nested more than {} deep", key, kGgufMaxArrayDepth);
  }
  const GgufType t = a.elem_type;
  e->put(static_cast<uint32_t>(t));
  e->put<uint64_t>(a.size());
  switch (t) {
    case GgufType::kString:
      for (const std::string& s : a.strings) e->put_string(s);
      return Status::ok_status();
    case GgufType::kFloat32:
      for (double d : a.floats) e->put(static_cast<float>(d));
      return Status::ok_status();
    case GgufType::kFloat64:
      for (double d : a.floats) e->put(d);
      return Status::ok_status();
    case GgufType::kArray:
      for (const MetaValue& inner : a.arrays) {
        const auto* ia = std::get_if<MetaArray>(&inner.value);
        if (inner.type != GgufType::kArray || !ia) {
          return invalid_argument("metadata '{}': nested array element is not an array", key);
        }
        RETURN_IF_ERROR(encode_array(e, key, *ia, depth + 1));
      }
      return Status::ok_status();
    default:
      if (!is_int_type(t)) {
        return invalid_argument("metadata '{}': unknown array element type {}", key,
                                static_cast<uint32_t>(t));
      }
      for (int64_t v : a.ints) {
        if (!int_fits(t, v)) {
          return invalid_argument("metadata '{}': array element {} does not fit {}", key, v,
                                  gguf_type_name(t));
        }
        put_int(e, t, v);
      }
      return Status::ok_status();
  }
}

// Owns the temp file descriptor; removes the temp file unless committed.
class TempFile {
 public:
  explicit TempFile(std::string path) : path_(std::move(path)) {}
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());
  }
  Status open() {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) return io_error("{}: cannot create: {}", path_, std::strerror(errno));
    return Status::ok_status();
  }
  Status write_all(const uint8_t* p, uint64_t n) {
    while (n > 0) {
      const size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, uint64_t{1} << 30));
      const ssize_t w = ::write(fd_, p, chunk);
      if (w < 0) {
        if (errno == EINTR) continue;
        return io_error("{}: write failed: {}", path_, std::strerror(errno));
      }
      p += w;
      n -= static_cast<uint64_t>(w);
      written_ += static_cast<uint64_t>(w);
    }
    return Status::ok_status();
  }
  Status write_zeros(uint64_t n) {
    static const uint8_t kZeros[4096] = {};
    while (n > 0) {
      const uint64_t chunk = std::min<uint64_t>(n, sizeof(kZeros));
      RETURN_IF_ERROR(write_all(kZeros, chunk));
      n -= chunk;
    }
    return Status::ok_status();
  }
  Status pad_to(uint64_t alignment) {
    return write_zeros((alignment - written_ % alignment) % alignment);
  }
  // Flushes, closes and renames onto `final_path`.
  Status commit(const std::string& final_path) {
    if (::fsync(fd_) != 0) return io_error("{}: fsync failed: {}", path_, std::strerror(errno));
    const int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) return io_error("{}: close failed: {}", path_, std::strerror(errno));
    if (::rename(path_.c_str(), final_path.c_str()) != 0) {
      return io_error("cannot rename {} to {}: {}", path_, final_path, std::strerror(errno));
    }
    committed_ = true;
    return Status::ok_status();
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t written_ = 0;
  bool committed_ = false;
};

}  // namespace

Status GgufWriter::add_entry(Entry entry) {
  if (entry.name.empty()) return invalid_argument("tensor with an empty name");
  for (const Entry& e : tensors_) {
    if (e.name == entry.name) return invalid_argument("duplicate tensor '{}'", entry.name);
  }
  if (entry.ne.empty() || entry.ne.size() > 4) {
    return invalid_argument("tensor '{}' has {} dimensions (must be 1..4)", entry.name,
                            entry.ne.size());
  }
  const DTypeTraits& traits = dtype_traits(entry.type);
  int64_t n = 1;
  for (int64_t d : entry.ne) {
    if (d < 0) return invalid_argument("tensor '{}' has negative dimension {}", entry.name, d);
    if (__builtin_mul_overflow(n, d, &n)) {
      return invalid_argument("tensor '{}' element count overflows", entry.name);
    }
  }
  if (entry.ne[0] % traits.block_size != 0) {
    return invalid_argument("tensor '{}': ne[0] = {} is not a multiple of the {} block size {}",
                            entry.name, entry.ne[0], traits.name, traits.block_size);
  }
  const uint64_t n_blocks = static_cast<uint64_t>(n / traits.block_size);
  if (__builtin_mul_overflow(n_blocks, static_cast<uint64_t>(traits.block_bytes),
                             &entry.n_bytes)) {
    return invalid_argument("tensor '{}' byte size overflows", entry.name);
  }
  if (entry.data == nullptr && !entry.fill && entry.n_bytes != 0) {
    return invalid_argument("tensor '{}' has no data", entry.name);
  }
  tensors_.push_back(std::move(entry));
  return Status::ok_status();
}

Status GgufWriter::add_tensor(const std::string& name, DType type, std::vector<int64_t> ne,
                              const uint8_t* data) {
  return add_entry(Entry{name, type, std::move(ne), 0, data, {}});
}

Status GgufWriter::add_tensor(const std::string& name, DType type, std::vector<int64_t> ne,
                              FillFn fill) {
  if (!fill) return invalid_argument("tensor '{}' has an empty fill function", name);
  return add_entry(Entry{name, type, std::move(ne), 0, nullptr, std::move(fill)});
}

uint64_t GgufWriter::total_tensor_bytes() const {
  uint64_t n = 0;
  for (const Entry& e : tensors_) n += e.n_bytes;
  return n;
}

Status GgufWriter::write(const std::string& path, const ProgressFn& progress) const {
  uint64_t alignment = kGgufDefaultAlignment;
  if (metadata_.has("general.alignment")) {
    const std::optional<int64_t> a = metadata_.get_int("general.alignment");
    if (!a || *a <= 0 || (*a & (*a - 1)) != 0) {
      return invalid_argument("{}: general.alignment must be a power of two", path);
    }
    alignment = static_cast<uint64_t>(*a);
  }

  Encoder e;
  e.put(kGgufMagic);
  e.put(kGgufVersion);
  e.put<uint64_t>(tensors_.size());
  e.put<uint64_t>(metadata_.size());
  for (const std::string& key : metadata_.keys()) {
    e.put_string(key);
    const MetaValue& v = *metadata_.find(key);
    e.put(static_cast<uint32_t>(v.type));
    RETURN_IF_ERROR(encode_value(&e, key, v, 0).with_context(path));
  }
  // Data offsets: each tensor starts aligned, relative to the data section.
  uint64_t offset = 0;
  for (const Entry& t : tensors_) {
    e.put_string(t.name);
    e.put(static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) e.put(static_cast<uint64_t>(d));
    e.put(static_cast<uint32_t>(t.type));
    e.put(offset);
    offset += (t.n_bytes + alignment - 1) / alignment * alignment;
  }

  TempFile out(path + ".partial");
  RETURN_IF_ERROR(out.open());
  RETURN_IF_ERROR(out.write_all(e.bytes().data(), e.bytes().size()));
  std::vector<uint8_t>().swap(e.bytes());
  if (!tensors_.empty()) RETURN_IF_ERROR(out.pad_to(alignment));

  const uint64_t total = total_tensor_bytes();
  uint64_t done = 0;
  if (progress) progress(done, total);
  std::vector<uint8_t> buffer;  // one fill tensor at a time
  for (const Entry& t : tensors_) {
    if (t.fill) {
      buffer.assign(t.n_bytes, 0);
      t.fill(buffer.data(), buffer.size());
      RETURN_IF_ERROR(out.write_all(buffer.data(), t.n_bytes));
    } else if (t.n_bytes != 0) {
      RETURN_IF_ERROR(out.write_all(t.data, t.n_bytes));
    }
    RETURN_IF_ERROR(out.pad_to(alignment));
    done += t.n_bytes;
    if (progress) progress(done, total);
  }
  return out.commit(path);
}

Status write_gguf(const ModelFile& mf, const std::string& path) {
  GgufWriter w;
  w.set_metadata(mf.metadata);
  for (const TensorInfo& t : mf.tensors) {
    RETURN_IF_ERROR(w.add_tensor(t.name, t.type, t.ne, t.data).with_context(path));
  }
  return w.write(path);
}

}  // namespace sluice
