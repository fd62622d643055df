#include "kv/prefix_cache.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <numeric>
#include <vector>

namespace sluice {
namespace {

std::vector<int32_t> iota_tokens(int n, int32_t first) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

TEST(PrefixCacheTest, BlockHashIsXxh3OverTokenBytesSeededWithPreviousHash) {
  const std::vector<int32_t> block = {5, 6, 7, 8};
  const uint64_t seed = 0x1234abcdull;
  EXPECT_EQ(kv_block_hash(seed, block), XXH3_64bits_withSeed(block.data(), 16, seed));
  EXPECT_NE(kv_block_hash(seed, block), kv_block_hash(seed + 1, block));
}

TEST(PrefixCacheTest, HashesChainOverEveryEarlierToken) {
  const std::vector<int32_t> a = iota_tokens(10, 100);  // blocks [100..103][104..107] + partial
  std::vector<int32_t> b = a;
  b[0] = 999;  // differs only in the first block
  const std::vector<uint64_t> ha = kv_block_hashes(a, 4);
  const std::vector<uint64_t> hb = kv_block_hashes(b, 4);
  ASSERT_EQ(ha.size(), 2u);  // the partial block [108, 109] has no hash
  ASSERT_EQ(hb.size(), 2u);
  EXPECT_EQ(ha[0], kv_block_hash(kRootBlockHash, std::span<const int32_t>(a).first(4)));
  EXPECT_EQ(ha[1], kv_block_hash(ha[0], std::span<const int32_t>(a).subspan(4, 4)));
  // Same tokens in block 1, different history: different hash.
  EXPECT_NE(ha[0], hb[0]);
  EXPECT_NE(ha[1], hb[1]);
  // A prefix hashes the same as the start of the longer sequence.
  const std::vector<uint64_t> hp = kv_block_hashes(std::span<const int32_t>(a).first(8), 4);
  EXPECT_EQ(hp, ha);
  EXPECT_TRUE(kv_block_hashes(std::span<const int32_t>(a).first(3), 4).empty());
}

TEST(PrefixCacheTest, IndexMapsOneBlockPerHash) {
  PrefixCache cache(8);
  EXPECT_FALSE(cache.find(42).has_value());
  EXPECT_TRUE(cache.insert(42, 3));
  EXPECT_FALSE(cache.insert(42, 5));  // taken: the first stays
  ASSERT_TRUE(cache.find(42).has_value());
  EXPECT_EQ(*cache.find(42), 3);
  EXPECT_TRUE(cache.insert(43, 5));
  EXPECT_EQ(cache.n_indexed(), 2);
  cache.erase(42, 3);
  EXPECT_FALSE(cache.find(42).has_value());
  EXPECT_EQ(cache.n_indexed(), 1);
}

TEST(PrefixCacheTest, EvictionOrderIsLeastRecentlyFreedFirst) {
  PrefixCache cache(6);
  EXPECT_FALSE(cache.pop_lru().has_value());
  for (const int32_t b : {4, 1, 5, 0}) cache.push_evictable(b);
  EXPECT_EQ(cache.n_evictable(), 4);
  EXPECT_EQ(cache.evictable_in_order(), (std::vector<int32_t>{4, 1, 5, 0}));
  // Reusing a block (a prefix hit) takes it out of the middle.
  cache.remove_evictable(1);
  EXPECT_FALSE(cache.is_evictable(1));
  EXPECT_TRUE(cache.is_evictable(5));
  EXPECT_EQ(cache.evictable_in_order(), (std::vector<int32_t>{4, 5, 0}));
  // Freed again later, it goes to the back.
  cache.push_evictable(1);
  EXPECT_EQ(cache.evictable_in_order(), (std::vector<int32_t>{4, 5, 0, 1}));
  EXPECT_EQ(*cache.pop_lru(), 4);
  cache.remove_evictable(1);  // the tail
  EXPECT_EQ(*cache.pop_lru(), 5);
  EXPECT_EQ(*cache.pop_lru(), 0);
  EXPECT_FALSE(cache.pop_lru().has_value());
  EXPECT_EQ(cache.n_evictable(), 0);
  // Empty list works again from scratch.
  cache.push_evictable(2);
  EXPECT_EQ(cache.evictable_in_order(), (std::vector<int32_t>{2}));
}

TEST(PrefixCacheTest, RandomOperationsMatchAReferenceList) {
  const int n = 16;
  PrefixCache cache(n);
  std::vector<int32_t> ref;  // least recently freed first
  uint64_t state = 7;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int>((state >> 33) % 1000);
  };
  for (int step = 0; step < 5000; ++step) {
    const int32_t b = next() % n;
    const auto it = std::find(ref.begin(), ref.end(), b);
    const int op = next() % 3;
    if (op == 0 && it == ref.end()) {
      cache.push_evictable(b);
      ref.push_back(b);
    } else if (op == 1 && it != ref.end()) {
      cache.remove_evictable(b);
      ref.erase(it);
    } else if (op == 2) {
      const std::optional<int32_t> got = cache.pop_lru();
      ASSERT_EQ(got.has_value(), !ref.empty());
      if (got) {
        EXPECT_EQ(*got, ref.front());
        ref.erase(ref.begin());
      }
    }
    ASSERT_EQ(cache.evictable_in_order(), ref) << "step " << step;
    ASSERT_EQ(cache.n_evictable(), static_cast<int64_t>(ref.size()));
  }
}

}  // namespace
}  // namespace sluice
