#include "backend/cuda/cuda_expert_slots.h"

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
    : slots_(n_layer, n_expert, n_slots), slot_bytes_(slot_bytes_for(expert_bytes)) {
  SLUICE_CUDA_OK(cudaMalloc(&dev_, slot_bytes_ * static_cast<size_t>(n_slots)));
  SLUICE_CUDA_OK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
  SLUICE_CUDA_OK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
  const auto n = static_cast<size_t>(n_slots);
  read_.resize(n);
  filled_.resize(n);
  read_recorded_.assign(n, 0);
  filled_recorded_.assign(n, 0);
  for (cudaEvent_t& e : read_) SLUICE_CUDA_OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  for (cudaEvent_t& e : filled_) SLUICE_CUDA_OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
}

DeviceExperts::~DeviceExperts() {
  cudaStreamSynchronize(copy_);
  for (cudaEvent_t e : read_) cudaEventDestroy(e);
  for (cudaEvent_t e : filled_) cudaEventDestroy(e);
  cudaEventDestroy(copied_);
  cudaStreamDestroy(copy_);
  cudaFree(dev_);
}

ExpertWeights DeviceExperts::copy_into(int s, const ExpertWeights& host) {
  const auto su = static_cast<size_t>(s);
  uint8_t* base = dev_ + su * slot_bytes_;
  if (read_recorded_[su]) SLUICE_CUDA_OK(cudaStreamWaitEvent(copy_, read_[su], 0));  // the slot's readers first
  ExpertWeights d = host;
  size_t off = 0;
  for (WeightView* w : {&d.gate, &d.up, &d.down}) {
    const size_t n = expert_view_bytes(*w);
    CHECK(off + n <= slot_bytes_);
    SLUICE_CUDA_OK(cudaMemcpyAsync(base + off, w->data, n, cudaMemcpyHostToDevice, copy_));
    bytes_copied_ += n;
    w->data = base + off;
    off += weight_aligned(n);
  }
  SLUICE_CUDA_OK(cudaEventRecord(filled_[su], copy_));
  filled_recorded_[su] = 1;
  return d;
}

ExpertWeights DeviceExperts::acquire(int64_t layer, int64_t expert, const ExpertWeights& host, cudaStream_t compute) {
  const ExpertSlots::Found f = slots_.find(layer, expert);
  held_ = f.slot;
  const auto su = static_cast<size_t>(f.slot);
  ++(f.hit ? hits_ : misses_);
  if (!f.hit) {
    const ExpertWeights d = copy_into(f.slot, host);
    SLUICE_CUDA_OK(cudaEventRecord(copied_, copy_));
    pending_ = true;
    SLUICE_CUDA_OK(cudaStreamWaitEvent(compute, filled_[su], 0));
    return d;
  }
  // Held already (perhaps by a prefetch still copying): the views into the slot, after its copy.
  if (filled_recorded_[su]) SLUICE_CUDA_OK(cudaStreamWaitEvent(compute, filled_[su], 0));
  ExpertWeights d = host;
  size_t off = 0;
  for (WeightView* w : {&d.gate, &d.up, &d.down}) {
    w->data = dev_ + su * slot_bytes_ + off;
    off += weight_aligned(expert_view_bytes(*w));
  }
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
  SLUICE_CUDA_OK(cudaEventRecord(read_[static_cast<size_t>(held_)], compute));
  read_recorded_[static_cast<size_t>(held_)] = 1;
  held_ = -1;
}

void DeviceExperts::finish() {
  if (!pending_) return;
  SLUICE_CUDA_OK(cudaEventSynchronize(copied_));
  pending_ = false;
}

}  // namespace sluice::cuda
