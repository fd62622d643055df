#include "format/gguf_reader.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <unordered_set>

namespace sluice {
namespace {

constexpr uint64_t kMaxAlignment = uint64_t{1} << 30;
constexpr uint64_t kMaxNameBytes = 65535;              // keys and tensor names
constexpr uint64_t kMaxStringBytes = uint64_t{1} << 28; // any string value
constexpr uint64_t kMaxArrayElements = uint64_t{1} << 24;
constexpr uint32_t kMaxDims = 4;

// Smallest possible encodings, used to refuse lying counts before allocating.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;             // empty key, type, u8 value
constexpr uint64_t kMinTensorBytes = 8 + 4 + 8 + 4 + 8;  // empty name, 1 dim, type, offset

// Bytes of one scalar of a GGUF value type, 0 for string/array/unknown.
uint64_t scalar_bytes(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool: return 1;
    case GgufType::kUint16:
    case GgufType::kInt16: return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32: return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64: return 8;
    default: return 0;
  }
}

// Smallest encoded size of one value of type `t` (used to bound array counts).
uint64_t min_value_bytes(GgufType t) {
  if (t == GgufType::kString) return 8;
  if (t == GgufType::kArray) return 4 + 8;
  return scalar_bytes(t);
}

bool valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kFloat64); }

// Sequential little-endian reader over the header bytes. Every read is bounds
// checked; the parser turns a failed read into a Status naming what was read.
class GgufParser {
 public:
  GgufParser(const uint8_t* data, size_t size, const std::string& name)
      : data_(data), size_(size), name_(name) {}

  StatusOr<ModelFile> parse();

 private:
  uint64_t remaining() const { return size_ - pos_; }

  template <typename T>
  bool read(T* out) {
    if (remaining() < sizeof(T)) return false;
    std::memcpy(out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }

  Status truncated(const std::string& what) const {
    return data_loss("{}: truncated at byte {} (file size {}) while reading {}", name_, pos_,
                     size_, what);
  }

  Status read_string(uint64_t cap, const std::string& what, std::string* out);
  Status read_value(GgufType type, int depth, const std::string& key, MetaValue* out);
  // One value of file type T, stored in out->value as V (int64_t or double).
  template <typename T, typename V>
  Status read_scalar(const std::string& what, MetaValue* out) {
    T v;
    if (!read(&v)) return truncated(what);
    out->value = static_cast<V>(v);
    return Status::ok_status();
  }
  Status read_array(int depth, const std::string& key, MetaArray* out);
  Status read_kv(Metadata* md);
  Status read_tensor_info(std::unordered_set<std::string>* names, TensorInfo* t,
                          uint64_t* offset);

  const uint8_t* data_;
  uint64_t size_;
  std::string name_;
  uint64_t pos_ = 0;
};

Status GgufParser::read_string(uint64_t cap, const std::string& what, std::string* out) {
  uint64_t len = 0;
  if (!read(&len)) return truncated("the length of " + what);
  if (len > cap) {
    return data_loss("{}: {} has length {} at byte {}, more than the limit {}", name_, what, len,
                     pos_ - 8, cap);
  }
  if (len > remaining()) {
    return data_loss("{}: {} has length {} at byte {}, but only {} bytes remain", name_, what,
                     len, pos_ - 8, remaining());
  }
  out->assign(reinterpret_cast<const char*>(data_ + pos_), len);
  pos_ += len;
  return Status::ok_status();
}

Status GgufParser::read_value(GgufType type, int depth, const std::string& key,
                              MetaValue* out) {
  out->type = type;
  const std::string what = "the value of '" + key + "'";
  switch (type) {
    case GgufType::kUint8: return read_scalar<uint8_t, int64_t>(what, out);
    case GgufType::kInt8: return read_scalar<int8_t, int64_t>(what, out);
    case GgufType::kUint16: return read_scalar<uint16_t, int64_t>(what, out);
    case GgufType::kInt16: return read_scalar<int16_t, int64_t>(what, out);
    case GgufType::kUint32: return read_scalar<uint32_t, int64_t>(what, out);
    case GgufType::kInt32: return read_scalar<int32_t, int64_t>(what, out);
    case GgufType::kInt64: return read_scalar<int64_t, int64_t>(what, out);
    case GgufType::kFloat32: return read_scalar<float, double>(what, out);
    case GgufType::kFloat64: return read_scalar<double, double>(what, out);
    case GgufType::kUint64: {
      uint64_t v;
      if (!read(&v)) return truncated(what);
      if (v > static_cast<uint64_t>(INT64_MAX)) out->value = v;
      else out->value = static_cast<int64_t>(v);
      return Status::ok_status();
    }
    case GgufType::kBool: {
      uint8_t v;
      if (!read(&v)) return truncated(what);
      if (v > 1) return data_loss("{}: bool '{}' has byte value {}", name_, key, v);
      out->value = v == 1;
      return Status::ok_status();
    }
    case GgufType::kString: {
      std::string s;
      RETURN_IF_ERROR(read_string(kMaxStringBytes, what, &s));
      out->value = std::move(s);
      return Status::ok_status();
    }
    case GgufType::kArray: {
      MetaArray a;
      RETURN_IF_ERROR(read_array(depth + 1, key, &a));
      out->value = std::move(a);
      return Status::ok_status();
    }
  }
  return data_loss("{}: '{}' has unknown value type {}", name_, key, static_cast<uint32_t>(type));
}

Status GgufParser::read_array(int depth, const std::string& key, MetaArray* out) {
  if (depth > kGgufMaxArrayDepth) {
    return data_loss("{}: array '{}' is nested more than {} deep", name_, key, kGgufMaxArrayDepth);
  }
  uint32_t raw_type = 0;
  uint64_t n = 0;
  if (!read(&raw_type)) return truncated("the element type of array '" + key + "'");
  if (!valid_value_type(raw_type)) {
    return data_loss("{}: array '{}' has unknown element type {}", name_, key, raw_type);
  }
  const auto type = static_cast<GgufType>(raw_type);
  if (!read(&n)) return truncated("the length of array '" + key + "'");
  const uint64_t min_bytes = min_value_bytes(type);
  if (n > remaining() / min_bytes || n > kMaxArrayElements) {
    return data_loss("{}: array '{}' claims {} elements of type {}, but only {} bytes remain",
                     name_, key, n, gguf_type_name(type), remaining());
  }
  out->elem_type = type;
  switch (type) {
    case GgufType::kString: {
      out->strings.resize(n);
      for (uint64_t i = 0; i < n; ++i) {
        RETURN_IF_ERROR(read_string(kMaxStringBytes,
                                    fmt::format("element {} of array '{}'", i, key),
                                    &out->strings[i]));
      }
      return Status::ok_status();
    }
    case GgufType::kArray: {
      out->arrays.resize(n);
      for (uint64_t i = 0; i < n; ++i) {
        out->arrays[i].type = GgufType::kArray;
        MetaArray inner;
        RETURN_IF_ERROR(read_array(depth + 1, key, &inner));
        out->arrays[i].value = std::move(inner);
      }
      return Status::ok_status();
    }
    case GgufType::kFloat32:
    case GgufType::kFloat64: {
      out->floats.resize(n);
      for (uint64_t i = 0; i < n; ++i) {
        MetaValue v;
        RETURN_IF_ERROR(read_value(type, depth, key, &v));
        out->floats[i] = std::get<double>(v.value);
      }
      return Status::ok_status();
    }
    default: {
      out->ints.resize(n);
      for (uint64_t i = 0; i < n; ++i) {
        MetaValue v;
        RETURN_IF_ERROR(read_value(type, depth, key, &v));
        if (auto* u = std::get_if<uint64_t>(&v.value)) out->ints[i] = static_cast<int64_t>(*u);
        else if (auto* b = std::get_if<bool>(&v.value)) out->ints[i] = *b ? 1 : 0;
        else out->ints[i] = std::get<int64_t>(v.value);
      }
      return Status::ok_status();
    }
  }
}

Status GgufParser::read_kv(Metadata* md) {
  const uint64_t at = pos_;
  std::string key;
  RETURN_IF_ERROR(read_string(kMaxNameBytes, fmt::format("a metadata key at byte {}", at), &key));
  if (md->has(key)) return data_loss("{}: duplicate metadata key '{}' at byte {}", name_, key, at);
  uint32_t raw_type = 0;
  if (!read(&raw_type)) return truncated("the type of '" + key + "'");
  if (!valid_value_type(raw_type)) {
    return data_loss("{}: metadata key '{}' has unknown value type {}", name_, key, raw_type);
  }
  MetaValue v;
  RETURN_IF_ERROR(read_value(static_cast<GgufType>(raw_type), 0, key, &v));
  md->set(key, std::move(v));
  return Status::ok_status();
}

Status GgufParser::read_tensor_info(std::unordered_set<std::string>* names, TensorInfo* t,
                                    uint64_t* offset) {
  const uint64_t at = pos_;
  RETURN_IF_ERROR(
      read_string(kMaxNameBytes, fmt::format("a tensor name at byte {}", at), &t->name));
  if (!names->insert(t->name).second) {
    return data_loss("{}: duplicate tensor name '{}' at byte {}", name_, t->name, at);
  }
  const std::string& tn = t->name;
  uint32_t n_dims = 0;
  if (!read(&n_dims)) return truncated("the dimension count of tensor '" + tn + "'");
  if (n_dims < 1 || n_dims > kMaxDims) {
    return data_loss("{}: tensor '{}' has {} dimensions (must be 1..{})", name_, tn, n_dims,
                     kMaxDims);
  }
  t->ne.resize(n_dims);
  int64_t n_elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    uint64_t ne = 0;
    if (!read(&ne)) return truncated("the dimensions of tensor '" + tn + "'");
    if (ne > static_cast<uint64_t>(INT64_MAX)) {
      return data_loss("{}: tensor '{}' dimension {} is {}, which is negative as int64", name_,
                       tn, d, ne);
    }
    if (ne == 0) {
      // Row arithmetic downstream divides by ne[0]; no model has an empty tensor.
      return data_loss("{}: tensor '{}' dimension {} is 0 (every dimension must be at least 1)",
                       name_, tn, d);
    }
    t->ne[d] = static_cast<int64_t>(ne);
    if (__builtin_mul_overflow(n_elements, t->ne[d], &n_elements)) {
      return data_loss("{}: tensor '{}' element count overflows int64 (shape {})", name_, tn,
                       t->shape_string());
    }
  }
  uint32_t raw_type = 0;
  if (!read(&raw_type)) return truncated("the type of tensor '" + tn + "'");
  if (!read(offset)) return truncated("the offset of tensor '" + tn + "'");
  const std::optional<DType> type = dtype_from_ggml(raw_type);
  if (!type) {
    return unimplemented("{}: tensor '{}' has type {} (ggml type {}), which is not supported",
                         name_, tn, ggml_type_name(raw_type), raw_type);
  }
  t->type = *type;
  const DTypeTraits& traits = dtype_traits(t->type);
  if (t->ne[0] % traits.block_size != 0) {
    return data_loss("{}: tensor '{}' of type {} has ne[0] = {}, not a multiple of the block "
                     "size {}",
                     name_, tn, traits.name, t->ne[0], traits.block_size);
  }
  // n_elements fits int64, so blocks * block_bytes is checked in unsigned 64-bit.
  const uint64_t n_blocks = static_cast<uint64_t>(n_elements / traits.block_size);
  if (__builtin_mul_overflow(n_blocks, static_cast<uint64_t>(traits.block_bytes), &t->n_bytes)) {
    return data_loss("{}: tensor '{}' byte size overflows (shape {})", name_, tn,
                     t->shape_string());
  }
  return Status::ok_status();
}

StatusOr<ModelFile> GgufParser::parse() {
  uint32_t magic = 0;
  if (!read(&magic)) return truncated("the magic");
  if (magic != kGgufMagic) {
    return data_loss("{}: not a GGUF file (magic 0x{:08x}, expected \"GGUF\")", name_, magic);
  }
  uint32_t version = 0;
  if (!read(&version)) return truncated("the version");
  if (version != 0 && (version & 0xffffu) == 0) {
    return unimplemented("{}: big-endian GGUF not supported (version field 0x{:08x})", name_,
                         version);
  }
  if (version == 1) {
    return unimplemented("{}: GGUF version 1 (32-bit counts) is obsolete and not supported; "
                         "convert the file to version 3",
                         name_);
  }
  if (version != 2 && version != 3) {
    return unimplemented("{}: GGUF version {} not supported (only 2 and 3)", name_, version);
  }
  uint64_t n_tensors = 0, n_kv = 0;
  if (!read(&n_tensors)) return truncated("the tensor count");
  if (!read(&n_kv)) return truncated("the metadata count");
  if (n_kv > remaining() / kMinKvBytes) {
    return data_loss("{}: header claims {} metadata entries, but only {} bytes remain", name_,
                     n_kv, remaining());
  }
  if (n_tensors > remaining() / kMinTensorBytes ||
      n_kv * kMinKvBytes + n_tensors * kMinTensorBytes > remaining()) {
    return data_loss("{}: header claims {} tensors and {} metadata entries, but only {} bytes "
                     "remain",
                     name_, n_tensors, n_kv, remaining());
  }

  ModelFile mf;
  mf.source_path = name_;
  mf.format = "gguf";
  mf.gguf_version = version;
  for (uint64_t i = 0; i < n_kv; ++i) RETURN_IF_ERROR(read_kv(&mf.metadata));

  mf.alignment = kGgufDefaultAlignment;
  if (const MetaValue* a = mf.metadata.find("general.alignment")) {
    const std::optional<int64_t> v = mf.metadata.get_int("general.alignment");
    if (!v || a->type == GgufType::kBool) {
      return data_loss("{}: general.alignment has type {}, expected an integer", name_,
                       gguf_type_name(a->type));
    }
    const uint64_t al = static_cast<uint64_t>(*v);
    if (*v <= 0 || (al & (al - 1)) != 0 || al > kMaxAlignment) {
      return data_loss("{}: general.alignment is {}, not a power of two in 1..{}", name_, *v,
                       kMaxAlignment);
    }
    mf.alignment = al;
  }

  mf.tensors.resize(n_tensors);
  std::vector<uint64_t> offsets(n_tensors);
  std::unordered_set<std::string> names;
  names.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    RETURN_IF_ERROR(read_tensor_info(&names, &mf.tensors[i], &offsets[i]));
  }
  if (n_tensors == 0) return mf;

  // Tensor data starts at the first aligned byte after the header.
  const uint64_t data_start = (pos_ + mf.alignment - 1) / mf.alignment * mf.alignment;
  if (data_start > size_) {
    return data_loss("{}: tensor data would start at byte {}, past the end of the file ({} "
                     "bytes)",
                     name_, data_start, size_);
  }
  const uint64_t data_size = size_ - data_start;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo& t = mf.tensors[i];
    if (offsets[i] % mf.alignment != 0) {
      return data_loss("{}: tensor '{}' offset {} is not a multiple of the alignment {}", name_,
                       t.name, offsets[i], mf.alignment);
    }
    if (offsets[i] > data_size || t.n_bytes > data_size - offsets[i]) {
      return data_loss("{}: tensor '{}' ({} bytes at data offset {}) ends past the end of the "
                       "file (data region is {} bytes)",
                       name_, t.name, t.n_bytes, offsets[i], data_size);
    }
    t.file_offset = static_cast<int64_t>(data_start + offsets[i]);
    t.data = data_ + data_start + offsets[i];
  }
  std::vector<size_t> order(n_tensors);
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return offsets[a] < offsets[b]; });
  // Non-empty regions must not overlap: compare each with the furthest end so far.
  uint64_t prev_end = 0;
  const TensorInfo* prev = nullptr;
  for (size_t idx : order) {
    const TensorInfo& cur = mf.tensors[idx];
    if (cur.n_bytes == 0) continue;
    if (prev != nullptr && offsets[idx] < prev_end) {
      return data_loss("{}: tensor '{}' (data offset {}) overlaps tensor '{}' (data bytes up to "
                       "{})",
                       name_, cur.name, offsets[idx], prev->name, prev_end);
    }
    prev_end = offsets[idx] + cur.n_bytes;
    prev = &cur;
  }
  return mf;
}

}  // namespace

StatusOr<ModelFile> parse_gguf(const uint8_t* data, size_t size, const std::string& name) {
  if (data == nullptr && size != 0) return invalid_argument("{}: null data", name);
  GgufParser parser(data, size, name);
  return parser.parse();
}

StatusOr<ModelFile> read_gguf(const std::string& path) {
  ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::open(path));
  auto mapping = std::make_shared<MappedFile>(std::move(mapped));
  ASSIGN_OR_RETURN(ModelFile mf, parse_gguf(mapping->data(), mapping->size(), path));
  mf.hold(std::move(mapping));
  return mf;
}

}  // namespace sluice
