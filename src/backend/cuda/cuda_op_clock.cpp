#include "backend/cuda/cuda_op_clock.h"

#include <utility>

#include "backend/cuda/cuda_check.cuh"
#include "base/check.h"

namespace sluice::cuda {

CudaOpClock::CudaOpClock(cudaStream_t s, int* live, int capacity)
    : stream_(s), live_(live), events_(static_cast<size_t>(capacity)) {
  CHECK(capacity > 0);
  for (cudaEvent_t& e : events_) SLUICE_CUDA_OK(cudaEventCreate(&e));
  ++*live_;
}

CudaOpClock::~CudaOpClock() {
  if (n_ > 0) SLUICE_CUDA_OK(cudaEventSynchronize(events_[static_cast<size_t>(n_ - 1)]));
  for (cudaEvent_t e : events_) SLUICE_CUDA_OK(cudaEventDestroy(e));
  --*live_;
}

void CudaOpClock::mark() {
  CHECK(n_ < capacity());
  SLUICE_CUDA_OK(cudaEventRecord(events_[static_cast<size_t>(n_++)], stream_));
}

void CudaOpClock::read(std::vector<double>& at) {
  at.clear();
  if (n_ == 0) return;
  SLUICE_CUDA_OK(cudaEventSynchronize(events_[static_cast<size_t>(n_ - 1)]));
  for (int i = 0; i < n_; ++i) {
    float ms = 0;
    SLUICE_CUDA_OK(cudaEventElapsedTime(&ms, events_[0], events_[static_cast<size_t>(i)]));
    at.push_back(1e-3 * static_cast<double>(ms));
  }
  std::swap(events_[0], events_[static_cast<size_t>(n_ - 1)]);  // the last mark is the next read's first
  n_ = 1;
}

}  // namespace sluice::cuda
