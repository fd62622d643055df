// HostViews: weight views in a weight source's host memory (the store's
// resident layers and ring slots under --mem-budget), copied into a ring of
// device memory at each use, through the backend's copy queue (critical copies).
//
//   host    the source's buffers, pinned with register_range() (a view outside
//           them is copied too, from pageable memory, at a lower rate)
//   device  one buffer of `capacity` bytes; where each copy goes, and which
//           earlier copies' readers it waits for, is backend/byte_ring.h's
//           ByteRing (tested without a GPU)
//
// A copy waits (on the copy stream) for the event recorded behind the kernels
// that read the bytes it overwrites; the compute stream waits for the copy's
// event before the kernels that read it (events, never the host). The host
// waits only in finish(): every copy issued so far has read its bytes, so the
// source may reuse them. The host thread runs ahead of the GPU, so the copy of
// the next layer overlaps the kernels of this one.
//
// Between two finish() calls the host bytes do not change (a source hands
// them out until release(), and the model finishes before it releases), so
// the same view used again while its copy is live in the ring is not copied
// again: a training step's backward reads each matrix twice in one visit
// (recomputing the forward, then matmul_t), and copies it once.
//
// Calls come from one thread at a time (the backend's); nothing allocates
// after construction but register_range's bookkeeping.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "backend/byte_ring.h"
#include "backend/cuda/cuda_copy_queue.h"

namespace sluice::cuda {

class HostViews {
 public:
  // capacity: device bytes for the copies in flight and in use (at least two
  // layers' worth, so the next layer's copies need not wait for this one's kernels).
  // The queue (the backend's copies, cuda_copy_queue.h) outlives the views.
  HostViews(size_t capacity, CopyQueue& queue);
  ~HostViews();
  HostViews(const HostViews&) = delete;
  HostViews& operator=(const HostViews&) = delete;

  size_t capacity() const { return ring_.capacity(); }
  // At least `capacity` bytes: waits for every copy, reallocates. The caller
  // has waited for the kernels that read the copies (its stream synchronized).
  void grow(size_t capacity);

  // Names [data, data + bytes) as host memory views point into, and pins it
  // for copies (false: it could not be pinned; its views are copied from
  // pageable memory). unregister_range() forgets and unpins it.
  bool register_range(const uint8_t* data, size_t bytes);
  void unregister_range(const uint8_t* data);
  // Whether p lies in a registered range.
  bool holds(const uint8_t* p) const;

  // The device copy of n bytes at `host`, ordered before the next work on
  // `compute`. Returns its ticket for read(). n <= capacity().
  struct Copy {
    uint8_t* device;
    int64_t ticket;
  };
  Copy copy_in(const uint8_t* host, size_t n, cudaStream_t compute);
  // The work enqueued on `compute` so far is the last to read the copy `ticket`.
  void read(int64_t ticket, cudaStream_t compute);
  // Returns once every copy issued so far has read its host bytes; later
  // views are copied again (their host bytes may have changed).
  void finish();

  uint64_t bytes_copied() const { return bytes_copied_; }

 private:
  static constexpr int kMaxLive = 64;  // copies alive at once (events in the pool)
  ByteRing ring_;
  uint8_t* dev_ = nullptr;
  CopyQueue& queue_;
  cudaEvent_t copied_ = nullptr;          // after the last copy
  std::vector<cudaEvent_t> read_;         // [kMaxLive] by ticket % kMaxLive
  std::vector<int64_t> read_ticket_;      // which ticket read_[i] was last recorded for (-1: none)
  struct Range {
    size_t bytes;
    bool pinned;
  };
  std::map<const uint8_t*, Range> ranges_;  // registered, by start
  bool pending_ = false;                  // a copy since the last finish()
  // The copies since the last finish() whose pieces may still be live, for
  // copy_in to hand out again (dead ones dropped at each copy).
  struct Made {
    const uint8_t* host;
    size_t bytes;
    int64_t ticket;
    uint8_t* device;
  };
  std::vector<Made> made_;
  std::vector<int64_t> unread_;           // handed out again by copy_in, read() not yet called
  int64_t newest_read_ = -1;              // the newest ticket read() recorded
  uint64_t bytes_copied_ = 0;
};

}  // namespace sluice::cuda
