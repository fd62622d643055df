#include "base/half.h"

#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

namespace sluice {
namespace {

// The array conversion (F16C where the CPU has it) gives f32_to_f16's bits for
// every value: a sweep over all exponents with varied mantissas and signs, the
// rounding ties, the overflow and subnormal edges, infinities and NaNs.
TEST(Half, ArrayConversionGivesTheScalarBits) {
  std::vector<float> x;
  for (uint64_t u = 0; u < (1ull << 32); u += 4099) x.push_back(bits_to_float(static_cast<uint32_t>(u)));
  for (float v : {65504.0f, 65519.99f, 65520.0f, 6.1035156e-05f, 5.9604645e-08f, 2.9802322e-08f, 1.0009766f,
                  1.0004883f, 1.0014648f, std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN(), -0.0f}) {
    x.push_back(v);
    x.push_back(-v);
  }
  x.push_back(bits_to_float(0x7fa00001u));  // a NaN with payload bits
  std::vector<uint16_t> got(x.size() + 3, 0xABCD);
  f32_to_f16_array(x.data(), got.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(got[i], f32_to_f16(x[i])) << "value " << x[i] << " index " << i;
  for (size_t i = x.size(); i < got.size(); ++i) EXPECT_EQ(got[i], 0xABCD) << "wrote past the end";
}

}  // namespace
}  // namespace sluice
