// AVX2 kernel for Q8_0 weights x ActQ8x64 activations, 8 rows per ymm (Q8_0x8
// records, repack.h; GGUF rows are staged into them). Tiling and the
// quant_rows_* contract as in quant_matmul_avx2.cpp. Compiled for AVX2 only:
// everything here has internal linkage except the quant_rows_* functions.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/quant_matmul.h"
#include "backend/cpu/quant_tile_avx2.h"
#include "backend/cpu/repack.h"
#include "base/check.h"
#include "quant/blocks.h"

namespace sluice::cpu {
namespace {

// ---------------------------------------------------------------- Q8_0 (x8) --
//
// Q8_0 at this level holds one row per int32 lane: 8 rows side by side in the
// record layout of repack.h (Q8_0x8). Chunk k of a record holds 4 weight bytes
// of each of the 8 rows; the same 4 activation bytes, broadcast, meet them in
// one maddubs (|w| times q with w's sign, so each pair stays within int16:
// 2 * 128 * 127 < 2^15), and one madd with 1 adds the pair sums of a row:
//
//   isum(r, t, b) = sum over k = 0..7 of lane r of
//                   madd(maddubs(|chunk k|, sign(q(t, b)[4k .. 4k+3], chunk k)), 1)
//   acc(r, t)     = fma(float(isum), wd(r, b) * ad(t, b), acc(r, t)),  b = 0, 1, ...
//
// so a block's dot product is exact in integers and each (row, token) takes one
// float update per block, in block order. Against one row per vector (lanes of
// partial sums, a float update per row, token and block) this takes about half
// the vector operations per product: sign, maddubs, madd and add for 8 rows x 4
// elements, where that took them for 1 row x 32 elements plus a convert and two
// float operations (Zen 3, 16 tokens at n_in 768: 0.7 against 1.25 ns per
// 32-element block and (row, token), one thread). Repacked weights are read as
// they are; GGUF rows are staged into the same records on the stack, a run of
// blocks at a time, with acc carried through y between runs, so both layouts take
// exactly these operations per (row, token).

constexpr int kX8Toks = 4;              // tokens per tile: 4 int + 4 float accumulators
constexpr int64_t kStageBlocks = 32;    // blocks of 8 GGUF rows staged at a time (8.5 KiB)

struct X8Tile {
  const uint8_t* rec;  // record of block b0 of the 8 rows
  int64_t b0, b1;      // blocks [b0, b1)
  const uint8_t* xa;   // token t0's activations
  size_t xa_stride;
  float* y;            // y of token t0, row r
  int64_t y_stride;
  int nr;              // rows of the group that exist (1..8)
  const uint8_t* next; // records to ask into L2 alongside these (the next group's), or null
};

// Lanes r of chunk `w` (4 bytes of each of 8 rows) times the 4 bytes at q, the
// pairs summed: the int32 lane r = sum over e < 4 of w(r, e) * q[e].
__m256i x8_chunk_dot(const uint8_t* w, const int8_t* q, __m256i ones) {
  const __m256i wv = loadu256(w);
  int32_t q4;
  std::memcpy(&q4, q, 4);
  const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(wv), _mm256_sign_epi8(_mm256_set1_epi32(q4), wv));
  return _mm256_madd_epi16(p, ones);
}

template <int NT>
void x8_tile(const X8Tile& a, bool first) {
  const __m256i lanes = _mm256_cmpgt_epi32(_mm256_set1_epi32(a.nr), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  __m256 acc[NT];
#pragma GCC unroll 8
  for (int j = 0; j < NT; ++j)
    acc[j] = first ? _mm256_setzero_ps() : _mm256_maskload_ps(a.y + j * a.y_stride, lanes);
  const __m256i ones = _mm256_set1_epi16(1);
  const uint8_t* rec = a.rec;
  const uint8_t* next = a.next;
  for (int64_t b = a.b0; b < a.b1; ++b, rec += kQ8_0x8RecordBytes) {
    if (next != nullptr) {  // 5 lines a record: over consecutive records, every line
      for (size_t c = 0; c < kQ8_0x8RecordBytes; c += 64) _mm_prefetch(reinterpret_cast<const char*>(next + c), _MM_HINT_T1);
      next += kQ8_0x8RecordBytes;
    }
    const int h = static_cast<int>(b & 1);
    const int8_t* q[NT];
    __m256i s[NT];
#pragma GCC unroll 8
    for (int j = 0; j < NT; ++j) {
      q[j] = reinterpret_cast<const ActQ8x64*>(a.xa + j * a.xa_stride)[b >> 1].q + 32 * h;
      s[j] = _mm256_setzero_si256();
    }
    if constexpr (NT == 1) {
      // One token: two independent chains (integer sums, so the split is exact).
      __m256i s1 = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int k = 0; k < 8; k += 2) {
        s[0] = _mm256_add_epi32(s[0], x8_chunk_dot(rec + 16 + 32 * k, q[0] + 4 * k, ones));
        s1 = _mm256_add_epi32(s1, x8_chunk_dot(rec + 48 + 32 * k, q[0] + 4 * k + 4, ones));
      }
      s[0] = _mm256_add_epi32(s[0], s1);
    } else {
      // Not unrolled: unrolled, GCC sums the 8 x NT products as a tree and spills them.
#pragma GCC unroll 1
      for (int k = 0; k < 8; ++k) {
        const __m256i w = loadu256(rec + 16 + 32 * k);
        const __m256i wabs = _mm256_abs_epi8(w);
#pragma GCC unroll 8
        for (int j = 0; j < NT; ++j) {
          int32_t qk;
          std::memcpy(&qk, q[j] + 4 * k, 4);
          const __m256i p = _mm256_maddubs_epi16(wabs, _mm256_sign_epi8(_mm256_set1_epi32(qk), w));
          s[j] = _mm256_add_epi32(s[j], _mm256_madd_epi16(p, ones));
        }
      }
    }
    const __m256 wd = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec)));
#pragma GCC unroll 8
    for (int j = 0; j < NT; ++j) {
      const float ad = reinterpret_cast<const ActQ8x64*>(a.xa + j * a.xa_stride)[b >> 1].d[8 * h];
      acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[j]), _mm256_mul_ps(wd, _mm256_set1_ps(ad)), acc[j]);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < NT; ++j) {
    if (a.nr == kX8Rows)
      _mm256_storeu_ps(a.y + j * a.y_stride, acc[j]);
    else
      _mm256_maskstore_ps(a.y + j * a.y_stride, lanes, acc[j]);
  }
}

void x8_tile_any(const X8Tile& a, int nt, bool first) {
  static constexpr void (*kTable[kX8Toks])(const X8Tile&, bool) = {x8_tile<1>, x8_tile<2>, x8_tile<3>,
                                                                    x8_tile<4>};
  kTable[nt - 1](a, first);
}

// Tokens per chunk: their activations stay in L2 while every row group passes.
int64_t x8_chunk(const Args& a) {
  const int64_t chunk = static_cast<int64_t>(Avx2Tiles::kChunkActBytes / (a.xa_stride ? a.xa_stride : 1));
  return chunk < kX8Toks ? kX8Toks : chunk / kX8Toks * kX8Toks;
}

// Rows [r0, r1) (multiples of 8) of a Q8_0x8 matrix.
void rows_q8_0x8(const Args& a, int64_t n_tok, int64_t r0, int64_t r1) {
  const int64_t n_blocks = a.n_in / 32;
  const int64_t chunk = x8_chunk(a);
  for (int64_t t0 = 0; t0 < n_tok; t0 += chunk) {
    const int64_t t1 = std::min(n_tok, t0 + chunk);
    for (int64_t r = r0; r < r1; r += kX8Rows)
      for (int64_t t = t0; t < t1; t += kX8Toks) {
        // The second token tile over a group, which reads it from cache, asks for
        // the next group's records, so that its first tile finds them in L2.
        const bool ask_next = t == t0 + kX8Toks && r + kX8Rows < r1;
        const X8Tile tile{.rec = a.w + r * a.w_row_bytes, .b0 = 0, .b1 = n_blocks, .xa = a.xa + t * a.xa_stride,
                          .xa_stride = a.xa_stride, .y = a.y + t * a.y_stride + r, .y_stride = a.y_stride,
                          .nr = kX8Rows, .next = ask_next ? a.w + (r + kX8Rows) * a.w_row_bytes : nullptr};
        x8_tile_any(tile, static_cast<int>(std::min<int64_t>(kX8Toks, t1 - t)), true);
      }
  }
}

// Blocks [b0, b1) of GGUF rows [r, r + nr) -> Q8_0x8 records (rows past nr read
// nothing and hold zero). Per block, an 8 x 8 transpose of dwords:
//
//   in:   v[i] = [ row i: dwords 0..7 ]
//   out:  chunk k = [ dword k of rows 0..7 ]
void x8_stage(const Args& a, int64_t r, int nr, int64_t b0, int64_t b1, uint8_t* out) {
  const uint8_t* row[kX8Rows];
  for (int i = 0; i < kX8Rows; ++i) row[i] = i < nr ? a.w + (r + i) * a.w_row_bytes : nullptr;
  uint8_t* rec = out;
  for (int64_t b = b0; b < b1; ++b, rec += kQ8_0x8RecordBytes) {
    const size_t at = static_cast<size_t>(b) * sizeof(BlockQ8_0);
    uint16_t d[kX8Rows];
    __m256i v[kX8Rows];
    for (int i = 0; i < kX8Rows; ++i) {
      d[i] = 0;
      v[i] = _mm256_setzero_si256();
      if (row[i] != nullptr) {
        std::memcpy(&d[i], row[i] + at, 2);
        v[i] = loadu256(row[i] + at + 2);
      }
    }
    std::memcpy(rec, d, sizeof(d));
    __m256i t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
      t[i] = _mm256_unpacklo_epi32(v[i], v[i + 1]);      // [i,i+1: d0 d1 | d4 d5]
      t[i + 1] = _mm256_unpackhi_epi32(v[i], v[i + 1]);  // [i,i+1: d2 d3 | d6 d7]
    }
    for (int i = 0; i < 8; i += 4) {
      u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);          // dword 0 | 4 of rows i..i+3
      u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);      // dword 1 | 5
      u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);  // dword 2 | 6
      u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);  // dword 3 | 7
    }
    for (int k = 0; k < 4; ++k) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(rec + 16 + 32 * k), _mm256_permute2x128_si256(u[k], u[k + 4], 0x20));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(rec + 16 + 32 * (k + 4)),
                          _mm256_permute2x128_si256(u[k], u[k + 4], 0x31));
    }
  }
}

// Rows [r0, r1) (any) of a Q8_0 matrix in GGUF rows: the same tiles on staged records.
void rows_q8_0(const Args& a, int64_t n_tok, int64_t r0, int64_t r1) {
  const int64_t n_blocks = a.n_in / 32;
  alignas(64) uint8_t stage[kStageBlocks * kQ8_0x8RecordBytes];
  const int64_t chunk = x8_chunk(a);
  for (int64_t t0 = 0; t0 < n_tok; t0 += chunk) {
    const int64_t t1 = std::min(n_tok, t0 + chunk);
    for (int64_t r = r0; r < r1; r += kX8Rows) {
      const int nr = static_cast<int>(std::min<int64_t>(kX8Rows, r1 - r));
      for (int64_t b0 = 0; b0 < n_blocks; b0 += kStageBlocks) {
        const int64_t b1 = std::min(n_blocks, b0 + kStageBlocks);
        x8_stage(a, r, nr, b0, b1, stage);
        for (int64_t t = t0; t < t1; t += kX8Toks) {
          const X8Tile tile{.rec = stage, .b0 = b0, .b1 = b1, .xa = a.xa + t * a.xa_stride, .xa_stride = a.xa_stride,
                            .y = a.y + t * a.y_stride + r, .y_stride = a.y_stride, .nr = nr, .next = nullptr};
          x8_tile_any(tile, static_cast<int>(std::min<int64_t>(kX8Toks, t1 - t)), b0 == 0);
        }
      }
    }
  }
}

}  // namespace

void quant_rows_q8_0_avx2(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                          size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0,
                          int64_t r1) {
  rows_q8_0(Args{.w = w, .w_row_bytes = w_row_bytes, .n_in = n_in, .xa = xa, .xa_stride = xa_stride, .y = y,
                 .y_stride = y_stride},
            n_tok, r0, r1);
}

void quant_rows_q8_0x8_avx2(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                            size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0,
                            int64_t r1) {
  CHECK(n_in % 32 == 0 && r0 % kX8Rows == 0 && r1 % kX8Rows == 0);
  rows_q8_0x8(Args{.w = w, .w_row_bytes = w_row_bytes, .n_in = n_in, .xa = xa, .xa_stride = xa_stride, .y = y,
                   .y_stride = y_stride},
              n_tok, r0, r1);
}

}  // namespace sluice::cpu
