// KV-cache arithmetic: bytes per token and per sequence, the batch a memory
// budget admits, paged versus max-context allocation, and context sharding.
//
//   kv bytes per token = 2 (K and V) x n_layer x n_head_kv x head_dim x bytes/elem
//
// (the formula of essays 001, 003 and 004). The element format is a block
// geometry like a weight format (f16: 2 bytes; q8_0: 34 bytes per 32), applied
// per KV row of n_head_kv x head_dim elements. Only n_layer, n_head_kv and
// head_dim of the shape are read, and the window by kv_tokens_kept(). Pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "plan/model_shape.h"
#include "plan/weight_bytes.h"
#include "sluice/status.h"

namespace sluice::plan {

// Bytes of K and V for one token across all layers.
double kv_bytes_per_token(const ModelShape& shape, const WeightFormat& kv);
// Bytes of one sequence of n_ctx tokens.
double kv_bytes_per_seq(const ModelShape& shape, const WeightFormat& kv, int64_t n_ctx);
// Context length at which one sequence's KV equals `weight_bytes`.
double kv_break_even_ctx(const ModelShape& shape, const WeightFormat& kv, double weight_bytes);

// The positions of a sequence of n_ctx tokens whose K/V the engine keeps, with
// blocks of block_tokens positions. Every one, unless every layer attends over
// a window (ModelShape::kv_window()): the engine then releases the blocks
// wholly behind the window, so a sequence keeps at most
//
//   (ceil(n_swa / block_tokens) + 1) x block_tokens positions   (kv/block_pool.h kv_blocks_per_seq)
//
// (mistral-7b, window 4096, blocks of 16: 4112). A model with windowed and
// global layers (gemma2, gemma3) keeps every position of every layer: the
// engine's blocks span all layers, and the global ones read the whole context.
struct KvKept {
  int64_t n_tokens = 0;   // positions kept: n_ctx, or the window's blocks when fewer
  bool windowed = false;  // the window bounds what is kept (every layer windowed)
  std::string note;       // one line on how the window was counted
};
KvKept kv_tokens_kept(const ModelShape& shape, int64_t n_ctx, int64_t block_tokens);
// kv_bytes_per_seq() of the positions kv_tokens_kept() keeps.
double kv_bytes_kept_per_seq(const ModelShape& shape, const WeightFormat& kv, int64_t n_ctx, int64_t block_tokens);

struct KvBudgetInputs {
  double memory_bytes = 0;   // device (or host) memory
  double weight_bytes = 0;   // resident weights
  double reserve_bytes = 0;  // activations, runtime, allocator slack
  double kv_bytes_per_seq = 0;
};

struct KvBudget {
  double kv_budget_bytes = 0;  // memory - weights - reserve
  double seqs_exact = 0;       // kv budget / per-sequence bytes
  int64_t max_batch = 0;       // floor of the above (0 when nothing fits)
};

// The largest batch of full-length sequences whose KV fits the budget.
// Errors: non-positive per-sequence bytes or memory.
StatusOr<KvBudget> max_batch_for_budget(const KvBudgetInputs& in);

// Memory two allocation policies take for requests of the given lengths: every
// request reserving max_ctx slots, versus blocks of block_tokens on demand.
struct PagedAllocation {
  int64_t reserved_slots = 0;
  int64_t paged_slots = 0;
  int64_t slack_slots = 0;                 // paged slots not holding a token
  std::vector<double> reserved_waste;      // per request: unused share of its reservation
};
StatusOr<PagedAllocation> paged_allocation(std::span<const int64_t> request_tokens, int64_t max_ctx,
                                           int64_t block_tokens);

}  // namespace sluice::plan
