#include "kv/block_pool.h"

#include <gtest/gtest.h>

#include <limits>
#include <vector>

namespace sluice {
namespace {

TEST(KvLayoutTest, BlockBytesPerDtype) {
  // 2 (K, V) * 22 layers * 16 tokens * 256 values * bytes per value.
  KvLayout layout{.n_layer = 22, .n_embd_kv = 256, .block_size = 16, .dtype = KvDtype::kF32};
  EXPECT_EQ(*kv_block_bytes(layout), 2 * 22 * 16 * 256 * 4);
  layout.dtype = KvDtype::kF16;
  EXPECT_EQ(*kv_block_bytes(layout), 2 * 22 * 16 * 256 * 2);
  layout.dtype = KvDtype::kQ8_0;
  EXPECT_EQ(*kv_block_bytes(layout), 2 * 22 * 16 * (256 / 32 * 34));
  EXPECT_EQ(*kv_row_bytes(KvDtype::kQ8_0, 32), 34);
  EXPECT_EQ(*kv_row_bytes(KvDtype::kF16, 3), 6);
}

TEST(KvLayoutTest, BlocksForBudgetRoundsDown) {
  const KvLayout layout{.n_layer = 2, .n_embd_kv = 64, .block_size = 16, .dtype = KvDtype::kF16};
  const int64_t block = 2 * 2 * 16 * 64 * 2;  // 8192
  ASSERT_EQ(*kv_block_bytes(layout), block);
  EXPECT_EQ(*kv_blocks_for_budget(0, layout), 0);
  EXPECT_EQ(*kv_blocks_for_budget(block - 1, layout), 0);
  EXPECT_EQ(*kv_blocks_for_budget(block, layout), 1);
  EXPECT_EQ(*kv_blocks_for_budget(10 * block + block / 2, layout), 10);
  EXPECT_EQ(*kv_blocks_for_budget(uint64_t{1} << 30, layout), (int64_t{1} << 30) / block);
}

TEST(KvLayoutTest, RefusesUnusableLayouts) {
  KvLayout q8{.n_layer = 4, .n_embd_kv = 48, .block_size = 16, .dtype = KvDtype::kQ8_0};
  StatusOr<int64_t> r = kv_blocks_for_budget(1 << 20, q8);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("multiple of 32"), std::string::npos);
  q8.dtype = KvDtype::kF16;  // 48 is fine for f16
  EXPECT_TRUE(kv_blocks_for_budget(1 << 20, q8).ok());

  EXPECT_FALSE(kv_block_bytes({.n_layer = 0, .n_embd_kv = 64}).ok());
  EXPECT_FALSE(kv_block_bytes({.n_layer = 2, .n_embd_kv = 0}).ok());
  EXPECT_FALSE(kv_block_bytes({.n_layer = 2, .n_embd_kv = 64, .block_size = 0}).ok());
  const int64_t big = std::numeric_limits<int64_t>::max() / 16;
  EXPECT_FALSE(kv_block_bytes({.n_layer = big, .n_embd_kv = 1 << 20, .block_size = 16}).ok());
  EXPECT_STREQ(kv_dtype_name(KvDtype::kQ8_0), "q8_0");
}

TEST(BlockPoolTest, FreshPoolHandsOutBlocksInOrderUntilEmpty) {
  BlockPool pool(4);
  EXPECT_EQ(pool.n_total(), 4);
  EXPECT_EQ(pool.n_available(), 4);
  for (int32_t b = 0; b < 4; ++b) {
    const std::optional<int32_t> got = pool.allocate();
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(*got, b);
    EXPECT_EQ(pool.ref_count(b), 1);
  }
  EXPECT_FALSE(pool.allocate().has_value());
  EXPECT_EQ(pool.n_used(), 4);
  EXPECT_EQ(pool.n_available(), 0);
  const std::vector<int32_t> refs = {1, 1, 1, 1};
  EXPECT_TRUE(pool.check_invariants(refs).ok());
}

TEST(BlockPoolTest, RefcountsAndStateMoves) {
  BlockPool pool(3);
  const int32_t a = *pool.allocate();
  const int32_t b = *pool.allocate();
  pool.ref(a);  // two holders
  EXPECT_EQ(pool.ref_count(a), 2);
  ASSERT_TRUE(pool.register_hash(a, 111));
  EXPECT_FALSE(pool.register_hash(b, 111)) << "a hash names one block";
  EXPECT_FALSE(pool.has_hash(b));
  EXPECT_TRUE(pool.check_invariants(std::vector<int32_t>{2, 1, 0}).ok());
  // Wrong expectations are reported.
  EXPECT_FALSE(pool.check_invariants(std::vector<int32_t>{1, 1, 0}).ok());
  EXPECT_FALSE(pool.check_invariants(std::vector<int32_t>{2, 1}).ok());

  pool.unref(a);
  pool.unref(a);  // hashed, unheld: cached free
  pool.unref(b);  // unhashed: free
  EXPECT_EQ(pool.n_used(), 0);
  EXPECT_EQ(pool.n_cached(), 1);
  EXPECT_EQ(pool.n_available(), 3);
  EXPECT_EQ(*pool.find(111), a);
  EXPECT_TRUE(pool.check_invariants(std::vector<int32_t>{0, 0, 0}).ok());

  // A prefix hit brings the cached block back with its content.
  pool.ref(a);
  EXPECT_EQ(pool.ref_count(a), 1);
  EXPECT_EQ(pool.n_cached(), 0);
  EXPECT_TRUE(pool.has_hash(a));
  EXPECT_TRUE(pool.check_invariants(std::vector<int32_t>{1, 0, 0}).ok());
  pool.unregister_hash(a);
  EXPECT_FALSE(pool.find(111).has_value());
  pool.unref(a);
  EXPECT_EQ(pool.n_cached(), 0);
  EXPECT_TRUE(pool.check_invariants(std::vector<int32_t>{0, 0, 0}).ok());
}

TEST(BlockPoolTest, FreeBlocksGoFirstThenCachedOnesLeastRecentlyFreed) {
  BlockPool pool(4);
  std::vector<int32_t> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(*pool.allocate());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(pool.register_hash(blocks[i], 1000 + i));
  // Free order: 2, 0, 3 (unhashed), 1.
  pool.unref(blocks[2]);
  pool.unref(blocks[0]);
  pool.unref(blocks[3]);
  pool.unref(blocks[1]);
  EXPECT_EQ(pool.cached_in_eviction_order(), (std::vector<int32_t>{2, 0, 1}));
  EXPECT_EQ(*pool.allocate(), 3) << "a plain free block is used before evicting";
  EXPECT_EQ(pool.n_evictions(), 0);
  EXPECT_EQ(*pool.allocate(), 2);
  EXPECT_EQ(pool.n_evictions(), 1);
  EXPECT_FALSE(pool.find(1002).has_value()) << "eviction forgets the hash";
  EXPECT_FALSE(pool.has_hash(2));
  // Touching block 0 (a hit) spares it: block 1 is evicted next.
  pool.ref(0);
  EXPECT_EQ(*pool.allocate(), 1);
  EXPECT_FALSE(pool.allocate().has_value());
  EXPECT_EQ(pool.n_evictions(), 2);
  EXPECT_EQ(*pool.find(1000), 0);
  EXPECT_TRUE(pool.check_invariants(std::vector<int32_t>{1, 1, 1, 1}).ok());
}

// A random walk of allocate / ref / unref / register_hash over n blocks,
// checking the invariants and the used count after every step; with
// move_limit the limit moves too, and allocate() must never hand out an id
// past it, and the draining count must be the used ids past it.
void random_walk(int32_t n, int steps, bool move_limit) {
  BlockPool pool(n);
  std::vector<int32_t> refs(static_cast<size_t>(n), 0);
  uint64_t state = 99;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int>((state >> 33) % 100000);
  };
  uint64_t next_hash = 1;
  for (int step = 0; step < steps; ++step) {
    const int op = next() % (move_limit ? 5 : 4);
    const int32_t b = next() % n;
    if (op == 0) {
      const int64_t available = pool.n_available();
      const std::optional<int32_t> got = pool.allocate();
      ASSERT_EQ(got.has_value(), available > 0);
      if (got) {
        ASSERT_LT(*got, pool.n_total()) << "an id past the limit";
        ++refs[*got];
      }
    } else if (op == 1 && (refs[b] > 0 || pool.has_hash(b))) {
      pool.ref(b);
      ++refs[b];
    } else if (op == 2 && refs[b] > 0) {
      pool.unref(b);
      --refs[b];
    } else if (op == 3 && refs[b] > 0 && !pool.has_hash(b)) {
      pool.register_hash(b, next_hash++);
    } else if (op == 4 && next() % 8 == 0) {
      pool.set_limit(1 + next() % n);
    }
    const Status st = pool.check_invariants(refs);
    ASSERT_TRUE(st.ok()) << "step " << step << ": " << st.to_string();
    int64_t used = 0, draining = 0;
    for (int32_t id = 0; id < n; ++id) {
      used += refs[id] > 0;
      draining += id >= pool.n_total() && refs[id] > 0;
    }
    ASSERT_EQ(pool.n_used(), used);
    ASSERT_EQ(pool.n_draining(), draining);
    ASSERT_EQ(pool.drained(), draining == 0);
  }
}

TEST(BlockPoolTest, RandomOperationsKeepInvariants) { random_walk(12, 4000, false); }

// A limit retires the free and cached blocks past it at once and the used ones
// as they are freed; raising it brings them back, lowest ids first.
TEST(BlockPoolTest, ALimitRetiresBlocksPastItAndDrainsTheUsedOnes) {
  BlockPool pool(8);
  std::vector<int32_t> refs(8, 0);
  std::vector<int32_t> got;
  for (int i = 0; i < 6; ++i) got.push_back(*pool.allocate());  // 0..5 used
  for (int32_t b : got) refs[b] = 1;
  ASSERT_TRUE(pool.register_hash(5, 55));
  pool.unref(5);  // 5: cached
  refs[5] = 0;
  pool.unref(4);  // 4: free
  refs[4] = 0;
  pool.set_limit(3);  // 3 used past it; 4 free, 5 cached, 6 and 7 free: retired
  EXPECT_EQ(pool.n_total(), 3);
  EXPECT_EQ(pool.n_draining(), 1);
  EXPECT_FALSE(pool.drained());
  EXPECT_EQ(pool.n_available(), 0);
  EXPECT_FALSE(pool.find(55).has_value());  // the cached block's hash is forgotten
  EXPECT_FALSE(pool.allocate().has_value());
  ASSERT_TRUE(pool.check_invariants(refs).ok()) << pool.check_invariants(refs).to_string();
  pool.unref(3);  // the last holder: 3 retires
  refs[3] = 0;
  EXPECT_TRUE(pool.drained());
  EXPECT_EQ(pool.n_used(), 3);
  ASSERT_TRUE(pool.check_invariants(refs).ok()) << pool.check_invariants(refs).to_string();
  pool.set_limit(8);
  EXPECT_EQ(pool.n_available(), 5);
  EXPECT_EQ(*pool.allocate(), 3);  // lowest first
  refs[3] = 1;
  ASSERT_TRUE(pool.check_invariants(refs).ok()) << pool.check_invariants(refs).to_string();
}

TEST(BlockPoolTest, RaisingTheLimitKeepsADrainingBlockUsed) {
  BlockPool pool(4, 2);
  EXPECT_EQ(pool.n_total(), 2);
  std::vector<int32_t> refs(4, 0);
  EXPECT_EQ(*pool.allocate(), 0);
  EXPECT_EQ(*pool.allocate(), 1);
  refs[0] = refs[1] = 1;
  EXPECT_FALSE(pool.allocate().has_value());
  pool.set_limit(1);  // 1 drains
  pool.set_limit(3);  // and is simply used again; 2 becomes free
  EXPECT_EQ(pool.n_draining(), 0);
  EXPECT_EQ(pool.n_available(), 1);
  EXPECT_EQ(*pool.allocate(), 2);
  refs[2] = 1;
  ASSERT_TRUE(pool.check_invariants(refs).ok()) << pool.check_invariants(refs).to_string();
}

// The random walk again with the limit moving.
TEST(BlockPoolTest, RandomOperationsWithAMovingLimitKeepInvariants) { random_walk(48, 6000, true); }

}  // namespace
}  // namespace sluice
