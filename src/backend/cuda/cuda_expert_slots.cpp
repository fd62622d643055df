#include "backend/cuda/cuda_expert_slots.h"

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

DeviceExperts::DeviceExperts(int64_t n_layer, int64_t n_expert, uint64_t expert_bytes, int n_slots)
    : slots_(n_layer, n_expert, n_slots), slots_dev_(slot_bytes_for(expert_bytes), n_slots) {
  SLUICE_CUDA_OK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
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

ExpertWeights DeviceExperts::copy_into(int s, const ExpertWeights& host) {
  slots_dev_.begin_fill(s);  // the slot's readers first
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
  const ExpertWeights d = f.hit ? in_slot(f.slot, host) : copy_into(f.slot, host);
  if (!f.hit) {
    SLUICE_CUDA_OK(cudaEventRecord(copied_, slots_dev_.copy_stream()));
    pending_ = true;
  }
  slots_dev_.wait_filled(f.slot, compute);
  return d;
}

void DeviceExperts::prefetch(int64_t layer, int64_t expert, const ExpertWeights& host) {
  const ExpertSlots::Found f = slots_.find(layer, expert);
  if (f.hit) return;
  copy_into(f.slot, host);
  ++prefetched_;
}

void DeviceExperts::release(cudaStream_t compute) {
  CHECK(held_ >= 0);
  slots_dev_.mark_read(held_, compute);
  held_ = -1;
}

void DeviceExperts::finish() {
  if (!pending_) return;
  SLUICE_CUDA_OK(cudaEventSynchronize(copied_));
  pending_ = false;
}

}  // namespace sluice::cuda
