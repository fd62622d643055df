// CopyQueue: the CUDA backend's copies between host and device memory (the
// streamed ring's layers, the expert slots' experts, KV swap) on one copy
// stream, issued in CopySchedule's order (backend/copy_schedule.h): a chunk
// at a time, the most urgent transfer first, so that a critical copy waits
// for at most the chunks in flight, not for every predicted expert queued
// before it.
//
//   submit(class, pieces, after)  -> id   queued; its first chunk waits (on the
//                                         copy stream) for `after`
//   pump thread: keeps max_in_flight chunks on the stream, taking each next
//                chunk from the schedule as the oldest one completes
//   wait(id, stream)   stream's later work waits for the transfer; chunks of it
//                      not issued yet are issued at once, ahead of the rest
//   sync(id)           the host waits for it
//   reprioritize / cancel / retire   as CopySchedule's
//
// Contract for `after`: its latest record when the transfer is submitted is
// what the copy follows; the caller records it again only after wait() or
// sync() (DeviceSlots: a slot's readers are recorded after they waited for
// its fill). All methods are thread-safe; the host memory of a transfer must
// stay until it is done.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "backend/copy_schedule.h"

namespace sluice::cuda {

struct CopyQueueOptions {
  size_t chunk_bytes = size_t{4} << 20;  // ~80 us at a PCIe 5 x16 link's rate
  int max_in_flight = 2;                 // chunks the pump keeps on the stream
  int max_transfers = 1024;              // alive at once (more: CHECK, an owner not retiring)
  int max_pieces = 64;                   // per transfer
};

class CopyQueue {
 public:
  using Id = CopySchedule::Id;
  explicit CopyQueue(const CopyQueueOptions& options = {});
  ~CopyQueue();
  CopyQueue(const CopyQueue&) = delete;
  CopyQueue& operator=(const CopyQueue&) = delete;

  // A new transfer; `after` (may be null) is an event its first chunk waits
  // for. Blocks while max_transfers are alive. CHECKs pieces <= max_pieces.
  Id submit(CopyClass c, std::span<const CopyPiece> pieces, cudaEvent_t after);
  void reprioritize(Id id, CopyClass c);
  // Whether every chunk of the transfer is on the stream.
  bool fully_issued(Id id) const;
  // Whether the transfer is done (the host does not wait).
  bool done(Id id) const;
  // The work enqueued on `stream` (unless null) from now on waits for the transfer;
  // `copied` (if set) is recorded on the copy stream after it (and perhaps
  // after chunks issued since: a host wait on it waits no less).
  void wait(Id id, cudaStream_t stream, cudaEvent_t copied = nullptr);
  // Returns once the transfer is done.
  void sync(Id id);
  // Drops the chunks not issued, waits for those in flight; frees the record.
  // Returns the bytes that had been issued.
  size_t cancel(Id id);
  // Frees the record of a transfer; one not fully issued is cancelled.
  void retire(Id id);
  // Returns once every transfer submitted so far is done.
  void finish();

  cudaStream_t stream() const { return stream_; }
  // Bytes copied per class so far.
  std::array<uint64_t, kNumCopyClasses> bytes_issued() const;

 private:
  struct Rec {
    Id id = 0;
    cudaEvent_t after = nullptr;
    cudaEvent_t done = nullptr;  // recorded after its last chunk
    bool done_recorded = false;
  };
  Rec* rec(Id id);
  // Enqueues one chunk on the stream (mu_ held).
  void issue(const CopySchedule::Chunk& c);
  // Issues every chunk of `id` not issued yet (mu_ held).
  void issue_all(Id id);
  // An event recorded on the stream now, into the in-flight list (mu_ held).
  void mark_in_flight();
  void pump();

  CopyQueueOptions options_;
  cudaStream_t stream_ = nullptr;
  mutable std::mutex mu_;
  std::condition_variable cv_;        // work for the pump
  CopySchedule schedule_;
  std::vector<Rec> recs_;             // [max_transfers]
  std::vector<cudaEvent_t> free_events_;
  std::deque<cudaEvent_t> in_flight_;  // oldest first
  bool stop_ = false;
  std::thread pump_;
};

}  // namespace sluice::cuda
