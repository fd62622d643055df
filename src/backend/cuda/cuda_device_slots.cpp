#include "backend/cuda/cuda_device_slots.h"

#include <algorithm>

#include "backend/cuda/cuda_check.cuh"
#include "base/check.h"

namespace sluice::cuda {

DeviceSlots::DeviceSlots(size_t slot_bytes, int n_slots, CopyQueue& queue, int chunk_slots)
    : slot_bytes_(slot_bytes), n_backed_(n_slots), queue_(queue) {
  CHECK(n_slots >= 1 && slot_bytes > 0 && chunk_slots >= 0);
  const auto n = static_cast<size_t>(n_slots);
  const int k = chunk_slots > 0 ? (n_slots - chunk_slots) / chunk_slots : 0;  // chunks after the first
  chunks_.push_back({.first = 0, .n = n_slots - k * chunk_slots});
  for (int j = 0; j < k; ++j) chunks_.push_back({.first = chunks_.back().first + chunks_.back().n, .n = chunk_slots});
  base_.assign(n, nullptr);
  for (Chunk& c : chunks_) {
    SLUICE_CUDA_OK(cudaMalloc(&c.dev, slot_bytes_ * static_cast<size_t>(c.n)));
    for (int i = 0; i < c.n; ++i) base_[static_cast<size_t>(c.first + i)] = c.dev + static_cast<size_t>(i) * slot_bytes_;
  }
  read_.resize(n);
  filled_.resize(n);
  read_recorded_.assign(n, 0);
  filled_recorded_.assign(n, 0);
  pending_.assign(n, 0);
  for (cudaEvent_t& e : read_) SLUICE_CUDA_OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  for (cudaEvent_t& e : filled_) SLUICE_CUDA_OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
}

DeviceSlots::~DeviceSlots() {
  for (CopyQueue::Id id : pending_)
    if (id != 0) queue_.cancel(id);  // waits for its chunks in flight
  for (cudaEvent_t e : read_) cudaEventDestroy(e);
  for (cudaEvent_t e : filled_) cudaEventDestroy(e);
  for (const Chunk& c : chunks_) cudaFree(c.dev);
}

bool DeviceSlots::set_backed(int n) {
  bool ok = true;
  for (Chunk& c : chunks_) {
    CHECK(c.first >= n || c.first + c.n <= n);  // a chunk boundary
    if (c.first >= n && c.dev) {  // given up: its fills dropped, its readers done, its memory freed
      for (int s = c.first; s < c.first + c.n; ++s) {
        const auto su = static_cast<size_t>(s);
        cancel_fill(s);
        if (read_recorded_[su]) SLUICE_CUDA_OK(cudaEventSynchronize(read_[su]));
        if (filled_recorded_[su]) SLUICE_CUDA_OK(cudaEventSynchronize(filled_[su]));
        read_recorded_[su] = filled_recorded_[su] = 0;
        base_[su] = nullptr;
      }
      SLUICE_CUDA_OK(cudaFree(c.dev));
      c.dev = nullptr;
    } else if (c.first < n && !c.dev) {  // taken back
      if (cudaMalloc(&c.dev, slot_bytes_ * static_cast<size_t>(c.n)) != cudaSuccess) {
        (void)cudaGetLastError();
        c.dev = nullptr;
        ok = false;  // the chunks before it stay backed: still a prefix
        break;
      }
      for (int i = 0; i < c.n; ++i) base_[static_cast<size_t>(c.first + i)] = c.dev + static_cast<size_t>(i) * slot_bytes_;
    }
  }
  n_backed_ = 0;
  for (const Chunk& c : chunks_)
    if (c.dev) n_backed_ = std::max(n_backed_, c.first + c.n);
  return ok;
}

void DeviceSlots::begin_fill(int s, CopyClass c) {
  cancel_fill(s);
  filled_recorded_[static_cast<size_t>(s)] = 0;
  fill_class_ = c;
  n_pieces_ = 0;
}

void DeviceSlots::copy(int s, size_t offset, const void* host, size_t n) {
  CHECK(offset + n <= slot_bytes_ && n_pieces_ < kMaxPieces);
  pieces_[n_pieces_++] = CopyPiece{slot(s) + offset, host, n};
}

void DeviceSlots::end_fill(int s) {
  const auto su = static_cast<size_t>(s);
  // The fill follows the kernels that last read the slot; they record read_
  // again only after they waited for this fill (the queue's contract).
  pending_[su] = queue_.submit(fill_class_, std::span<const CopyPiece>(pieces_, static_cast<size_t>(n_pieces_)),
                               read_recorded_[su] ? read_[su] : nullptr);
  n_pieces_ = 0;
}

void DeviceSlots::wait_filled(int s, cudaStream_t compute, cudaEvent_t copied) {
  const auto su = static_cast<size_t>(s);
  if (filled_recorded_[su]) {  // a settled fill
    SLUICE_CUDA_OK(cudaStreamWaitEvent(compute, filled_[su], 0));
    if (copied) SLUICE_CUDA_OK(cudaEventRecord(copied, queue_.stream()));
    filled_recorded_[su] = 0;
    return;
  }
  if (pending_[su] == 0) return;  // compute already waited for the slot's fill
  queue_.wait(pending_[su], compute, copied);
  queue_.retire(pending_[su]);
  pending_[su] = 0;
}

void DeviceSlots::mark_read(int s, cudaStream_t compute) {
  const auto su = static_cast<size_t>(s);
  SLUICE_CUDA_OK(cudaEventRecord(read_[su], compute));
  read_recorded_[su] = 1;
}

bool DeviceSlots::fill_issued(int s) const {
  const CopyQueue::Id id = pending_[static_cast<size_t>(s)];
  return id != 0 && queue_.fully_issued(id);
}

bool DeviceSlots::fill_done(int s) const {
  const auto su = static_cast<size_t>(s);
  if (pending_[su] != 0) return queue_.done(pending_[su]);
  if (!filled_recorded_[su]) return true;  // compute waited for it already
  const cudaError_t e = cudaEventQuery(filled_[su]);
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  SLUICE_CUDA_OK(e);
  return true;
}

void DeviceSlots::raise_fill(int s) {
  const CopyQueue::Id id = pending_[static_cast<size_t>(s)];
  if (id != 0) queue_.reprioritize(id, CopyClass::kCritical);
}

void DeviceSlots::settle_fill(int s) {
  const auto su = static_cast<size_t>(s);
  if (pending_[su] == 0) return;
  queue_.wait(pending_[su], nullptr, filled_[su]);
  queue_.retire(pending_[su]);
  pending_[su] = 0;
  filled_recorded_[su] = 1;
}

void DeviceSlots::finish_fill(int s) {
  const auto su = static_cast<size_t>(s);
  if (pending_[su] != 0) {
    queue_.sync(pending_[su]);  // compute still waits for it (wait_filled)
  } else if (filled_recorded_[su]) {
    SLUICE_CUDA_OK(cudaEventSynchronize(filled_[su]));
  }
}

void DeviceSlots::cancel_fill(int s) {
  CopyQueue::Id& id = pending_[static_cast<size_t>(s)];
  if (id == 0) return;
  queue_.cancel(id);
  id = 0;
}

}  // namespace sluice::cuda
