// __half and __nv_bfloat16 for sluice's CUDA emulator: 16-bit storage with
// the device's conversions (round to nearest even; NaN stays NaN).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace sluice_emu {

inline float f16_bits_to_float(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: man x 2^-24
    const float f = std::ldexp(static_cast<float>(man), -24);
    std::memcpy(&bits, &f, 4);
    bits |= sign;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t float_to_f16_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to infinity
  if (ax < 0x38800000u) {  // below the smallest normal: a multiple of 2^-24, ties to even
    float a;
    std::memcpy(&a, &ax, 4);
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(std::ldexp(a, 24))));
  }
  const uint32_t lsb = (ax >> 13) & 1u;
  const uint32_t r = ax + 0xfffu + lsb;  // round the 13 dropped bits to nearest even
  return static_cast<uint16_t>(sign | ((r - (112u << 23)) >> 13));
}

inline float bf16_bits_to_float(uint16_t h) {
  const uint32_t bits = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t float_to_bf16_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN, quiet
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace sluice_emu

struct __half {
  uint16_t bits_;
  __half() = default;
  __half(float f) : bits_(::sluice_emu::float_to_f16_bits(f)) {}
  operator float() const { return ::sluice_emu::f16_bits_to_float(bits_); }
};
struct alignas(4) __half2 { __half x, y; };
using half = __half;
using half2 = __half2;

struct __nv_bfloat16 {
  uint16_t bits_;
  __nv_bfloat16() = default;
  __nv_bfloat16(float f) : bits_(::sluice_emu::float_to_bf16_bits(f)) {}
  operator float() const { return ::sluice_emu::bf16_bits_to_float(bits_); }
};
struct alignas(4) __nv_bfloat162 { __nv_bfloat16 x, y; };

inline float __half2float(__half h) { return ::sluice_emu::f16_bits_to_float(h.bits_); }
inline __half __float2half(float f) { __half h; h.bits_ = ::sluice_emu::float_to_f16_bits(f); return h; }
inline __half __float2half_rn(float f) { return __float2half(f); }
inline __half __ushort_as_half(unsigned short u) { __half h; h.bits_ = u; return h; }
inline unsigned short __half_as_ushort(__half h) { return h.bits_; }
inline __half2 __floats2half2_rn(float a, float b) { return {__float2half(a), __float2half(b)}; }
inline float __low2float(__half2 h) { return __half2float(h.x); }
inline float __high2float(__half2 h) { return __half2float(h.y); }

inline float __bfloat162float(__nv_bfloat16 h) { return ::sluice_emu::bf16_bits_to_float(h.bits_); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  __nv_bfloat16 h;
  h.bits_ = ::sluice_emu::float_to_bf16_bits(f);
  return h;
}
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { __nv_bfloat16 h; h.bits_ = u; return h; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.bits_; }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__float2bfloat16_rn(a), __float2bfloat16_rn(b)}; }
