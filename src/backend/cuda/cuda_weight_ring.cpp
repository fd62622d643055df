#include "backend/cuda/cuda_weight_ring.h"

#include <algorithm>

#include "backend/cuda/cuda_align.h"
#include "backend/cuda/cuda_check.cuh"
#include "base/check.h"

namespace sluice::cuda {

WeightRing::WeightRing(std::vector<size_t> group_bytes, int n_slots)
    : bytes_(std::move(group_bytes)), ring_(static_cast<int>(bytes_.size()), n_slots, *this) {
  offset_.resize(bytes_.size());
  for (size_t g = 0; g < bytes_.size(); ++g) {
    offset_[g] = host_bytes_;
    host_bytes_ += weight_aligned(bytes_[g]);
    slot_bytes_ = std::max(slot_bytes_, weight_aligned(bytes_[g]));
  }
  SLUICE_CUDA_OK(cudaMallocHost(&host_, host_bytes_));
  SLUICE_CUDA_OK(cudaMalloc(&dev_, slot_bytes_ * static_cast<size_t>(n_slots)));
  SLUICE_CUDA_OK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
  used_recorded_.assign(static_cast<size_t>(n_slots), 0);
  copied_.resize(static_cast<size_t>(n_slots));
  used_.resize(static_cast<size_t>(n_slots));
  for (int s = 0; s < n_slots; ++s) {
    SLUICE_CUDA_OK(cudaEventCreateWithFlags(&copied_[static_cast<size_t>(s)], cudaEventDisableTiming));
    SLUICE_CUDA_OK(cudaEventCreateWithFlags(&used_[static_cast<size_t>(s)], cudaEventDisableTiming));
  }
}

WeightRing::~WeightRing() {
  cudaStreamSynchronize(copy_);
  for (cudaEvent_t e : copied_) cudaEventDestroy(e);
  for (cudaEvent_t e : used_) cudaEventDestroy(e);
  cudaStreamDestroy(copy_);
  cudaFree(dev_);
  cudaFreeHost(host_);
}

uint8_t* WeightRing::acquire(int g, cudaStream_t compute) {
  compute_ = compute;
  const int s = ring_.acquire(g);
  return dev_ + static_cast<size_t>(s) * slot_bytes_;
}

void WeightRing::release(int g, cudaStream_t compute) {
  compute_ = compute;
  ring_.release(g);
}

void WeightRing::copy(int g, int s) {
  const auto su = static_cast<size_t>(s), gu = static_cast<size_t>(g);
  if (used_recorded_[su]) SLUICE_CUDA_OK(cudaStreamWaitEvent(copy_, used_[su], 0));  // its readers first
  SLUICE_CUDA_OK(cudaMemcpyAsync(dev_ + su * slot_bytes_, host_ + offset_[gu], bytes_[gu], cudaMemcpyHostToDevice, copy_));
  SLUICE_CUDA_OK(cudaEventRecord(copied_[su], copy_));
  bytes_copied_ += bytes_[gu];
}

void WeightRing::wait_copied(int s) {
  SLUICE_CUDA_OK(cudaStreamWaitEvent(compute_, copied_[static_cast<size_t>(s)], 0));
}

void WeightRing::mark_read(int s) {
  SLUICE_CUDA_OK(cudaEventRecord(used_[static_cast<size_t>(s)], compute_));
  used_recorded_[static_cast<size_t>(s)] = 1;
}

}  // namespace sluice::cuda
