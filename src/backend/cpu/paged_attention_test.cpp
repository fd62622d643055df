// Paged attention against the contiguous scalar reference (ref::attention, backend/reference_ops.h).
#include "backend/cpu/paged_attention.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/op_test_util.h"
#include "backend/reference_ops.h"
#include "base/half.h"
#include "base/huge_buffer.h"

namespace sluice::cpu {
namespace {

using testing::GuardedFloats;
using testing::nmse;
using testing::random_floats;

struct Shape {
  int64_t n_head, n_head_kv, hd, n_ctx, bs = 16;
  KvRowType type = KvRowType::kF32;
  int64_t slices = 1;  // 1: rows; n_head_kv: head-major inside each block
  bool f16_values = false;  // values rounded through f16 first (whatever the row type)
};

// Builds paged K/V rows from contiguous floats with a shuffled block table, and
// the contiguous floats as the store would give them back (f16/q8 rounding).
struct PagedData {
  std::vector<uint8_t> k, v;
  std::vector<float> k_ref, v_ref;  // [n_ctx, n_embd_kv] after storage rounding
  std::vector<int32_t> table;
  size_t row_bytes;
  int64_t slices;
};

PagedData make_paged(const Shape& s, uint32_t seed) {
  const int64_t n_kv = s.n_head_kv * s.hd;
  const int64_t n_blocks = (s.n_ctx + s.bs - 1) / s.bs;
  PagedData d;
  d.row_bytes = s.type == KvRowType::kF32 ? n_kv * 4 : s.type == KvRowType::kF16 ? n_kv * 2 : n_kv / 32 * 34;
  d.slices = s.slices;
  d.table.resize(static_cast<size_t>(n_blocks));
  std::iota(d.table.begin(), d.table.end(), 0);
  std::mt19937 rng(seed);
  std::shuffle(d.table.begin(), d.table.end(), rng);
  auto kf = random_floats(static_cast<size_t>(s.n_ctx * n_kv), seed + 1);
  auto vf = random_floats(static_cast<size_t>(s.n_ctx * n_kv), seed + 2);
  if (s.f16_values) {
    for (float& x : kf) x = f16_to_f32(f32_to_f16(x));
    for (float& x : vf) x = f16_to_f32(f32_to_f16(x));
  }
  d.k.assign(static_cast<size_t>(n_blocks * s.bs) * d.row_bytes, 0);
  d.v = d.k;
  d.k_ref.resize(kf.size());
  d.v_ref.resize(vf.size());
  auto store_values = [&](const float* src, uint8_t* dst, float* back, int64_t n_vals) {
    if (s.type == KvRowType::kF32) {
      std::memcpy(dst, src, static_cast<size_t>(n_vals) * 4);
      std::memcpy(back, src, static_cast<size_t>(n_vals) * 4);
    } else if (s.type == KvRowType::kF16) {
      for (int64_t i = 0; i < n_vals; ++i) {
        const uint16_t h = f32_to_f16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
        back[i] = f16_to_f32(h);
      }
    } else {
      for (int64_t b = 0; b < n_vals / 32; ++b) {
        float amax = 0;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(src[b * 32 + i]));
        const uint16_t dh = f32_to_f16(amax / 127.0f);
        const float dd = f16_to_f32(dh), id = amax > 0 ? 127.0f / amax : 0.0f;
        std::memcpy(dst + b * 34, &dh, 2);
        for (int i = 0; i < 32; ++i) {
          const auto q = static_cast<int8_t>(std::lround(src[b * 32 + i] * id));
          dst[b * 34 + 2 + i] = static_cast<uint8_t>(q);
          back[b * 32 + i] = dd * q;
        }
      }
    }
  };
  // Position p: block table[p / bs], slot p % bs; slice c of its row at
  // block * bs * row_bytes + (c * bs + slot) * slice bytes.
  const int64_t n_slice = n_kv / s.slices;
  const size_t slice = d.row_bytes / static_cast<size_t>(s.slices);
  auto store = [&](const float* src, uint8_t* base, float* back, int64_t p) {
    const size_t block = static_cast<size_t>(d.table[p / s.bs]) * static_cast<size_t>(s.bs) * d.row_bytes;
    for (int64_t c = 0; c < s.slices; ++c)
      store_values(src + c * n_slice, base + block + static_cast<size_t>(c * s.bs + p % s.bs) * slice,
                   back + c * n_slice, n_slice);
  };
  for (int64_t p = 0; p < s.n_ctx; ++p) {
    store(kf.data() + p * n_kv, d.k.data(), d.k_ref.data() + p * n_kv, p);
    store(vf.data() + p * n_kv, d.v.data(), d.v_ref.data() + p * n_kv, p);
  }
  return d;
}

// Runs paged attention for queries at positions pos0 .. pos0 + n - 1 of one sequence.
// window / softcap as PagedAttentionArgs has them.
std::vector<float> run_paged(const Shape& s, const PagedData& d, const std::vector<float>& q, int64_t pos0,
                             int64_t n, int threads, Isa isa, int64_t window = 0, float softcap = 0.0f) {
  ThreadPool pool(threads);
  GuardedFloats out(static_cast<size_t>(n * s.n_head * s.hd));
  PagedSeq seq{.q = q.data(), .out = out.data(), .n_tokens = n, .pos0 = pos0, .block_table = d.table.data()};
  PagedAttentionArgs a{.seqs = std::span(&seq, 1),
                       .kv = {.k = d.k.data(), .v = d.v.data(), .row_bytes = d.row_bytes, .block_size = s.bs, .type = s.type,
                              .n_slices = d.slices},
                       .n_head = s.n_head, .n_head_kv = s.n_head_kv, .head_dim = s.hd,
                       .scale = 1.0f / std::sqrt(static_cast<float>(s.hd)), .window = window, .softcap = softcap};
  const size_t np = paged_attention_partials_floats(n * s.n_head_kv, s.n_ctx, s.n_head, s.n_head_kv, s.hd, threads);
  std::vector<float> partials(np);
  paged_attention(a, partials.data(), np, pool, isa);
  EXPECT_TRUE(out.guards_intact());
  return std::vector<float>(out.data(), out.data() + out.size());
}

// The contiguous scalar reference (ref::attention) over the stored (rounded) K/V values.
std::vector<float> reference(const Shape& s, const PagedData& d, const std::vector<float>& q, int64_t pos0, int64_t n,
                             int64_t window = 0, float softcap = 0.0f) {
  std::vector<float> ref(q.size());
  ThreadPool one(1);
  std::vector<float> scratch(static_cast<size_t>(s.hd));
  ref::attention(ref::AttentionArgs{.q = q.data(), .k = d.k_ref.data(), .v = d.v_ref.data(), .out = ref.data(),
                          .n_tokens = n, .pos0 = pos0, .n_head = s.n_head, .n_head_kv = s.n_head_kv,
                          .head_dim = s.hd, .scale = 1.0f / std::sqrt(static_cast<float>(s.hd)),
                          .window = window, .softcap = softcap},
            scratch.data(), one);
  return ref;
}

TEST(PagedAttention, MatchesContiguousReferenceForEveryRowTypeLayoutAndIsa) {
  for (KvRowType type : {KvRowType::kF32, KvRowType::kF16, KvRowType::kQ8_0})
  for (bool by_head : {false, true}) {
    // head_dim 64 and 128 take the fused kernel's register paths, 32/40/8 its
    // generic one (40 and 8 with a masked tail); blocks of 8 and 32 move the
    // tile boundaries (a tile never spans two blocks).
    for (Shape s : {Shape{8, 2, 64, 300}, Shape{4, 4, 32, 40}, Shape{8, 1, 64, 600}, Shape{4, 2, 128, 70, 32},
                    Shape{6, 3, 40, 90, 8}, Shape{8, 4, 8, 45}}) {
      s.type = type;
      s.slices = by_head ? s.n_head_kv : 1;
      // q8_0 holds whole blocks of 32 values: rows (and head slices) of 32k values.
      if (type == KvRowType::kQ8_0 && (s.n_head_kv * s.hd) % 32 != 0) continue;
      if (type == KvRowType::kQ8_0 && by_head && s.hd % 32 != 0) continue;
      const PagedData d = make_paged(s, 11);
      const int64_t pos0 = s.n_ctx - 5, n = 5;
      const auto q = random_floats(static_cast<size_t>(n * s.n_head * s.hd), 3);
      const auto ref = reference(s, d, q, pos0, n);
      for (int isa = 0; isa <= static_cast<int>(max_supported_isa()); ++isa) {
        const auto out = run_paged(s, d, q, pos0, n, 2, static_cast<Isa>(isa));
        EXPECT_LT(nmse(out.data(), ref.data(), out.size()), 1e-10)
            << "type " << static_cast<int>(type) << " slices " << s.slices << " isa " << isa;
      }
    }
  }
}

// Head-major blocks hold the same values at other addresses: the same bits.
TEST(PagedAttention, HeadMajorBlocksGiveTheBitsOfRowBlocks) {
  for (KvRowType type : {KvRowType::kF32, KvRowType::kF16, KvRowType::kQ8_0}) {
    Shape rows{8, 4, 64, 150};
    rows.type = type;
    Shape heads = rows;
    heads.slices = 4;
    const PagedData a = make_paged(rows, 31), b = make_paged(heads, 31);
    ASSERT_EQ(a.k_ref, b.k_ref);
    ASSERT_NE(a.k, b.k);  // the layouts differ
    const int64_t n = 6, pos0 = rows.n_ctx - n;
    const auto q = random_floats(static_cast<size_t>(n * rows.n_head * rows.hd), 4);
    EXPECT_EQ(run_paged(rows, a, q, pos0, n, 2, active_isa()), run_paged(heads, b, q, pos0, n, 2, active_isa()))
        << "type " << static_cast<int>(type);
  }
}

// The fused kernel reads f16 rows in place; its arithmetic must not depend on
// how a value is stored.
TEST(PagedAttention, F16RowsGiveTheBitsOfTheSameValuesInF32) {
  for (Shape s : {Shape{8, 2, 64, 150}, Shape{4, 4, 40, 70, 8}}) {
    s.f16_values = true;
    s.slices = s.n_head_kv;
    Shape f32 = s, f16 = s;
    f16.type = KvRowType::kF16;
    const PagedData a = make_paged(f32, 17), b = make_paged(f16, 17);
    ASSERT_EQ(a.k_ref, b.k_ref);
    const int64_t n = 9, pos0 = s.n_ctx - n;
    const auto q = random_floats(static_cast<size_t>(n * s.n_head * s.hd), 6);
    for (int isa = 0; isa <= static_cast<int>(max_supported_isa()); ++isa)
      EXPECT_EQ(run_paged(f32, a, q, pos0, n, 2, static_cast<Isa>(isa)), run_paged(f16, b, q, pos0, n, 2, static_cast<Isa>(isa)))
          << "head_dim " << s.hd << " isa " << isa;
  }
}

TEST(PagedAttention, DecodeEqualsPrefillBitForBitAcrossThreadCounts) {
  Shape s{8, 2, 64, 700};
  s.type = KvRowType::kF16;
  const PagedData d = make_paged(s, 5);
  const int64_t n = 40, pos0 = s.n_ctx - n;
  const auto q = random_floats(static_cast<size_t>(n * s.n_head * s.hd), 9);
  const auto batch = run_paged(s, d, q, pos0, n, 3, active_isa());
  const int64_t per_tok = s.n_head * s.hd;
  for (int threads : {1, 2, 3}) {
    for (int64_t t = 0; t < n; t += 13) {
      std::vector<float> q1(q.begin() + t * per_tok, q.begin() + (t + 1) * per_tok);
      const auto one = run_paged(s, d, q1, pos0 + t, 1, threads, active_isa());  // split-KV path
      for (int64_t i = 0; i < per_tok; ++i) ASSERT_EQ(one[i], batch[t * per_tok + i]) << "token " << t;
    }
  }
}

// Items take several kv heads when there are few threads for the query tiles
// (one item per tile on one thread) and one when there are many; a query head's
// arithmetic is the same either way.
TEST(PagedAttention, ItemsOfManyKvHeadsGiveTheBitsOfOneHeadItems) {
  for (KvRowType type : {KvRowType::kF16, KvRowType::kQ8_0}) {
    Shape s{8, 4, 64, 300};
    s.type = type;
    s.slices = s.n_head_kv;
    const PagedData d = make_paged(s, 41);
    const int64_t n = 48, pos0 = s.n_ctx - n;
    const auto q = random_floats(static_cast<size_t>(n * s.n_head * s.hd), 12);
    const auto wide = run_paged(s, d, q, pos0, n, 1, active_isa());     // 6 tiles: items of 4 kv heads
    const auto narrow = run_paged(s, d, q, pos0, n, 8, active_isa());  // 6 tiles x 4 heads < 32 items
    EXPECT_EQ(wide, narrow) << "type " << static_cast<int>(type);
    const auto ref = reference(s, d, q, pos0, n);
    EXPECT_LT(nmse(wide.data(), ref.data(), wide.size()), 1e-10);
  }
}

TEST(PagedAttention, ManySequencesOfDifferentLengthsInOneCall) {
  Shape s{4, 2, 32, 520};
  const PagedData d = make_paged(s, 21);
  // Three sequences sharing the same physical rows but different lengths/positions.
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{0, 7}, {260, 1}, {500, 20}};
  std::vector<std::vector<float>> qs, outs;
  std::vector<PagedSeq> seqs;
  for (auto [pos0, n] : shapes) {
    qs.push_back(random_floats(static_cast<size_t>(n * s.n_head * s.hd), static_cast<uint32_t>(pos0 + 1)));
    outs.emplace_back(qs.back().size());
  }
  for (size_t i = 0; i < shapes.size(); ++i)
    seqs.push_back(PagedSeq{.q = qs[i].data(), .out = outs[i].data(), .n_tokens = shapes[i].second,
                            .pos0 = shapes[i].first, .block_table = d.table.data()});
  ThreadPool pool(2);
  PagedAttentionArgs a{.seqs = seqs, .kv = {.k = d.k.data(), .v = d.v.data(), .row_bytes = d.row_bytes, .block_size = s.bs},
                       .n_head = s.n_head, .n_head_kv = s.n_head_kv, .head_dim = s.hd,
                       .scale = 1.0f / std::sqrt(static_cast<float>(s.hd))};
  const size_t np = paged_attention_partials_floats(28 * s.n_head_kv, s.n_ctx, s.n_head, s.n_head_kv, s.hd, 2);
  std::vector<float> partials(np);
  paged_attention(a, partials.data(), np, pool);
  for (size_t i = 0; i < shapes.size(); ++i) {
    const auto alone = run_paged(s, d, qs[i], shapes[i].first, shapes[i].second, 2, active_isa());
    EXPECT_EQ(alone, outs[i]) << "sequence " << i;
  }
}

// Sliding windows of odd sizes (1, a block less one, not a multiple of the
// 256-position chunk, exactly a chunk, past the context) and soft-capped scores,
// for every row type, layout and level this machine runs, prefill at the start
// and at the end of the context.
TEST(PagedAttention, WindowAndSoftcapMatchTheContiguousReference) {
  for (KvRowType type : {KvRowType::kF32, KvRowType::kF16, KvRowType::kQ8_0})
  for (bool by_head : {false, true})
  for (Shape s : {Shape{8, 2, 64, 600}, Shape{6, 3, 64, 90, 8}}) {
    s.type = type;
    s.slices = by_head ? s.n_head_kv : 1;
    const PagedData d = make_paged(s, 23);
    for (int64_t window : {int64_t{1}, s.bs - 1, int64_t{37}, int64_t{256}, int64_t{300}, s.n_ctx + 5})
    for (float softcap : {0.0f, 0.6f})
    for (int64_t pos0 : {int64_t{0}, s.n_ctx - 21}) {
      const int64_t n = 21;
      const auto q = random_floats(static_cast<size_t>(n * s.n_head * s.hd), 7);
      const auto ref = reference(s, d, q, pos0, n, window, softcap);
      for (int isa = 0; isa <= static_cast<int>(max_supported_isa()); ++isa) {
        const auto out = run_paged(s, d, q, pos0, n, 2, static_cast<Isa>(isa), window, softcap);
        EXPECT_LT(nmse(out.data(), ref.data(), out.size()), 1e-10)
            << "type " << static_cast<int>(type) << " slices " << s.slices << " window " << window << " softcap "
            << softcap << " pos0 " << pos0 << " isa " << isa;
      }
    }
  }
}

// The reference itself: a window of 1 gives each query its own V row; a window
// covering the context changes nothing; a soft cap changes the result.
TEST(PagedAttention, ReferenceWindowAndSoftcapMeanWhatTheySay) {
  Shape s{4, 2, 32, 100};
  const PagedData d = make_paged(s, 29);
  const int64_t n = 10, pos0 = s.n_ctx - n;
  const auto q = random_floats(static_cast<size_t>(n * s.n_head * s.hd), 8);
  const auto own = reference(s, d, q, pos0, n, 1);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < s.n_head; ++h)
      for (int64_t i = 0; i < s.hd; ++i)
        ASSERT_EQ(own[(t * s.n_head + h) * s.hd + i],
                  d.v_ref[static_cast<size_t>((pos0 + t) * s.n_head_kv * s.hd + h / 2 * s.hd + i)]);
  EXPECT_EQ(reference(s, d, q, pos0, n, s.n_ctx), reference(s, d, q, pos0, n));
  EXPECT_EQ(run_paged(s, d, q, pos0, n, 2, active_isa(), s.n_ctx), run_paged(s, d, q, pos0, n, 2, active_isa()));
  const auto full = reference(s, d, q, pos0, n);
  const auto capped = reference(s, d, q, pos0, n, 0, 0.2f);
  EXPECT_GT(nmse(capped.data(), full.data(), full.size()), 1e-6);
}

// A windowed query's output depends only on its position: decoded alone (the
// split-KV path with 2 and 3 threads, whose first chunk is not chunk 0), inside a
// prefill batch, or with any thread count, the same bits.
TEST(PagedAttention, WindowedDecodeEqualsPrefillBitForBitAcrossThreadCounts) {
  for (float softcap : {0.0f, 30.0f}) {
    Shape s{8, 2, 64, 700};
    s.type = KvRowType::kF16;
    s.slices = 2;
    const PagedData d = make_paged(s, 5);
    const int64_t n = 40, pos0 = s.n_ctx - n, window = 300;
    const auto q = random_floats(static_cast<size_t>(n * s.n_head * s.hd), 9);
    const auto batch = run_paged(s, d, q, pos0, n, 3, active_isa(), window, softcap);
    const int64_t per_tok = s.n_head * s.hd;
    for (int threads : {1, 2, 3}) {
      for (int64_t t = 0; t < n; t += 7) {
        std::vector<float> q1(q.begin() + t * per_tok, q.begin() + (t + 1) * per_tok);
        const auto one = run_paged(s, d, q1, pos0 + t, 1, threads, active_isa(), window, softcap);
        for (int64_t i = 0; i < per_tok; ++i)
          ASSERT_EQ(one[i], batch[t * per_tok + i]) << "token " << t << " threads " << threads;
      }
    }
  }
}

// Blocks wholly before the first query's window may have been freed: their table
// entries point far outside the pool and their rows hold NaN, and neither is
// read (a read would fault or turn the output into NaN).
TEST(PagedAttention, WindowNeverReadsBlocksBeforeIt) {
  for (KvRowType type : {KvRowType::kF32, KvRowType::kF16, KvRowType::kQ8_0}) {
    Shape s{8, 2, 64, 600};
    s.type = type;
    s.slices = 2;
    PagedData d = make_paged(s, 37);
    const int64_t n = 9, pos0 = s.n_ctx - n, window = 200;
    const auto q = random_floats(static_cast<size_t>(n * s.n_head * s.hd), 10);
    const auto ref = reference(s, d, q, pos0, n, window);
    const int64_t first_block = (pos0 - window + 1) / s.bs;  // the first query's window starts in it
    for (int64_t b = 0; b < first_block; ++b) {
      const size_t at = static_cast<size_t>(d.table[static_cast<size_t>(b)]) * static_cast<size_t>(s.bs) * d.row_bytes;
      std::fill_n(d.k.begin() + static_cast<std::ptrdiff_t>(at), s.bs * static_cast<int64_t>(d.row_bytes), uint8_t{0xFF});
      std::fill_n(d.v.begin() + static_cast<std::ptrdiff_t>(at), s.bs * static_cast<int64_t>(d.row_bytes), uint8_t{0xFF});
    }
    PagedData freed = d;
    for (int64_t b = 0; b < first_block; ++b) freed.table[static_cast<size_t>(b)] = 1 << 30;
    for (int isa = 0; isa <= static_cast<int>(max_supported_isa()); ++isa) {
      for (int threads : {1, 2}) {
        for (const PagedData* data : {&d, &freed}) {
          const auto out = run_paged(s, *data, q, pos0, n, threads, static_cast<Isa>(isa), window);
          EXPECT_LT(nmse(out.data(), ref.data(), out.size()), 1e-10) << "type " << static_cast<int>(type);
          const auto one = run_paged(s, *data, std::vector<float>(q.begin(), q.begin() + s.n_head * s.hd), pos0, 1,
                                     threads, static_cast<Isa>(isa), window);
          EXPECT_TRUE(std::all_of(one.begin(), one.end(), [](float x) { return std::isfinite(x); }));
        }
      }
    }
  }
}

// Decode attention of a serving step, for measuring (not run by default):
//   build/test_backend --gtest_also_run_disabled_tests --gtest_filter=PagedAttention.DISABLED_Throughput
// 16 sequences with one query token each, 110m shape (12 heads, head dim 64),
// f16 K/V in head-major blocks of 16 on huge pages, blocks shuffled over a pool
// of 256, 12 layers of their own (so the K/V come from memory, as in a step
// where the weights pass through the caches between layers). Prints the median
// step time over 30 steps and the K/V bytes read per second.
TEST(PagedAttention, DISABLED_Throughput) {
  const int64_t n_head = 12, n_head_kv = 12, hd = 64, bs = 16, n_layers = 12, n_seqs = 16, n_blocks = 256;
  const size_t row_bytes = static_cast<size_t>(n_head_kv * hd) * 2;
  const size_t layer_bytes = static_cast<size_t>(n_blocks * bs) * row_bytes;
  HugeBuffer kv(layer_bytes * 2 * n_layers);
  {
    auto* h = reinterpret_cast<uint16_t*>(kv.data());
    const auto vals = random_floats(4096, 3);
    for (size_t i = 0; i < kv.size() / 2; ++i) h[i] = f32_to_f16(vals[i % vals.size()]);
  }
  std::vector<int32_t> table(static_cast<size_t>(n_blocks));
  std::iota(table.begin(), table.end(), 0);
  std::mt19937 rng(1);
  std::shuffle(table.begin(), table.end(), rng);
  ThreadPool pool(2);
  const size_t np = paged_attention_partials_floats(n_seqs * n_head_kv, 1024, n_head, n_head_kv, hd, pool.n_threads());
  std::vector<float> partials(np);
  const auto q = random_floats(static_cast<size_t>(n_seqs * n_head * hd), 5);
  std::vector<float> out(q.size());
  for (int64_t ctx : {72, 136}) {
    const int64_t per_seq = (ctx + bs - 1) / bs;
    ASSERT_LE(per_seq * n_seqs, n_blocks);
    std::vector<PagedSeq> seqs;
    for (int64_t i = 0; i < n_seqs; ++i)
      seqs.push_back(PagedSeq{.q = q.data() + i * n_head * hd, .out = out.data() + i * n_head * hd, .n_tokens = 1,
                              .pos0 = ctx - 1, .block_table = table.data() + i * per_seq});
    std::vector<double> step_s;
    for (int rep = 0; rep < 30; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t l = 0; l < n_layers; ++l) {
        const uint8_t* k = kv.data() + static_cast<size_t>(2 * l) * layer_bytes;
        PagedAttentionArgs a{.seqs = seqs,
                             .kv = {.k = k, .v = k + layer_bytes, .row_bytes = row_bytes, .block_size = bs,
                                    .type = KvRowType::kF16, .n_slices = n_head_kv},
                             .n_head = n_head, .n_head_kv = n_head_kv, .head_dim = hd, .scale = 0.125f};
        paged_attention(a, partials.data(), np, pool);
      }
      step_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(step_s.begin(), step_s.end());
    const double med = step_s[step_s.size() / 2];
    const double bytes = static_cast<double>(n_seqs * ctx * n_layers) * static_cast<double>(row_bytes) * 2;
    std::printf("16 sequences x %3lld positions x 12 layers, f16 KV: %.3f ms per step (median of 30), %.1f GB/s of K/V\n",
                static_cast<long long>(ctx), med * 1e3, bytes / med / 1e9);
  }
}

}  // namespace
}  // namespace sluice::cpu
