// ByteRing: where the next n bytes go in a circular buffer, and which earlier
// pieces they overwrite, for weights copied into device memory at each use
// (a weight source's host memory under --mem-budget on the cuda backend;
// cuda/cuda_host_views.h). The policy only, over offsets and tickets, so that
// it is tested on any machine; the bytes, the copies and their events are the
// caller's.
//
//   allocate(n)  a contiguous range [offset, offset + n) after the last one,
//                or from 0 when it would pass the end (the skipped tail is
//                given up with it). Every earlier piece it overlaps, or that
//                must go to keep at most max_live pieces, is retired, oldest
//                first; `after` is the newest retired ticket: the copy into
//                the range must wait until that piece's readers are done, and
//                readers run in ticket order, so that covers every older one.
//
// Pieces are retired only by allocate(), in the order they were handed out.
// Calls come from one thread at a time; nothing allocates after construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice {

class ByteRing {
 public:
  // capacity > 0 bytes; max_live >= 1 pieces alive at once.
  ByteRing(size_t capacity, int max_live);

  struct Piece {
    size_t offset = 0;
    int64_t ticket = 0;  // 0, 1, 2, ... in allocation order
    int64_t after = -1;  // the newest piece this one retired (-1: none)
  };
  // 0 < n <= capacity().
  Piece allocate(size_t n);

  size_t capacity() const { return capacity_; }
  int max_live() const { return max_live_; }
  int live() const { return count_; }
  // Whether piece `ticket` is still live: handed out and not retired (its
  // bytes not yet given to a later piece).
  bool is_live(int64_t ticket) const;

 private:
  struct Live {
    size_t offset;
    size_t bytes;
    int64_t ticket;
  };
  void retire_front(int64_t* after);

  size_t capacity_;
  int max_live_;
  size_t head_ = 0;           // where the next piece starts if it fits
  std::vector<Live> live_;    // a circular queue of max_live_ entries, oldest at front_
  int front_ = 0, count_ = 0;
  int64_t next_ticket_ = 0;
};

}  // namespace sluice
