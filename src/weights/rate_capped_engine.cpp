// The read-rate cap of IoEngine (see make_rate_capped_engine in io_engine.h):
// a decorator that passes reads to the real engine at once and returns each
// completion when it is due on a disk of the capped rate.
//
//   submit:  due = max(due of the previous read, now) + length / rate
//   wait:    completions of the inner engine are kept in their slot until due;
//            between, wait() sleeps in the inner engine's wait() (which an
//            inner completion or interrupt() ends) until the earliest due.
//
// No allocation after construction: slots, the free list and the scratch
// vector for the inner engine's completions are sized to the queue depth.
#include <algorithm>
#include <atomic>
#include <limits>
#include <memory>
#include <vector>

#include "base/check.h"
#include "base/timer.h"
#include "weights/io_engine.h"

namespace sluice::weights {
namespace {

class RateCappedEngine final : public IoEngine {
 public:
  RateCappedEngine(std::unique_ptr<IoEngine> inner, double bytes_per_s)
      : IoEngine(inner->backend(), inner->path(), inner->direct(), inner->file_size(), inner->queue_depth()),
        inner_(std::move(inner)),
        slots_(static_cast<size_t>(queue_depth_)) {
    fallback_note_ = inner_->fallback_note();
    rate_cap_bytes_per_s_ = bytes_per_s;
    free_.reserve(slots_.size());
    for (int i = queue_depth_ - 1; i >= 0; --i) free_.push_back(i);
    scratch_.reserve(slots_.size());
  }

  // The inner engine's destructor finishes (or reaps) its reads in flight.
  ~RateCappedEngine() override = default;

  int in_flight() const override { return in_flight_; }

  void submit(const IoRead& r) override {
    CHECK(in_flight_ < queue_depth_);
    const int s = free_.back();
    free_.pop_back();
    Slot& slot = slots_[static_cast<size_t>(s)];
    next_due_s_ = std::max(next_due_s_, now_seconds()) + static_cast<double>(r.length) / rate_cap_bytes_per_s_;
    slot = Slot{.tag = r.tag, .due_s = next_due_s_};
    ++in_flight_;
    IoRead inner_read = r;
    inner_read.tag = static_cast<uint64_t>(s);
    inner_->submit(inner_read);
  }

  int wait(std::vector<IoCompletion>& out, double timeout_s) override {
    constexpr double kForever = std::numeric_limits<double>::infinity();
    const double start = now_seconds();
    const double deadline = timeout_s < 0 ? kForever : start + timeout_s;
    collect(0);
    while (true) {
      const double now = now_seconds();
      const int n = release_due(out, now);
      if (n > 0) return n;
      if (interrupted_.exchange(false, std::memory_order_acq_rel)) return 0;
      if (now >= deadline) return 0;
      // Sleep until the earliest read that has finished falls due, the
      // deadline, or the inner engine has news (a completion, an interrupt).
      double until = deadline;
      for (const Slot& slot : slots_)
        if (slot.landed) until = std::min(until, slot.due_s);
      collect(until == kForever ? -1.0 : std::max(until - now, 1e-6));
    }
  }

  void interrupt() override {
    interrupted_.store(true, std::memory_order_release);
    inner_->interrupt();
  }

 private:
  struct Slot {
    uint64_t tag = 0;     // the caller's
    double due_s = 0;     // when the capped disk would have finished it
    bool landed = false;  // the inner engine has finished it
    uint64_t bytes = 0;
    Status status;
  };

  // Moves the inner engine's completions into their slots.
  void collect(double timeout_s) {
    scratch_.clear();
    inner_->wait(scratch_, timeout_s);
    for (IoCompletion& c : scratch_) {
      Slot& slot = slots_[static_cast<size_t>(c.tag)];
      slot.landed = true;
      slot.bytes = c.bytes;
      slot.status = std::move(c.status);
    }
  }

  // Appends the finished reads due by `now` to `out`; returns how many.
  int release_due(std::vector<IoCompletion>& out, double now) {
    int n = 0;
    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot& slot = slots_[i];
      if (!slot.landed || slot.due_s > now) continue;
      out.push_back({.tag = slot.tag, .bytes = slot.bytes, .status = std::move(slot.status)});
      slot = Slot{};
      free_.push_back(static_cast<int>(i));
      --in_flight_;
      ++n;
    }
    return n;
  }

  std::unique_ptr<IoEngine> inner_;
  std::vector<Slot> slots_;
  std::vector<int> free_;                // slots not in use
  std::vector<IoCompletion> scratch_;    // the inner engine's completions of one wait()
  int in_flight_ = 0;                    // submitted, not yet returned by wait()
  double next_due_s_ = 0;                // when the capped disk is free again
  std::atomic<bool> interrupted_{false};
};

}  // namespace

std::unique_ptr<IoEngine> make_rate_capped_engine(std::unique_ptr<IoEngine> inner, double bytes_per_s) {
  CHECK(inner != nullptr && bytes_per_s > 0);
  return std::make_unique<RateCappedEngine>(std::move(inner), bytes_per_s);
}

}  // namespace sluice::weights
