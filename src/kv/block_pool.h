// BlockPool: the fixed set of KV blocks of one device and the state of each.
//
// A block holds the K and V rows of block_size consecutive token positions of one
// sequence, in every layer. Its bytes (see kv_block_bytes) are owned by whoever
// backs the pool with memory; this class only does the accounting. Every block is
// in exactly one of three states:
//
//   used         ref_count > 0           held by one or more block tables
//   cached free  ref_count == 0, hashed  reusable by a prefix hit until evicted
//   free         ref_count == 0, no hash on the free list, content meaningless
//
//   allocate(): free list first, else evict the least recently freed cached block
//   ref():      used -> used (count+1), or cached free -> used (prefix hit)
//   unref():    count-1; at 0: hashed -> cached free (most recent), else -> free
//
// A limit (set_limit) lets the pool's memory shrink and grow at run time (the
// fluid split, plan/fluid_split.h): ids at or past it are never handed out.
// Free and cached ones there are retired at once (hash dropped); used ones
// drain, retiring at their last unref. Raising the limit brings retired ids
// back as free. Ids run 0 .. n_ids()-1 whatever the limit:
//
//   ids:   [0 ............ limit) [limit ............ n_ids)
//           used / cached / free    draining (used) or retired
//
// A block is hashed only while the PrefixCache index maps its hash to it, so a
// hash maps to at most one block and a block has at most one hash.
// Not thread-safe: owned by the engine thread (through BlockManager).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "kv/prefix_cache.h"
#include "sluice/status.h"

namespace sluice {

// Element format of stored K/V rows.
enum class KvDtype { kF32, kF16, kQ8_0 };

const char* kv_dtype_name(KvDtype dtype);

// What one KV block stores: for each of n_layer layers, block_size K rows and
// block_size V rows of n_embd_kv (= n_head_kv * head_dim) elements.
struct KvLayout {
  int64_t n_layer = 0;
  int64_t n_embd_kv = 0;
  int64_t block_size = 16;  // tokens per block
  KvDtype dtype = KvDtype::kF16;
  int64_t n_head_kv = 1;    // heads in a row; the store keeps each head's slice together (kv_slices)
};

// Slices a KV row is stored in, head by head inside each block (kv_store.h):
// n_head_kv when every head's part of a row is whole elements of the dtype (for
// q8_0, head_dim a multiple of 32), else 1 (rows kept whole).
int64_t kv_slices(const KvLayout& layout);

// Bytes of one row of n_embd_kv elements: 4 or 2 per element, or 34 per 32 for
// Q8_0 ([f16 scale][32 x int8]). Errors: Q8_0 with n_embd_kv not a multiple of 32.
StatusOr<int64_t> kv_row_bytes(KvDtype dtype, int64_t n_embd_kv);

// Bytes of one block: 2 (K and V) * n_layer * block_size * row bytes.
// Errors: a non-positive dimension, a Q8_0 row that does not split into 32s,
// or a size that overflows.
StatusOr<int64_t> kv_block_bytes(const KvLayout& layout);

// How many whole blocks fit in `budget_bytes` (0 when not even one does).
// Errors: those of kv_block_bytes.
StatusOr<int64_t> kv_blocks_for_budget(uint64_t budget_bytes, const KvLayout& layout);

class BlockPool {
 public:
  // n_blocks ids, all below the limit (n_blocks unless `limit` is given, 1 .. n_blocks).
  explicit BlockPool(int64_t n_blocks, int64_t limit = -1);

  // Ids the pool was made with (per-block arrays are this long).
  int64_t n_ids() const { return static_cast<int64_t>(ref_count_.size()); }
  // Blocks the pool may hold now: the limit.
  int64_t n_total() const { return limit_; }
  // Used blocks, draining ones included.
  int64_t n_used() const { return n_used_; }
  // Used blocks at or past the limit, waiting for their last holder.
  int64_t n_draining() const { return n_draining_; }
  // Blocks an allocate() can return: free plus cached free, below the limit.
  int64_t n_available() const { return n_total() - (n_used_ - n_draining_); }
  // Moves the limit (1 .. n_ids()). Lowering it retires the free and cached
  // blocks past it and leaves the used ones draining; raising it makes the
  // retired ids below the new limit free (a draining one stays used).
  void set_limit(int64_t limit);
  // True when no block at or past the limit is used: the memory of ids
  // limit .. n_ids()-1 holds nothing anyone reads.
  bool drained() const { return n_draining_ == 0; }
  // Free blocks that still keep a hash (a subset of n_available()).
  int64_t n_cached() const { return cache_.n_evictable(); }
  // Cached blocks evicted so far to make room.
  int64_t n_evictions() const { return n_evictions_; }

  // A block with ref_count 1 and no hash; nullopt when none is available.
  std::optional<int32_t> allocate();
  // Adds one holder. A cached free block leaves the eviction order.
  void ref(int32_t block);
  // Drops one holder (the block must be used).
  void unref(int32_t block);
  int32_t ref_count(int32_t block) const { return ref_count_[check_id(block)]; }

  // The block registered under `hash` (used or cached free), if any.
  std::optional<int32_t> find(uint64_t hash) const { return cache_.find(hash); }
  // Registers a used block under `hash`. False, changing nothing, if the hash is
  // already taken by another block. The block must be used and unhashed.
  bool register_hash(int32_t block, uint64_t hash);
  // Forgets the hash of a used block (its content is no longer a full block).
  void unregister_hash(int32_t block);
  bool has_hash(int32_t block) const { return has_hash_[check_id(block)] != 0; }
  uint64_t hash(int32_t block) const { return hash_[check_id(block)]; }

  // Cached free blocks, least recently freed (first to be evicted) first.
  std::vector<int32_t> cached_in_eviction_order() const { return cache_.evictable_in_order(); }

  // Verifies the three-state partition below the limit (used or retired past
  // it), the counters, the index, and that every block's ref_count equals
  // expected_refs[block] (the number of tables holding it; [n_ids()]).
  Status check_invariants(std::span<const int32_t> expected_refs) const;

 private:
  int32_t check_id(int32_t block) const;

  std::vector<int32_t> ref_count_;  // [n_blocks]
  std::vector<uint64_t> hash_;      // [n_blocks], meaningful when has_hash_
  std::vector<uint8_t> has_hash_;   // [n_blocks]
  std::vector<int32_t> free_list_;  // unhashed free blocks; back is taken first
  PrefixCache cache_;
  int64_t limit_ = 0;
  int64_t n_draining_ = 0;
  int64_t n_used_ = 0;
  int64_t n_evictions_ = 0;
};

}  // namespace sluice
