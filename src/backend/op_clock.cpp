#include "backend/op_clock.h"

#include "base/check.h"
#include "base/timer.h"

namespace sluice {

HostOpClock::HostOpClock(int capacity) : capacity_(capacity) {
  CHECK(capacity > 0);
  marks_.reserve(static_cast<size_t>(capacity));
}

void HostOpClock::mark() {
  CHECK(static_cast<int>(marks_.size()) < capacity_);
  marks_.push_back(now_seconds());
}

void HostOpClock::read(std::vector<double>& at) {
  at.clear();
  for (double t : marks_) at.push_back(t - marks_.front());
  if (!marks_.empty()) marks_.erase(marks_.begin(), marks_.end() - 1);
}

}  // namespace sluice
