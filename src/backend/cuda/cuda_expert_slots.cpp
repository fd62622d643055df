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
  read_.resize(static_cast<size_t>(n_slots));
  read_recorded_.assign(static_cast<size_t>(n_slots), 0);
  for (cudaEvent_t& e : read_) SLUICE_CUDA_OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
}

DeviceExperts::~DeviceExperts() {
  cudaStreamSynchronize(copy_);
  for (cudaEvent_t e : read_) cudaEventDestroy(e);
  cudaEventDestroy(copied_);
  cudaStreamDestroy(copy_);
  cudaFree(dev_);
}

ExpertWeights DeviceExperts::acquire(int64_t layer, int64_t expert, const ExpertWeights& host, cudaStream_t compute) {
  const ExpertSlots::Found f = slots_.find(layer, expert);
  held_ = f.slot;
  uint8_t* base = dev_ + static_cast<size_t>(f.slot) * slot_bytes_;
  ExpertWeights d = host;
  size_t off = 0;
  for (WeightView* w : {&d.gate, &d.up, &d.down}) {
    const size_t n = expert_view_bytes(*w);
    CHECK(off + n <= slot_bytes_);
    if (!f.hit) {
      if (w == &d.gate && read_recorded_[static_cast<size_t>(f.slot)])  // the slot's readers first
        SLUICE_CUDA_OK(cudaStreamWaitEvent(copy_, read_[static_cast<size_t>(f.slot)], 0));
      SLUICE_CUDA_OK(cudaMemcpyAsync(base + off, w->data, n, cudaMemcpyHostToDevice, copy_));
      bytes_copied_ += n;
    }
    w->data = base + off;
    off += weight_aligned(n);
  }
  if (!f.hit) {
    SLUICE_CUDA_OK(cudaEventRecord(copied_, copy_));
    SLUICE_CUDA_OK(cudaStreamWaitEvent(compute, copied_, 0));
    pending_ = true;
  }
  return d;
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
