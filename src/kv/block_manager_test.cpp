#include "kv/block_manager.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "kv/kv_test_util.h"

namespace sluice {
namespace {

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<int32_t> table_of(const BlockManager& m, SeqId s) {
  const std::span<const int32_t> t = m.block_table(s);
  return std::vector<int32_t>(t.begin(), t.end());
}

TEST(BlockManagerTest, MatchPrefixLeavesAtLeastOneTokenToCompute) {
  BlockManager m({.n_blocks = 16, .block_size = 4});
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  EXPECT_EQ(*m.allocate(1, a), 0);
  EXPECT_EQ(m.match_prefix(a), 0) << "nothing is registered before it is computed";
  ASSERT_TRUE(m.mark_computed(1, 7).ok());
  EXPECT_EQ(m.match_prefix(concat(a, {13})), 4) << "only the block whose rows are all computed";
  ASSERT_TRUE(m.mark_computed(1, 12).ok());
  EXPECT_EQ(m.match_prefix(a), 8) << "a full hit still recomputes the last block";
  EXPECT_EQ(m.match_prefix(concat(a, {13})), 12);
  EXPECT_EQ(m.match_prefix(std::vector<int32_t>{1, 2, 3, 4, 99, 6, 7, 8, 9}), 4);
  EXPECT_EQ(m.match_prefix(std::vector<int32_t>{9, 2, 3, 4, 5}), 0);
  EXPECT_EQ(m.match_prefix(std::vector<int32_t>{1, 2, 3, 4}), 0);
  EXPECT_INVARIANTS(m);
}

TEST(BlockManagerTest, SharedPrefixIsSharedThenCachedThenHitAgain) {
  BlockManager m({.n_blocks = 16, .block_size = 4});
  const std::vector<int32_t> prefix = {10, 11, 12, 13, 14, 15, 16, 17};
  const std::vector<int32_t> a = concat(prefix, {20, 21});
  const std::vector<int32_t> b = concat(prefix, {30, 31, 32, 33, 34});
  ASSERT_EQ(*m.allocate(1, a), 0);
  ASSERT_TRUE(m.mark_computed(1, 10).ok());
  ASSERT_EQ(*m.allocate(2, b), 8);
  const std::vector<int32_t> ta = table_of(m, 1), tb = table_of(m, 2);
  ASSERT_EQ(ta.size(), 3u);
  ASSERT_EQ(tb.size(), 4u);
  EXPECT_EQ(tb[0], ta[0]);
  EXPECT_EQ(tb[1], ta[1]);
  EXPECT_NE(tb[2], ta[2]);
  EXPECT_EQ(m.pool().ref_count(ta[0]), 2);
  EXPECT_EQ(m.stats().n_used, 5);
  EXPECT_INVARIANTS(m);
  ASSERT_TRUE(m.mark_computed(2, 13).ok());  // registers b's third block
  ASSERT_TRUE(m.free(1).ok());
  ASSERT_TRUE(m.free(2).ok());
  BlockStats st = m.stats();
  EXPECT_EQ(st.n_used, 0);
  EXPECT_EQ(st.n_cached, 3);  // the two prefix blocks and b's [30..33]
  EXPECT_EQ(st.n_free, 13);
  EXPECT_INVARIANTS(m);

  ASSERT_EQ(*m.allocate(3, concat(prefix, {40})), 8);
  EXPECT_EQ(table_of(m, 3)[0], ta[0]);
  EXPECT_EQ(table_of(m, 3)[1], ta[1]);
  st = m.stats();
  EXPECT_EQ(st.n_prefix_queried_tokens, 10 + 13 + 9);
  EXPECT_EQ(st.n_prefix_hit_tokens, 16);
  EXPECT_EQ(st.n_cached, 1);
  EXPECT_INVARIANTS(m);
}

TEST(BlockManagerTest, CachedBlocksAreEvictedLeastRecentlyFreedFirst) {
  BlockManager m({.n_blocks = 4, .block_size = 2});
  const std::vector<int32_t> a = {1, 2, 3}, b = {5, 6, 7};
  ASSERT_TRUE(m.allocate(1, a).ok());
  ASSERT_TRUE(m.mark_computed(1, 3).ok());
  ASSERT_TRUE(m.allocate(2, b).ok());
  ASSERT_TRUE(m.mark_computed(2, 3).ok());
  ASSERT_TRUE(m.free(1).ok());  // a's first block is freed first
  ASSERT_TRUE(m.free(2).ok());
  EXPECT_EQ(m.match_prefix(a), 2);
  EXPECT_EQ(m.match_prefix(b), 2);
  // Three fresh blocks: the two plain free ones, then one eviction (a's).
  ASSERT_TRUE(m.allocate(3, std::vector<int32_t>{9, 9, 9, 9, 9}).ok());
  EXPECT_EQ(m.stats().n_evictions, 1);
  EXPECT_EQ(m.match_prefix(a), 0);
  EXPECT_EQ(m.match_prefix(b), 2);
  EXPECT_INVARIANTS(m);
}

TEST(BlockManagerTest, FreeingASequenceQueuesItsDeepestBlocksForEvictionFirst) {
  BlockManager m({.n_blocks = 8, .block_size = 2});
  ASSERT_TRUE(m.allocate(1, std::vector<int32_t>{1, 2, 3, 4, 5}).ok());
  ASSERT_TRUE(m.mark_computed(1, 5).ok());
  const std::vector<int32_t> t = table_of(m, 1);
  ASSERT_TRUE(m.free(1).ok());
  // Block 1 is useless without block 0, so it goes first.
  EXPECT_EQ(m.pool().cached_in_eviction_order(), (std::vector<int32_t>{t[1], t[0]}));
}

TEST(BlockManagerTest, AllocationNeverEvictsTheBlocksItMatched) {
  BlockManager m({.n_blocks = 4, .block_size = 2});
  ASSERT_TRUE(m.allocate(1, std::vector<int32_t>{1, 2, 3}).ok());
  ASSERT_TRUE(m.mark_computed(1, 3).ok());
  ASSERT_TRUE(m.allocate(2, std::vector<int32_t>{8, 8, 8}).ok());
  ASSERT_TRUE(m.mark_computed(2, 3).ok());
  const int32_t a0 = table_of(m, 1)[0];
  ASSERT_TRUE(m.free(1).ok());  // a0 is now the least recently freed cached block
  ASSERT_TRUE(m.free(2).ok());
  // 4 blocks: a0 by match, 2 plain free ones, 1 eviction that must not be a0.
  StatusOr<int64_t> hit = m.allocate(3, std::vector<int32_t>{1, 2, 5, 6, 7, 8, 9});
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ(*hit, 2);
  EXPECT_EQ(table_of(m, 3)[0], a0);
  EXPECT_EQ(m.stats().n_evictions, 1);
  EXPECT_EQ(m.match_prefix(std::vector<int32_t>{8, 8, 8}), 0);
  EXPECT_INVARIANTS(m);
}

TEST(BlockManagerTest, CanAllocateDoesNotCountMatchedCachedBlocksAsFree) {
  BlockManager m({.n_blocks = 3, .block_size = 2});
  ASSERT_TRUE(m.allocate(1, std::vector<int32_t>{1, 2, 3, 4, 5}).ok());
  ASSERT_TRUE(m.mark_computed(1, 5).ok());
  ASSERT_TRUE(m.free(1).ok());  // 2 cached + 1 free
  const std::vector<int32_t> hit = {1, 2, 3, 4, 9};
  EXPECT_TRUE(m.can_allocate(hit));
  ASSERT_TRUE(m.allocate(2, std::vector<int32_t>{42}).ok());  // takes the free block
  // Only the two matched blocks are available: none left for hit's third block.
  EXPECT_EQ(m.pool().n_available(), 2);
  EXPECT_FALSE(m.can_allocate(hit));
  EXPECT_FALSE(m.allocate(3, hit).ok());
  EXPECT_TRUE(m.can_allocate(std::vector<int32_t>{7, 7, 7}));  // evicting both is fine
  EXPECT_FALSE(m.can_allocate(std::vector<int32_t>{7, 7, 7}, 1));
  EXPECT_INVARIANTS(m);
}

TEST(BlockManagerTest, ForkSharesBlocksAndFirstWriteCopiesThePartialBlock) {
  BlockManager m({.n_blocks = 8, .block_size = 4});
  ASSERT_TRUE(m.allocate(1, std::vector<int32_t>{1, 2, 3, 4, 5, 6}).ok());
  ASSERT_TRUE(m.mark_computed(1, 6).ok());
  ASSERT_TRUE(m.fork(1, 2).ok());
  const std::vector<int32_t> t = table_of(m, 1);
  EXPECT_EQ(table_of(m, 2), t);
  EXPECT_EQ(m.pool().ref_count(t[0]), 2);
  EXPECT_EQ(m.pool().ref_count(t[1]), 2);
  EXPECT_INVARIANTS(m);

  EXPECT_EQ(m.blocks_needed_to_append(1, 1), 1);  // the copy
  StatusOr<std::vector<BlockCopy>> c1 = m.append(1, std::vector<int32_t>{7});
  ASSERT_TRUE(c1.ok());
  ASSERT_EQ(c1->size(), 1u);
  EXPECT_EQ((*c1)[0].src, t[1]);
  EXPECT_EQ((*c1)[0].dst, table_of(m, 1)[1]);
  EXPECT_NE(table_of(m, 1)[1], t[1]);
  EXPECT_EQ(table_of(m, 1)[0], t[0]) << "full blocks stay shared";
  EXPECT_EQ(m.pool().ref_count(t[1]), 1);
  // The child now owns the old partial block alone: no copy.
  StatusOr<std::vector<BlockCopy>> c2 = m.append(2, std::vector<int32_t>{8, 9, 10});
  ASSERT_TRUE(c2.ok());
  EXPECT_TRUE(c2->empty());
  EXPECT_EQ(table_of(m, 2)[1], t[1]);
  EXPECT_EQ(table_of(m, 2).size(), 3u);
  EXPECT_EQ(m.stats().n_cow_copies, 1);
  EXPECT_INVARIANTS(m);
  ASSERT_TRUE(m.free(1).ok());
  ASSERT_TRUE(m.free(2).ok());
  EXPECT_EQ(m.stats().n_used, 0);
  EXPECT_INVARIANTS(m);
}

TEST(BlockManagerTest, ForkAtABlockBoundaryNeedsNoCopy) {
  BlockManager m({.n_blocks = 8, .block_size = 4});
  ASSERT_TRUE(m.allocate(1, std::vector<int32_t>{1, 2, 3, 4}).ok());
  ASSERT_TRUE(m.fork(1, 2).ok());
  StatusOr<std::vector<BlockCopy>> c = m.append(1, std::vector<int32_t>{5});
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->empty());
  EXPECT_EQ(table_of(m, 1)[0], table_of(m, 2)[0]);
  EXPECT_INVARIANTS(m);
}

TEST(BlockManagerTest, TruncateFreesTailBlocksAndUnhashesTheNewLastBlock) {
  BlockManager m({.n_blocks = 8, .block_size = 4});
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  ASSERT_TRUE(m.allocate(1, a).ok());
  ASSERT_TRUE(m.mark_computed(1, 10).ok());
  const std::vector<int32_t> t = table_of(m, 1);
  EXPECT_TRUE(m.pool().has_hash(t[1]));
  ASSERT_TRUE(m.truncate(1, 5).ok());
  EXPECT_EQ(m.n_tokens(1), 5);
  EXPECT_EQ(table_of(m, 1), (std::vector<int32_t>{t[0], t[1]}));
  EXPECT_FALSE(m.pool().has_hash(t[1])) << "block 1 holds one token now";
  EXPECT_EQ(m.pool().ref_count(t[2]), 0);
  EXPECT_EQ(m.match_prefix(concat(a, {11})), 4);
  EXPECT_INVARIANTS(m);
  // Different speculative tokens after the rollback, written in place.
  StatusOr<std::vector<BlockCopy>> c = m.append(1, std::vector<int32_t>{50, 51, 52, 53});
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->empty());
  ASSERT_TRUE(m.mark_computed(1, 9).ok());
  EXPECT_EQ(m.match_prefix(std::vector<int32_t>{1, 2, 3, 4, 5, 50, 51, 52, 0}), 8);
  EXPECT_EQ(m.match_prefix(concat(a, {11})), 4);
  EXPECT_INVARIANTS(m);
  ASSERT_TRUE(m.truncate(1, 0).ok());
  EXPECT_TRUE(table_of(m, 1).empty());
  EXPECT_FALSE(m.truncate(1, 1).ok());
  EXPECT_INVARIANTS(m);
}

TEST(BlockManagerTest, TruncateIntoASharedFullBlockCopiesOnTheNextWrite) {
  BlockManager m({.n_blocks = 8, .block_size = 4});
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8};
  ASSERT_TRUE(m.allocate(1, a).ok());
  ASSERT_TRUE(m.mark_computed(1, 8).ok());
  ASSERT_TRUE(m.fork(1, 2).ok());
  const std::vector<int32_t> t = table_of(m, 1);
  ASSERT_TRUE(m.truncate(1, 6).ok());
  EXPECT_TRUE(m.pool().has_hash(t[1])) << "sequence 2 still holds it whole";
  StatusOr<std::vector<BlockCopy>> c = m.append(1, std::vector<int32_t>{60});
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->size(), 1u);
  EXPECT_EQ((*c)[0].src, t[1]);
  EXPECT_EQ(m.match_prefix(concat(a, {9})), 8) << "the registered block is untouched";
  EXPECT_INVARIANTS(m);

  // Same start, but the other holder leaves before the write: no copy, and the
  // block loses its hash before being overwritten.
  ASSERT_TRUE(m.free(1).ok());
  ASSERT_TRUE(m.fork(2, 3).ok());
  ASSERT_TRUE(m.truncate(3, 6).ok());
  ASSERT_TRUE(m.free(2).ok());
  EXPECT_TRUE(m.pool().has_hash(t[1]));
  c = m.append(3, std::vector<int32_t>{70});
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->empty());
  EXPECT_FALSE(m.pool().has_hash(t[1]));
  EXPECT_EQ(m.match_prefix(concat(a, {9})), 4);
  EXPECT_INVARIANTS(m);
}

TEST(BlockManagerTest, SwapOutAndBackIn) {
  for (const bool caching : {false, true}) {
    SCOPED_TRACE(caching ? "prefix caching" : "no prefix caching");
    BlockManager m({.n_blocks = 6, .block_size = 4, .n_host_blocks = 3, .enable_prefix_caching = caching});
    ASSERT_TRUE(m.allocate(1, std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7}).ok());
    ASSERT_TRUE(m.mark_computed(1, 7).ok());
    ASSERT_TRUE(m.allocate(2, std::vector<int32_t>{9, 9, 9, 9, 9, 9, 9, 9, 9}).ok());
    EXPECT_TRUE(m.can_swap_out(2)) << "3 blocks, 3 host slots";
    const std::vector<int32_t> t = table_of(m, 1);
    ASSERT_TRUE(m.can_swap_out(1));
    StatusOr<std::vector<BlockSwap>> out = m.swap_out(1);
    ASSERT_TRUE(out.ok());
    ASSERT_EQ(out->size(), 2u);
    EXPECT_EQ((*out)[0].device_block, t[0]);
    EXPECT_EQ((*out)[1].device_block, t[1]);
    EXPECT_NE((*out)[0].host_slot, (*out)[1].host_slot);
    EXPECT_TRUE(m.is_swapped(1));
    EXPECT_TRUE(table_of(m, 1).empty());
    EXPECT_EQ(m.n_tokens(1), 7);
    EXPECT_EQ(m.stats().n_host_used, 2);
    EXPECT_EQ(m.stats().n_used, 3);
    EXPECT_FALSE(m.append(1, std::vector<int32_t>{8}).ok());
    EXPECT_FALSE(m.can_swap_out(2)) << "3 blocks, 1 host slot left";
    EXPECT_INVARIANTS(m);

    EXPECT_TRUE(m.can_swap_in(1, 1));
    EXPECT_FALSE(m.can_swap_in(1, 10));
    StatusOr<std::vector<BlockSwap>> in = m.swap_in(1);
    ASSERT_TRUE(in.ok());
    // With caching, the full block [1..4] is still registered: shared, not copied.
    ASSERT_EQ(in->size(), caching ? 1u : 2u);
    EXPECT_EQ(in->back().host_slot, (*out)[1].host_slot);
    EXPECT_EQ(in->back().device_block, table_of(m, 1)[1]);
    if (caching) {
      EXPECT_EQ(table_of(m, 1)[0], t[0]);
    }
    EXPECT_FALSE(m.is_swapped(1));
    EXPECT_EQ(m.stats().n_host_used, 0);
    EXPECT_TRUE(m.append(1, std::vector<int32_t>{8}).ok());
    EXPECT_INVARIANTS(m);

    // A swapped sequence can be freed: its host slots come back.
    ASSERT_TRUE(m.swap_out(1).ok());
    ASSERT_TRUE(m.free(1).ok());
    ASSERT_TRUE(m.free(2).ok());
    EXPECT_EQ(m.stats().n_host_used, 0);
    EXPECT_EQ(m.stats().n_used, 0);
    EXPECT_INVARIANTS(m);
  }
}

TEST(BlockManagerTest, RefusesBadCalls) {
  BlockManager m({.n_blocks = 2, .block_size = 4});
  EXPECT_FALSE(m.allocate(1, std::vector<int32_t>{}).ok());
  ASSERT_TRUE(m.allocate(1, std::vector<int32_t>{1, 2, 3}).ok());
  EXPECT_EQ(m.allocate(1, std::vector<int32_t>{1}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(m.allocate(2, std::vector<int32_t>(9, 1)).status().code(), StatusCode::kResourceExhausted);
  EXPECT_FALSE(m.append(7, std::vector<int32_t>{1}).ok());
  EXPECT_FALSE(m.can_append(7, 1));
  EXPECT_EQ(m.append(1, std::vector<int32_t>(6, 1)).status().code(), StatusCode::kResourceExhausted);
  EXPECT_FALSE(m.mark_computed(1, 4).ok());
  EXPECT_FALSE(m.truncate(1, 4).ok());
  EXPECT_FALSE(m.fork(1, 1).ok());
  EXPECT_FALSE(m.fork(5, 6).ok());
  EXPECT_FALSE(m.free(5).ok());
  EXPECT_FALSE(m.swap_out(1).ok()) << "no host pool";
  EXPECT_FALSE(m.swap_in(1).ok());
  EXPECT_EQ(m.n_tokens(1), 3);
  EXPECT_INVARIANTS(m);
}

// Random operations against a small pool, with every kind of call, checking the
// invariants after each one and that everything is released at the end.
TEST(BlockManagerTest, RandomOperationsKeepInvariantsAndLeakNothing) {
  for (const bool caching : {true, false}) {
    SCOPED_TRACE(caching ? "prefix caching" : "no prefix caching");
    BlockManager m({.n_blocks = 24, .block_size = 4, .n_host_blocks = 10, .enable_prefix_caching = caching});
    struct Shadow {
      int64_t n_computed = 0;
    };
    std::map<SeqId, Shadow> live;
    uint64_t state = 12345;
    auto rnd = [&](int n) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      return static_cast<int>((state >> 33) % static_cast<uint64_t>(n));
    };
    // A few shared prefixes make prefix hits common.
    const std::vector<std::vector<int32_t>> prefixes = {
        {1, 2, 3, 4, 5, 6, 7, 8}, {1, 2, 3, 4, 9, 9, 9, 9, 9, 9, 9, 9}, {7, 7, 7, 7}};
    SeqId next_id = 0;
    int64_t n_hits = 0;
    for (int step = 0; step < 3000; ++step) {
      SeqId pick = -1;
      if (!live.empty()) {
        auto it = live.begin();
        std::advance(it, rnd(static_cast<int>(live.size())));
        pick = it->first;
      }
      const bool swapped = pick >= 0 && m.is_swapped(pick);
      switch (rnd(8)) {
        case 0: {
          std::vector<int32_t> p = prefixes[static_cast<size_t>(rnd(3))];
          for (int i = rnd(6); i > 0; --i) p.push_back(rnd(50));
          if (!m.can_allocate(p)) break;
          StatusOr<int64_t> hit = m.allocate(next_id, p);
          ASSERT_TRUE(hit.ok()) << hit.status().to_string();
          ASSERT_LT(*hit, static_cast<int64_t>(p.size()));
          n_hits += *hit;
          live[next_id++] = Shadow{.n_computed = *hit};
          break;
        }
        case 1:
          if (pick >= 0 && !swapped) {
            std::vector<int32_t> t(static_cast<size_t>(1 + rnd(5)), rnd(50));
            if (m.can_append(pick, static_cast<int64_t>(t.size()))) {
              ASSERT_TRUE(m.append(pick, t).ok());
            }
          }
          break;
        case 2:
          if (pick >= 0 && !swapped) {
            Shadow& s = live[pick];
            s.n_computed = std::max(s.n_computed, m.n_tokens(pick) - rnd(3));
            ASSERT_TRUE(m.mark_computed(pick, s.n_computed).ok());
          }
          break;
        case 3:
          if (pick >= 0 && !swapped) {
            ASSERT_TRUE(m.fork(pick, next_id).ok());
            live[next_id++] = live[pick];
          }
          break;
        case 4:
          if (pick >= 0 && !swapped) {
            const int64_t n = std::max<int64_t>(0, m.n_tokens(pick) - rnd(6));
            ASSERT_TRUE(m.truncate(pick, n).ok());
            live[pick].n_computed = std::min(live[pick].n_computed, n);
          }
          break;
        case 5:
          if (pick >= 0) {
            ASSERT_TRUE(m.free(pick).ok());
            live.erase(pick);
          }
          break;
        case 6:
          if (pick >= 0 && !swapped && m.can_swap_out(pick)) {
            ASSERT_TRUE(m.swap_out(pick).ok());
          }
          break;
        case 7:
          if (pick >= 0 && swapped && m.can_swap_in(pick)) {
            ASSERT_TRUE(m.swap_in(pick).ok());
          }
          break;
      }
      const Status st = m.check_invariants();
      ASSERT_TRUE(st.ok()) << "step " << step << ": " << st.to_string();
      const BlockStats bs = m.stats();
      ASSERT_EQ(bs.n_used + bs.n_free + bs.n_cached, bs.n_total);
    }
    if (caching) {
      EXPECT_GT(n_hits, 0);
    }
    for (const auto& [id, s] : live) ASSERT_TRUE(m.free(id).ok());
    EXPECT_EQ(m.stats().n_used, 0);
    EXPECT_EQ(m.stats().n_host_used, 0);
    if (!caching) {
      EXPECT_EQ(m.stats().n_cached, 0);
    }
    EXPECT_INVARIANTS(m);
  }
}


// Sliding window of 8 over blocks of 4: after n computed tokens the next query
// reads positions >= n - 7, so the blocks wholly before it are released.
TEST(BlockManagerWindowTest, BlocksPerSequenceStopAtTheWindow) {
  // No window: every position, rounded up to blocks.
  EXPECT_EQ(kv_blocks_per_seq(32768, 16, 0), 2048);
  EXPECT_EQ(kv_blocks_per_seq(33, 16, 0), 3);
  EXPECT_EQ(kv_window_blocks(0, 16), 0);
  // Window 4096 on every layer (Mistral 7B): ceil(4096 / 16) + 1 blocks, 4112
  // positions, however long the context; a shorter context keeps what it has.
  EXPECT_EQ(kv_window_blocks(4096, 16), 257);
  EXPECT_EQ(kv_blocks_per_seq(32768, 16, 4096), 257);
  EXPECT_EQ(kv_blocks_per_seq(1000, 16, 4096), 63);
  // A window off the block grid: 33 positions span at most 3 + 1 blocks of 16.
  EXPECT_EQ(kv_window_blocks(33, 16), 4);
  EXPECT_EQ(kv_blocks_per_seq(10000, 16, 33), 4);
}

TEST(BlockManagerWindowTest, ReleasesBlocksThatLeftTheWindowAndStaysFlat) {
  BlockManager m({.n_blocks = 6, .block_size = 4, .enable_prefix_caching = false, .window = 8});
  EXPECT_EQ(m.window_blocks(), 3);
  ASSERT_EQ(*m.allocate(1, std::vector<int32_t>{1, 2, 3}), 0);
  int64_t max_used_past_window = 0;
  // 100 tokens in a pool of 6 blocks (24 positions): one token at a time.
  for (int32_t n = 3; n < 100; ++n) {
    ASSERT_TRUE(m.mark_computed(1, n).ok());
    const std::vector<int32_t> table = table_of(m, 1);
    const int64_t lo = std::max<int64_t>(0, n - 7);  // first position the next query reads
    for (int64_t b = 0; b < static_cast<int64_t>(table.size()); ++b) {
      EXPECT_EQ(table[static_cast<size_t>(b)] == kReleasedBlock, (b + 1) * 4 <= lo) << "n " << n << " block " << b;
    }
    EXPECT_EQ(m.n_released(1), lo / 4);
    if (n >= 8) max_used_past_window = std::max(max_used_past_window, m.stats().n_used);
    EXPECT_INVARIANTS(m);
    ASSERT_TRUE(m.append(1, std::vector<int32_t>{n}).ok()) << "n " << n;
  }
  EXPECT_LE(max_used_past_window, m.window_blocks());
  EXPECT_EQ(m.n_tokens(1), 100);
  EXPECT_EQ(static_cast<int64_t>(table_of(m, 1).size()), 25) << "the table keeps its indexing";
  ASSERT_TRUE(m.free(1).ok());
  EXPECT_EQ(m.stats().n_used, 0);
  EXPECT_INVARIANTS(m);
}

TEST(BlockManagerWindowTest, SharedBlocksOnlyLoseOneReference) {
  BlockManager m({.n_blocks = 16, .block_size = 4, .window = 4});
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  ASSERT_EQ(*m.allocate(1, a), 0);
  ASSERT_TRUE(m.mark_computed(1, 6).ok());  // next query at 6 reads 3.. : nothing wholly before
  ASSERT_TRUE(m.fork(1, 2).ok());
  const std::vector<int32_t> t = table_of(m, 1);
  ASSERT_TRUE(m.mark_computed(1, 10).ok());  // reads 7..: block 0 released by 1, still held by 2
  EXPECT_EQ(table_of(m, 1)[0], kReleasedBlock);
  EXPECT_EQ(table_of(m, 2)[0], t[0]);
  EXPECT_EQ(m.pool().ref_count(t[0]), 1);
  EXPECT_INVARIANTS(m);
  // A fork of a sequence with released blocks shares only the held ones.
  ASSERT_TRUE(m.fork(1, 3).ok());
  EXPECT_EQ(table_of(m, 3)[0], kReleasedBlock);
  EXPECT_EQ(m.pool().ref_count(t[1]), 3);
  EXPECT_INVARIANTS(m);
  // Truncating back into the released blocks is refused; past them it works.
  EXPECT_EQ(m.truncate(1, 4).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(m.truncate(1, 9).ok());
  EXPECT_INVARIANTS(m);
  for (SeqId s : {1, 2, 3}) ASSERT_TRUE(m.free(s).ok());
  EXPECT_EQ(m.stats().n_used, 0);
  EXPECT_INVARIANTS(m);
}

// A released block keeps its hash: a later prompt with the same prefix shares
// the cached blocks it still needs and enters the ones before its window released.
TEST(BlockManagerWindowTest, PrefixCacheHitsSkipBlocksBeforeTheWindow) {
  BlockManager m({.n_blocks = 16, .block_size = 4, .window = 4});
  std::vector<int32_t> a(17);
  for (int32_t i = 0; i < 17; ++i) a[static_cast<size_t>(i)] = 100 + i;
  ASSERT_EQ(*m.allocate(1, a), 0);
  ASSERT_TRUE(m.mark_computed(1, 17).ok());
  EXPECT_EQ(m.n_released(1), 3);  // the next query at 17 reads 14..
  EXPECT_EQ(m.stats().n_cached, 3);
  std::vector<int32_t> b = a;
  b.push_back(7);
  ASSERT_EQ(*m.allocate(2, b), 16);  // first computed query at 16 reads 13..: blocks 0..2 are not needed
  const std::vector<int32_t> tb = table_of(m, 2);
  EXPECT_EQ(m.n_released(2), 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(tb[static_cast<size_t>(i)], kReleasedBlock);
  EXPECT_EQ(tb[3], table_of(m, 1)[3]);
  EXPECT_INVARIANTS(m);
}

TEST(BlockManagerWindowTest, SwapMovesOnlyHeldBlocks) {
  BlockManager m({.n_blocks = 8, .block_size = 4, .n_host_blocks = 4, .enable_prefix_caching = false, .window = 4});
  std::vector<int32_t> a(14, 5);
  ASSERT_EQ(*m.allocate(1, a), 0);
  ASSERT_TRUE(m.mark_computed(1, 14).ok());  // reads 11..: blocks 0, 1 released
  ASSERT_EQ(m.n_released(1), 2);
  ASSERT_TRUE(m.can_swap_out(1));
  auto out = m.swap_out(1);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->size(), 2u);
  EXPECT_EQ(m.stats().n_host_used, 2);
  EXPECT_INVARIANTS(m);
  ASSERT_TRUE(m.can_swap_in(1, 1));
  auto in = m.swap_in(1);
  ASSERT_TRUE(in.ok());
  EXPECT_EQ(in->size(), 2u);
  const std::vector<int32_t> t = table_of(m, 1);
  EXPECT_EQ(t[0], kReleasedBlock);
  EXPECT_EQ(t[1], kReleasedBlock);
  EXPECT_NE(t[2], kReleasedBlock);
  EXPECT_EQ(m.stats().n_host_used, 0);
  EXPECT_INVARIANTS(m);
  ASSERT_TRUE(m.free(1).ok());
  EXPECT_INVARIANTS(m);
}

}  // namespace
}  // namespace sluice
