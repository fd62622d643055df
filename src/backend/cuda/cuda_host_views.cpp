#include "backend/cuda/cuda_host_views.h"

#include "backend/cuda/cuda_align.h"
#include "backend/cuda/cuda_check.cuh"
#include "base/check.h"

namespace sluice::cuda {

HostViews::HostViews(size_t capacity, CopyQueue& queue)
    : ring_(weight_aligned(capacity), kMaxLive), queue_(queue), read_(kMaxLive), read_ticket_(kMaxLive, -1) {
  SLUICE_CUDA_OK(cudaMalloc(&dev_, ring_.capacity()));
  SLUICE_CUDA_OK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
  for (cudaEvent_t& e : read_) SLUICE_CUDA_OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
}

HostViews::~HostViews() {
  queue_.finish();
  for (auto& [p, r] : ranges_)
    if (r.pinned) cudaHostUnregister(const_cast<uint8_t*>(p));
  for (cudaEvent_t e : read_) cudaEventDestroy(e);
  cudaEventDestroy(copied_);
  cudaFree(dev_);
}

void HostViews::grow(size_t capacity) {
  if (weight_aligned(capacity) <= ring_.capacity()) return;
  queue_.finish();
  SLUICE_CUDA_OK(cudaFree(dev_));
  ring_ = ByteRing(weight_aligned(capacity), kMaxLive);
  SLUICE_CUDA_OK(cudaMalloc(&dev_, ring_.capacity()));
  read_ticket_.assign(kMaxLive, -1);
  pending_ = false;
}

bool HostViews::register_range(const uint8_t* data, size_t bytes) {
  if (!data || bytes == 0 || ranges_.count(data)) return false;
  const bool pinned = cudaHostRegister(const_cast<uint8_t*>(data), bytes, cudaHostRegisterDefault) == cudaSuccess;
  if (!pinned) cudaGetLastError();  // not sticky: the copies run from pageable memory instead
  ranges_[data] = Range{.bytes = bytes, .pinned = pinned};
  return pinned;
}

void HostViews::unregister_range(const uint8_t* data) {
  auto it = ranges_.find(data);
  if (it == ranges_.end()) return;
  queue_.finish();  // no copy reads it any more
  if (it->second.pinned) cudaHostUnregister(const_cast<uint8_t*>(data));
  ranges_.erase(it);
}

bool HostViews::holds(const uint8_t* p) const {
  auto it = ranges_.upper_bound(p);
  if (it == ranges_.begin()) return false;
  --it;
  return p < it->first + it->second.bytes;
}

HostViews::Copy HostViews::copy_in(const uint8_t* host, size_t n, cudaStream_t compute) {
  const ByteRing::Piece p = ring_.allocate(weight_aligned(n));
  if (p.after >= 0) {
    const size_t i = static_cast<size_t>(p.after % kMaxLive);
    // A piece overwritten before its readers were enqueued would be one call's
    // views overrunning the ring (the capacity is sized for two layers).
    CHECK(read_ticket_[i] == p.after);
  }
  // A critical copy (the layer is about to run): after the piece's last readers.
  const CopyPiece piece{dev_ + p.offset, host, n};
  const CopyQueue::Id id = queue_.submit(CopyClass::kCritical, std::span(&piece, 1),
                                         p.after >= 0 ? read_[static_cast<size_t>(p.after % kMaxLive)] : nullptr);
  queue_.wait(id, compute, copied_);
  queue_.retire(id);
  pending_ = true;
  bytes_copied_ += n;
  return Copy{.device = dev_ + p.offset, .ticket = p.ticket};
}

void HostViews::read(int64_t ticket, cudaStream_t compute) {
  const size_t i = static_cast<size_t>(ticket % kMaxLive);
  SLUICE_CUDA_OK(cudaEventRecord(read_[i], compute));
  read_ticket_[i] = ticket;
}

void HostViews::finish() {
  if (!pending_) return;
  SLUICE_CUDA_OK(cudaEventSynchronize(copied_));
  pending_ = false;
}

}  // namespace sluice::cuda
