#include "kv/kv_cache.h"

namespace sluice {

KvCache::KvCache(int64_t n_layer, int64_t n_ctx, int64_t n_embd_kv)
    : n_ctx_(n_ctx),
      n_embd_kv_(n_embd_kv),
      k_(static_cast<size_t>(n_layer * n_ctx * n_embd_kv)),
      v_(static_cast<size_t>(n_layer * n_ctx * n_embd_kv)) {}

}  // namespace sluice
