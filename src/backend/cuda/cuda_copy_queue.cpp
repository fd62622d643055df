#include "backend/cuda/cuda_copy_queue.h"

#include "backend/cuda/cuda_check.cuh"
#include "base/check.h"

namespace sluice::cuda {

CopyQueue::CopyQueue(const CopyQueueOptions& options)
    : options_(options), schedule_(options.chunk_bytes, options.max_transfers, options.max_pieces) {
  CHECK(options.max_in_flight >= 1);
  SLUICE_CUDA_OK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  recs_.resize(static_cast<size_t>(options.max_transfers));
  for (Rec& r : recs_) SLUICE_CUDA_OK(cudaEventCreateWithFlags(&r.done, cudaEventDisableTiming));
  free_events_.resize(static_cast<size_t>(options.max_in_flight) + 8);
  for (cudaEvent_t& e : free_events_) SLUICE_CUDA_OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  int device = 0;
  SLUICE_CUDA_OK(cudaGetDevice(&device));
  pump_ = std::thread([this, device] {
    SLUICE_CUDA_OK(cudaSetDevice(device));  // the current device is per thread: the backend's
    pump();
  });
}

CopyQueue::~CopyQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  pump_.join();
  cudaStreamSynchronize(stream_);
  for (Rec& r : recs_) cudaEventDestroy(r.done);
  for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
  cudaStreamDestroy(stream_);
}

CopyQueue::Rec* CopyQueue::rec(Id id) {
  const int r = schedule_.record_of(id);
  return r >= 0 ? &recs_[static_cast<size_t>(r)] : nullptr;
}

CopyQueue::Id CopyQueue::submit(CopyClass c, std::span<const CopyPiece> pieces, cudaEvent_t after) {
  CHECK(pieces.size() <= static_cast<size_t>(options_.max_pieces));
  Id id = 0;
  {
    std::unique_lock<std::mutex> lock(mu_);
    // Every record in use: an owner does not retire its transfers (a bug).
    CHECK(schedule_.n_alive() < options_.max_transfers);
    id = schedule_.submit(c, pieces);
    CHECK(id != 0);
    Rec* r = rec(id);
    r->id = id;
    r->after = after;
    r->done_recorded = false;
  }
  cv_.notify_all();
  return id;
}

bool CopyQueue::fully_issued(Id id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return schedule_.fully_issued(id);
}

bool CopyQueue::done(Id id) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!schedule_.fully_issued(id)) return false;
  const int at = schedule_.record_of(id);
  CHECK(at >= 0);
  const Rec& rec = recs_[static_cast<size_t>(at)];
  CHECK(rec.done_recorded);
  const cudaError_t e = cudaEventQuery(rec.done);
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  SLUICE_CUDA_OK(e);
  return true;
}

void CopyQueue::reprioritize(Id id, CopyClass c) {
  std::lock_guard<std::mutex> lock(mu_);
  schedule_.reprioritize(id, c);
}

void CopyQueue::issue(const CopySchedule::Chunk& c) {
  Rec* r = rec(c.id);
  CHECK(r != nullptr);
  if (c.first && r->after) SLUICE_CUDA_OK(cudaStreamWaitEvent(stream_, r->after, 0));
  SLUICE_CUDA_OK(cudaMemcpyAsync(c.piece.dst, c.piece.src, c.piece.n, cudaMemcpyDefault, stream_));
  if (c.last) {
    SLUICE_CUDA_OK(cudaEventRecord(r->done, stream_));
    r->done_recorded = true;
  }
}

void CopyQueue::issue_all(Id id) {
  if (schedule_.fully_issued(id)) return;
  schedule_.promote(id);
  CopySchedule::Chunk c;
  while (schedule_.next_of(id, &c)) issue(c);
  mark_in_flight();
}

void CopyQueue::mark_in_flight() {
  if (free_events_.empty()) {
    cudaEvent_t e = nullptr;
    SLUICE_CUDA_OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    free_events_.push_back(e);
  }
  cudaEvent_t e = free_events_.back();
  free_events_.pop_back();
  SLUICE_CUDA_OK(cudaEventRecord(e, stream_));
  in_flight_.push_back(e);
}

void CopyQueue::pump() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    while (!stop_ && static_cast<int>(in_flight_.size()) < options_.max_in_flight) {
      CopySchedule::Chunk c;
      if (!schedule_.next(&c)) break;
      issue(c);
      mark_in_flight();
    }
    if (in_flight_.empty()) {
      if (stop_) return;
      cv_.wait(lock);
      continue;
    }
    cudaEvent_t e = in_flight_.front();
    lock.unlock();
    SLUICE_CUDA_OK(cudaEventSynchronize(e));
    lock.lock();
    in_flight_.pop_front();  // only the pump takes from the front
    free_events_.push_back(e);
  }
}

void CopyQueue::wait(Id id, cudaStream_t stream, cudaEvent_t copied) {
  std::lock_guard<std::mutex> lock(mu_);
  Rec* r = rec(id);
  CHECK(r != nullptr);
  issue_all(id);
  if (stream && r->done_recorded) SLUICE_CUDA_OK(cudaStreamWaitEvent(stream, r->done, 0));
  if (copied) SLUICE_CUDA_OK(cudaEventRecord(copied, stream_));
}

void CopyQueue::sync(Id id) {
  cudaEvent_t done = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Rec* r = rec(id);
    CHECK(r != nullptr);
    issue_all(id);
    if (r->done_recorded) done = r->done;
  }
  cv_.notify_all();
  // The record stays the caller's until it retires it: `done` is not re-recorded meanwhile.
  if (done) SLUICE_CUDA_OK(cudaEventSynchronize(done));
}

size_t CopyQueue::cancel(Id id) {
  cudaEvent_t in_flight = nullptr;
  size_t issued = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Rec* r = rec(id);
    CHECK(r != nullptr);
    issued = schedule_.drop_rest(id);  // nothing more of it is issued; the record stays
    if (issued > 0) {
      // Its chunks on the stream must be done before its memory is reused.
      if (!r->done_recorded) {
        SLUICE_CUDA_OK(cudaEventRecord(r->done, stream_));
        r->done_recorded = true;
      }
      in_flight = r->done;
    }
  }
  if (in_flight) SLUICE_CUDA_OK(cudaEventSynchronize(in_flight));
  {
    std::lock_guard<std::mutex> lock(mu_);
    Rec* r = rec(id);
    schedule_.retire(id);
    *r = Rec{.done = r->done};
  }
  return issued;
}

void CopyQueue::retire(Id id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    Rec* r = rec(id);
    CHECK(r != nullptr);
    if (schedule_.fully_issued(id)) {
      schedule_.retire(id);
      *r = Rec{.done = r->done};
      return;
    }
  }
  cancel(id);
}

void CopyQueue::finish() {
  cudaEvent_t e = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    CopySchedule::Chunk c;
    while (schedule_.next(&c)) issue(c);
    mark_in_flight();
    e = in_flight_.back();
  }
  cv_.notify_all();
  // The pump frees e only after it completed; a later record of it is after this one.
  SLUICE_CUDA_OK(cudaEventSynchronize(e));
}

std::array<uint64_t, kNumCopyClasses> CopyQueue::bytes_issued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return schedule_.bytes_issued();
}

}  // namespace sluice::cuda
