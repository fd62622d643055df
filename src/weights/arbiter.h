// BandwidthArbiter: the one queue every transfer into host memory goes through.
//
// A transfer is a list of aligned extents (extent_layout.h) to land in one
// buffer. The arbiter cuts transfers into reads of at most chunk_bytes and
// keeps the IoEngine's queue full, always issuing the next read of the most
// urgent transfer:
//
//   class       kCritical  >  kPredicted  >  kKvSwap  >  kPrefetch   (then oldest first)
//               the layer or  experts the    KV blocks    opportunistic
//               expert about  router is      swapped in   read-ahead
//               to run        expected to
//                             choose
//
// A prediction that turns out right is moved up to kCritical
// (reprioritize()) when its layer is about to run; one that turns out wrong
// is cancelled.
//
// Reads already in flight are never recalled, so a critical transfer waits for
// at most queue_depth reads in front of it. An optional cap (bytes/s, a token
// bucket with no burst) spaces reads so the disk is left to other users.
//
// Lifecycle of a transfer: submit() -> queued -> reads in flight -> landed;
// every transfer is retired exactly once, by wait() (blocks until landed) or by
// cancel() (stops issuing, waits for its reads in flight). Retiring frees its
// record; a TransferId must not be used after that.
//
// Threads: one internal IO thread owns the engine. All public methods are
// thread-safe; the data the extents point at must stay valid until retirement.
#pragma once

#include <array>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "sluice/status.h"
#include "weights/extent_layout.h"
#include "weights/io_engine.h"

namespace sluice::weights {

enum class TransferClass : int { kCritical = 0, kPredicted = 1, kKvSwap = 2, kPrefetch = 3 };
inline constexpr int kNumTransferClasses = 4;
const char* transfer_class_name(TransferClass c);

struct ArbiterOptions {
  int max_transfers = 64;          // transfer records alive at once (queued or landed, not retired)
  uint64_t chunk_bytes = 1u << 20; // largest single read (rounded down to kDirectAlign)
  double cap_bytes_per_s = 0;      // 0: no cap
  bool start_paused = false;       // queue but issue nothing until resume()
};

using TransferId = uint64_t;  // 0 is never a valid id

struct TransferResult {
  Status status;
  uint64_t bytes = 0;        // bytes read from disk (extent bytes, less past end of file)
  double wait_s = 0;         // how long wait() blocked
  double service_s = 0;      // submit -> landed
  uint64_t done_order = 0;   // 1 for the first transfer the arbiter ever finished, 2 next, ...
};

struct ArbiterStats {
  std::array<uint64_t, kNumTransferClasses> bytes{};        // read per class
  std::array<uint64_t, kNumTransferClasses> n_transfers{};  // landed per class
  uint64_t n_reads = 0;
  uint64_t n_cancelled = 0;
  double cap_wait_s = 0;     // time the IO thread held reads back for the cap
  double busy_s = 0;         // time with at least one read in flight (as the IO thread sees it)

  uint64_t total_bytes() const {
    uint64_t n = 0;
    for (uint64_t b : bytes) n += b;
    return n;
  }
  // The disk's rate while it had work: total_bytes / busy_s (0 before any read).
  double in_flight_gbps() const { return busy_s > 0 ? static_cast<double>(total_bytes()) / busy_s / 1e9 : 0.0; }
};

class BandwidthArbiter {
 public:
  // Starts the IO thread. The engine must outlive the arbiter and is used by no one else.
  BandwidthArbiter(IoEngine& engine, const ArbiterOptions& options);
  // Cancels queued transfers, waits for reads in flight, stops the thread.
  ~BandwidthArbiter();
  BandwidthArbiter(const BandwidthArbiter&) = delete;
  BandwidthArbiter& operator=(const BandwidthArbiter&) = delete;

  // Queues reads of `extents` into base + extent.dst_offset.
  // Errors: max_transfers records already alive (resource exhausted).
  StatusOr<TransferId> submit(TransferClass cls, std::span<const IoExtent> extents, uint8_t* base);
  // Blocks until the transfer has landed, retires it and returns its result.
  TransferResult wait(TransferId id);
  // True once every read of the transfer has completed (it is not retired).
  bool landed(TransferId id) const;
  // Stops issuing the transfer's reads, waits for those in flight and retires it.
  struct Cancelled {
    bool was_pending = false;  // it had not landed yet
    uint64_t bytes_read = 0;   // what its reads brought in before it stopped
    bool untouched = false;    // no read of it was ever issued: its buffer is as it was
  };
  Cancelled cancel(TransferId id);
  // Moves a transfer to another class; it keeps its age within the new class.
  void reprioritize(TransferId id, TransferClass cls);

  void set_cap(double bytes_per_s);
  void pause();
  void resume();

  ArbiterStats stats() const;
  const IoEngine& engine() const { return engine_; }

 private:
  struct Transfer {
    uint32_t generation = 0;
    bool alive = false;
    TransferClass cls = TransferClass::kPrefetch;
    uint64_t seq = 0;                 // submission order
    std::span<const IoExtent> extents;
    uint8_t* base = nullptr;
    size_t next_extent = 0;           // next read starts at extents[next_extent] + next_pos
    uint64_t next_pos = 0;
    int in_flight = 0;
    bool issued = false;              // a read of it went to the engine
    bool cancelled = false;
    bool landed = false;
    uint64_t bytes = 0;
    Status status;
    double submit_s = 0;
    double landed_s = 0;
    uint64_t done_order = 0;
    bool has_work() const { return !cancelled && next_extent < extents.size(); }
  };

  void io_loop();
  Transfer& lookup(TransferId id);
  const Transfer& lookup(TransferId id) const;
  // Picks the transfer whose next read goes first, or -1.
  int pick() const;
  void issue(int index);
  void retire(int index);
  void maybe_land(Transfer& t, double now);

  IoEngine& engine_;
  const uint64_t chunk_bytes_;
  mutable std::mutex mu_;
  std::condition_variable state_cv_;  // waiters: a transfer landed or a read finished
  std::condition_variable work_cv_;   // IO thread: new work, resume, stop
  std::vector<Transfer> transfers_;
  std::vector<int> free_;
  uint64_t next_seq_ = 0;
  uint64_t n_landed_ = 0;
  double cap_bytes_per_s_ = 0;
  double next_allowed_s_ = 0;         // token bucket: the next read may start then
  double busy_since_ = -1;            // when the engine's queue last went from empty to not; -1: empty
  bool paused_ = false;
  bool stop_ = false;
  ArbiterStats stats_;
  std::thread thread_;
};

}  // namespace sluice::weights
