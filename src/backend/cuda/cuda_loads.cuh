// Reading quantized blocks on the device: the loads of the sizes and
// alignments GGUF blocks come in, the f16 scale, IQ4's codebook lookup, and
// 2-aligned spans read as aligned words. Shared by the float decoders
// (cuda_dequant.cuh) and the 8-bit-activation kernels (cuda_q8_blocks.cuh,
// cuda_dp4a_formats.cuh). Included by .cu files only.
#pragma once

#include <cstdint>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "quant/blocks_more.h"

namespace sluice::cuda {

__device__ __forceinline__ uint32_t ld8(const uint8_t* p) { return __ldg(p); }
__device__ __forceinline__ uint32_t ld16(const uint8_t* p) { return __ldg(reinterpret_cast<const uint16_t*>(p)); }
__device__ __forceinline__ uint32_t ld32(const uint8_t* p) { return __ldg(reinterpret_cast<const uint32_t*>(p)); }
// 4 bytes at a 2-aligned address.
__device__ __forceinline__ uint32_t ld32_a2(const uint8_t* p) { return ld16(p) | ld16(p + 2) << 16; }
__device__ __forceinline__ float f16(uint32_t bits) { return __half2float(__ushort_as_half(static_cast<uint16_t>(bits))); }
// Byte k of w as int8.
__device__ __forceinline__ float s8(uint32_t w, int k) { return static_cast<float>(static_cast<int8_t>(w >> (8 * k))); }

// Bits 0..3 of b to bit 0 of bytes 0..3 (the four shifted copies do not
// overlap): Q5_0 / Q5_1's fifth bits beside their nibbles.
__device__ __forceinline__ uint32_t bits_to_bytes(uint32_t b) { return ((b & 15u) * 0x00204081u) & 0x01010101u; }

// Byte i (0..11) of the 12 bytes w0 w1 w2 (little-endian).
__device__ __forceinline__ uint32_t byte12(uint32_t w0, uint32_t w1, uint32_t w2, int i) {
  return __byte_perm(i < 4 ? w0 : (i < 8 ? w1 : w2), 0, 0x4440 | (i & 3));
}
// The 6-bit scale (x) and min (y) of sub-block s (0..7) of a Q4_K / Q5_K
// super-block from its 12 bytes of scales w0 w1 w2 (quant/blocks.h's
// q4_k_scale_min).
__device__ __forceinline__ uint2 k_scale_min(uint32_t w0, uint32_t w1, uint32_t w2, int s) {
  const uint32_t a = byte12(w0, w1, w2, s), b = byte12(w0, w1, w2, s ^ 4);
  if (s < 4) return {a & 63, b & 63};
  const uint32_t e = byte12(w0, w1, w2, 8 + (s & 3));
  return {(e & 15) | ((b >> 6) << 4), (e >> 4) | ((a >> 6) << 4)};
}

// kIq4NlValues as 4 little-endian words of int8.
constexpr uint32_t iq4_word(int i) {
  uint32_t w = 0;
  for (int k = 0; k < 4; ++k) w |= static_cast<uint32_t>(static_cast<uint8_t>(kIq4NlValues[4 * i + k])) << (8 * k);
  return w;
}
// Codebook values of 4 indices (the low nibble of each byte of idx, high nibbles
// zero), as 4 int8 in a word: two byte permutes over the 16-byte table, picked
// per byte by bit 3 of the index. No memory access.
__device__ __forceinline__ uint32_t iq4_lookup4(uint32_t idx) {
  const uint32_t t = idx & 0x07070707u;
  const uint32_t u = t | (t >> 4);                  // byte 0: i0 | i1 << 4, byte 2: i2 | i3 << 4
  const uint32_t sel = (u & 0xffu) | ((u >> 8) & 0xff00u);  // 4 selector nibbles, bit 3 clear
  const uint32_t lo = __byte_perm(iq4_word(0), iq4_word(1), sel);
  const uint32_t hi = __byte_perm(iq4_word(2), iq4_word(3), sel);
  const uint32_t mask = ((idx >> 3) & 0x01010101u) * 0xffu;
  return (lo & ~mask) | (hi & mask);
}

// 4N bytes at a 2-aligned address p, as the aligned words around them: the
// N + 1 words from p rounded down to 4. word(i, sel) is bytes 4i .. 4i + 3 of
// the span, sel = a2_sel(p): one selector serves every span of a block at a
// multiple of 4 bytes from p. The last word reaches 4 bytes past the span
// when p is 4-aligned (2 when it is not), so those must lie in the matrix;
// with kTight it is read only when p is 2 past a boundary (a predicated load
// that costs registers: for a span at the end of a block).
template <int N>
struct WordsA2 {
  uint32_t w[N + 1];
  __device__ __forceinline__ uint32_t word(int i, uint32_t sel) const { return __byte_perm(w[i], w[i + 1], sel); }
};
__device__ __forceinline__ bool is_2_past(const uint8_t* p) { return (reinterpret_cast<uintptr_t>(p) & 2) != 0; }
__device__ __forceinline__ uint32_t a2_sel(const uint8_t* p) { return is_2_past(p) ? 0x5432u : 0x3210u; }
template <int N, bool kTight = false>
__device__ __forceinline__ WordsA2<N> load_words_a2(const uint8_t* p) {
  const uint32_t* a = reinterpret_cast<const uint32_t*>(p - (reinterpret_cast<uintptr_t>(p) & 2));
  WordsA2<N> r;
#pragma unroll
  for (int i = 0; i < N; ++i) r.w[i] = __ldg(a + i);
  r.w[N] = !kTight || is_2_past(p) ? __ldg(a + N) : 0u;
  return r;
}

}  // namespace sluice::cuda
