// The kernels of the CUDA backend's training operators (cuda_train_ops.h),
// one launch_* per step of an operator of backend/train_ops.h. Each enqueues
// on the given stream and returns: no allocation, no synchronization; every
// pointer is device memory (the host side stages targets and losses).
//
// Arithmetic follows ReferenceTrainOps (backend/reference_train_ops.cpp):
// sums in double (the H200's FP64 rate makes that cheap at these sizes), each
// reduced in an order fixed by the launch shape alone (warp and block trees,
// loops over tokens in ascending order), so a run repeats bit for bit. Sums
// over tokens (dA, dB, dK, dV) are loops in one thread, never atomics.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "arch/arch_spec.h"  // RopeLayout, Activation
#include "backend/op_types.h"

namespace sluice::cuda {

// ---- matmul_t -----------------------------------------------------------------

// Whether launch_weights_to_f32 reads this matrix: F16 and BF16 rows of any
// width (2-byte aligned), the block types of matmul_supports() in GGUF rows
// (n_in a multiple of the block, data aligned for the decoder's loads), or
// Q4_0 / Q8_0 with the scales split off (16-byte aligned). F32 rows need no decoding (launch_matmul_t_panel
// reads them in place).
bool weights_to_f32_takes(const WeightView& w);
// Whether type / layout is one weights_to_f32_takes can take (alignment aside).
bool weights_to_f32_type(DType type, WeightLayout layout);
// out[r][i] = W[row0 + r][i] for r < n_rows, as dequantize_row computes it.
//   out: [n_rows, w.n_in], 16-byte aligned
void launch_weights_to_f32(const WeightView& w, int64_t row0, int64_t n_rows, float* out, cudaStream_t s);
// dx[t][i] = (first ? 0 : dx[t][i]) + sum_{r < n_rows} wp[r][i] * dy[t][row0 + r]
// (the sum in double, r ascending).  wp: [n_rows, n_in]  dy: [n_tok, n_out]  dx: [n_tok, n_in]
void launch_matmul_t_panel(const float* wp, int64_t n_rows, int64_t row0, const float* dy, int64_t n_out, float* dx,
                           int64_t n_in, int64_t n_tok, bool first, cudaStream_t s);

// ---- per row / per element ------------------------------------------------------

// RmsNormBackArgs, one block per row.
void launch_rmsnorm_backward(const float* x, const float* w, const float* dy, float* dx, int64_t n_tok, int64_t n,
                             float eps, cudaStream_t s);
// RopeArgs: one thread per rotated pair, the products rounded as the reference's (no fused multiply-add).
void launch_train_rope(float* x, const float* cos_sin, int64_t n_tok, int64_t n_head, int64_t head_dim, int64_t n_rot,
                       RopeLayout layout, bool inverse, cudaStream_t s);
// GluArgs: h = act(g) * u.  GluBackArgs: dg = dh * u * act'(g), du = dh * act(g).  [n] each
void launch_train_glu(const float* g, const float* u, float* h, int64_t n, Activation act, cudaStream_t s);
// x[t][i] += v[i] for t < n_tok, i < n (one thread per element).
void launch_add_rows(float* x, const float* v, int64_t n_tok, int64_t n, cudaStream_t s);
void launch_glu_backward(const float* g, const float* u, const float* dh, float* dg, float* du, int64_t n,
                         Activation act, cudaStream_t s);
// CrossEntropyArgs with targets and loss in device memory, one block per row.
void launch_cross_entropy(float* logits, const int32_t* targets, double* loss, int64_t n_tok, int64_t n_vocab,
                          float grad_scale, cudaStream_t s);
// AdamWArgs; bc1 = 1 - beta1^step, bc2 = 1 - beta2^step (computed on the host).
void launch_adamw(float* p, const float* g, float* m, float* v, int64_t n, double lr, double beta1, double beta2,
                  double eps, double weight_decay, double bc1, double bc2, cudaStream_t s);

// ---- the routed FFN's rows (GatherRowsArgs .. GatedAddBackArgs) -----------------
// (gather_rows is cuda_kernels.cuh's launch_gather_rows.) row, w, dw: device
// copies of the host arrays.

// SlotSumArgs: one thread per output element, the slots in order, products
// and sums rounded as the reference's (no fused multiply-add); w null: 1.
void launch_slot_sum(const float* y, const int32_t* row, const float* w, float* out, int64_t n_tok, int64_t k, int64_t n,
                     cudaStream_t s);
// SlotSumBackArgs: dw[t * k + j] (one warp per slot, a double sum), then
// dy[row[t * k + j]] = w[t * k + j] * dout[t] (one thread per element).
void launch_slot_sum_backward(const float* y, const int32_t* row, const float* w, const float* dout, float* dy,
                              float* dw, int64_t n_tok, int64_t k, int64_t n, cudaStream_t s);
// GatedAddArgs and GatedAddBackArgs, one block per row (gate null: s = 1).
void launch_gated_add(const float* x, const float* gate, const float* y, float* out, float* s_out, int64_t n_tok,
                      int64_t n, cudaStream_t s);
void launch_gated_add_backward(const float* gate, const float* y, const float* s_in, const float* dout, float* dy,
                               float* dx, int64_t n_tok, int64_t n, cudaStream_t s);

// ---- lora_backward: four steps --------------------------------------------------

// du[t][r] = scale * sum_o b[o][r] dy[t][o] (one warp per (t, r)).  du: [n_tok, rank] doubles
void launch_lora_du(const float* b, const float* dy, double* du, int64_t n_tok, int64_t n_out, int64_t rank,
                    float scale, cudaStream_t s);
// db[o][r] += scale * sum_t dy[t][o] u[t][r]   (one thread per (o, r), t ascending)
void launch_lora_db(const float* dy, const float* u, float* db, int64_t n_tok, int64_t n_out, int64_t rank, float scale,
                    cudaStream_t s);
// da[r][i] += sum_t du[t][r] x[t][i]            (one thread per (r, i), t ascending)
void launch_lora_da(const double* du, const float* x, float* da, int64_t n_tok, int64_t n_in, int64_t rank,
                    cudaStream_t s);
// dx[t][i] += sum_r a[r][i] du[t][r]            (one thread per (t, i), r ascending)
void launch_lora_dx(const double* du, const float* a, float* dx, int64_t n_tok, int64_t n_in, int64_t rank,
                    cudaStream_t s);

// ---- attention -------------------------------------------------------------------

// A row of a training attention call: its index, its sequence's first row and length.
struct TrainRowDev {
  int32_t row = 0;
  int32_t tok0 = 0;
  int32_t n_tok = 0;
  int32_t pad = 0;
};
struct TrainAttnDev {
  const TrainRowDev* rows = nullptr;  // [n_rows] the rows the sequences cover
  int32_t n_rows = 0, n_head = 0, n_head_kv = 0, head_dim = 0;  // head_dim <= kTrainMaxHeadDim
  int32_t window = 0;
  float scale = 1, softcap = 0;
  const float* q = nullptr;  // [.., n_head * head_dim]
  const float* k = nullptr;  // [.., n_head_kv * head_dim]
  const float* v = nullptr;
  float* out = nullptr;      // [.., n_head * head_dim]
  float* lse = nullptr;      // [.., n_head]
};
constexpr int kTrainMaxHeadDim = 256;
// TrainAttentionArgs: one warp per (row, head), one pass over the keys
// (cuda_train_attention.cu: float, a key per lane, online softmax).
void launch_train_attention(const TrainAttnDev& a, cudaStream_t s);
// TrainAttentionBackArgs: dsum[row][h] = dout . out, then dq (one warp per
// (row, head), keys ascending) and dk, dv (one warp per (row, kv head):
// the heads of its group ascending, then the queries reading it ascending).
//   dsum: [.., n_head] doubles scratch
void launch_train_attention_backward(const TrainAttnDev& a, const float* dout, float* dq, float* dk, float* dv,
                                     double* dsum, cudaStream_t s);

}  // namespace sluice::cuda
