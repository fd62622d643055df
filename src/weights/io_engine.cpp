#include "weights/io_engine.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "base/check.h"
#include "base/enum_names.h"
#include "base/huge_buffer.h"
#include "base/timer.h"

namespace sluice::weights {

void check_submit(const IoRead& r, bool direct, int in_flight, int queue_depth) {
  CHECK(in_flight < queue_depth);
  CHECK(r.length > 0 && r.dst != nullptr);
  if (direct) {
    CHECK(r.offset % kDirectAlign == 0 && r.length % kDirectAlign == 0);
    CHECK(reinterpret_cast<uintptr_t>(r.dst) % kDirectAlign == 0);
  }
}

StatusOr<AlignedBuffer> AlignedBuffer::allocate(uint64_t bytes) {
  AlignedBuffer b;
  if (bytes == 0) return b;
  // Weights are read from these buffers over and over: from 2 MiB up they sit
  // on transparent huge pages where the kernel gives them (one page walk per
  // 2 MiB instead of per 4 KiB; a hint, ordinary pages otherwise).
  const uint64_t align = bytes >= kHugePageBytes ? kHugePageBytes : kDirectAlign;
  const uint64_t rounded = align_up(bytes, align);
  void* p = std::aligned_alloc(align, rounded);
  if (!p) return resource_exhausted("cannot allocate {} bytes of aligned host memory", rounded);
  if (align == kHugePageBytes) advise_huge_pages(p, rounded);
  std::memset(p, 0, rounded);
  b.data_ = static_cast<uint8_t*>(p);
  b.size_ = rounded;
  return b;
}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
  if (this != &o) {
    std::free(data_);
    data_ = o.data_;
    size_ = o.size_;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

AlignedBuffer::~AlignedBuffer() { std::free(data_); }

constexpr EnumName<IoBackend> kIoBackendNames[] = {
    {IoBackend::kAuto, "auto"}, {IoBackend::kUring, "io_uring"}, {IoBackend::kPread, "pread"}};

const char* io_backend_name(IoBackend b) { return enum_name(b, kIoBackendNames); }

StatusOr<IoBackend> parse_io_backend(const std::string& name) {
  if (name == "auto") return IoBackend::kAuto;
  if (name == "uring" || name == "io_uring") return IoBackend::kUring;
  if (name == "pread") return IoBackend::kPread;
  return invalid_argument("unknown IO backend '{}' (known: auto, uring, pread)", name);
}

std::string IoEngine::describe() const {
  std::string s = fmt::format("{}, queue depth {}, {}", io_backend_name(backend_), queue_depth_,
                              direct_ ? "O_DIRECT (page cache bypassed)" : "buffered (page cache in use)");
  if (rate_cap_bytes_per_s_ > 0) s += fmt::format(", reads capped at {:.4g} MB/s", rate_cap_bytes_per_s_ / 1e6);
  if (!fallback_note_.empty()) s += "; " + fallback_note_;
  return s;
}

namespace {

// True when an O_DIRECT read of the first block succeeds (some filesystems
// accept the open flag and then refuse the reads).
bool direct_read_works(int fd, uint64_t file_size) {
  if (file_size == 0) return true;
  void* p = std::aligned_alloc(kDirectAlign, kDirectAlign);
  if (!p) return false;
  const ssize_t got = ::pread(fd, p, kDirectAlign, 0);
  std::free(p);
  return got > 0;
}

}  // namespace

StatusOr<std::unique_ptr<IoEngine>> IoEngine::open(const IoEngineOptions& o) {
  if (o.queue_depth < 1 || o.queue_depth > 256)
    return invalid_argument("IO queue depth must be in [1, 256] (got {})", o.queue_depth);
  if (!(o.rate_cap_bytes_per_s >= 0) || std::isinf(o.rate_cap_bytes_per_s))
    return invalid_argument("the read-rate cap must be a finite number of bytes/s, 0 for none (got {})",
                            o.rate_cap_bytes_per_s);
  struct stat st {};
  if (::stat(o.path.c_str(), &st) != 0) return not_found("{}: {}", o.path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return invalid_argument("{}: not a regular file (weights stream from one file)", o.path);
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);

  std::string note;
  bool direct = o.direct;
  int fd = -1;
  if (direct) {
    fd = ::open(o.path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (fd >= 0 && !direct_read_works(fd, file_size)) {
      ::close(fd);
      fd = -1;
    }
    if (fd < 0) {
      direct = false;
      note = "the filesystem refused O_DIRECT, reading buffered";
    }
  }
  if (fd < 0) {
    fd = ::open(o.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return io_error("{}: cannot open: {}", o.path, std::strerror(errno));
  }

  std::unique_ptr<IoEngine> engine;
  if (o.backend == IoBackend::kPread) {
    engine = make_pread_engine(fd, o.path, direct, file_size, o.queue_depth);
  } else {
    StatusOr<std::unique_ptr<IoEngine>> ring = make_uring_engine(fd, o.path, direct, file_size, o.queue_depth);
    if (ring.ok()) {
      engine = std::move(*ring);
    } else if (o.backend == IoBackend::kUring) {
      ::close(fd);
      return ring.status();
    } else {
      if (!note.empty()) note += "; ";
      note += "io_uring unavailable (" + ring.status().message() + "), using the pread thread pool";
      engine = make_pread_engine(fd, o.path, direct, file_size, o.queue_depth);
    }
  }
  engine->fallback_note_ = note;
  if (o.rate_cap_bytes_per_s > 0) return make_rate_capped_engine(std::move(engine), o.rate_cap_bytes_per_s);
  return engine;
}

Status read_exact(IoEngine& engine, uint64_t offset, uint64_t length, uint8_t* dst, uint64_t chunk_bytes) {
  CHECK(engine.in_flight() == 0);
  if (length == 0) return Status();
  if (offset + length > engine.file_size())
    return data_loss("read of [{}, {}) runs past the end of the file ({} bytes)", offset, offset + length,
                     engine.file_size());
  chunk_bytes = std::max<uint64_t>(kDirectAlign, align_down(chunk_bytes, kDirectAlign));
  const uint64_t first = align_down(offset, kDirectAlign);
  const uint64_t last = align_up(offset + length, kDirectAlign);
  const uint64_t n_chunks = (last - first + chunk_bytes - 1) / chunk_bytes;
  const int depth = static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(engine.queue_depth()), n_chunks));
  ASSIGN_OR_RETURN(AlignedBuffer bounce, AlignedBuffer::allocate(chunk_bytes * static_cast<uint64_t>(depth)));
  std::vector<int> free_slots;
  for (int i = depth - 1; i >= 0; --i) free_slots.push_back(i);
  std::vector<IoCompletion> done;
  Status status;
  uint64_t next = 0;  // next chunk to issue
  while (next < n_chunks || engine.in_flight() > 0) {
    while (status.ok() && next < n_chunks && !free_slots.empty()) {
      const int slot = free_slots.back();
      free_slots.pop_back();
      const uint64_t off = first + next * chunk_bytes;
      engine.submit({.offset = off,
                     .length = std::min(chunk_bytes, last - off),
                     .dst = bounce.data() + static_cast<uint64_t>(slot) * chunk_bytes,
                     .tag = next * 1024 + static_cast<uint64_t>(slot)});
      ++next;
    }
    if (!status.ok() && engine.in_flight() == 0) break;
    done.clear();
    engine.wait(done, -1);
    for (const IoCompletion& c : done) {
      const uint64_t chunk = c.tag / 1024;
      const int slot = static_cast<int>(c.tag % 1024);
      free_slots.push_back(slot);
      if (!c.status.ok()) {
        if (status.ok()) status = c.status;
        continue;
      }
      // Copy the part of this chunk that lies inside [offset, offset + length).
      const uint64_t c0 = first + chunk * chunk_bytes;
      const uint64_t c1 = c0 + c.bytes;
      const uint64_t b = std::max(c0, offset);
      const uint64_t e = std::min(c1, offset + length);
      if (e < std::min(c0 + chunk_bytes, offset + length) && status.ok())
        status = data_loss("short read at offset {}: {} bytes", c0, c.bytes);
      if (e > b) std::memcpy(dst + (b - offset), bounce.data() + static_cast<uint64_t>(slot) * chunk_bytes + (b - c0), e - b);
    }
  }
  return status;
}

StatusOr<double> probe_read_gbps(IoEngine& engine, uint64_t block, uint64_t offset, uint64_t bytes) {
  CHECK(block > 0 && block % kDirectAlign == 0 && offset % kDirectAlign == 0);
  bytes = bytes / block * block;
  if (bytes == 0) return invalid_argument("read probe: fewer bytes than one {}-byte read", block);
  const int depth = engine.queue_depth();
  ASSIGN_OR_RETURN(AlignedBuffer buf, AlignedBuffer::allocate(block * static_cast<uint64_t>(depth)));
  std::vector<int> free_slots;
  for (int i = 0; i < depth; ++i) free_slots.push_back(i);
  std::vector<IoCompletion> done;
  uint64_t issued = 0, landed = 0;
  Stopwatch sw;
  while (landed < bytes) {
    while (issued < bytes && !free_slots.empty()) {
      const int slot = free_slots.back();
      free_slots.pop_back();
      engine.submit({.offset = offset + issued, .length = block, .dst = buf.data() + static_cast<uint64_t>(slot) * block,
                     .tag = static_cast<uint64_t>(slot)});
      issued += block;
    }
    done.clear();
    engine.wait(done, -1);
    for (const IoCompletion& c : done) {
      if (!c.status.ok()) return c.status;
      landed += block;
      free_slots.push_back(static_cast<int>(c.tag));
    }
  }
  return static_cast<double>(bytes) / sw.seconds() / 1e9;
}

}  // namespace sluice::weights
