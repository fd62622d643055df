// A clock for the operators a backend runs: marks placed between operator
// calls as they are made, read later as each mark's time on the clock of the
// hardware that ran the work. The time between two consecutive marks is the
// time the hardware took for the calls made between them, so a forward pass
// with a mark after each operator reads as a time per operator (OpProfile,
// model/op_profile.h).
//
//   calls:  [embed] m0 [rope] m1 [norm+qkv] m2 [attention] m3 ...
//   read:   t0       t1          t2               t3
//           rope took t1 - t0, q/k/v t2 - t1, attention t3 - t2
//
// A backend whose operators return when their work is done (the CPU, the
// reference) reads the host's clock (HostOpClock). A device that runs its
// work later, in order on a stream, records a timed event there instead
// (the CUDA backend), so the times are the device's, not the host's enqueue.
// One thread uses a clock; it lives no longer than the backend it came from.
#pragma once

#include <vector>

namespace sluice {

class OpClock {
 public:
  virtual ~OpClock() = default;
  // Marks the point after every operator called so far. At most capacity()
  // marks are held between reads; mark() beyond that is a CHECK failure.
  virtual void mark() = 0;
  virtual int capacity() const = 0;
  // Waits for the marked work, then writes each held mark's time in seconds,
  // in order, from the first mark (at[0] = 0), and forgets them all but the
  // last, which becomes the first of the next read (no time between reads is
  // lost).
  virtual void read(std::vector<double>& at) = 0;
};

// The host's steady clock: for backends whose operators are done on return.
class HostOpClock final : public OpClock {
 public:
  explicit HostOpClock(int capacity = 4096);
  void mark() override;
  int capacity() const override { return capacity_; }
  void read(std::vector<double>& at) override;

 private:
  int capacity_;
  std::vector<double> marks_;  // [held] seconds on the host's clock
};

}  // namespace sluice
