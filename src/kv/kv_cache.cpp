#include "kv/kv_cache.h"

#include <numeric>

namespace sluice {

StatusOr<KvCache> KvCache::create(const KvLayout& layout, int64_t n_ctx) {
  if (n_ctx <= 0) return invalid_argument("context size must be positive, got {}", n_ctx);
  const int64_t n_blocks = (n_ctx + layout.block_size - 1) / layout.block_size;
  ASSIGN_OR_RETURN(KvStore store, KvStore::create(layout, n_blocks));
  return wrap(std::move(store), n_ctx);
}

StatusOr<KvCache> KvCache::wrap(KvStore store, int64_t n_ctx) {
  if (n_ctx <= 0) return invalid_argument("context size must be positive, got {}", n_ctx);
  const int64_t n_blocks = (n_ctx + store.layout().block_size - 1) / store.layout().block_size;
  if (store.n_blocks() < n_blocks) {
    return invalid_argument("a KV store of {} blocks cannot hold a context of {}", store.n_blocks(), n_ctx);
  }
  KvCache c;
  c.store_ = std::move(store);
  c.table_.resize(static_cast<size_t>(n_blocks));
  std::iota(c.table_.begin(), c.table_.end(), 0);
  c.n_ctx_ = n_ctx;
  return c;
}

}  // namespace sluice
