// F16C conversion of float arrays to f16 (this file is compiled with -mf16c).
#include <immintrin.h>

#include "base/half.h"

namespace sluice {

// Converts whole groups of 8 from the front and returns how many values it
// wrote. vcvtps2ph rounds to nearest even like f32_to_f16, but keeps NaN
// payload bits, so a group holding a NaN takes the scalar path.
int64_t f32_to_f16_array_f16c(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(src + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) != 0) {
      for (int64_t k = i; k < i + 8; ++k) dst[k] = f32_to_f16(src[k]);
      continue;
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  return i;
}

}  // namespace sluice
