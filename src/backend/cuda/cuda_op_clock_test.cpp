// CudaOpClock (cuda_op_clock.h): marks on a stream read back in order, from the
// first, with the last mark kept as the next read's first (backend/op_clock.h);
// the live count its backend reads while it exists. Without a usable GPU it
// skips.
#ifdef SLUICE_HAVE_CUDA

#include <vector>

#include <gtest/gtest.h>

#include "backend/cuda/cuda_op_clock.h"
#include "backend/cuda/cuda_test_util.h"

namespace sluice::cuda::testing {
namespace {

// Marks 0..4 on a clock of 3: read after 3 (times 0 <= t1 <= t2), then the
// kept third and two more (the kept one at 0); each copy between marks makes
// the device pass time.
template <class Between>
void expect_reads_in_order(OpClock& clock, Between between) {
  std::vector<double> at;
  for (int i = 0; i < 3; ++i) {
    clock.mark();
    between();
  }
  clock.read(at);
  ASSERT_EQ(at.size(), 3u);
  EXPECT_EQ(at[0], 0.0);
  EXPECT_LE(at[0], at[1]);
  EXPECT_LE(at[1], at[2]);
  for (int i = 0; i < 2; ++i) {
    clock.mark();
    between();
  }
  clock.read(at);
  ASSERT_EQ(at.size(), 3u) << "the last mark of the first read is this one's first";
  EXPECT_EQ(at[0], 0.0);
  EXPECT_LE(at[1], at[2]);
  EXPECT_GT(at[2], 0.0);
}

TEST(CudaOpClock, ReadsMarksInOrderAndKeepsTheLast) {
  SKIP_WITHOUT_GPU();
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaSuccess, cudaStreamCreate(&s));
  constexpr size_t kBytes = size_t{1} << 20;
  void* a = device_alloc(kBytes);
  void* b = device_alloc(kBytes);
  int live = 0;
  {
    CudaOpClock clock(s, &live, 3);
    EXPECT_EQ(live, 1);
    EXPECT_EQ(clock.capacity(), 3);
    expect_reads_in_order(clock, [&] { ASSERT_EQ(cudaSuccess, cudaMemcpyAsync(b, a, kBytes, cudaMemcpyDefault, s)); });
  }
  EXPECT_EQ(live, 0);
  ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(s));
  device_free(a);
  device_free(b);
  ASSERT_EQ(cudaSuccess, cudaStreamDestroy(s));
}

}  // namespace
}  // namespace sluice::cuda::testing

#endif  // SLUICE_HAVE_CUDA
