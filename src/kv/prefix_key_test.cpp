// Prefix keys: blocks computed under one key (a sequence's LoRA adapters) are
// matched only under the same key; key 0 keeps the plain chain.
#include <gtest/gtest.h>

#include <vector>

#include "kv/block_manager.h"
#include "kv/kv_test_util.h"
#include "kv/prefix_cache.h"

namespace sluice {
namespace {

TEST(PrefixKey, KeyZeroIsThePlainRootAndKeysHaveRootsOfTheirOwn) {
  EXPECT_EQ(kv_prefix_root(0), kRootBlockHash);
  EXPECT_NE(kv_prefix_root(1), kRootBlockHash);
  EXPECT_NE(kv_prefix_root(1), kv_prefix_root(2));
  EXPECT_NE(kv_prefix_root(3), kv_prefix_root(1) ^ kv_prefix_root(2));
  const std::vector<int32_t> t = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_EQ(kv_block_hashes(t, 4), kv_block_hashes(t, 4, kRootBlockHash));
  EXPECT_NE(kv_block_hashes(t, 4)[0], kv_block_hashes(t, 4, kv_prefix_root(1))[0]);
}

TEST(PrefixKey, BlocksAreSharedOnlyUnderTheSameKey) {
  BlockManager m({.n_blocks = 32, .block_size = 4});
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  ASSERT_EQ(*m.allocate(1, a, /*prefix_key=*/1), 0);
  ASSERT_TRUE(m.mark_computed(1, 10).ok());
  EXPECT_INVARIANTS(m);
  EXPECT_EQ(m.match_prefix(a, 1), 8);
  EXPECT_EQ(m.match_prefix(a), 0) << "the base model does not read adapter 1's K/V";
  EXPECT_EQ(m.match_prefix(a, 2), 0);
  EXPECT_EQ(m.match_prefix(a, 3), 0) << "a set holding adapter 1 is another key";
  // A second sequence under the same key shares the blocks; under another it
  // gets fresh ones, and registers its own.
  EXPECT_EQ(*m.allocate(2, a, 1), 8);
  EXPECT_EQ(*m.allocate(3, a, 0), 0);
  ASSERT_TRUE(m.mark_computed(3, 10).ok());
  EXPECT_EQ(m.match_prefix(a), 8);
  const std::span<const int32_t> t1 = m.block_table(1), t2 = m.block_table(2), t3 = m.block_table(3);
  EXPECT_EQ(t1[0], t2[0]);
  EXPECT_NE(t1[0], t3[0]);
  EXPECT_NE(t1[1], t3[1]);
  // A fork keeps its parent's key: its blocks chain from the same root.
  ASSERT_TRUE(m.fork(2, 4).ok());
  EXPECT_INVARIANTS(m);
  // Freed, the keyed blocks stay cached under their key.
  for (SeqId s : {1, 2, 3, 4}) ASSERT_TRUE(m.free(s).ok());
  EXPECT_EQ(m.match_prefix(a, 1), 8);
  EXPECT_EQ(m.match_prefix(a, 0), 8);
  EXPECT_EQ(m.match_prefix(a, 2), 0);
  EXPECT_INVARIANTS(m);
}

}  // namespace
}  // namespace sluice
