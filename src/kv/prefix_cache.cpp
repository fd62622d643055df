#include "kv/prefix_cache.h"

#include <xxhash.h>

#include "base/check.h"

namespace sluice {

uint64_t kv_block_hash(uint64_t prev_hash, std::span<const int32_t> block_tokens) {
  return XXH3_64bits_withSeed(block_tokens.data(), block_tokens.size_bytes(), prev_hash);
}

uint64_t kv_prefix_root(uint64_t key) {
  if (key == 0) return kRootBlockHash;
  // A domain tag keeps roots apart from any block hash of the same bits.
  const uint64_t words[2] = {0x736c756963652d6bull /* "sluice-k" */, key};
  return XXH3_64bits(words, sizeof(words));
}

std::vector<uint64_t> kv_block_hashes(std::span<const int32_t> tokens, int64_t block_size, uint64_t root) {
  CHECK(block_size > 0);
  const int64_t n_full = static_cast<int64_t>(tokens.size()) / block_size;
  std::vector<uint64_t> hashes;
  hashes.reserve(static_cast<size_t>(n_full));
  uint64_t prev = root;
  for (int64_t i = 0; i < n_full; ++i) {
    prev = kv_block_hash(prev, tokens.subspan(static_cast<size_t>(i * block_size),
                                              static_cast<size_t>(block_size)));
    hashes.push_back(prev);
  }
  return hashes;
}

PrefixCache::PrefixCache(int64_t n_blocks)
    : prev_(static_cast<size_t>(n_blocks), kNone),
      next_(static_cast<size_t>(n_blocks), kNone),
      in_list_(static_cast<size_t>(n_blocks), 0) {
  CHECK(n_blocks > 0);
}

std::optional<int32_t> PrefixCache::find(uint64_t hash) const {
  auto it = index_.find(hash);
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

bool PrefixCache::insert(uint64_t hash, int32_t block) {
  CHECK(block >= 0 && block < static_cast<int32_t>(prev_.size()));
  return index_.emplace(hash, block).second;
}

void PrefixCache::erase(uint64_t hash, int32_t block) {
  auto it = index_.find(hash);
  CHECK(it != index_.end() && it->second == block);
  index_.erase(it);
}

void PrefixCache::push_evictable(int32_t block) {
  CHECK(block >= 0 && block < static_cast<int32_t>(prev_.size()));
  CHECK(!in_list_[block]);
  in_list_[block] = 1;
  prev_[block] = tail_;
  next_[block] = kNone;
  if (tail_ != kNone) {
    next_[tail_] = block;
  } else {
    head_ = block;
  }
  tail_ = block;
  ++n_evictable_;
}

void PrefixCache::remove_evictable(int32_t block) {
  CHECK(block >= 0 && block < static_cast<int32_t>(prev_.size()));
  CHECK(in_list_[block]);
  const int32_t p = prev_[block];
  const int32_t n = next_[block];
  if (p != kNone) {
    next_[p] = n;
  } else {
    head_ = n;
  }
  if (n != kNone) {
    prev_[n] = p;
  } else {
    tail_ = p;
  }
  prev_[block] = kNone;
  next_[block] = kNone;
  in_list_[block] = 0;
  --n_evictable_;
}

std::optional<int32_t> PrefixCache::pop_lru() {
  if (head_ == kNone) return std::nullopt;
  const int32_t block = head_;
  remove_evictable(block);
  return block;
}

bool PrefixCache::is_evictable(int32_t block) const {
  CHECK(block >= 0 && block < static_cast<int32_t>(prev_.size()));
  return in_list_[block] != 0;
}

std::vector<int32_t> PrefixCache::evictable_in_order() const {
  std::vector<int32_t> order;
  order.reserve(static_cast<size_t>(n_evictable_));
  for (int32_t b = head_; b != kNone; b = next_[b]) order.push_back(b);
  return order;
}

}  // namespace sluice
