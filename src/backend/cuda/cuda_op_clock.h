// OpClock (backend/op_clock.h) on a CUDA stream: each mark is a timed event
// recorded on the stream the operators are enqueued on, so the times read are
// when the device reached each mark, not when the host enqueued the work.
// Events are made once, capacity() of them; read() waits for the last mark
// and keeps its event as the next read's first.
//
// While a clock exists its backend records no CUDA graph (`live` counts the
// clocks; CudaBackend::begin_step reads it): an event recorded during stream
// capture would become a node of the graph instead of a time. Each operator's
// kernels then launch one by one, so a profiled decode step also shows the
// launch gaps a graph would hide; the profile says so.
#pragma once

#include <vector>

#include <cuda_runtime.h>

#include "backend/op_clock.h"

namespace sluice::cuda {

class CudaOpClock final : public OpClock {
 public:
  // Marks on `s`; *live is incremented for the clock's life.
  CudaOpClock(cudaStream_t s, int* live, int capacity = 4096);
  ~CudaOpClock() override;
  CudaOpClock(const CudaOpClock&) = delete;
  CudaOpClock& operator=(const CudaOpClock&) = delete;

  void mark() override;
  int capacity() const override { return static_cast<int>(events_.size()); }
  void read(std::vector<double>& at) override;

 private:
  cudaStream_t stream_;
  int* live_;
  std::vector<cudaEvent_t> events_;  // [capacity]
  int n_ = 0;                        // marks held
};

}  // namespace sluice::cuda
