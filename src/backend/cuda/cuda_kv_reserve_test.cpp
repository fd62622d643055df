// The fluid split's KV store on the GPU (cuda_kv_reserve.h): blocks backed on
// demand keep what was written while the pool grows and shrinks above them,
// and the memory mapped follows the blocks backed. Skips without a GPU.
#include "backend/cuda/cuda_test_util.h"

#ifdef SLUICE_HAVE_CUDA

#include <cstring>

#include "kv/kv_store.h"

namespace sluice::cuda::testing {
namespace {

TEST(CudaKvReserve, BlocksBackedOnDemandKeepTheirRowsAsThePoolMoves) {
  SKIP_WITHOUT_GPU();
  std::shared_ptr<Backend> be = gpu();
  const KvLayout layout{.n_layer = 3, .n_embd_kv = 256, .block_size = 16, .dtype = KvDtype::kF16, .n_head_kv = 2};
  auto kv = be->create_kv_reserved(layout, 4096, 100);  // 8 KiB a block side: 100 blocks in 1 granule a layer side
  ASSERT_TRUE(kv.ok()) << kv.status().to_string();
  const size_t bb = kv->block_bytes();
  ASSERT_EQ(bb, 16u * 256 * 2);
  // Block 7 of every layer, K and V, written with its own bytes.
  auto pattern = [&](int64_t l, int side) {
    std::vector<uint8_t> p(bb);
    for (size_t i = 0; i < bb; ++i) p[i] = static_cast<uint8_t>(i * 7 + static_cast<size_t>(l) * 31 + side * 101);
    return p;
  };
  for (int64_t l = 0; l < 3; ++l)
    for (int side = 0; side < 2; ++side)
      copy_to_device((side ? kv->v_layer(l) : kv->k_layer(l)) + 7 * bb, pattern(l, side).data(), bb);
  ASSERT_TRUE(be->resize_kv(*kv, 4000).ok());  // grow past many granules
  std::vector<uint8_t> far(bb, 0x5a), back(bb);
  copy_to_device(kv->k_layer(2) + 3999 * bb, far.data(), bb);
  copy_to_host(back.data(), kv->k_layer(2) + 3999 * bb, bb);
  EXPECT_EQ(back, far);
  ASSERT_TRUE(be->resize_kv(*kv, 10).ok());  // shrink to one granule a layer side
  for (int64_t l = 0; l < 3; ++l)
    for (int side = 0; side < 2; ++side) {
      copy_to_host(back.data(), (side ? kv->v_layer(l) : kv->k_layer(l)) + 7 * bb, bb);
      EXPECT_EQ(back, pattern(l, side)) << "layer " << l << " side " << side;
    }
  EXPECT_FALSE(be->resize_kv(*kv, 0).ok());
  EXPECT_FALSE(be->resize_kv(*kv, 4097).ok());
}

}  // namespace
}  // namespace sluice::cuda::testing

#endif  // SLUICE_HAVE_CUDA
