// The grouped matmuls (cuda_matmul.cuh's MatmulGroup: a routed layer's
// experts in one launch) against one plain launch per row: the same bits, for
// the float kernels and the 8-bit-activation ones, with groups of 1..11 rows
// (every tokens-per-pass kernel and a last, partial pass), two parts and
// one, rows gathered by token and scattered by slot. Outputs are NaN-poisoned,
// so a row a launch skips fails. Without a usable GPU every test skips.
#ifdef SLUICE_HAVE_CUDA

#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cuda/cuda_matmul.cuh"
#include "backend/cuda/cuda_matmul_q8.cuh"
#include "backend/cuda/cuda_test_util.h"
#include "quant/split_scales.h"

namespace sluice::cuda::testing {
namespace {

// Device memory holding a host vector's bytes (NaN floats when poisoned).
class DevBytes {
 public:
  template <class T>
  explicit DevBytes(const std::vector<T>& host) : n_(host.size() * sizeof(T)), p_(device_alloc(n_)) {
    copy_to_device(p_, host.data(), n_);
  }
  ~DevBytes() { device_free(p_); }
  DevBytes(const DevBytes&) = delete;
  DevBytes& operator=(const DevBytes&) = delete;
  template <class T>
  T* as() const { return static_cast<T*>(p_); }
  template <class T>
  std::vector<T> host() const {
    std::vector<T> h(n_ / sizeof(T));
    copy_to_host(h.data(), p_, n_);
    return h;
  }

 private:
  size_t n_;
  void* p_;
};

std::vector<float> nans(int64_t n) { return std::vector<float>(static_cast<size_t>(n), std::nanf("")); }

// One grouped case: n_groups experts of `parts` matrices [n_out, n_in] each,
// group g taking counts[g] rows whose x rows are tokens of an n_tok batch
// and whose y rows are a shuffle of all rows.
struct GroupedCase {
  DType type;
  WeightLayout layout = WeightLayout::kRows;
  int64_t n_in = 256, n_out = 70, n_tok = 4;
  int parts = 2;
  std::vector<int32_t> counts = {1, 3, 9, 2, 11, 1};
};

void check_grouped(const GroupedCase& c, bool q8) {
  SCOPED_TRACE(std::string(dtype_name(c.type)) + (q8 ? " 8-bit x" : " float x") + " parts=" + std::to_string(c.parts) +
               (c.layout == WeightLayout::kSplitScales ? " split scales" : ""));
  const int64_t n_groups = static_cast<int64_t>(c.counts.size());
  int64_t n_rows = 0, max_count = 0;
  for (int32_t k : c.counts) n_rows += k, max_count = std::max<int64_t>(max_count, k);
  // Every group's parts, one after the other in one buffer (the layout each
  // matrix has on its own).
  const size_t mat_bytes = row_bytes(c.type, c.n_in) * static_cast<size_t>(c.n_out);
  std::vector<uint8_t> w_host(mat_bytes * static_cast<size_t>(n_groups * c.parts));
  for (int64_t m = 0; m < n_groups * c.parts; ++m) {
    const auto f = random_floats(static_cast<size_t>(c.n_in * c.n_out), 100 + static_cast<uint32_t>(m), 0.05f);
    uint8_t* dst = w_host.data() + static_cast<size_t>(m) * mat_bytes;
    quantize_tensor(c.type, f.data(), dst, c.n_out, c.n_in);
    if (c.layout == WeightLayout::kSplitScales) {
      std::vector<uint8_t> rows(dst, dst + mat_bytes);
      split_scales(c.type, rows.data(), c.n_out, c.n_in, dst);
    }
  }
  const DevBytes w(w_host);
  const DevBytes x(random_floats(static_cast<size_t>(c.n_tok * c.n_in), 7));
  std::vector<int32_t> x_rows(static_cast<size_t>(n_rows)), y_rows(static_cast<size_t>(n_rows));
  for (int64_t i = 0; i < n_rows; ++i) {
    x_rows[static_cast<size_t>(i)] = static_cast<int32_t>((i * 3 + 1) % c.n_tok);
    y_rows[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7 + 2) % n_rows);  // 7 is prime to every n_rows here
  }
  std::vector<MatmulGroup> groups;
  int32_t off = 0;
  for (int64_t g = 0; g < n_groups; ++g) {
    MatmulGroup grp{.off = off, .count = c.counts[static_cast<size_t>(g)]};
    for (int p = 0; p < c.parts; ++p) grp.w[p] = w.as<uint8_t>() + static_cast<size_t>(g * c.parts + p) * mat_bytes;
    groups.push_back(grp);
    off += grp.count;
  }
  const DevBytes d_groups(groups), d_x_rows(x_rows), d_y_rows(y_rows);
  const GroupedRows rows{.groups = d_groups.as<MatmulGroup>(), .n_groups = n_groups, .max_count = max_count,
                         .x_rows = d_x_rows.as<int32_t>(), .y_rows = d_y_rows.as<int32_t>()};
  std::vector<std::unique_ptr<DevBytes>> ys, refs;
  std::vector<float*> y_ptrs;
  for (int p = 0; p < c.parts; ++p) {
    ys.push_back(std::make_unique<DevBytes>(nans(n_rows * c.n_out)));
    refs.push_back(std::make_unique<DevBytes>(nans(n_rows * c.n_out)));
    y_ptrs.push_back(ys.back()->as<float>());
  }
  // x quantized once for the batch (what the grouped launch reads by token).
  const DevBytes xq(std::vector<int8_t>(static_cast<size_t>(c.n_tok * c.n_in)));
  const DevBytes xd(nans(c.n_tok * c.n_in / 32)), xs(nans(c.n_tok * c.n_in / 32));
  const QuantizedX qx{.q = xq.as<int8_t>(), .d = xd.as<float>(), .s = xs.as<float>(), .n_in = c.n_in};
  if (q8) {
    quantize_x(x.as<float>(), c.n_in, c.n_in, c.n_tok, qx, nullptr);
    launch_matmul_q8_grouped(c.type, c.layout, c.n_in, c.n_out, rows, qx, y_ptrs, c.n_out, nullptr);
  } else {
    launch_matmul_grouped(c.type, c.n_in, c.n_out, rows, x.as<float>(), c.n_in, y_ptrs, c.n_out, nullptr);
  }
  // The reference: each row alone, one launch per part.
  for (int64_t g = 0; g < n_groups; ++g) {
    const MatmulGroup& grp = groups[static_cast<size_t>(g)];
    for (int32_t i = grp.off; i < grp.off + grp.count; ++i) {
      const int64_t xr = x_rows[static_cast<size_t>(i)], yr = y_rows[static_cast<size_t>(i)];
      for (int p = 0; p < c.parts; ++p) {
        const WeightView view{.type = c.type, .data = grp.w[p], .n_in = c.n_in, .n_out = c.n_out, .layout = c.layout};
        float* y = refs[static_cast<size_t>(p)]->as<float>() + yr * c.n_out;
        if (q8) {
          const int64_t nb = c.n_in / 32;
          const QuantizedX row{.q = qx.q + xr * c.n_in, .d = qx.d + xr * nb, .s = qx.s + xr * nb, .n_in = c.n_in};
          launch_matmul_q8(std::span(&view, 1), std::span(&y, 1), row, 1, nullptr);
        } else {
          launch_matmul(view, x.as<float>() + xr * c.n_in, c.n_in, 1, y, c.n_out, nullptr);
        }
      }
    }
  }
  ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(nullptr));
  for (int p = 0; p < c.parts; ++p) {
    const auto got = ys[static_cast<size_t>(p)]->host<float>(), want = refs[static_cast<size_t>(p)]->host<float>();
    for (size_t i = 0; i < got.size(); ++i) ASSERT_FALSE(std::isnan(want[i])) << "reference row not written: " << i;
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float))) << "part " << p;
  }
}

TEST(CudaGroupedMatmul, FloatKernelsGiveEachRowsOwnLaunchBits) {
  SKIP_WITHOUT_GPU();
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ4_0, DType::kQ4_1, DType::kQ4_K, DType::kQ6_K,
                     DType::kIQ4_XS}) {
    check_grouped({.type = type}, false);
    check_grouped({.type = type, .parts = 1, .counts = {5, 1, 2}}, false);
  }
}

TEST(CudaGroupedMatmul, EightBitKernelsGiveEachRowsOwnLaunchBits) {
  SKIP_WITHOUT_GPU();
  for (DType type : {DType::kQ4_0, DType::kQ8_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ4_1, DType::kQ5_0,
                     DType::kQ5_1, DType::kIQ4_NL, DType::kIQ4_XS, DType::kQ2_K, DType::kQ3_K}) {
    for (WeightLayout layout : {WeightLayout::kRows, WeightLayout::kSplitScales}) {
      const bool split = type == DType::kQ4_0 || type == DType::kQ8_0;
      if (!split && layout == WeightLayout::kSplitScales) continue;  // GGUF rows only
      check_grouped({.type = type, .layout = layout}, true);
      check_grouped({.type = type, .layout = layout, .parts = 1, .counts = {1}}, true);
    }
  }
}

}  // namespace
}  // namespace sluice::cuda::testing

#endif  // SLUICE_HAVE_CUDA
