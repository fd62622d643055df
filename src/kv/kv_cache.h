// KvCache: the paged KV storage of a single sequence, for callers that run one
// sequence at a time (sluice run, tests, benchmarks).
//
// It owns a KvStore of ceil(n_ctx / block_size) blocks and the identity block
// table 0, 1, 2, ..., so it goes through exactly the same paged code as the
// serving engine. The model writes rows n_past .. n_past + n - 1 during a
// forward pass and advances n_past. Not thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kv/kv_store.h"

namespace sluice {

class KvCache {
 public:
  // Errors: see KvStore::create.
  static StatusOr<KvCache> create(const KvLayout& layout, int64_t n_ctx);
  // The same over a store made elsewhere (a backend's create_kv()), which must
  // hold ceil(n_ctx / block_size) blocks.
  static StatusOr<KvCache> wrap(KvStore store, int64_t n_ctx);

  int64_t n_ctx() const { return n_ctx_; }
  // Number of positions holding valid K/V (the next position to write).
  int64_t n_past() const { return n_past_; }
  void set_n_past(int64_t n) { n_past_ = n; }
  // Forgets everything (the memory stays allocated).
  void clear() { n_past_ = 0; }

  KvStore& store() { return store_; }
  std::span<const int32_t> block_table() const { return table_; }
  uint64_t bytes() const { return store_.bytes(); }

 private:
  KvStore store_;
  std::vector<int32_t> table_;
  int64_t n_ctx_ = 0;
  int64_t n_past_ = 0;
};

}  // namespace sluice
