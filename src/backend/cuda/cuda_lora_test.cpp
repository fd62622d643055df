// The CUDA backend's LoRA operator against the reference backend (segments of
// two adapters with a row between them in none, the u output), and a token
// alone against the same token in a batch, bit for bit. The operator runs
// here although supports(kLora) stays false until this suite has passed on a
// GPU; without one every test skips with the reason, and in builds without
// nvcc the file is empty.
#ifdef SLUICE_HAVE_CUDA

#include <cmath>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cuda/cuda_test_util.h"
#include "backend/reference_backend.h"

namespace sluice::cuda::testing {
namespace {


struct Shape {
  int64_t n_in, n_out, rank;
};

class CudaLora : public ::testing::TestWithParam<Shape> {};

TEST_P(CudaLora, MatchesTheReferenceAndATokenAloneEqualsItInABatch) {
  SKIP_WITHOUT_GPU();
  auto be = gpu();
  ReferenceBackend ref;
  const Shape s = GetParam();
  const int64_t n_tok = 9, gap = 3, u_stride = s.rank + 2;
  const auto a0 = random_floats(static_cast<size_t>(s.rank * s.n_in), 1, 0.1f);
  const auto b0 = random_floats(static_cast<size_t>(s.n_out * s.rank), 2, 0.1f);
  const auto a1 = random_floats(a0.size(), 3, 0.1f), b1 = random_floats(b0.size(), 4, 0.1f);
  const auto x = random_floats(static_cast<size_t>(n_tok * s.n_in), 5);
  const auto y0 = random_floats(static_cast<size_t>(n_tok * s.n_out), 6);
  Dev da0(*be, a0), db0(*be, b0), da1(*be, a1), db1(*be, b1), dx(*be, x);
  auto segs_for = [&](const float* pa0, const float* pb0, const float* pa1, const float* pb1) {
    return std::vector<LoraSegment>{
        {.tok0 = 0, .n_tok = gap, .a = pa0, .b = pb0, .rank = s.rank, .scale = 2.0f},
        {.tok0 = gap + 1, .n_tok = n_tok - gap - 1, .a = pa1, .b = pb1, .rank = s.rank, .scale = -0.5f}};
  };
  const auto dev_segs = segs_for(da0.p(), db0.p(), da1.p(), db1.p());
  const auto host_segs = segs_for(a0.data(), b0.data(), a1.data(), b1.data());

  Dev dy(*be, y0), du(*be, n_tok * u_stride);
  be->lora({.x = dx.p(), .y = dy.p(), .n_in = s.n_in, .n_out = s.n_out, .segs = dev_segs, .u = du.p(),
            .u_stride = u_stride});
  std::vector<float> ry = y0, ru(static_cast<size_t>(n_tok * u_stride), std::nanf(""));
  ref.lora({.x = x.data(), .y = ry.data(), .n_in = s.n_in, .n_out = s.n_out, .segs = host_segs, .u = ru.data(),
            .u_stride = u_stride});
  const auto gy = dy.host(*be), gu = du.host(*be);
  EXPECT_LT(nmse(gy.data(), ry.data(), gy.size()), 1e-11);
  EXPECT_EQ(0, std::memcmp(gy.data() + gap * s.n_out, y0.data() + gap * s.n_out, s.n_out * sizeof(float)))
      << "the row in no segment";
  for (int64_t t = 0; t < n_tok; ++t) {
    if (t == gap) continue;
    EXPECT_LT(nmse(gu.data() + t * u_stride, ru.data() + t * u_stride, static_cast<size_t>(s.rank)), 1e-11) << t;
  }
  // Each token alone.
  for (const LoraSegment& sg : dev_segs) {
    for (int64_t t = sg.tok0; t < sg.tok0 + sg.n_tok; ++t) {
      LoraSegment one = sg;
      one.tok0 = t;
      one.n_tok = 1;
      Dev alone(*be, y0);
      be->lora({.x = dx.p(), .y = alone.p(), .n_in = s.n_in, .n_out = s.n_out, .segs = std::span(&one, 1)});
      const auto ga = alone.host(*be);
      EXPECT_EQ(0, std::memcmp(ga.data() + t * s.n_out, gy.data() + t * s.n_out, s.n_out * sizeof(float))) << t;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaLora,
                         ::testing::Values(Shape{64, 32, 4}, Shape{172, 64, 4}, Shape{100, 77, 13},
                                           Shape{4096, 4096, 16}, Shape{4096, 14336, 64}));

}  // namespace
}  // namespace sluice::cuda::testing

#endif  // SLUICE_HAVE_CUDA
