#include "weights/arbiter.h"

#include <algorithm>

#include "base/check.h"
#include "base/enum_names.h"
#include "base/timer.h"

namespace sluice::weights {

constexpr EnumName<TransferClass> kTransferClassNames[] = {
    {TransferClass::kCritical, "critical"}, {TransferClass::kPredicted, "predicted"},
    {TransferClass::kKvSwap, "kv_swap"}, {TransferClass::kPrefetch, "prefetch"}};

const char* transfer_class_name(TransferClass c) { return enum_name(c, kTransferClassNames); }

BandwidthArbiter::BandwidthArbiter(IoEngine& engine, const ArbiterOptions& o)
    : engine_(engine),
      chunk_bytes_(std::max<uint64_t>(kDirectAlign, align_down(o.chunk_bytes, kDirectAlign))),
      transfers_(static_cast<size_t>(std::max(1, o.max_transfers))),
      cap_bytes_per_s_(std::max(0.0, o.cap_bytes_per_s)),
      paused_(o.start_paused) {
  for (int i = static_cast<int>(transfers_.size()) - 1; i >= 0; --i) free_.push_back(i);
  thread_ = std::thread([this] { io_loop(); });
}

BandwidthArbiter::~BandwidthArbiter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    for (Transfer& t : transfers_)
      if (t.alive) t.cancelled = true;
  }
  work_cv_.notify_all();
  engine_.interrupt();
  thread_.join();
}

BandwidthArbiter::Transfer& BandwidthArbiter::lookup(TransferId id) {
  const uint64_t index = (id & 0xffffffffu) - 1;
  CHECK(id != 0 && index < transfers_.size());
  Transfer& t = transfers_[index];
  CHECK(t.alive && t.generation == static_cast<uint32_t>(id >> 32));
  return t;
}

const BandwidthArbiter::Transfer& BandwidthArbiter::lookup(TransferId id) const {
  return const_cast<BandwidthArbiter*>(this)->lookup(id);
}

StatusOr<TransferId> BandwidthArbiter::submit(TransferClass cls, std::span<const IoExtent> extents, uint8_t* base) {
  TransferId id = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.empty())
      return resource_exhausted("{} transfers already queued or unretired (ArbiterOptions::max_transfers)",
                                transfers_.size());
    const int index = free_.back();
    free_.pop_back();
    Transfer& t = transfers_[static_cast<size_t>(index)];
    const uint32_t generation = t.generation + 1;
    t = Transfer{};
    t.generation = generation;
    t.alive = true;
    t.cls = cls;
    t.seq = next_seq_++;
    t.extents = extents;
    t.base = base;
    t.submit_s = now_seconds();
    maybe_land(t, t.submit_s);  // an empty transfer lands at once
    id = (static_cast<uint64_t>(generation) << 32) | static_cast<uint64_t>(index + 1);
  }
  work_cv_.notify_one();
  engine_.interrupt();  // the IO thread may be asleep in engine.wait() with a free queue slot
  return id;
}

TransferResult BandwidthArbiter::wait(TransferId id) {
  std::unique_lock<std::mutex> lock(mu_);
  Transfer& t = lookup(id);
  const double t0 = now_seconds();
  state_cv_.wait(lock, [&] { return t.landed; });
  TransferResult r{.status = t.status,
                   .bytes = t.bytes,
                   .wait_s = now_seconds() - t0,
                   .service_s = t.landed_s - t.submit_s,
                   .done_order = t.done_order};
  retire(static_cast<int>(&t - transfers_.data()));
  return r;
}

bool BandwidthArbiter::landed(TransferId id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return lookup(id).landed;
}

BandwidthArbiter::Cancelled BandwidthArbiter::cancel(TransferId id) {
  std::unique_lock<std::mutex> lock(mu_);
  Transfer& t = lookup(id);
  t.cancelled = true;
  state_cv_.wait(lock, [&] { return t.in_flight == 0; });
  const Cancelled c{.was_pending = !t.landed, .bytes_read = t.bytes, .untouched = !t.issued};
  if (c.was_pending) ++stats_.n_cancelled;
  retire(static_cast<int>(&t - transfers_.data()));
  return c;
}

void BandwidthArbiter::reprioritize(TransferId id, TransferClass cls) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    lookup(id).cls = cls;
  }
  engine_.interrupt();
}

void BandwidthArbiter::set_cap(double bytes_per_s) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cap_bytes_per_s_ = std::max(0.0, bytes_per_s);
    next_allowed_s_ = 0;
  }
  work_cv_.notify_one();
  engine_.interrupt();
}

void BandwidthArbiter::pause() {
  std::lock_guard<std::mutex> lock(mu_);
  paused_ = true;
}

void BandwidthArbiter::resume() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    paused_ = false;
  }
  work_cv_.notify_one();
  engine_.interrupt();
}

ArbiterStats BandwidthArbiter::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  ArbiterStats s = stats_;
  if (busy_since_ >= 0) s.busy_s += now_seconds() - busy_since_;  // the busy period under way
  return s;
}

void BandwidthArbiter::retire(int index) {
  Transfer& t = transfers_[static_cast<size_t>(index)];
  t.alive = false;
  t.extents = {};
  t.base = nullptr;
  free_.push_back(index);
}

void BandwidthArbiter::maybe_land(Transfer& t, double now) {
  if (t.landed || t.cancelled || t.in_flight > 0 || t.next_extent < t.extents.size()) return;
  t.landed = true;
  t.landed_s = now;
  t.done_order = ++n_landed_;
  ++stats_.n_transfers[static_cast<size_t>(t.cls)];
}

int BandwidthArbiter::pick() const {
  int best = -1;
  for (size_t i = 0; i < transfers_.size(); ++i) {
    const Transfer& t = transfers_[i];
    if (!t.alive || !t.has_work()) continue;
    if (best < 0) {
      best = static_cast<int>(i);
      continue;
    }
    const Transfer& b = transfers_[static_cast<size_t>(best)];
    if (t.cls < b.cls || (t.cls == b.cls && t.seq < b.seq)) best = static_cast<int>(i);
  }
  return best;
}

void BandwidthArbiter::issue(int index) {
  Transfer& t = transfers_[static_cast<size_t>(index)];
  const IoExtent& e = t.extents[t.next_extent];
  const uint64_t len = std::min(chunk_bytes_, e.length - t.next_pos);
  engine_.submit({.offset = e.file_offset + t.next_pos,
                  .length = len,
                  .dst = t.base + e.dst_offset + t.next_pos,
                  .tag = static_cast<uint64_t>(index)});
  ++t.in_flight;
  t.issued = true;
  ++stats_.n_reads;
  t.next_pos += len;
  if (t.next_pos == e.length) {
    ++t.next_extent;
    t.next_pos = 0;
  }
  if (cap_bytes_per_s_ > 0) {
    next_allowed_s_ = std::max(next_allowed_s_, now_seconds()) + static_cast<double>(len) / cap_bytes_per_s_;
  }
}

void BandwidthArbiter::io_loop() {
  std::vector<IoCompletion> done;
  done.reserve(static_cast<size_t>(engine_.queue_depth()));
  std::unique_lock<std::mutex> lock(mu_);
  double cap_blocked_since = -1;
  while (true) {
    // Fill the engine's queue in priority order, as far as the cap allows.
    double cap_sleep_s = -1;
    while (!paused_ && engine_.in_flight() < engine_.queue_depth()) {
      const int i = pick();
      if (i < 0) break;
      if (cap_bytes_per_s_ > 0) {
        const double now = now_seconds();
        if (now < next_allowed_s_) {
          cap_sleep_s = next_allowed_s_ - now;
          if (cap_blocked_since < 0) cap_blocked_since = now;
          break;
        }
        if (cap_blocked_since >= 0) {
          stats_.cap_wait_s += now - cap_blocked_since;
          cap_blocked_since = -1;
        }
      }
      // Busy time is every period with reads in flight, from the first issued
      // to the last landed, including the time this thread spends between
      // waits (the lock, completions, issuing), when the disk keeps working.
      // Each submission is a system call that starts its read, so a period
      // begins before the first of a refill, not after the last.
      if (busy_since_ < 0) busy_since_ = now_seconds();
      issue(i);
    }
    if (engine_.in_flight() == 0) {
      if (busy_since_ >= 0) {  // what was issued finished at once (nothing to read)
        stats_.busy_s += now_seconds() - busy_since_;
        busy_since_ = -1;
      }
      if (stop_) break;  // every transfer is cancelled, nothing in flight
      if (cap_sleep_s > 0) {
        work_cv_.wait_for(lock, std::chrono::duration<double>(cap_sleep_s));
      } else {
        work_cv_.wait(lock, [&] { return stop_ || (!paused_ && pick() >= 0); });
      }
      continue;
    }
    lock.unlock();
    done.clear();
    engine_.wait(done, cap_sleep_s > 0 ? cap_sleep_s : -1.0);
    const double t1 = now_seconds();
    lock.lock();
    if (engine_.in_flight() == 0) {
      stats_.busy_s += t1 - busy_since_;
      busy_since_ = -1;
    }
    for (IoCompletion& c : done) {
      Transfer& t = transfers_[static_cast<size_t>(c.tag)];
      --t.in_flight;
      t.bytes += c.bytes;
      stats_.bytes[static_cast<size_t>(t.cls)] += c.bytes;
      if (!c.status.ok() && t.status.ok()) {
        t.status = c.status;
        t.next_extent = t.extents.size();  // issue nothing more; land with the error
      }
      maybe_land(t, t1);
    }
    if (!done.empty()) state_cv_.notify_all();
  }
}

}  // namespace sluice::weights
