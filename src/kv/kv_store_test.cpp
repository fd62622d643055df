#include "kv/kv_store.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace sluice {
namespace {

std::vector<float> row_values(int64_t n, int64_t row) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = std::sin(0.37f * static_cast<float>(i + 101 * row));
  return v;
}

TEST(KvSlices, HeadMajorWhenEveryHeadIsWholeValues) {
  EXPECT_EQ(kv_slices({.n_layer = 1, .n_embd_kv = 256, .dtype = KvDtype::kF16, .n_head_kv = 4}), 4);
  EXPECT_EQ(kv_slices({.n_layer = 1, .n_embd_kv = 256, .dtype = KvDtype::kQ8_0, .n_head_kv = 4}), 4);  // 64 per head
  EXPECT_EQ(kv_slices({.n_layer = 1, .n_embd_kv = 32, .dtype = KvDtype::kQ8_0, .n_head_kv = 4}), 1);   // 8 per head
  EXPECT_EQ(kv_slices({.n_layer = 1, .n_embd_kv = 32, .dtype = KvDtype::kF32, .n_head_kv = 4}), 4);
  EXPECT_EQ(kv_slices({.n_layer = 1, .n_embd_kv = 30, .dtype = KvDtype::kF32, .n_head_kv = 4}), 1);    // not divisible
  EXPECT_EQ(kv_slices({.n_layer = 1, .n_embd_kv = 64, .dtype = KvDtype::kF32}), 1);
}

TEST(KvStore, RowsRoundTripInEveryDtypeAndLayout) {
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16, KvDtype::kQ8_0}) {
    for (int64_t heads : {1, 4}) {
      const KvLayout layout{.n_layer = 2, .n_embd_kv = 128, .block_size = 4, .dtype = dtype, .n_head_kv = heads};
      auto store = KvStore::create(layout, 3);
      ASSERT_TRUE(store.ok());
      EXPECT_EQ(store->n_slices(), heads);
      // Every row of every block, in both layers; then read back.
      for (int64_t l = 0; l < 2; ++l)
        for (int64_t r = 0; r < 12; ++r) store->store_row(row_values(128, r + 12 * l).data(), store->k_layer(l), r);
      const double tol = dtype == KvDtype::kF32 ? 0 : dtype == KvDtype::kF16 ? 1e-3 : 1.0 / 127;
      std::vector<float> back(128);
      for (int64_t l = 0; l < 2; ++l) {
        for (int64_t r = 0; r < 12; ++r) {
          store->load_row(store->k_layer(l), r, back.data());
          const std::vector<float> want = row_values(128, r + 12 * l);
          for (int64_t i = 0; i < 128; ++i)
            ASSERT_NEAR(back[i], want[i], tol) << kv_dtype_name(dtype) << " heads " << heads << " row " << r;
        }
      }
      // Copy-on-write of block 1 to 2 carries every slice of its rows.
      store->copy_block(1, 2);
      std::vector<float> a(128), b(128);
      for (int64_t slot = 0; slot < 4; ++slot) {
        store->load_row(store->k_layer(1), 4 + slot, a.data());
        store->load_row(store->k_layer(1), 8 + slot, b.data());
        ASSERT_EQ(a, b);
      }
    }
  }
}

TEST(KvStore, HeadMajorBlockPutsAHeadsSlotsTogether) {
  const KvLayout layout{.n_layer = 1, .n_embd_kv = 32, .block_size = 4, .dtype = KvDtype::kF32, .n_head_kv = 4};
  auto store = KvStore::create(layout, 2);
  ASSERT_TRUE(store.ok());
  for (int64_t r = 0; r < 8; ++r) store->store_row(row_values(32, r).data(), store->k_layer(0), r);
  // Block 1, head 2: slots 0..3 of rows 4..7, 8 floats each, one after another.
  const float* head = reinterpret_cast<const float*>(store->k_layer(0) + store->row_bytes() * 4) + 2 * 4 * 8;
  for (int64_t slot = 0; slot < 4; ++slot) {
    const std::vector<float> want = row_values(32, 4 + slot);
    EXPECT_EQ(std::memcmp(head + slot * 8, want.data() + 2 * 8, 8 * sizeof(float)), 0) << "slot " << slot;
  }
}

}  // namespace
}  // namespace sluice
