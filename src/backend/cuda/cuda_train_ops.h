// CudaTrainOps: the training operators (backend/train_ops.h) on the CUDA
// backend's stream, with the kernels of cuda_train_kernels.cuh.
//
//   matmul_t            past the tensor-core path's token threshold, every
//                       type but F32 on it (PrefillMatmul::run_t: dy and the
//                       weights in BF16, as the forward rounds); otherwise
//                       the matrix decoded to f32 a panel of rows at a time
//                       (the forward's decoders), dx summed over each panel
//   attention (+ back)  float; one warp per (row, head), the keys a lane
//                       each, 32 at a time; dk, dv one warp per key row
//   lora_backward       from kLoraGemmMinTokens tokens, four F32 GEMMs on
//                       cuBLASLt (du = s dy B, dB, dA, dx); fewer tokens, or
//                       without cuBLASLt: du in doubles, then dB, dA, dx each
//                       a sum in one thread per output element
//   cross_entropy       one block per row; targets sent from and losses
//                       returned to host memory (the call waits for them)
//   gather_rows, slot_sum (+ back), gated_add (+ back)
//                       the routed FFN's rows: their host index and weight
//                       arrays staged in one copy a call; slot_sum_backward
//                       returns dw to host memory (the call waits for it)
//   rmsnorm_backward, rope, glu, glu_backward, adamw
//                       per row or per element
//
// Every sum is taken in an order fixed by the shapes alone, so results repeat
// bit for bit. Pointers (but cross_entropy's targets and loss, and the routed
// rows' index, weight and dw arrays) are device
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
  // lora_backward's GEMMs from this many tokens (and past the backend's
  // batch-invariant size, so that dx keeps the per-row contract below it).
  static constexpr int64_t kLoraGemmMinTokens = 16;

  explicit CudaTrainOps(CudaBackend& be);  // be outlives this
  ~CudaTrainOps() override;
  CudaTrainOps(const CudaTrainOps&) = delete;
  CudaTrainOps& operator=(const CudaTrainOps&) = delete;

  // F32 rows, and every type launch_weights_to_f32 decodes (GGUF rows; Q4_0 /
  // Q8_0 also with the scales split off, as prepare_weights leaves them).
  bool supports_matmul_t(DType type, WeightLayout layout) const override;
  // Past the tensor-core path's token threshold, every type but F32 (cuda_prefill.h's run_t).
  bool matmul_t_rounds_to_bf16(DType type, int64_t n_tok) const override;
  void reserve(const TrainScratchNeeds& needs) override;

  void matmul_t(const MatmulTArgs& a) override;
  void rmsnorm_backward(const RmsNormBackArgs& a) override;
  void rope(const RopeArgs& a) override;
  void glu(const GluArgs& a) override;
  void glu_backward(const GluBackArgs& a) override;
  void attention(const TrainAttentionArgs& a) override;
  void attention_backward(const TrainAttentionBackArgs& a) override;
  void cross_entropy(const CrossEntropyArgs& a) override;
  void finish_losses() override;
  void lora_backward(const LoraBackArgs& a) override;
  void adamw(const AdamWArgs& a) override;
  void add_rows(const AddRowsArgs& a) override;
  void gather_rows(const GatherRowsArgs& a) override;
  void slot_sum(const SlotSumArgs& a) override;
  void slot_sum_backward(const SlotSumBackArgs& a) override;
  void gated_add(const GatedAddArgs& a) override;
  void gated_add_backward(const GatedAddBackArgs& a) override;

 private:
  // Device scratch of at least `bytes` (grows; `which` names it).
  enum Area { kPanel, kDu, kDsum, kRows, kTargets, kLoss, kStaged, kDw, kNumAreas };
  void* area(int which, size_t bytes);
  // Pinned host memory of at least `bytes`, free to write (the last copy from it done).
  void* pinned(size_t bytes);
  // Host arrays (pointer, bytes) copied to the device in one stream-ordered
  // copy through pinned(), into kStaged; dev[i] is where part i landed (null
  // for a null part). Kernels queued before still read what they read.
  void stage(std::initializer_list<std::pair<const void*, size_t>> parts, const void** dev);
  // Room for `rows` targets and losses of cross_entropy calls (pinned and on
  // the device); only while none is pending.
  void reserve_losses(int64_t rows);
  double* host_losses() const {  // the pinned losses, after the targets
    return reinterpret_cast<double*>(loss_host_ + static_cast<size_t>(loss_cap_) * sizeof(int32_t));
  }
  // The rows of seqs, on the device (copied there only when they changed).
  TrainAttnDev attn_dev(const TrainAttentionArgs& a);
  cudaStream_t stream() const;
  // matmul_t with w readable by the kernels (CudaBackend::hold_weight).
  void matmul_t_held(const MatmulTArgs& a, const WeightView& w);
  // lora_backward as F32 GEMMs (CudaBackend::f32_gemms); false, nothing
  // enqueued, when they cannot run.
  bool lora_backward_gemms(const LoraBackArgs& a);

  CudaBackend& be_;
  std::vector<std::pair<void*, size_t>> areas_;
  void* pinned_ = nullptr;
  size_t pinned_cap_ = 0;
  cudaEvent_t sent_ = nullptr;  // recorded after the last copy from pinned_
  std::vector<TrainRowDev> rows_;
  // cross_entropy's rows since the last finish_losses(): targets and losses at
  // [0, loss_rows_) of loss_host_ (pinned: loss_cap_ int32 targets, then
  // loss_cap_ doubles) and of kTargets / kLoss; each call's losses copied back
  // to the caller's array by finish_losses().
  struct PendingLoss {
    double* dst;
    int64_t at, n;
  };
  uint8_t* loss_host_ = nullptr;
  int64_t loss_cap_ = 0, loss_rows_ = 0;
  std::vector<PendingLoss> pending_losses_;
  cudaEvent_t losses_copied_ = nullptr;  // after the last loss copied to loss_host_
  // What kRows holds on the device (empty: unknown). A step's attention calls
  // share their rows, so one upload serves every layer's forward and backward.
  std::vector<TrainRowDev> rows_on_device_;
};

}  // namespace sluice::cuda
