// IEEE half (f16) and bfloat16 <-> float conversion, scalar and exact.
// f16 -> f32 is exact; f32 -> f16 rounds to nearest even (as numpy and ggml do),
// f32 -> bf16 rounds to nearest even with NaN kept quiet.
#pragma once

#include <cstdint>
#include <cstring>

namespace sluice {

inline float bits_to_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t float_to_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return bits_to_float(sign);
    // subnormal: value = mant * 2^-24
    float v = static_cast<float>(mant) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  if (exp == 31) return bits_to_float(sign | 0x7f800000u | (mant << 13));
  return bits_to_float(sign | ((exp + 112) << 23) | (mant << 13));
}

inline uint16_t f32_to_f16(float f) {
  const uint32_t x = float_to_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) {  // inf or nan
    return static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
  }
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (absx < 0x38800000u) {  // result is subnormal or zero
    // value / 2^-24, rounded to nearest even
    const float v = bits_to_float(absx) * 16777216.0f;
    // v < 1024, rint via adding magic
    const float r = (v + 8388608.0f) - 8388608.0f;  // round-to-nearest-even in fp32
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(r));
  }
  // normal: rebias exponent and round mantissa to 10 bits, nearest even
  uint32_t mant_odd = (absx >> 13) & 1u;
  absx += 0xc8000fffu + mant_odd;  // (-112 << 23) + rounding bias
  return static_cast<uint16_t>(sign | (absx >> 13));
}

// dst[i] = f32_to_f16(src[i]) for n values, the same bits; with F16C (checked at
// run time) 8 values per instruction, groups holding a NaN converted one by one.
void f32_to_f16_array(const float* src, uint16_t* dst, int64_t n);

inline float bf16_to_f32(uint16_t b) { return bits_to_float(static_cast<uint32_t>(b) << 16); }

inline uint16_t f32_to_bf16(float f) {
  uint32_t x = float_to_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 64);  // quiet nan
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace sluice
