#include "backend/cuda/cuda_device_slots.h"

#include "backend/cuda/cuda_check.cuh"
#include "base/check.h"

namespace sluice::cuda {

DeviceSlots::DeviceSlots(size_t slot_bytes, int n_slots) : slot_bytes_(slot_bytes) {
  CHECK(n_slots >= 1 && slot_bytes > 0);
  const auto n = static_cast<size_t>(n_slots);
  SLUICE_CUDA_OK(cudaMalloc(&dev_, slot_bytes_ * n));
  SLUICE_CUDA_OK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
  filled_.resize(n);
  read_.resize(n);
  filled_recorded_.assign(n, 0);
  read_recorded_.assign(n, 0);
  for (size_t s = 0; s < n; ++s) {
    SLUICE_CUDA_OK(cudaEventCreateWithFlags(&filled_[s], cudaEventDisableTiming));
    SLUICE_CUDA_OK(cudaEventCreateWithFlags(&read_[s], cudaEventDisableTiming));
  }
}

DeviceSlots::~DeviceSlots() {
  cudaStreamSynchronize(copy_);
  for (cudaEvent_t e : filled_) cudaEventDestroy(e);
  for (cudaEvent_t e : read_) cudaEventDestroy(e);
  cudaStreamDestroy(copy_);
  cudaFree(dev_);
}

void DeviceSlots::begin_fill(int s) {
  const auto su = static_cast<size_t>(s);
  if (read_recorded_[su]) SLUICE_CUDA_OK(cudaStreamWaitEvent(copy_, read_[su], 0));
}

void DeviceSlots::copy(int s, size_t offset, const void* host, size_t n) {
  CHECK(offset + n <= slot_bytes_);
  SLUICE_CUDA_OK(cudaMemcpyAsync(slot(s) + offset, host, n, cudaMemcpyHostToDevice, copy_));
}

void DeviceSlots::end_fill(int s) {
  const auto su = static_cast<size_t>(s);
  SLUICE_CUDA_OK(cudaEventRecord(filled_[su], copy_));
  filled_recorded_[su] = 1;
}

void DeviceSlots::wait_filled(int s, cudaStream_t compute) {
  const auto su = static_cast<size_t>(s);
  if (filled_recorded_[su]) SLUICE_CUDA_OK(cudaStreamWaitEvent(compute, filled_[su], 0));
}

void DeviceSlots::mark_read(int s, cudaStream_t compute) {
  const auto su = static_cast<size_t>(s);
  SLUICE_CUDA_OK(cudaEventRecord(read_[su], compute));
  read_recorded_[su] = 1;
}

}  // namespace sluice::cuda
