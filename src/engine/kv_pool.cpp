#include "engine/kv_pool.h"

#include <algorithm>

#include "kv/block_manager.h"
#include "kv/block_pool.h"
#include "model/model.h"

namespace sluice {

StatusOr<KvDtype> parse_kv_dtype(const std::string& s, KvDtype automatic) {
  if (s == "auto" || s.empty()) return automatic;
  if (s == "f32") return KvDtype::kF32;
  if (s == "f16") return KvDtype::kF16;
  if (s == "q8_0") return KvDtype::kQ8_0;
  return invalid_argument("unknown KV dtype '{}' (auto, f32, f16, q8_0)", s);
}

StatusOr<KvPool> plan_kv_pool(const EngineConfig& config, const KvShape& shape) {
  KvPool p;
  ASSIGN_OR_RETURN(KvDtype dtype, parse_kv_dtype(config.kv_dtype, shape.default_dtype));
  p.layout = shape.layout(dtype, config.kv_block_size);
  ASSIGN_OR_RETURN(p.block_bytes, kv_block_bytes(p.layout));
  p.window = shape.window;
  if (config.kv_budget_bytes > 0) {
    ASSIGN_OR_RETURN(p.n_blocks, kv_blocks_for_budget(config.kv_budget_bytes, p.layout));
  } else {
    const int64_t per_seq = kv_blocks_per_seq(shape.n_ctx_max, p.layout.block_size, p.window);
    const int64_t floor =
        p.window > 0 ? kv_window_blocks(p.window, p.layout.block_size) +
                           (config.max_batch_tokens + p.layout.block_size - 1) / p.layout.block_size
                     : per_seq;
    const int64_t want = std::max(floor, per_seq * std::max<int64_t>(1, config.max_seqs / 4));
    const int64_t cap = std::max<int64_t>(floor, (int64_t{4} << 30) / p.block_bytes);
    p.n_blocks = std::min(want, cap);
  }
  if (p.n_blocks < 1) return resource_exhausted("KV budget holds no block of {} bytes", p.block_bytes);
  return p;
}

}  // namespace sluice
