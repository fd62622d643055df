// The CUDA matmul (cuda_matmul.cu) against the scalar reference dot_row, for
// every weight type, on random weights and activations.
//
// Error bounds. Both sides compute in float from identical decoded weights, so
// they differ only by rounding in a different summation order (and FMA
// contraction of q * d + m): per output at most ~(n_in / 1024 * 8 + 7 + the
// reference's 32 + n_in / 32) * 2^-24 * sum |w_e x_e| in the worst case.
// Checked two ways: every output |y - ref| <= kElemTol * sum_e |w_e x_e| (its
// own magnitude, so rows of any scale are held to the same relative standard),
// and ||y - ref|| / ||ref|| < kNormTol over a whole case (for F32 as for the
// rest; a single mis-decoded element per row gives ~1e-2 there). Outputs are
// NaN-poisoned and guarded by canaries (backend/cpu/op_test_util.h), so a
// skipped or stray write fails. Without a usable GPU every test skips.
#ifdef SLUICE_HAVE_CUDA

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/op_test_util.h"
#include "backend/cuda/cuda_api.h"
#include "quant/quant.h"

namespace sluice::cuda {
namespace {

using cpu::testing::GuardedFloats;
using cpu::testing::kGuardFloats;
using cpu::testing::nmse;
using cpu::testing::random_floats;

constexpr DType kTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                            DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K,
                            DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_NL, DType::kIQ4_XS};
constexpr double kElemTol = 2e-5;  // of sum |w_e x_e|, per output
constexpr double kNormTol = 1e-5;  // ||y - ref|| / ||ref|| per case

#define SKIP_WITHOUT_DEVICE()                     \
  do {                                            \
    std::string why;                              \
    if (!device_available(&why)) GTEST_SKIP() << why; \
  } while (0)

// Device memory for the length of a scope.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : p_(device_alloc(bytes)) {}
  ~DeviceBuffer() { device_free(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T>
  T* as() const { return static_cast<T*>(p_); }

 private:
  void* p_;
};

// A weight matrix on the host: [n_out, n_in] random floats, rows scaled
// differently (1/8 .. 8) so that rows of different magnitude meet, quantized.
struct HostWeights {
  DType type;
  int64_t n_in, n_out;
  size_t row_bytes;
  std::vector<uint8_t> bytes;  // [n_out, row_bytes]
};

HostWeights make_weights(DType type, int64_t n_in, int64_t n_out, uint32_t seed) {
  std::vector<float> f = random_floats(static_cast<size_t>(n_in * n_out), seed);
  for (int64_t o = 0; o < n_out; ++o) {
    const float scale = std::ldexp(1.0f, static_cast<int>(o % 7) - 3);
    for (int64_t i = 0; i < n_in; ++i) f[o * n_in + i] *= scale;
  }
  HostWeights w{type, n_in, n_out, row_bytes(type, n_in), {}};
  w.bytes.resize(w.row_bytes * n_out);
  quantize_tensor(type, f.data(), w.bytes.data(), n_out, n_in);
  return w;
}

// ref[t][o] = dot_row, mag[t][o] = sum_e |w_e x_e| over rows [row0, row0 + n_out).
void reference(const HostWeights& w, int64_t row0, int64_t n_out, const float* x, int64_t n_tok,
               std::vector<float>* ref, std::vector<double>* mag) {
  ref->assign(static_cast<size_t>(n_tok * n_out), 0.0f);
  mag->assign(static_cast<size_t>(n_tok * n_out), 0.0);
  std::vector<float> row(static_cast<size_t>(w.n_in));
  for (int64_t o = 0; o < n_out; ++o) {
    const uint8_t* src = w.bytes.data() + (row0 + o) * w.row_bytes;
    dequantize_row(w.type, src, row.data(), w.n_in);
    for (int64_t t = 0; t < n_tok; ++t) {
      const float* xt = x + t * w.n_in;
      (*ref)[t * n_out + o] = dot_row(w.type, src, xt, w.n_in);
      double m = 0;
      for (int64_t i = 0; i < w.n_in; ++i) m += std::fabs(static_cast<double>(row[i]) * xt[i]);
      (*mag)[t * n_out + o] = m;
    }
  }
}

// y = W[row0 .. row0 + n_out) x on the device, through a guarded, NaN-poisoned
// output buffer; x is placed x_pad floats into its device buffer.
std::vector<float> run_device(const HostWeights& w, int64_t row0, int64_t n_out, const std::vector<float>& x,
                              int64_t n_tok, int64_t x_pad, bool* guards_ok) {
  DeviceBuffer dw(w.bytes.size());
  copy_to_device(dw.as<void>(), w.bytes.data(), w.bytes.size());
  DeviceBuffer dx((x.size() + x_pad) * sizeof(float));
  copy_to_device(dx.as<float>() + x_pad, x.data(), x.size() * sizeof(float));
  GuardedFloats y(static_cast<size_t>(n_tok * n_out));
  const size_t y_all = y.size() + 2 * kGuardFloats;
  DeviceBuffer dy(y_all * sizeof(float));
  copy_to_device(dy.as<void>(), y.data() - kGuardFloats, y_all * sizeof(float));

  const WeightView view{.type = w.type, .data = dw.as<uint8_t>() + row0 * w.row_bytes, .n_in = w.n_in, .n_out = n_out};
  matmul_sync(view, dx.as<float>() + x_pad, n_tok, dy.as<float>() + kGuardFloats);

  copy_to_host(y.data() - kGuardFloats, dy.as<void>(), y_all * sizeof(float));
  *guards_ok = y.guards_intact();
  return std::vector<float>(y.data(), y.data() + y.size());
}

// Runs one case and compares it with the reference (the first 5 bad outputs named).
void check_case(const HostWeights& w, int64_t row0, int64_t n_out, int64_t n_tok, int64_t x_pad, uint32_t seed) {
  SCOPED_TRACE(std::string(dtype_name(w.type)) + " n_in=" + std::to_string(w.n_in) + " n_out=" +
               std::to_string(n_out) + " row0=" + std::to_string(row0) + " n_tok=" + std::to_string(n_tok) +
               " x_pad=" + std::to_string(x_pad));
  const std::vector<float> x = random_floats(static_cast<size_t>(n_tok * w.n_in), seed);
  std::vector<float> ref;
  std::vector<double> mag;
  reference(w, row0, n_out, x.data(), n_tok, &ref, &mag);
  bool guards_ok = false;
  const std::vector<float> y = run_device(w, row0, n_out, x, n_tok, x_pad, &guards_ok);
  EXPECT_TRUE(guards_ok) << "a write outside y";
  int bad = 0;
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int64_t o = 0; o < n_out; ++o) {
      const size_t i = static_cast<size_t>(t * n_out + o);
      const double tol = kElemTol * mag[i] + 1e-30;
      if (!(std::fabs(static_cast<double>(y[i]) - ref[i]) <= tol) && ++bad <= 5) {
        ADD_FAILURE() << "y[" << t << "][" << o << "] = " << y[i] << ", reference " << ref[i] << " (tolerance "
                      << tol << ")";
      }
    }
  }
  EXPECT_EQ(bad, 0) << "outputs out of tolerance";
  EXPECT_LT(std::sqrt(nmse(y.data(), ref.data(), y.size())), kNormTol);
}

TEST(CudaMatmul, SupportsEveryType) {
  for (DType t : kTypes) EXPECT_TRUE(matmul_supports(t)) << dtype_name(t);
}

// Every type x n_in {256, 2816 (11 x 256), 4096} x n_out {37, 1000} (not
// multiples of the rows a thread block owns) x n_tok {1, 3, 8, 11} (the
// 1/2/4/8-token kernels, alone and chained).
TEST(CudaMatmul, EveryTypeMatchesDotRow) {
  SKIP_WITHOUT_DEVICE();
  uint32_t seed = 1;
  for (DType type : kTypes) {
    for (int64_t n_in : {256, 2816, 4096}) {
      for (int64_t n_out : {37, 1000}) {
        const HostWeights w = make_weights(type, n_in, n_out, seed++);
        for (int64_t n_tok : {1, 3, 8, 11}) check_case(w, 0, n_out, n_tok, 0, seed++);
      }
    }
  }
}

// A view that starts one row into a matrix (so its rows are only as aligned as
// the row size) and x that starts 4 floats into its buffer; and one row alone.
TEST(CudaMatmul, OffsetViewsAndSingleRow) {
  SKIP_WITHOUT_DEVICE();
  uint32_t seed = 1000;
  for (DType type : kTypes) {
    const HostWeights w = make_weights(type, 768, 9, seed++);
    check_case(w, 1, 8, 2, 4, seed++);
    check_case(w, 3, 1, 1, 0, seed++);
    check_case(w, 8, 1, 5, 0, seed++);
  }
}

// Many rows (a large grid; an output-embedding-like matrix) and a long row.
TEST(CudaMatmul, LargeShapes) {
  SKIP_WITHOUT_DEVICE();
  const HostWeights wide = make_weights(DType::kQ4_0, 256, 70001, 7);
  check_case(wide, 0, wide.n_out, 1, 0, 8);
  for (DType type : {DType::kBF16, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K}) {
    const HostWeights tall = make_weights(type, 14336, 64, 9);
    check_case(tall, 0, tall.n_out, 2, 0, 10);
  }
}

// A token's outputs do not depend on the batch around it: the same x row alone
// and inside batches of 2, 4, 8 and 11 gives the same bits.
TEST(CudaMatmul, TokenAloneEqualsTokenInBatch) {
  SKIP_WITHOUT_DEVICE();
  for (DType type : kTypes) {
    SCOPED_TRACE(dtype_name(type));
    const HostWeights w = make_weights(type, 2816, 37, 11);
    const std::vector<float> batch = random_floats(static_cast<size_t>(11 * w.n_in), 12);
    bool ok = false;
    const std::vector<float> all = run_device(w, 0, w.n_out, batch, 11, 0, &ok);
    for (int64_t t : {0, 5, 10}) {
      const std::vector<float> one_x(batch.begin() + t * w.n_in, batch.begin() + (t + 1) * w.n_in);
      const std::vector<float> one = run_device(w, 0, w.n_out, one_x, 1, 0, &ok);
      EXPECT_EQ(0, std::memcmp(one.data(), all.data() + t * w.n_out, one.size() * sizeof(float))) << "token " << t;
    }
  }
}

}  // namespace
}  // namespace sluice::cuda

#endif  // SLUICE_HAVE_CUDA
