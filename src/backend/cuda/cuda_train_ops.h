// CudaTrainOps: the training operators (backend/train_ops.h) on the CUDA
// backend's stream, with the kernels of cuda_train_kernels.cuh.
//
//   matmul_t            the matrix decoded to f32 a panel of rows at a time
//                       (the forward's decoders), dx summed over each panel
//   attention (+ back)  one warp per (row, head); dk, dv one warp per key row
//   lora_backward       du = s B^T dy (doubles, kept), then dB, dA, dx each
//                       a sum in one thread per output element
//   cross_entropy       one block per row; targets sent from and losses
//                       returned to host memory (the call waits for them)
//   rmsnorm_backward, rope, glu, glu_backward, adamw
//                       per row or per element
//
// Every sum is taken in an order fixed by the shapes alone, so results repeat
// bit for bit. Pointers (but cross_entropy's targets and loss) are device
// memory from CudaBackend::alloc. Operators return once their work is
// enqueued, after the backend's deferred add (CudaBackend::flush_pending).
// reserve() sizes the scratch; a call past it grows the scratch once.
// Not thread-safe: calls come from the backend's one caller.
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "backend/cuda/cuda_train_kernels.cuh"
#include "backend/train_ops.h"

namespace sluice::cuda {

class CudaBackend;

class CudaTrainOps final : public TrainOps {
 public:
  explicit CudaTrainOps(CudaBackend& be);  // be outlives this
  ~CudaTrainOps() override;
  CudaTrainOps(const CudaTrainOps&) = delete;
  CudaTrainOps& operator=(const CudaTrainOps&) = delete;

  // F32 rows, and every type launch_weights_to_f32 decodes (GGUF rows; Q4_0 /
  // Q8_0 also with the scales split off, as prepare_weights leaves them).
  bool supports_matmul_t(DType type, WeightLayout layout) const override;
  void reserve(const TrainScratchNeeds& needs) override;

  void matmul_t(const MatmulTArgs& a) override;
  void rmsnorm_backward(const RmsNormBackArgs& a) override;
  void rope(const RopeArgs& a) override;
  void glu(const GluArgs& a) override;
  void glu_backward(const GluBackArgs& a) override;
  void attention(const TrainAttentionArgs& a) override;
  void attention_backward(const TrainAttentionBackArgs& a) override;
  void cross_entropy(const CrossEntropyArgs& a) override;
  void lora_backward(const LoraBackArgs& a) override;
  void adamw(const AdamWArgs& a) override;

 private:
  // Device scratch of at least `bytes` (grows; `which` names it).
  enum Area { kPanel, kDu, kDsum, kRows, kTargets, kLoss, kNumAreas };
  void* area(int which, size_t bytes);
  // Pinned host memory of at least `bytes`, free to write (the last copy from it done).
  void* pinned(size_t bytes);
  // The rows of seqs, on the device.
  TrainAttnDev attn_dev(const TrainAttentionArgs& a);
  cudaStream_t stream() const;
  // matmul_t with w readable by the kernels (CudaBackend::hold_weight).
  void matmul_t_held(const MatmulTArgs& a, const WeightView& w);

  CudaBackend& be_;
  std::vector<std::pair<void*, size_t>> areas_;
  void* pinned_ = nullptr;
  size_t pinned_cap_ = 0;
  cudaEvent_t sent_ = nullptr;  // recorded after the last copy from pinned_
  std::vector<TrainRowDev> rows_;
};

}  // namespace sluice::cuda
