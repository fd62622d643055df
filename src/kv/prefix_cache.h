// PrefixCache: the index that makes full KV blocks reusable across sequences.
//
// A full block of block_size tokens is named by a 64-bit hash chained over every
// token before it and its own tokens:
//
//   tokens:  [ t0 .. t15 ][ t16 .. t31 ][ t32 .. t47 ][ t48 t49 ]
//   hash:       h0            h1            h2          (partial: none)
//   h0 = XXH3_64(t0..t15,  seed = kRootBlockHash)
//   h1 = XXH3_64(t16..t31, seed = h0)
//   h2 = XXH3_64(t32..t47, seed = h1)
//
// so equal hashes mean (up to 64-bit collisions) equal whole prefixes, and the
// K/V rows of such a block can be shared by every sequence starting that way.
//
// K/V rows also depend on what computed them: a sequence run with LoRA
// adapters on q/k/v (or on any earlier layer) writes other rows for the same
// tokens. Such sequences chain from a root of their own, kv_prefix_root(key)
// with a key that names the adapters, so their blocks are shared only with
// sequences on the same adapters; key 0 (the base model) is kRootBlockHash.
//
//   h0 = XXH3_64(t0..t15, seed = kv_prefix_root(key))
//
// The cache holds two things, both keyed by block id in [0, n_blocks):
//   - the index: hash -> the one block registered under it;
//   - the eviction order of blocks that are free (no sequence holds them) but
//     still keep their hash: least recently freed first.
// It does not own refcounts or decide when a block is free: BlockPool does and
// tells the cache. Not thread-safe (owned by the engine thread through BlockPool).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace sluice {

// Seed of the first block of every sequence.
inline constexpr uint64_t kRootBlockHash = 0;

// The root a sequence's chain starts from: kRootBlockHash for key 0, else a
// hash of the key (so no two keys share blocks, up to 64-bit collisions).
uint64_t kv_prefix_root(uint64_t key);

// The chained hash of one full block: XXH3_64bits_withSeed over the block's token
// ids (as stored, little-endian int32), seeded with the previous block's hash.
uint64_t kv_block_hash(uint64_t prev_hash, std::span<const int32_t> block_tokens);

// Hashes of the leading full blocks of `tokens` (a trailing partial block has
// none), chained from `root`.
std::vector<uint64_t> kv_block_hashes(std::span<const int32_t> tokens, int64_t block_size,
                                      uint64_t root = kRootBlockHash);

class PrefixCache {
 public:
  explicit PrefixCache(int64_t n_blocks);

  // --- the index ---
  // The block registered under `hash`, if any.
  std::optional<int32_t> find(uint64_t hash) const;
  // Registers `block` under `hash`; false (and no change) if the hash is taken.
  bool insert(uint64_t hash, int32_t block);
  // Removes the entry for `hash`; it must map to `block`.
  void erase(uint64_t hash, int32_t block);
  int64_t n_indexed() const { return static_cast<int64_t>(index_.size()); }
  const std::unordered_map<uint64_t, int32_t>& index() const { return index_; }

  // --- the eviction order of free blocks that keep their hash ---
  // Appends `block` as the most recently freed. It must not be in the order.
  void push_evictable(int32_t block);
  // Takes `block` out of the order (it is being reused). It must be in it.
  void remove_evictable(int32_t block);
  // Takes the least recently freed block out of the order; nullopt when empty.
  std::optional<int32_t> pop_lru();
  bool is_evictable(int32_t block) const;
  int64_t n_evictable() const { return n_evictable_; }
  // Blocks in eviction order, least recently freed first (for tests and checks).
  std::vector<int32_t> evictable_in_order() const;

 private:
  static constexpr int32_t kNone = -1;
  // Intrusive doubly linked list over block ids: no allocation per operation.
  std::vector<int32_t> prev_;     // [n_blocks]
  std::vector<int32_t> next_;     // [n_blocks]
  std::vector<uint8_t> in_list_;  // [n_blocks]
  int32_t head_ = kNone;          // least recently freed
  int32_t tail_ = kNone;          // most recently freed
  int64_t n_evictable_ = 0;
  std::unordered_map<uint64_t, int32_t> index_;
};

}  // namespace sluice
