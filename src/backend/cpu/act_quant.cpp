// Scalar activation quantizers; the AVX2 / AVX-512 ones (act_quant_avx*.cpp)
// perform the same float operations and write the same bytes.
#include "backend/cpu/act_quant.h"

#include <cmath>
#include <cstring>

#include "base/check.h"

namespace sluice::cpu {
namespace {

// Quantizes n floats with one scale: returns d, writes q[n].
float quantize_block(const float* x, int n, int8_t* q) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
  for (int i = 0; i < n; ++i) q[i] = static_cast<int8_t>(std::nearbyint(x[i] * id));
  return amax / 127.0f;
}

}  // namespace

size_t act_row_bytes_q8x64(int64_t n_in) {
  return static_cast<size_t>((n_in + kActQ8x64Elems - 1) / kActQ8x64Elems) * sizeof(ActQ8x64);
}

size_t act_row_bytes_q8x256(int64_t n_in) {
  return static_cast<size_t>(n_in / kActQ8x256Elems) * sizeof(ActQ8x256);
}

void convert_act_q8x64_scalar(const float* x, void* dst, int64_t n_in, int32_t off) {
  CHECK(n_in % 32 == 0);
  auto* g = static_cast<ActQ8x64*>(dst);
  const int64_t n_blocks = n_in / 32;
  for (int64_t b = 0; b < n_blocks; ++b) {
    ActQ8x64& out = g[b / 2];
    const int h = static_cast<int>(b % 2);  // which half of the group
    const float d = quantize_block(x + b * 32, 32, out.q + 32 * h);
    for (int j = 0; j < 8; ++j) {
      const int8_t* q = out.q + 32 * h + 4 * j;
      out.corr[8 * h + j] = -off * (q[0] + q[1] + q[2] + q[3]);
      out.d[8 * h + j] = d;
    }
  }
  if (n_blocks % 2 == 1) {  // zero second half of the last group
    ActQ8x64& out = g[n_blocks / 2];
    std::memset(out.q + 32, 0, 32);
    std::memset(out.corr + 8, 0, 8 * sizeof(int32_t));
    std::memset(out.d + 8, 0, 8 * sizeof(float));
  }
}

void convert_act_q8x256_scalar(const float* x, void* dst, int64_t n_in) {
  CHECK(n_in % kActQ8x256Elems == 0);
  auto* blocks = static_cast<ActQ8x256*>(dst);
  for (int64_t b = 0; b < n_in / kActQ8x256Elems; ++b) {
    ActQ8x256& out = blocks[b];
    out.d = quantize_block(x + b * kActQ8x256Elems, kActQ8x256Elems, out.q);
    for (int k = 0; k < 16; ++k) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += out.q[16 * k + i];
      out.bsum[k] = static_cast<int16_t>(sum);
    }
    std::memset(out.pad, 0, sizeof(out.pad));
  }
}

}  // namespace sluice::cpu
