// Paged attention: causal GQA attention for many sequences in one step, reading
// K/V rows through each sequence's block table (no gather into a contiguous copy).
//
//   position p of a sequence -> slot p % block_size of block block_table[p / block_size]
//   of the layer's K (and V); values are f32, f16 or q8_0 (GGUF Q8_0 blocks). A block
//   holds its rows in n_slices head-major slices (kv/kv_store.h):
//
//     block b: [n_slices][block_size][row_bytes / n_slices]
//
//   so with n_slices = n_head_kv one head's K of a block is block_size
//   consecutive slices; n_slices = 1 is plain rows.
//
// Online softmax in fixed chunks of kPagedKvChunk positions, folded left to right
// (m = running max, l = sum exp(s - m), acc = sum exp(s - m) v):
//
//   query at position P:  chunks [0,256) [256,512) ... [c*256, P+1)
//   each chunk starts from (m=-inf, l=0, acc=0); states merge in chunk order.
//
// Inside a chunk, tiles of at most 16 positions that never span two blocks
// (so one head's positions of a tile are equally spaced) are the unit of a
// softmax rescale. At AVX-512, f32 and f16 K/V are read in place by a fused
// kernel (16 scores at once, vector exp, f16 converted in registers); at AVX2 by
// the composed arithmetic (dot products, scalar softmax, accumulation) reading
// rows where they lie; q8_0, and the scalar level, convert a tile to floats first.
//
// A sliding window (window > 0) keeps this grid: a query at P reads positions
// lo = max(0, P - window + 1) .. P, so its first chunk is lo / 256 and its first
// tile the grid's tile holding lo, cut to start at lo. Chunks and tiles wholly
// before the first query of a work item are skipped without touching their
// blocks (which the KV manager may have freed); a chunk that is empty for a
// later query of the item leaves its state untouched (merging into an empty
// state copies).
//
// Soft-capping (softcap > 0) applies softcap * tanh(s / softcap) to each score;
// it always takes the composed scores/accumulate path (never the fused tile
// kernel), so every level this machine can run checks it against the scalar one.
//
// Because chunking, tiling and fold order depend only on a query's position, its
// output has the same bits whether it is decoded alone or inside a prefill batch,
// and whatever the thread count. Work items are (sequence, up to 8 tokens, a run
// of kv heads): all query heads of those kv heads are handled together, and with
// head-major blocks the run's slices of a block are one stretch of memory. Items
// take as many kv heads as leave about four per thread and are claimed in turn.
// With few items (decode of long contexts), chunks of one kv head are spread over
// threads (split-KV) and folded in a second pass. No allocation: callers pass
// `partials`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "backend/cpu/cpu_features.h"
#include "base/thread_pool.h"

namespace sluice::cpu {

constexpr int64_t kPagedKvChunk = 256;

enum class KvRowType { kF32, kF16, kQ8_0 };

struct PagedKv {
  const uint8_t* k = nullptr;  // layer's K: [n_blocks][n_slices][block_size][row_bytes / n_slices]
  const uint8_t* v = nullptr;  // layer's V, the same
  size_t row_bytes = 0;        // one position's K (or V), all heads
  int64_t block_size = 16;
  KvRowType type = KvRowType::kF32;
  int64_t n_slices = 1;        // 1 or n_head_kv; q8_0 slices hold whole blocks of 32
};

struct PagedSeq {
  const float* q = nullptr;  // [n_tokens, n_head, head_dim]
  float* out = nullptr;      // [n_tokens, n_head, head_dim]
  int64_t n_tokens = 0;      // query tokens at positions pos0 .. pos0 + n_tokens - 1
  int64_t pos0 = 0;
  const int32_t* block_table = nullptr;  // covers positions 0 .. pos0 + n_tokens - 1; entries wholly
                                         // before the first query's window are never read
};

struct PagedAttentionArgs {
  std::span<const PagedSeq> seqs;
  PagedKv kv;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  float scale = 1.0f;
  int64_t window = 0;    // a query at position P attends to max(0, P - window + 1) .. P (0: 0 .. P)
  float softcap = 0.0f;  // scores s -> softcap * tanh(s / softcap) after the scale (0: none)
};

// Floats of `partials` needed for any call with at most max_items (token, kv head)
// items over contexts of at most max_ctx positions, on n_threads threads.
size_t paged_attention_partials_floats(int64_t max_items, int64_t max_ctx, int64_t n_head, int64_t n_head_kv,
                                       int64_t head_dim, int n_threads);

void paged_attention(const PagedAttentionArgs& a, float* partials, size_t n_partials, ThreadPool& pool,
                     Isa isa = active_isa());

}  // namespace sluice::cpu
