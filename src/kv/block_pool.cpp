#include "kv/block_pool.h"

#include <limits>

#include "base/check.h"
#include "base/enum_names.h"

namespace sluice {

constexpr EnumName<KvDtype> kKvDtypeNames[] = {
    {KvDtype::kF32, "f32"}, {KvDtype::kF16, "f16"}, {KvDtype::kQ8_0, "q8_0"}};

const char* kv_dtype_name(KvDtype dtype) { return enum_name(dtype, kKvDtypeNames); }

StatusOr<int64_t> kv_row_bytes(KvDtype dtype, int64_t n_embd_kv) {
  if (n_embd_kv <= 0) return invalid_argument("kv row: n_embd_kv must be positive, got {}", n_embd_kv);
  constexpr int64_t kMaxElems = std::numeric_limits<int64_t>::max() / 8;
  if (n_embd_kv > kMaxElems) return invalid_argument("kv row: n_embd_kv {} is too large", n_embd_kv);
  switch (dtype) {
    case KvDtype::kF32: return n_embd_kv * 4;
    case KvDtype::kF16: return n_embd_kv * 2;
    case KvDtype::kQ8_0:
      if (n_embd_kv % 32 != 0) {
        return invalid_argument("kv row: q8_0 needs n_embd_kv to be a multiple of 32, got {}",
                                n_embd_kv);
      }
      return n_embd_kv / 32 * 34;
  }
  return invalid_argument("kv row: unknown dtype {}", static_cast<int>(dtype));
}

int64_t kv_slices(const KvLayout& layout) {
  const int64_t h = layout.n_head_kv;
  if (h <= 1 || layout.n_embd_kv % h != 0) return 1;
  if (layout.dtype == KvDtype::kQ8_0 && (layout.n_embd_kv / h) % 32 != 0) return 1;
  return h;
}

StatusOr<int64_t> kv_block_bytes(const KvLayout& layout) {
  if (layout.n_layer <= 0) return invalid_argument("kv layout: n_layer must be positive, got {}", layout.n_layer);
  if (layout.block_size <= 0) {
    return invalid_argument("kv layout: block_size must be positive, got {}", layout.block_size);
  }
  ASSIGN_OR_RETURN(const int64_t row, kv_row_bytes(layout.dtype, layout.n_embd_kv));
  // 2 * n_layer * block_size * row, refusing anything past int64.
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  int64_t bytes = 2 * row;
  for (const int64_t factor : {layout.n_layer, layout.block_size}) {
    if (bytes > kMax / factor) {
      return invalid_argument("kv layout: block of {} layers x {} tokens x {} byte rows overflows",
                              layout.n_layer, layout.block_size, row);
    }
    bytes *= factor;
  }
  return bytes;
}

StatusOr<int64_t> kv_blocks_for_budget(uint64_t budget_bytes, const KvLayout& layout) {
  ASSIGN_OR_RETURN(const int64_t block, kv_block_bytes(layout));
  return static_cast<int64_t>(budget_bytes / static_cast<uint64_t>(block));
}

BlockPool::BlockPool(int64_t n_blocks, int64_t limit)
    : ref_count_(static_cast<size_t>(n_blocks), 0),
      hash_(static_cast<size_t>(n_blocks), 0),
      has_hash_(static_cast<size_t>(n_blocks), 0),
      cache_(n_blocks),
      limit_(limit < 0 ? n_blocks : limit) {
  CHECK(n_blocks > 0 && n_blocks <= std::numeric_limits<int32_t>::max());
  CHECK(limit_ >= 1 && limit_ <= n_blocks);
  free_list_.reserve(static_cast<size_t>(n_blocks));
  // Back of the list is taken first, so a fresh pool hands out 0, 1, 2, ...
  for (int64_t b = limit_ - 1; b >= 0; --b) free_list_.push_back(static_cast<int32_t>(b));
}

void BlockPool::set_limit(int64_t limit) {
  CHECK(limit >= 1 && limit <= n_ids());
  if (limit < limit_) {
    std::erase_if(free_list_, [&](int32_t b) { return b >= limit; });
    for (int32_t b = static_cast<int32_t>(limit); b < limit_; ++b) {
      if (ref_count_[b] > 0) {
        ++n_draining_;
      } else if (has_hash_[b]) {  // cached: forgotten
        cache_.remove_evictable(b);
        cache_.erase(hash_[b], b);
        has_hash_[b] = 0;
        hash_[b] = 0;
      }
    }
  } else {
    // Lowest ids on the back: they are handed out first.
    std::vector<int32_t> back;
    for (int32_t b = static_cast<int32_t>(limit) - 1; b >= limit_; --b) {
      if (ref_count_[b] > 0) --n_draining_;
      else back.push_back(b);
    }
    free_list_.insert(free_list_.begin(), back.begin(), back.end());
  }
  limit_ = limit;
}

int32_t BlockPool::check_id(int32_t block) const {
  CHECK(block >= 0 && block < static_cast<int32_t>(ref_count_.size()));
  return block;
}

std::optional<int32_t> BlockPool::allocate() {
  int32_t block;
  if (!free_list_.empty()) {
    block = free_list_.back();
    free_list_.pop_back();
  } else {
    const std::optional<int32_t> victim = cache_.pop_lru();
    if (!victim) return std::nullopt;
    block = *victim;
    cache_.erase(hash_[block], block);
    has_hash_[block] = 0;
    hash_[block] = 0;
    ++n_evictions_;
  }
  CHECK(ref_count_[block] == 0 && !has_hash_[block]);
  ref_count_[block] = 1;
  ++n_used_;
  return block;
}

void BlockPool::ref(int32_t block) {
  check_id(block);
  if (ref_count_[block] == 0) {
    // Only a cached free block can come back by reference; a plain free one has
    // meaningless content and is reachable only through allocate().
    CHECK(has_hash_[block]);
    cache_.remove_evictable(block);
    ++n_used_;
  }
  ++ref_count_[block];
}

void BlockPool::unref(int32_t block) {
  check_id(block);
  CHECK(ref_count_[block] > 0);
  if (--ref_count_[block] > 0) return;
  --n_used_;
  if (block >= limit_) {  // draining: retired
    --n_draining_;
    if (has_hash_[block]) {
      cache_.erase(hash_[block], block);
      has_hash_[block] = 0;
      hash_[block] = 0;
    }
    return;
  }
  if (has_hash_[block]) {
    cache_.push_evictable(block);
  } else {
    free_list_.push_back(block);
  }
}

bool BlockPool::register_hash(int32_t block, uint64_t hash) {
  check_id(block);
  CHECK(ref_count_[block] > 0 && !has_hash_[block]);
  if (!cache_.insert(hash, block)) return false;
  hash_[block] = hash;
  has_hash_[block] = 1;
  return true;
}

void BlockPool::unregister_hash(int32_t block) {
  check_id(block);
  CHECK(ref_count_[block] > 0 && has_hash_[block]);
  cache_.erase(hash_[block], block);
  has_hash_[block] = 0;
  hash_[block] = 0;
}

Status BlockPool::check_invariants(std::span<const int32_t> expected_refs) const {
  const int64_t n = n_ids();
  if (static_cast<int64_t>(expected_refs.size()) != n) {
    return internal_error("block pool: {} expected refcounts for {} blocks", expected_refs.size(), n);
  }
  std::vector<uint8_t> on_free_list(static_cast<size_t>(n), 0);
  for (const int32_t b : free_list_) {
    if (b < 0 || b >= n) return internal_error("block pool: free list holds bad id {}", b);
    if (on_free_list[b]) return internal_error("block pool: block {} twice on the free list", b);
    on_free_list[b] = 1;
  }
  int64_t n_used = 0, n_free = 0, n_cached = 0, n_draining = 0;
  for (int32_t b = 0; b < n; ++b) {
    if (ref_count_[b] != expected_refs[b]) {
      return internal_error("block pool: block {} has ref_count {} but {} tables hold it", b,
                            ref_count_[b], expected_refs[b]);
    }
    const bool evictable = cache_.is_evictable(b);
    if (b >= limit_) {  // past the limit: draining, or retired (on no list)
      if (on_free_list[b] || evictable) return internal_error("block pool: block {} past the limit {} is free", b, limit_);
      if (ref_count_[b] > 0) ++n_draining, ++n_used;
      else if (has_hash_[b]) return internal_error("block pool: retired block {} keeps a hash", b);
      if (has_hash_[b]) {
        const std::optional<int32_t> owner = cache_.find(hash_[b]);
        if (!owner || *owner != b) return internal_error("block pool: block {} hash is not indexed to it", b);
      }
      continue;
    }
    if (ref_count_[b] > 0) {
      if (on_free_list[b] || evictable) return internal_error("block pool: used block {} is also free", b);
      ++n_used;
    } else if (has_hash_[b]) {
      if (on_free_list[b] || !evictable) {
        return internal_error("block pool: cached block {} not exactly in the eviction order", b);
      }
      ++n_cached;
    } else {
      if (!on_free_list[b] || evictable) {
        return internal_error("block pool: free block {} not exactly on the free list", b);
      }
      ++n_free;
    }
    if (has_hash_[b]) {
      const std::optional<int32_t> owner = cache_.find(hash_[b]);
      if (!owner || *owner != b) return internal_error("block pool: block {} hash is not indexed to it", b);
    }
  }
  if (n_used != n_used_ || n_draining != n_draining_ || n_used - n_draining + n_cached + n_free != limit_ ||
      n_cached != cache_.n_evictable()) {
    return internal_error("block pool: counts used {} (kept {}, draining {} kept {}) + cached {} + free {} != limit {}",
                          n_used, n_used_, n_draining, n_draining_, n_cached, n_free, limit_);
  }
  for (const auto& [h, b] : cache_.index()) {
    if (b < 0 || b >= n || !has_hash_[b] || hash_[b] != h) {
      return internal_error("block pool: index maps hash {:#x} to block {} that does not carry it", h, b);
    }
  }
  return Status::ok_status();
}

}  // namespace sluice
