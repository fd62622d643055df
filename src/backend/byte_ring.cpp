#include "backend/byte_ring.h"

#include "base/check.h"

namespace sluice {

ByteRing::ByteRing(size_t capacity, int max_live)
    : capacity_(capacity), max_live_(max_live), live_(static_cast<size_t>(max_live)) {
  CHECK(capacity > 0 && max_live >= 1);
}

void ByteRing::retire_front(int64_t* after) {
  *after = live_[static_cast<size_t>(front_)].ticket;
  front_ = (front_ + 1) % max_live_;
  --count_;
}

ByteRing::Piece ByteRing::allocate(size_t n) {
  CHECK(n > 0 && n <= capacity_);
  Piece p;
  if (head_ + n > capacity_) {
    // From 0 again: the pieces of the previous lap, at head_ and after, are
    // the oldest; they go with the tail they sit in.
    while (count_ > 0 && live_[static_cast<size_t>(front_)].offset >= head_) retire_front(&p.after);
    head_ = 0;
  }
  // The oldest live pieces are the ones the range runs into: the previous
  // lap's, from head_ on; a front piece of this lap (below head_) means no
  // piece overlaps.
  while (count_ > 0) {
    const Live& f = live_[static_cast<size_t>(front_)];
    const bool overlaps = f.offset < head_ + n && f.offset + f.bytes > head_;
    if (!overlaps && count_ < max_live_) break;
    retire_front(&p.after);
  }
  p.offset = head_;
  p.ticket = next_ticket_++;
  live_[static_cast<size_t>((front_ + count_) % max_live_)] = Live{head_, n, p.ticket};
  ++count_;
  head_ += n;
  return p;
}

bool ByteRing::is_live(int64_t ticket) const {
  return count_ > 0 && ticket >= live_[static_cast<size_t>(front_)].ticket && ticket < next_ticket_;
}

}  // namespace sluice
