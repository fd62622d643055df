#include "backend/cuda/cuda_weight_ring.h"

#include <algorithm>

#include "backend/cuda/cuda_align.h"
#include "backend/cuda/cuda_check.cuh"
#include "base/check.h"

namespace sluice::cuda {

WeightRing::WeightRing(std::vector<size_t> group_bytes, int n_slots, CopyQueue& queue)
    : bytes_(std::move(group_bytes)), ring_(static_cast<int>(bytes_.size()), n_slots, *this) {
  offset_.resize(bytes_.size());
  for (size_t g = 0; g < bytes_.size(); ++g) {
    offset_[g] = host_bytes_;
    host_bytes_ += weight_aligned(bytes_[g]);
    slot_bytes_ = std::max(slot_bytes_, weight_aligned(bytes_[g]));
  }
  SLUICE_CUDA_OK(cudaMallocHost(&host_, host_bytes_));
  slots_ = std::make_unique<DeviceSlots>(slot_bytes_, n_slots, queue);
  std::vector<int> order;
  for (int g = 0; g < n_groups(); ++g) order.push_back(g);
  set_schedule(order);
}

bool WeightRing::set_schedule(std::span<const int> order) {
  if (!ring_.set_schedule(order)) return false;
  const std::vector<int64_t> copies = copies_per_period(n_groups(), n_slots(), order);
  scheduled_bytes_ = 0;
  for (size_t g = 0; g < copies.size(); ++g) scheduled_bytes_ += static_cast<uint64_t>(copies[g]) * bytes_[g];
  return true;
}

WeightRing::~WeightRing() {
  slots_.reset();  // its copies read host_
  cudaFreeHost(host_);
}

uint8_t* WeightRing::acquire(int g, cudaStream_t compute) {
  compute_ = compute;
  const int s = ring_.acquire(g);
  return slots_->slot(s);
}

void WeightRing::release(int g, cudaStream_t compute) {
  compute_ = compute;
  ring_.release(g);
}

void WeightRing::copy(int g, int s) {
  const auto gu = static_cast<size_t>(g);
  slots_->begin_fill(s, CopyClass::kCritical);  // its readers first
  slots_->copy(s, 0, host_ + offset_[gu], bytes_[gu]);
  slots_->end_fill(s);
  bytes_copied_ += bytes_[gu];
}

void WeightRing::wait_copied(int s) { slots_->wait_filled(s, compute_); }

void WeightRing::mark_read(int s) { slots_->mark_read(s, compute_); }

}  // namespace sluice::cuda
