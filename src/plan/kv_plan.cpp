#include "plan/kv_plan.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "base/check.h"
#include "kv/block_manager.h"

namespace sluice::plan {

double kv_bytes_per_token(const ModelShape& s, const WeightFormat& kv) {
  const int64_t row = s.n_embd_kv();
  return 2.0 * static_cast<double>(s.n_layer) * static_cast<double>(kv.bytes(row));
}

double kv_bytes_per_seq(const ModelShape& s, const WeightFormat& kv, int64_t n_ctx) {
  return kv_bytes_per_token(s, kv) * static_cast<double>(n_ctx);
}

double kv_break_even_ctx(const ModelShape& s, const WeightFormat& kv, double weight_bytes) {
  return weight_bytes / kv_bytes_per_token(s, kv);
}

KvKept kv_tokens_kept(const ModelShape& s, int64_t n_ctx, int64_t block_tokens) {
  CHECK(n_ctx >= 0 && block_tokens > 0);
  KvKept k{.n_tokens = n_ctx};
  const int64_t window = s.kv_window();
  if (window > 0) {
    const int64_t cap = kv_blocks_per_seq(n_ctx, block_tokens, window) * block_tokens;
    k.windowed = cap < n_ctx;
    k.n_tokens = std::min(n_ctx, cap);
    k.note = fmt::format(
        "sliding window {} on every layer: KV kept per sequence at most {} positions ({} blocks of {}), "
        "the blocks behind the window are freed",
        window, kv_window_blocks(window, block_tokens) * block_tokens, kv_window_blocks(window, block_tokens),
        block_tokens);
  } else if (s.n_swa > 0 && s.n_layer_swa > 0) {
    k.note = fmt::format(
        "sliding window {} on {} of {} layers: KV of every position kept (the engine frees blocks only when every "
        "layer is windowed; the global layers read the whole context)",
        s.n_swa, s.n_layer_swa, s.n_layer);
  }
  return k;
}

double kv_bytes_kept_per_seq(const ModelShape& s, const WeightFormat& kv, int64_t n_ctx, int64_t block_tokens) {
  return kv_bytes_per_seq(s, kv, kv_tokens_kept(s, n_ctx, block_tokens).n_tokens);
}

StatusOr<KvBudget> max_batch_for_budget(const KvBudgetInputs& in) {
  if (!(in.kv_bytes_per_seq > 0)) return invalid_argument("KV bytes per sequence must be positive");
  if (!(in.memory_bytes > 0)) return invalid_argument("the memory budget must be positive");
  if (in.weight_bytes < 0 || in.reserve_bytes < 0) return invalid_argument("weights and reserve must not be negative");
  KvBudget b;
  b.kv_budget_bytes = in.memory_bytes - in.weight_bytes - in.reserve_bytes;
  if (b.kv_budget_bytes <= 0) return b;
  b.seqs_exact = b.kv_budget_bytes / in.kv_bytes_per_seq;
  b.max_batch = static_cast<int64_t>(std::floor(b.seqs_exact));
  return b;
}

StatusOr<PagedAllocation> paged_allocation(std::span<const int64_t> request_tokens, int64_t max_ctx,
                                           int64_t block_tokens) {
  if (max_ctx <= 0 || block_tokens <= 0) return invalid_argument("max context and block size must be positive");
  PagedAllocation a;
  int64_t used = 0;
  for (int64_t t : request_tokens) {
    if (t < 0 || t > max_ctx) return invalid_argument("request of {} tokens outside [0, {}]", t, max_ctx);
    a.reserved_slots += max_ctx;
    a.paged_slots += (t + block_tokens - 1) / block_tokens * block_tokens;
    a.reserved_waste.push_back(static_cast<double>(max_ctx - t) / static_cast<double>(max_ctx));
    used += t;
  }
  a.slack_slots = a.paged_slots - used;
  return a;
}

}  // namespace sluice::plan
