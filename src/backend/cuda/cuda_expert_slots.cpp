#include "backend/cuda/cuda_expert_slots.h"

#include <algorithm>
#include <utility>

#include "backend/cuda/cuda_align.h"
#include "backend/cuda/cuda_check.cuh"
#include "base/check.h"
#include "quant/dtype.h"

namespace sluice::cuda {
namespace {

size_t expert_view_bytes(const WeightView& w) { return row_bytes(w.type, w.n_in) * static_cast<size_t>(w.n_out); }

}  // namespace

size_t DeviceExperts::slot_bytes_for(uint64_t expert_bytes) { return weight_aligned(expert_bytes) + 3 * kWeightAlign; }

DeviceExperts::DeviceExperts(int64_t n_layer, int64_t n_expert, uint64_t expert_bytes, int n_slots, CopyQueue& queue,
                             int chunk_slots)
    : slots_(n_layer, n_expert, n_slots), slots_dev_(slot_bytes_for(expert_bytes), n_slots, queue, chunk_slots) {
  CHECK(chunk_slots == 0 || chunk_slots >= 2);
  SLUICE_CUDA_OK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
  predicted_.reserve(static_cast<size_t>(n_slots));
  transient_.reserve(static_cast<size_t>(n_slots));
}

DeviceExperts::~DeviceExperts() { cudaEventDestroy(copied_); }

ExpertWeights DeviceExperts::in_slot(int s, const ExpertWeights& host) const {
  ExpertWeights d = host;
  size_t off = 0;
  for (WeightView* w : {&d.gate, &d.up, &d.down}) {
    w->data = slots_dev_.slot(s) + off;
    off += weight_aligned(expert_view_bytes(*w));
  }
  return d;
}

ExpertWeights DeviceExperts::copy_into(int s, const ExpertWeights& host, CopyClass c) {
  // A slot taken for another expert is no prediction's any more; a transient
  // fill of it is cancelled by begin_fill (its chunks in flight waited for).
  std::erase(predicted_, s);
  std::erase(transient_, s);
  slots_dev_.begin_fill(s, c);  // the slot's readers first
  const ExpertWeights d = in_slot(s, host);
  for (auto [from, to] : {std::pair{&host.gate, &d.gate}, std::pair{&host.up, &d.up}, std::pair{&host.down, &d.down}}) {
    const size_t n = expert_view_bytes(*from);
    slots_dev_.copy(s, static_cast<size_t>(to->data - slots_dev_.slot(s)), from->data, n);
    bytes_copied_ += n;
  }
  slots_dev_.end_fill(s);
  return d;
}

ExpertWeights DeviceExperts::acquire(int64_t layer, int64_t expert, const ExpertWeights& host, cudaStream_t compute) {
  const ExpertSlots::Found f = slots_.find(layer, expert);
  held_ = f.slot;
  ++(f.hit ? hits_ : misses_);
  // Held already (perhaps by a prefetch still copying), or copied now: after the slot's fill.
  const ExpertWeights d = f.hit ? in_slot(f.slot, host) : copy_into(f.slot, host, CopyClass::kCritical);
  bool transient = false;
  if (f.hit) {
    std::erase(predicted_, f.slot);
    transient = std::erase(transient_, f.slot) > 0;
    if (!slots_dev_.fill_done(f.slot)) ++late_;  // the compute waits for the copy ahead
  }
  // After a copy made here or one from transient bytes, copied_ marks when
  // its host bytes were read (finish()).
  const bool covered = !f.hit || transient;
  slots_dev_.wait_filled(f.slot, compute, covered ? copied_ : nullptr);
  if (covered) pending_ = true;
  return d;
}

void DeviceExperts::prefetch(int64_t layer, int64_t expert, const ExpertWeights& host, bool transient) {
  // A prefetch never takes the slot of another one not used yet: with fewer
  // slots than a layer's experts and the next layer's predicted ones, the
  // copies would evict each other before their acquire (the acquire copies
  // it anyway, as critical).
  if (!slots_.holds(layer, expert) &&
      std::find(predicted_.begin(), predicted_.end(), slots_.next_victim()) != predicted_.end()) {
    ++declined_;
    return;
  }
  const ExpertSlots::Found f = slots_.find(layer, expert);
  if (f.hit) return;
  copy_into(f.slot, host, CopyClass::kPredicted);
  predicted_.push_back(f.slot);
  if (transient) transient_.push_back(f.slot);
  ++prefetched_;
}

void DeviceExperts::settle_transient(int64_t layer, std::span<const int32_t> keep) {
  for (size_t i = 0; i < transient_.size();) {
    const int s = transient_[i];
    int64_t l = -1, e = -1;
    CHECK(slots_.held_by(s, &l, &e));  // whatever forgets a slot's expert drops it here first
    if ((layer >= 0 && l != layer) || std::find(keep.begin(), keep.end(), static_cast<int32_t>(e)) != keep.end()) {
      ++i;
      continue;
    }
    if (slots_dev_.fill_pending(s) && !slots_dev_.fill_issued(s)) {
      slots_dev_.cancel_fill(s);  // its chunks in flight waited for, the rest dropped
      slots_.forget(s);
      std::erase(predicted_, s);
      ++cancelled_;
    } else {
      slots_dev_.finish_fill(s);  // on the copy stream whole: the slot keeps it once it has read the host bytes
    }
    transient_[i] = transient_.back();
    transient_.pop_back();
  }
}

void DeviceExperts::settle_predictions(int64_t layer, std::span<const int32_t> chosen) {
  for (size_t i = 0; i < predicted_.size();) {
    const int s = predicted_[i];
    int64_t l = -1, e = -1;
    if (!slots_.held_by(s, &l, &e) || l != layer) {
      ++i;
      continue;
    }
    if (std::find(chosen.begin(), chosen.end(), static_cast<int32_t>(e)) != chosen.end()) {
      slots_dev_.raise_fill(s);  // acquire() will wait for it: ahead of the other predictions
      ++ready_;
    } else if (slots_dev_.fill_pending(s) && !slots_dev_.fill_issued(s)) {
      slots_dev_.cancel_fill(s);  // wrong: what is not copied yet is dropped, the slot freed
      slots_.forget(s);
      std::erase(transient_, s);  // cancel_fill waited for its chunks in flight
      ++cancelled_;
    } else {
      slots_dev_.settle_fill(s);  // wrong, but copied: kept (a later token may choose it)
      // From transient bytes (settle_transient() normally came first): read
      // before the source may reuse them.
      if (std::erase(transient_, s) > 0) slots_dev_.finish_fill(s);
    }
    predicted_[i] = predicted_.back();
    predicted_.pop_back();
  }
}

void DeviceExperts::release(cudaStream_t compute) {
  CHECK(held_ >= 0);
  slots_dev_.mark_read(held_, compute);
  held_ = -1;
}

bool DeviceExperts::set_n_slots(int n) {
  CHECK(held_ < 0 && n >= 2 && n <= max_slots());
  std::erase_if(predicted_, [n](int s) { return s >= n; });  // their fills go with the slots
  std::erase_if(transient_, [n](int s) { return s >= n; });  // (set_backed waits for what is in flight)
  const bool ok = slots_dev_.set_backed(n);
  slots_.set_limit(std::max(2, std::min(n, slots_dev_.n_backed())));
  return ok;
}

void DeviceExperts::finish() {
  if (!pending_) return;
  SLUICE_CUDA_OK(cudaEventSynchronize(copied_));
  pending_ = false;
}

}  // namespace sluice::cuda
