// Weight rows decoded on the device (cuda_decode_rows.cuh: prefill's BF16
// tiles through launch_weights_to_bf16, training's f32 panels through
// launch_weights_to_f32) against the host's dequantize_row: f32 bit for bit,
// BF16 the host's value rounded to nearest even, for every type the kernels
// decode, in GGUF rows and (Q4_0 / Q8_0) in the split layout prepare_weights
// gives them; a slice of rows from an odd row0, and nothing written past it.
// Without a usable GPU every test skips.
#ifdef SLUICE_HAVE_CUDA

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cuda/cuda_test_util.h"
#include "backend/cuda/cuda_to_bf16.cuh"
#include "backend/cuda/cuda_train_kernels.cuh"
#include "base/half.h"

namespace sluice::cuda::testing {
namespace {

class CudaDecodeRows : public ::testing::TestWithParam<DType> {};

TEST_P(CudaDecodeRows, RowsDecodeAsTheHostDequantizesThem) {
  SKIP_WITHOUT_GPU();
  auto be = gpu();
  const DType type = GetParam();
  const int64_t n_in = 512, n_out = 37, row0 = 3, n_rows = 30, n = n_rows * n_in;
  Matrix w(type, n_in, n_out, 41);
  DevMem rows(w.bytes.size());  // the GGUF rows as they are
  copy_to_device(rows.p, w.bytes.data(), rows.n);
  WeightView gguf = w.host;
  gguf.data = rows.as<uint8_t>();
  auto prepared = to_device(*be, {&w.dev});  // Q4_0 / Q8_0: the split layout
  std::vector<WeightView> views = {gguf};
  if (w.dev.layout == WeightLayout::kSplitScales) views.push_back(w.dev);
  for (const WeightView& view : views) {
    SCOPED_TRACE(view.layout == WeightLayout::kSplitScales ? "split scales" : "GGUF rows");
    ASSERT_TRUE(to_bf16_takes(view));
    ASSERT_TRUE(weights_to_f32_takes(view));
    std::vector<float> want(static_cast<size_t>(n));
    for (int64_t r = 0; r < n_rows; ++r)
      dequantize_row(type, w.host.data + (row0 + r) * row_bytes(type, n_in), want.data() + r * n_in, n_in);
    // One element past the slice is poisoned and must stay so.
    DevMem f32((n + 1) * sizeof(float)), b16((n + 8) * sizeof(uint16_t));
    std::vector<uint8_t> poison((n + 8) * sizeof(float), 0xA5);
    copy_to_device(f32.p, poison.data(), f32.n);
    copy_to_device(b16.p, poison.data(), b16.n);
    launch_weights_to_f32(view, row0, n_rows, f32.as<float>(), nullptr);
    launch_weights_to_bf16(view, row0, n_rows, b16.as<uint16_t>(), nullptr);
    std::vector<float> got(static_cast<size_t>(n + 1));
    std::vector<uint16_t> got16(static_cast<size_t>(n + 8));
    copy_to_host(got.data(), f32.p, f32.n);
    copy_to_host(got16.data(), b16.p, b16.n);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), static_cast<size_t>(n) * sizeof(float)), 0);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) bad += got16[static_cast<size_t>(i)] != f32_to_bf16(want[static_cast<size_t>(i)]);
    EXPECT_EQ(bad, 0) << "of " << n << " BF16 values";
    EXPECT_EQ(std::memcmp(&got[static_cast<size_t>(n)], poison.data(), sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(&got16[static_cast<size_t>(n)], poison.data(), 8 * sizeof(uint16_t)), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, CudaDecodeRows,
                         ::testing::Values(DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,
                                           DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K,
                                           DType::kIQ4_NL, DType::kIQ4_XS),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace sluice::cuda::testing

#endif  // SLUICE_HAVE_CUDA
