// IoEngine: asynchronous reads of one file into aligned host buffers.
//
// The disk tier of the weight store. A read is (file offset, length, dst); with
// O_DIRECT all three must be multiples of kDirectAlign (4096), which the extent
// layout (extent_layout.h) guarantees by rounding every tensor's byte range out
// to the alignment and handing the model a pointer inside it:
//
//   file:  |....[aligned start ....tensor bytes.... aligned end]....|
//                ^ offset & ~4095    ^ offset        ^ round up(offset + n)
//   dst:         [ pad |  tensor bytes  | pad ]   tensor pointer = dst + (offset - start)
//
// Two backends behind one interface:
//   kUring  io_uring (liburing): reads go to a submission ring of queue_depth
//           entries; completions are reaped from the completion ring. An eventfd
//           registered with the ring lets wait() sleep until a completion or an
//           interrupt() arrives.
//   kPread  a pool of queue_depth threads each doing blocking pread(); the
//           fallback when io_uring is unavailable (old kernel, seccomp).
// Short reads are finished inside the engine (the remainder is reissued), except
// at end of file: a read that runs past EOF completes with the bytes that exist.
// O_DIRECT: requested by default; when the filesystem refuses it (tmpfs, some
// network filesystems) the file is opened buffered and direct() says so.
// A read-rate cap (IoEngineOptions::rate_cap_bytes_per_s) wraps either backend
// in a decorator that holds each completion back until the bytes returned so
// far could have come off a disk of that rate: a slower disk, emulated (reads
// stay in flight for as long as they would take there), or a share of this one.
//
// Thread-safety: submit() and wait() are called from one thread (the arbiter's
// IO thread, or a single test thread). interrupt() may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "sluice/status.h"

namespace sluice::weights {

inline constexpr uint64_t kDirectAlign = 4096;

inline uint64_t align_down(uint64_t x, uint64_t a) { return x / a * a; }
inline uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// Owning, kDirectAlign-aligned, zero-initialised host buffer. Move-only.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // Errors: allocation failure (resource exhausted).
  static StatusOr<AlignedBuffer> allocate(uint64_t bytes);
  AlignedBuffer(AlignedBuffer&& o) noexcept : data_(o.data_), size_(o.size_) { o.data_ = nullptr; o.size_ = 0; }
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer();

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

enum class IoBackend { kAuto, kUring, kPread };
const char* io_backend_name(IoBackend b);
// "auto", "uring" (or "io_uring"), "pread". Errors: anything else.
StatusOr<IoBackend> parse_io_backend(const std::string& name);

struct IoEngineOptions {
  std::string path;                     // the model file
  IoBackend backend = IoBackend::kAuto; // kAuto: io_uring, falling back to pread
  int queue_depth = 16;                 // reads in flight at most (1..256)
  bool direct = true;                   // ask for O_DIRECT (falls back when refused)
  // Reads complete no faster than this many bytes/s (0: as fast as the disk
  // goes); see make_rate_capped_engine.
  double rate_cap_bytes_per_s = 0;
};

struct IoRead {
  uint64_t offset = 0;   // file offset   (aligned when direct())
  uint64_t length = 0;   // bytes to read (aligned when direct())
  uint8_t* dst = nullptr;// destination   (aligned when direct())
  uint64_t tag = 0;      // returned with the completion
};

// CHECKs the contract of IoEngine::submit on r: a read with somewhere to land,
// queue room (in_flight < queue_depth), and under O_DIRECT the alignments above.
void check_submit(const IoRead& r, bool direct, int in_flight, int queue_depth);

struct IoCompletion {
  uint64_t tag = 0;
  uint64_t bytes = 0;    // bytes read (less than length only at end of file)
  Status status;
};

class IoEngine {
 public:
  // Opens `options.path` with the requested backend. Errors: the file cannot be
  // opened; kUring requested explicitly but io_uring cannot be set up.
  static StatusOr<std::unique_ptr<IoEngine>> open(const IoEngineOptions& options);

  virtual ~IoEngine() = default;

  IoBackend backend() const { return backend_; }
  bool direct() const { return direct_; }
  int queue_depth() const { return queue_depth_; }
  uint64_t file_size() const { return file_size_; }
  const std::string& path() const { return path_; }
  // The read-rate cap in bytes/s (0: none).
  double rate_cap_bytes_per_s() const { return rate_cap_bytes_per_s_; }
  // One line for the placement map, e.g. "io_uring, queue depth 16, O_DIRECT",
  // with the cap when there is one ("reads capped at 100 MB/s").
  std::string describe() const;
  // Why kAuto fell back to pread, or O_DIRECT was refused (empty if neither).
  const std::string& fallback_note() const { return fallback_note_; }

  // Reads in flight (submitted, completion not yet returned by wait()).
  virtual int in_flight() const = 0;
  // Queues a read; in_flight() < queue_depth() is required (CHECK). Misaligned
  // direct reads are a bug in the caller (CHECK). A backend may hold the reads
  // submitted back to back until the next wait(), to start them with one
  // system call.
  virtual void submit(const IoRead& read) = 0;
  // Appends finished reads to `out`. Blocks until at least one completes, an
  // interrupt() arrives or `timeout_s` passes (< 0: no timeout; 0: poll).
  // Returns the number appended.
  virtual int wait(std::vector<IoCompletion>& out, double timeout_s) = 0;
  // Makes a blocked (or the next) wait() return early. Any thread.
  virtual void interrupt() = 0;

 protected:
  IoEngine(IoBackend backend, std::string path, bool direct, uint64_t file_size, int queue_depth)
      : backend_(backend), direct_(direct), queue_depth_(queue_depth), file_size_(file_size), path_(std::move(path)) {}

  IoBackend backend_;
  bool direct_;
  int queue_depth_;
  uint64_t file_size_;
  std::string path_;
  std::string fallback_note_;
  double rate_cap_bytes_per_s_ = 0;
};

// Backend constructors, used by IoEngine::open. The engine owns `fd` once it is
// returned; when make_uring_engine fails, fd is still the caller's.
StatusOr<std::unique_ptr<IoEngine>> make_uring_engine(int fd, const std::string& path, bool direct,
                                                      uint64_t file_size, int queue_depth);
std::unique_ptr<IoEngine> make_pread_engine(int fd, const std::string& path, bool direct, uint64_t file_size,
                                            int queue_depth);
// `inner` with its reads capped at `bytes_per_s` (> 0), a token bucket with no
// burst: the disk is modelled as serving the submitted reads one after another
// at that rate, so a read submitted at t completes no earlier than
//   due = max(due of the read before, t) + length / bytes_per_s
// (nor before `inner` finishes it). Bytes returned by time T since the first
// submission never exceed bytes_per_s x T, and a stream of reads kept in
// flight takes its bytes / bytes_per_s. Held reads count as in flight; wait()
// sleeps in inner's wait() until the next is due, and interrupt() still wakes
// it. Same threading as any IoEngine. Used by IoEngine::open when
// IoEngineOptions::rate_cap_bytes_per_s > 0.
std::unique_ptr<IoEngine> make_rate_capped_engine(std::unique_ptr<IoEngine> inner, double bytes_per_s);

// Reads bytes [offset, offset + length) of the engine's file into `dst` (any
// alignment): aligned chunks of `chunk_bytes` go through a bounce buffer, with
// up to queue_depth reads in flight. For tests, probes and one-off loads; the
// weight store reads straight into its aligned slots. Call only while no one
// else uses the engine. Errors: I/O failure, the range runs past end of file.
Status read_exact(IoEngine& engine, uint64_t offset, uint64_t length, uint8_t* dst,
                  uint64_t chunk_bytes = 1u << 20);

// Read rate of the engine's file (GB/s): `bytes` from `offset` in sequential
// reads of `block` bytes, keeping queue_depth() in flight, as the weight store
// reads its layers. offset and block multiples of kDirectAlign; bytes is
// rounded down to whole blocks. Call only while no one else uses the engine.
// Errors: I/O failure, fewer bytes than one block.
StatusOr<double> probe_read_gbps(IoEngine& engine, uint64_t block, uint64_t offset, uint64_t bytes);

}  // namespace sluice::weights
