// Attention of prefill on the tensor cores: a sequence's many query tokens
// against its keys in the paged KV store, flash-attention style (scores and
// the online softmax stay in registers; the scores matrix is never written).
// The same operation as launch_attention (cuda_kernels.cuh): causal, each
// query attends positions [lo, pos] with lo = max(0, pos - window + 1) under a
// sliding window (else 0), GQA (head h reads KV head h / (n_head / n_head_kv)),
// optional soft-cap of the scaled scores.
//
// Numbers: q, K and V are rounded to F16 for the products (K and V are F16 in
// an F16 store already), the probabilities too; scores, softmax state and the
// output sums are float. Against the float reference this leaves ~1e-4 of
// each output's scale (the per-op test bounds it).
//
// Work: a thread block takes kFlashRows consecutive query tokens of one
// sequence and one head (4 warps of 16 queries each) and walks the keys its
// queries attend to in tiles, each tile copied (converted to F16) to shared
// memory once for the 4 warps; mma.sync m16n8k16 for Q K^T and P V.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_kernels.cuh"  // KvLayerDev

namespace sluice::cuda {

constexpr int kFlashRows = 64;  // query tokens per thread block
// A sequence with at least this many query tokens in a call goes here; fewer
// (decode, short chunks) stay on launch_attention, which splits the keys of a
// few queries over many blocks instead (a tile of 64 rows would be mostly empty).
constexpr int64_t kFlashMinQueries = 32;

// kFlashRows (or fewer, at a sequence's end) query tokens of one sequence.
struct FlashTile {
  const float* q = nullptr;  // the first token's row: [n_rows, n_head * head_dim]
  float* out = nullptr;      // likewise
  int32_t pos = 0;           // the first token's position (token i is at pos + i)
  int32_t n_rows = 0;        // 1..kFlashRows
  int32_t table = 0;         // offset of the sequence's block table in `tables`
  int32_t pad = 0;
};

struct FlashAttnDev {
  const FlashTile* tiles = nullptr;  // [n_tiles]
  const int32_t* tables = nullptr;   // the sequences' block tables, packed
  int32_t n_tiles = 0, n_head = 0, n_head_kv = 0, head_dim = 0;
  int32_t window = 0;  // 0: every earlier position
  float scale = 1, softcap = 0;
  KvLayerDev kv;
};

// Whether launch_flash_attention runs this shape: head_dim 64, 96 or 128, and
// each KV head's elements in runs of 8 that start 16-byte aligned.
bool flash_attention_takes(int64_t head_dim, const KvLayerDev& kv);
// Grid: (n_tiles, n_head). Enqueued on s; no allocation.
void launch_flash_attention(const FlashAttnDev& a, cudaStream_t s);

}  // namespace sluice::cuda
