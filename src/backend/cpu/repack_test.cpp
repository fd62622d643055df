// Repacked weight layouts (repack.h): the layout rule, round trips of every
// row, groups repacked together, in-place repacking, and (disabled) repack
// throughput. The repacked kernels' bits are checked in quant_matmul_test.cpp.
#include "backend/cpu/repack.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/op_test_util.h"
#include "quant/quant.h"

namespace sluice::cpu {
namespace {

using testing::random_floats;

// Random weights [n_out, n_in] of a type, as GGUF rows.
struct RowWeights {
  size_t w_row;            // bytes per row
  std::vector<uint8_t> w;  // [n_out, w_row]
  RowWeights(DType t, int64_t n_in, int64_t n_out, uint32_t seed) : w_row(row_bytes(t, n_in)) {
    const auto wf = random_floats(static_cast<size_t>(n_in * n_out), seed, 0.05f);
    w.resize(w_row * static_cast<size_t>(n_out));
    quantize_tensor(t, wf.data(), w.data(), n_out, n_in);
  }
};

TEST(Repack, LayoutRuleAndRoundTripOfEveryRow) {
  EXPECT_EQ(repack_layout(DType::kQ4_0, 8, 128, Isa::kAvx2), WeightLayout::kQ4_0x8);
  EXPECT_EQ(repack_layout(DType::kQ4_0, 8, 96, Isa::kAvx2), WeightLayout::kQ4_0x8);   // odd blocks are fine
  EXPECT_EQ(repack_layout(DType::kQ4_0, 4, 128, Isa::kAvx2), WeightLayout::kRows);   // rows not a multiple of 8
  EXPECT_EQ(repack_layout(DType::kQ4_0, 8, 128, Isa::kAvx512), WeightLayout::kQ4_0x4);
  EXPECT_EQ(repack_layout(DType::kQ4_0, 6, 128, Isa::kAvx512), WeightLayout::kRows);  // rows not a multiple of 4
  EXPECT_EQ(repack_layout(DType::kQ4_0, 8, 96, Isa::kAvx512), WeightLayout::kRows);   // odd block count
  EXPECT_EQ(repack_layout(DType::kQ8_0, 8, 128, Isa::kAvx2), WeightLayout::kQ8_0x8);
  EXPECT_EQ(repack_layout(DType::kQ8_0, 8, 96, Isa::kAvx2), WeightLayout::kQ8_0x8);   // odd blocks are fine
  EXPECT_EQ(repack_layout(DType::kQ8_0, 12, 128, Isa::kAvx2), WeightLayout::kRows);  // rows not a multiple of 8
  EXPECT_EQ(repack_layout(DType::kQ8_0, 32, 96, Isa::kAvx512), WeightLayout::kQ8_0x16);  // odd blocks are fine
  EXPECT_EQ(repack_layout(DType::kQ8_0, 8, 128, Isa::kAvx512), WeightLayout::kRows);     // rows not a multiple of 16
  EXPECT_EQ(repack_layout(DType::kQ4_K, 8, 256, Isa::kAvx512), WeightLayout::kRows);
  EXPECT_EQ(repack_group_rows(WeightLayout::kQ8_0x16), 16);
  EXPECT_EQ(repack_group_rows(WeightLayout::kQ4_0x4), 4);
  EXPECT_EQ(repack_group_rows(WeightLayout::kQ8_0x8), 8);
  EXPECT_EQ(repack_group_rows(WeightLayout::kQ4_0x8), 8);
  struct Case {
    DType type;
    Isa isa;
  };
  for (Case c : {Case{DType::kQ4_0, Isa::kAvx2}, Case{DType::kQ4_0, Isa::kAvx512}, Case{DType::kQ8_0, Isa::kAvx2},
                 Case{DType::kQ8_0, Isa::kAvx512}}) {
    const int64_t n_out = 48;
    const WeightLayout layout = repack_layout(c.type, n_out, 64, c.isa);
    const int64_t group = repack_group_rows(layout);
    for (int64_t n_in : {64, 192, 2816}) {
      const RowWeights p(c.type, n_in, n_out, 1200 + static_cast<uint32_t>(n_in));
      testing::GuardedBytes whole(p.w.size()), split(p.w.size());
      repack_rows(layout, p.w.data(), whole.data(), n_in, 0, n_out);
      repack_rows(layout, p.w.data(), split.data(), n_in, group, n_out);  // ranges by different threads
      repack_rows(layout, p.w.data(), split.data(), n_in, 0, group);
      ASSERT_TRUE(whole.guards_intact() && split.guards_intact());
      ASSERT_EQ(std::memcmp(whole.data(), split.data(), p.w.size()), 0);
      for (Isa isa : testing::supported_isas()) {  // every level's code writes the same bytes
        testing::GuardedBytes at(p.w.size());
        repack_rows_at(isa, layout, p.w.data(), at.data(), n_in, group, n_out);
        repack_rows_at(isa, layout, p.w.data(), at.data(), n_in, 0, group);
        ASSERT_TRUE(at.guards_intact());
        ASSERT_EQ(std::memcmp(whole.data(), at.data(), p.w.size()), 0) << layout_name(layout) << " " << isa_name(isa);
      }
      std::vector<uint8_t> row(p.w_row);
      for (int64_t r = 0; r < n_out; ++r) {
        if (layout == WeightLayout::kQ4_0x4) unpack_q4_0x4_row(whole.data(), row.data(), n_in, r);
        else if (layout == WeightLayout::kQ4_0x8) unpack_q4_0x8_row(whole.data(), row.data(), n_in, r);
        else if (layout == WeightLayout::kQ8_0x8) unpack_q8_0x8_row(whole.data(), row.data(), n_in, r);
        else unpack_q8_0x16_row(whole.data(), row.data(), n_in, r);
        ASSERT_EQ(std::memcmp(row.data(), p.w.data() + r * p.w_row, p.w_row), 0)
            << layout_name(layout) << " n_in " << n_in << " row " << r;
      }
    }
  }
}

TEST(Repack, AGroupIsRepackedTogetherOrNotAtAll) {
  const WeightView q{.type = DType::kQ8_0, .n_in = 256, .n_out = 256};
  const WeightView k{.type = DType::kQ8_0, .n_in = 256, .n_out = 64};
  const WeightView odd{.type = DType::kQ8_0, .n_in = 256, .n_out = 40};  // no x16 layout
  WeightLayout l[3];
  const WeightView all[3] = {q, k, k};
  group_layouts(all, Isa::kAvx512, l);
  for (WeightLayout x : l) EXPECT_EQ(x, WeightLayout::kQ8_0x16);
  const WeightView mixed[3] = {q, k, odd};
  group_layouts(mixed, Isa::kAvx512, l);
  for (WeightLayout x : l) EXPECT_EQ(x, WeightLayout::kRows);
  group_layouts(all, Isa::kScalar, l);
  for (WeightLayout x : l) EXPECT_EQ(x, WeightLayout::kRows);
}

// A weight source's own memory (an expert that just landed) is repacked where
// it lies: the bytes repack_rows() writes elsewhere, the layout prepare_weights
// would choose (not at the scalar level, which reads GGUF rows), and a group
// with one matrix that cannot be repacked stays rows.
TEST(Repack, InPlaceEqualsRepackingIntoAnotherBuffer) {
  for (Isa isa : testing::supported_isas()) {
    CpuBackend be({.n_threads = 2, .isa = isa});
    for (DType type : {DType::kQ4_0, DType::kQ8_0})
    for (int64_t n_in : {64, 2816}) {
      const int64_t n_out = 48;
      const RowWeights p(type, n_in, n_out, 1400 + static_cast<uint32_t>(n_in));
      std::vector<uint8_t> a = p.w, b = p.w;
      WeightView views[2] = {{.type = type, .data = a.data(), .n_in = n_in, .n_out = n_out},
                             {.type = type, .data = b.data(), .n_in = n_in, .n_out = n_out}};
      WeightLayout want[2];
      be.in_place_layouts(views, want);
      be.prepare_in_place(views);
      const WeightLayout expect = isa == Isa::kScalar ? WeightLayout::kRows : repack_layout(type, n_out, n_in, isa);
      for (int i = 0; i < 2; ++i) {
        EXPECT_EQ(views[i].layout, expect) << isa_name(isa);
        EXPECT_EQ(want[i], expect);
      }
      std::vector<uint8_t> elsewhere = p.w;
      if (expect != WeightLayout::kRows) repack_rows(expect, p.w.data(), elsewhere.data(), n_in, 0, n_out);
      EXPECT_EQ(a, elsewhere) << isa_name(isa) << " " << dtype_name(type) << " n_in " << n_in;
      EXPECT_EQ(b, elsewhere);
      // Twice is once: a prepared view is left alone.
      be.prepare_in_place(std::span(views, 1));
      EXPECT_EQ(a, elsewhere);
      // 42 rows has no interleaved layout, so its group partner stays rows too.
      std::vector<uint8_t> c = p.w;
      WeightView mixed[2] = {{.type = type, .data = c.data(), .n_in = n_in, .n_out = n_out},
                             {.type = type, .data = b.data(), .n_in = n_in, .n_out = 42}};
      be.prepare_in_place(mixed);
      EXPECT_EQ(mixed[0].layout, WeightLayout::kRows);
      EXPECT_EQ(c, p.w);
    }
  }
}

// How fast each repacked layout is written from GGUF rows, at the reference
// (repack_rows) and at the active level (repack_rows_at), one thread, on a
// Mixtral-8x7B expert matrix (14336 x 4096), which is what a streamed expert
// costs to reorder where it lands:
//   build/test_backend --gtest_also_run_disabled_tests --gtest_filter=Repack.DISABLED_Throughput
TEST(Repack, DISABLED_Throughput) {
  const Isa isa = active_isa();
  const int64_t n_out = 14336, n_in = 4096;
  for (WeightLayout layout : kRepackedLayouts) {
    const DType type = repacked_type(layout);
    const size_t bytes = row_bytes(type, n_in) * static_cast<size_t>(n_out);
    std::vector<uint8_t> src(bytes), dst(bytes);
    for (size_t i = 0; i < bytes; ++i) src[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
    for (int at_level = 0; at_level < 2; ++at_level) {
      std::vector<double> gbs;
      for (int rep = 0; rep < 5; ++rep) {
        const double t0 = testing::thread_cpu_seconds();
        if (at_level) repack_rows_at(isa, layout, src.data(), dst.data(), n_in, 0, n_out);
        else repack_rows(layout, src.data(), dst.data(), n_in, 0, n_out);
        gbs.push_back(static_cast<double>(bytes) / (testing::thread_cpu_seconds() - t0) / 1e9);
      }
      std::sort(gbs.begin(), gbs.end());
      std::printf("%-8s %-9s %5lld x %lld: %5.1f GB/s (median of 5; min %.1f max %.1f)\n", layout_name(layout),
                  at_level ? isa_name(isa) : "reference", static_cast<long long>(n_out), static_cast<long long>(n_in),
                  gbs[2], gbs[0], gbs[4]);
    }
  }
}

}  // namespace
}  // namespace sluice::cpu
