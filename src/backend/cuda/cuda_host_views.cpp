#include "backend/cuda/cuda_host_views.h"

#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_align.h"
#include "backend/cuda/cuda_check.cuh"
#include "base/check.h"

namespace sluice::cuda {

HostViews::HostViews(size_t capacity, CopyQueue& queue)
    : ring_(weight_aligned(capacity), kMaxLive), queue_(queue), read_(kMaxLive), read_ticket_(kMaxLive, -1) {
  made_.reserve(kMaxLive);
  unread_.reserve(kMaxLive);
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
  made_.clear();
  unread_.clear();
  newest_read_ = -1;
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
  made_.clear();
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
  // Copied since the last finish() and still in the ring: the compute stream
  // waited for that copy before the kernels that read it, so later work on it
  // may read it too (read() keeps the piece until they are done).
  for (const Made& m : made_) {
    if (m.host == host && m.bytes == n && ring_.is_live(m.ticket)) {
      if (std::find(unread_.begin(), unread_.end(), m.ticket) == unread_.end()) unread_.push_back(m.ticket);
      return Copy{.device = m.device, .ticket = m.ticket};
    }
  }
  const ByteRing::Piece p = ring_.allocate(weight_aligned(n));
  if (p.after >= 0) {
    const size_t i = static_cast<size_t>(p.after % kMaxLive);
    // A piece overwritten before its readers were enqueued would be one call's
    // views overrunning the ring (the capacity is sized for two layers); the
    // same for a piece handed out again (older than the newest retired).
    CHECK(read_ticket_[i] == p.after);
    for (const int64_t u : unread_) CHECK(u > p.after);
  }
  // A critical copy (the layer is about to run): after the piece's last readers.
  const CopyPiece piece{dev_ + p.offset, host, n};
  const CopyQueue::Id id = queue_.submit(CopyClass::kCritical, std::span(&piece, 1),
                                         p.after >= 0 ? read_[static_cast<size_t>(p.after % kMaxLive)] : nullptr);
  queue_.wait(id, compute, copied_);
  queue_.retire(id);
  pending_ = true;
  bytes_copied_ += n;
  std::erase_if(made_, [&](const Made& m) { return !ring_.is_live(m.ticket); });  // at most kMaxLive stay
  made_.push_back({.host = host, .bytes = n, .ticket = p.ticket, .device = dev_ + p.offset});
  return Copy{.device = dev_ + p.offset, .ticket = p.ticket};
}

void HostViews::read(int64_t ticket, cudaStream_t compute) {
  const size_t i = static_cast<size_t>(ticket % kMaxLive);
  SLUICE_CUDA_OK(cudaEventRecord(read_[i], compute));
  read_ticket_[i] = ticket;
  std::erase(unread_, ticket);
  // A copy waits only for the newest piece it retires, as if readers ran in
  // ticket order; a piece read again after newer ones keeps that true by
  // moving the newer pieces' events behind its readers too.
  for (int64_t t = ticket + 1; t <= newest_read_; ++t) {
    const size_t j = static_cast<size_t>(t % kMaxLive);
    if (ring_.is_live(t) && read_ticket_[j] == t) SLUICE_CUDA_OK(cudaEventRecord(read_[j], compute));
  }
  newest_read_ = std::max(newest_read_, ticket);
}

void HostViews::finish() {
  made_.clear();
  unread_.clear();
  if (!pending_) return;
  SLUICE_CUDA_OK(cudaEventSynchronize(copied_));
  pending_ = false;
}

}  // namespace sluice::cuda
