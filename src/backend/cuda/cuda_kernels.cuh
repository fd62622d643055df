// The CUDA backend's kernels other than the matmuls (cuda_matmul.cuh): norms,
// activations, the residual add, bias + q/k norm + RoPE + KV store, paged
// attention, and the gathers of the expert FFN. Each launch_* enqueues on the
// given stream and returns; no allocation, no synchronization. Pointers are
// device memory unless a comment says otherwise. The scalar reference each one
// is tested against is ReferenceBackend (backend/reference_backend.cpp).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "arch/arch_spec.h"  // RopeLayout, Activation

namespace sluice::cuda {

// out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w; row t of x is x + rows[t] * n
// when rows is set (a device array), else x + t * n.  x, out: [.., n] (may alias)
// With `add` (rows null; [n_tok, n]), x[t] += add[t] is done first and
// written back: the residual add fused into the norm that follows it.
// With out16 ([n_tok, n]), out[t][i] rounded to BF16 goes there too (the
// tensor-core matmul's x: cuda_prefill.h), as launch_floats_to_bf16 rounds.
void launch_rmsnorm(const float* x, const int64_t* rows, const float* w, float eps, float* out, int64_t n_tok, int64_t n,
                    cudaStream_t s, const float* add = nullptr, uint16_t* out16 = nullptr);
// gate[i] = act(gate[i]) * up[i] over n floats; with out16, also its BF16 rounding there.
void launch_glu(float* gate, const float* up, int64_t n, Activation act, cudaStream_t s, uint16_t* out16 = nullptr);
// x[i] += y[i] over n floats.
void launch_add(float* x, const float* y, int64_t n, cudaStream_t s);

// Where layer `layer`'s K/V rows live on the device (kv/kv_store.h's layout):
// element e of row r at base + (r / block_size) * block_bytes
//   + ((e / slice_len) * block_size + r % block_size) * slice_bytes + (e % slice_len) * elem_bytes.
struct KvLayerDev {
  uint8_t* k = nullptr;
  uint8_t* v = nullptr;
  int64_t block_bytes = 0;
  int32_t block_size = 0;
  int32_t slice_len = 0;
  int32_t slice_bytes = 0;
  int32_t elem_bytes = 0;  // 4: f32, 2: f16
};

struct QkvStoreDev {
  float* q = nullptr;  // [n_tok, n_head * head_dim]
  float* k = nullptr;  // [n_tok, n_head_kv * head_dim]
  float* v = nullptr;  // [n_tok, n_head_kv * head_dim]
  const float* bq = nullptr;  // optional biases and per-head norms, as QkvStoreArgs
  const float* bk = nullptr;
  const float* bv = nullptr;
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  float norm_eps = 0;
  const float* cos_sin = nullptr;  // [n_tok, n_rot / 2, 2]
  const int64_t* kv_rows = nullptr;  // [n_tok]
  int32_t n_tok = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_rot = 0;
  RopeLayout rope = RopeLayout::kAdjacent;
  KvLayerDev kv;
};
void launch_qkv_store(const QkvStoreDev& a, cudaStream_t s);

// One query of an attention call: its rows and the keys it attends to.
struct AttnQuery {
  const float* q = nullptr;  // [n_head, head_dim]
  float* out = nullptr;      // [n_head, head_dim]
  int32_t lo = 0;            // first position attended
  int32_t pos = 0;           // the query's own position (last attended)
  int32_t table = 0;         // offset of its sequence's block table in `tables`
  int32_t pad = 0;
};
struct AttentionDev {
  const AttnQuery* queries = nullptr;  // [n_query]
  const int32_t* tables = nullptr;     // the sequences' block tables, packed
  int32_t n_query = 0, n_head = 0, n_head_kv = 0, head_dim = 0;
  float scale = 1, softcap = 0;
  int32_t n_split = 1;         // key ranges per (query, head), combined after (flash decoding)
  int32_t keys_per_split = 0;  // positions per range
  float* partial = nullptr;    // [n_query, n_head, n_split, head_dim + 2] when n_split > 1
  KvLayerDev kv;
};
void launch_attention(const AttentionDev& a, cudaStream_t s);

// dst[i] = src[rows[i]] for i < n_rows.  src: [.., n]  dst: [n_rows, n]  rows: device
void launch_gather_rows(const float* src, const int32_t* rows, float* dst, int64_t n_rows, int64_t n, cudaStream_t s);
// dst[rows[i]] = src[i].  src: [n_rows, n]
void launch_scatter_rows(const float* src, const int32_t* rows, float* dst, int64_t n_rows, int64_t n, cudaStream_t s);
// out[t] = sum over j < n_used of w[t][j] * y[t][j] (j in order), then
// + sigmoid(gate . x[t]) * ys[t] when ys is set (gate null: weight 1).
//   y: [n_tok, n_used, n]  w: [n_tok, n_used]  ys, x, out: [n_tok, n]  gate: [n]
void launch_expert_sum(const float* y, const float* w, int64_t n_used, const float* ys, const float* gate,
                       const float* x, float* out, int64_t n_tok, int64_t n, cudaStream_t s);

// One segment of a LoRA call (LoraSegment, with the rows' offsets).
struct LoraSegDev {
  const float* a = nullptr;  // [rank, n_in]
  const float* b = nullptr;  // [n_out, rank]
  int64_t tok0 = 0;          // first row of x / y
  int32_t n_tok = 0;
  int32_t rank = 0;          // at most kLoraMaxRank
  float scale = 1.0f;
  int32_t first = 0;         // tokens of the call's segments before this one
};
constexpr int kLoraMaxRank = 256;
// A LoRA call's segments: up to kLoraInlineSegs in the launch's arguments
// (nothing to copy; a recorded step keeps them in its graph's node), more in
// device memory.
constexpr int kLoraInlineSegs = 8;
struct LoraSegs {
  const LoraSegDev* dev = nullptr;  // [n] device memory, or null: in `in_args`
  LoraSegDev in_args[kLoraInlineSegs];
  int32_t n = 0;
};
// Per token t of every segment (one thread block each): u = A x[t] (one warp
// per rank row, a fixed reduction), then y[t] += scale * B u; with u_out,
// u_out[t * u_stride + r] = u[r]. The arithmetic of a token depends on its
// rows only, so a token alone equals it in a batch.
//   x: [.., n_in]  y: [.., n_out]
void launch_lora(const LoraSegs& segs, int64_t n_tok_total, const float* x, float* y, int64_t n_in, int64_t n_out,
                 float* u_out, int64_t u_stride, cudaStream_t s);

}  // namespace sluice::cuda
