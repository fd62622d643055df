// AVX2 kernels for Q8_0 and Q4_0 weights x ActQ8x64 activations, 8 rows per ymm
// (the Q8_0x8 and Q4_0x8 records of repack.h; GGUF rows are staged into them).
// Tiling and the quant_rows_* contract as in quant_rows256_avx2.cpp. Compiled for
// AVX2 only: everything here has internal linkage except the quant_rows_*
// functions.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/quant_rows.h"
#include "backend/cpu/quant_tile_avx2.h"
#include "backend/cpu/repack.h"
#include "base/check.h"
#include "quant/blocks.h"

namespace sluice::cpu {
namespace {

// Both types hold one row per int32 lane: 8 rows side by side, one record per
// block. A chunk of a record holds 4 weights of each of the 8 rows; the same 4
// activation bytes, broadcast, meet them in one maddubs, so a block's dot
// product is summed exactly in integers for 8 rows at once:
//
//   Q8_0  isum(r, t, b) = sum over k < 8 of lane r of
//                         madd(maddubs(|chunk k|, sign(q(t, b)[4k .. 4k+3], chunk k)), 1)
//         (|w| times q with w's sign keeps each pair within int16: 2 * 128 * 127 < 2^15)
//   Q4_0  isum(r, t, b) = corr(t, b) + lane r of madd(sum over k < 8 of
//                         maddubs(nibbles k, q(t, b)[4k .. 4k+3]), 1)
//         (a pair is at most 2 * 15 * 127, so the 8 chunks' pairs add up in
//         int16: 8 * 3810 < 2^15; corr(t, b) = -8 * sum of q(t, b) is the
//         nibbles' offset, the sum of the block's ActQ8x64 lane corrections)
//
//   acc(r, t) = fma(float(isum), wd(r, b) * ad(t, b), acc(r, t)),  b = 0, 1, ...
//
// so each (row, token) takes one float update per block, in block order.
// Against one row per vector (lanes of partial sums, a float update per row,
// token and block) this takes about half the vector operations per product
// (Q8_0, Zen 3, 16 tokens at n_in 768, one thread: 0.56-0.67 against 0.93-1.0 ns
// per 32-element block and (row, token)). Repacked weights are read as they
// are; GGUF rows are staged into the same records on the stack, a run of blocks
// at a time, with acc carried through y between runs, so both layouts take
// exactly these operations per (row, token).

constexpr int kX8Toks = 4;            // tokens per tile: 4 int + 4 float accumulators
constexpr int64_t kStageBlocks = 32;  // blocks of 8 GGUF rows staged at a time (8.5 KiB for Q8_0)
constexpr int kCorrInts = 8192;       // Q4_0's corr(t, b) of one token chunk, on the stack

// The start of staging block `at` (bytes into each row) of 8 GGUF rows: the 8
// f16 scales (0 for an absent row) to rec[0..16), and v[i] = load(row i's
// quants just past its scale), zeros for an absent row.
template <typename Vec, class Load>
void stage_scales(const uint8_t* const (&row)[kX8Rows], size_t at, uint8_t* rec, Vec (&v)[kX8Rows], Load load) {
  uint16_t d[kX8Rows];
  for (int i = 0; i < kX8Rows; ++i) {
    d[i] = 0;
    v[i] = Vec{};
    if (row[i] != nullptr) {
      std::memcpy(&d[i], row[i] + at, 2);
      v[i] = load(row[i] + at + 2);
    }
  }
  std::memcpy(rec, d, sizeof(d));
}

int32_t load4(const int8_t* q) {
  int32_t v;
  std::memcpy(&v, q, 4);
  return v;
}

// ------------------------------------------------------------------ Q8_0x8 --

struct Q8_0x8 {
  static constexpr size_t kRecordBytes = kQ8_0x8RecordBytes;
  static constexpr bool kCorr = false;

  // Lanes r of chunk `w` times the 4 bytes at q, pairs summed (int32).
  static __m256i chunk_dot(const uint8_t* w, const int8_t* q, __m256i ones) {
    const __m256i wv = loadu256(w);
    const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(wv), _mm256_sign_epi8(_mm256_set1_epi32(load4(q)), wv));
    return _mm256_madd_epi16(p, ones);
  }

  // s[j] = isum of the record at rec with token j's 32 activations q[j].
  template <int NT>
  static void block(const uint8_t* rec, const int8_t* const (&q)[NT], __m256i (&s)[NT]) {
    const __m256i ones = _mm256_set1_epi16(1);
    if constexpr (NT == 1) {
      // One token: two independent chains (integer sums, so the split is exact).
      __m256i s1 = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int k = 0; k < 8; k += 2) {
        s[0] = _mm256_add_epi32(s[0], chunk_dot(rec + 16 + 32 * k, q[0] + 4 * k, ones));
        s1 = _mm256_add_epi32(s1, chunk_dot(rec + 48 + 32 * k, q[0] + 4 * k + 4, ones));
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
          const __m256i p = _mm256_maddubs_epi16(wabs, _mm256_sign_epi8(_mm256_set1_epi32(load4(q[j] + 4 * k)), w));
          s[j] = _mm256_add_epi32(s[j], _mm256_madd_epi16(p, ones));
        }
      }
    }
  }

  // One GGUF block (at blk) times the block's 32 activations xq: 8 int32 lanes
  // whose sum is the block's isum (lane l: elements 4l .. 4l+3).
  static __m256i row_dot(const uint8_t* blk, __m256i xq, __m256i ones) {
    const __m256i w = loadu256(blk + 2);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(xq, w)), ones);
  }

  // Block b of 8 GGUF rows (null: absent, zero) -> one record. An 8 x 8
  // transpose of dwords: v[i] = row i's dwords 0..7; chunk k = dword k of rows 0..7.
  static void stage(const uint8_t* const (&row)[kX8Rows], size_t at, uint8_t* rec) {
    __m256i v[kX8Rows];
    stage_scales(row, at, rec, v, [](const uint8_t* qs) { return loadu256(qs); });
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
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(rec + 16 + 32 * k),
                          _mm256_permute2x128_si256(u[k], u[k + 4], 0x20));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(rec + 16 + 32 * (k + 4)),
                          _mm256_permute2x128_si256(u[k], u[k + 4], 0x31));
    }
  }
};

// ------------------------------------------------------------------ Q4_0x8 --

struct Q4_0x8 {
  static constexpr size_t kRecordBytes = kQ4_0x8RecordBytes;
  static constexpr bool kCorr = true;

  // The int16 pair sums of chunk c (elements 4c.. low nibbles, 16 + 4c.. high).
  static __m256i chunk_pairs(const uint8_t* rec, int c, const int8_t* q, __m256i nib) {
    const __m256i v = loadu256(rec + 16 + 32 * c);
    const __m256i lo = _mm256_and_si256(v, nib), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
    return _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_set1_epi32(load4(q + 4 * c))),
                            _mm256_maddubs_epi16(hi, _mm256_set1_epi32(load4(q + 16 + 4 * c))));
  }

  // s[j] (holding corr(t_j, b) on entry) += the nibbles' products with q[j].
  template <int NT>
  static void block(const uint8_t* rec, const int8_t* const (&q)[NT], __m256i (&s)[NT]) {
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i nib = _mm256_set1_epi8(0x0F);
    __m256i p[NT];
    if constexpr (NT == 1) {
      __m256i p1 = chunk_pairs(rec, 1, q[0], nib);
      p[0] = _mm256_add_epi16(chunk_pairs(rec, 0, q[0], nib), chunk_pairs(rec, 2, q[0], nib));
      p1 = _mm256_add_epi16(p1, chunk_pairs(rec, 3, q[0], nib));
      p[0] = _mm256_add_epi16(p[0], p1);
    } else {
#pragma GCC unroll 8
      for (int j = 0; j < NT; ++j) p[j] = _mm256_setzero_si256();
#pragma GCC unroll 1
      for (int c = 0; c < 4; ++c) {
        const __m256i v = loadu256(rec + 16 + 32 * c);
        const __m256i lo = _mm256_and_si256(v, nib), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
#pragma GCC unroll 8
        for (int j = 0; j < NT; ++j) {
          const __m256i pl = _mm256_maddubs_epi16(lo, _mm256_set1_epi32(load4(q[j] + 4 * c)));
          const __m256i ph = _mm256_maddubs_epi16(hi, _mm256_set1_epi32(load4(q[j] + 16 + 4 * c)));
          p[j] = _mm256_add_epi16(p[j], _mm256_add_epi16(pl, ph));
        }
      }
    }
#pragma GCC unroll 8
    for (int j = 0; j < NT; ++j) s[j] = _mm256_add_epi32(s[j], _mm256_madd_epi16(p[j], ones));
  }

  // As Q8_0x8::row_dot; the lanes' sum lacks corr(t, b).
  static __m256i row_dot(const uint8_t* blk, __m256i xq, __m256i ones) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
    const __m256i n = _mm256_and_si256(_mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1),
                                       _mm256_set1_epi8(0x0F));  // [elements 0..15 | 16..31]
    return _mm256_madd_epi16(_mm256_maddubs_epi16(n, xq), ones);
  }

  // Block b of 8 GGUF rows (null: absent, zero) -> one record. Row i's chunk c
  // is its qs[4c .. 4c+3] (GGUF puts element e < 16 in the low nibble of qs[e]
  // and 16 + e in the high one), so a 4 x 8 transpose of dwords, done as two
  // 4 x 4 ones: v[i] = [row i | row i + 4]; chunk c = [dword c of rows 0..3 | 4..7].
  static void stage(const uint8_t* const (&row)[kX8Rows], size_t at, uint8_t* rec) {
    __m128i x[kX8Rows];
    stage_scales(row, at, rec, x, [](const uint8_t* qs) { return loadu128(qs); });
    __m256i v[4];
    for (int i = 0; i < 4; ++i) v[i] = _mm256_inserti128_si256(_mm256_castsi128_si256(x[i]), x[i + 4], 1);
    const __m256i t0 = _mm256_unpacklo_epi32(v[0], v[1]), t1 = _mm256_unpackhi_epi32(v[0], v[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(v[2], v[3]), t3 = _mm256_unpackhi_epi32(v[2], v[3]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(rec + 16), _mm256_unpacklo_epi64(t0, t2));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(rec + 48), _mm256_unpackhi_epi64(t0, t2));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(rec + 80), _mm256_unpacklo_epi64(t1, t3));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(rec + 112), _mm256_unpackhi_epi64(t1, t3));
  }
};

// ---------------------------------------------------------------- the tiles --

struct X8Tile {
  const uint8_t* rec;    // record of block b0 of the 8 rows
  int64_t b0, b1;        // blocks [b0, b1)
  const uint8_t* xa;     // token t0's activations
  size_t xa_stride;
  const int32_t* corr;   // Q4_0: corr of token t0, [n_tok][n_blocks] from block 0
  int64_t n_blocks;
  float* y;              // y of token t0, row r
  int64_t y_stride;
  int nr;                // rows of the group that exist (1..8)
  const uint8_t* next;   // records to ask into L2 alongside these (the next group's), or null
};

template <class P, int NT>
void x8_tile(const X8Tile& a, bool first) {
  const __m256i lanes = _mm256_cmpgt_epi32(_mm256_set1_epi32(a.nr), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  __m256 acc[NT];
#pragma GCC unroll 8
  for (int j = 0; j < NT; ++j)
    acc[j] = first ? _mm256_setzero_ps() : _mm256_maskload_ps(a.y + j * a.y_stride, lanes);
  const uint8_t* rec = a.rec;
  const uint8_t* next = a.next;
  for (int64_t b = a.b0; b < a.b1; ++b, rec += P::kRecordBytes) {
    if (next != nullptr) {  // one line per 64 bytes: over consecutive records, every line
      for (size_t c = 0; c < P::kRecordBytes; c += 64) _mm_prefetch(reinterpret_cast<const char*>(next + c), _MM_HINT_T1);
      next += P::kRecordBytes;
    }
    const int h = static_cast<int>(b & 1);
    const int8_t* q[NT];
    __m256i s[NT];
#pragma GCC unroll 8
    for (int j = 0; j < NT; ++j) {
      q[j] = reinterpret_cast<const ActQ8x64*>(a.xa + j * a.xa_stride)[b >> 1].q + 32 * h;
      s[j] = P::kCorr ? _mm256_set1_epi32(a.corr[j * a.n_blocks + b]) : _mm256_setzero_si256();
    }
    P::template block<NT>(rec, q, s);
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

template <class P>
void x8_tile_any(const X8Tile& a, int nt, bool first) {
  static constexpr void (*kTable[kX8Toks])(const X8Tile&, bool) = {x8_tile<P, 1>, x8_tile<P, 2>, x8_tile<P, 3>,
                                                                    x8_tile<P, 4>};
  kTable[nt - 1](a, first);
}

// Tokens per chunk: their activations stay in L2 while every row group passes,
// and Q4_0's corr fits its stack buffer.
template <class P>
int64_t x8_chunk(const Args& a, int64_t n_blocks) {
  int64_t chunk = static_cast<int64_t>(Avx2Tiles::kChunkActBytes / (a.xa_stride ? a.xa_stride : 1));
  if (P::kCorr) {
    CHECK(n_blocks <= kCorrInts);
    chunk = std::min<int64_t>(chunk, kCorrInts / n_blocks);
  }
  return chunk < 1 ? 1 : chunk;
}

// corr(t, b) for tokens [t0, t1): the sum of block b's 8 lane corrections.
void block_corr(const Args& a, int64_t n_blocks, int64_t t0, int64_t t1, int32_t* corr) {
  for (int64_t t = t0; t < t1; ++t) {
    const auto* x = reinterpret_cast<const ActQ8x64*>(a.xa + t * a.xa_stride);
    int32_t* c = corr + (t - t0) * n_blocks;
    for (int64_t b = 0; b < n_blocks; ++b) {
      const __m256i v = loadu256(x[b >> 1].corr + 8 * (b & 1));
      const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
      const __m128i s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
      c[b] = _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32(s2, 1)));
    }
  }
}

// Rows [r0, r1) (multiples of 8) of a matrix of P records.
template <class P>
void rows_x8(const Args& a, int64_t n_tok, int64_t r0, int64_t r1) {
  const int64_t n_blocks = a.n_in / 32;
  int32_t corr[P::kCorr ? kCorrInts : 1];
  const int64_t chunk = x8_chunk<P>(a, n_blocks);
  for (int64_t t0 = 0; t0 < n_tok; t0 += chunk) {
    const int64_t t1 = std::min(n_tok, t0 + chunk);
    if (P::kCorr) block_corr(a, n_blocks, t0, t1, corr);
    for (int64_t r = r0; r < r1; r += kX8Rows)
      for (int64_t t = t0; t < t1; t += kX8Toks) {
        // The second token tile over a group, which reads it from cache, asks for
        // the next group's records, so that its first tile finds them in L2.
        const bool ask_next = t == t0 + kX8Toks && r + kX8Rows < r1;
        const X8Tile tile{.rec = a.w + r * a.w_row_bytes, .b0 = 0, .b1 = n_blocks, .xa = a.xa + t * a.xa_stride,
                          .xa_stride = a.xa_stride, .corr = P::kCorr ? corr + (t - t0) * n_blocks : nullptr, .n_blocks = n_blocks,
                          .y = a.y + t * a.y_stride + r, .y_stride = a.y_stride, .nr = kX8Rows,
                          .next = ask_next ? a.w + (r + kX8Rows) * a.w_row_bytes : nullptr};
        x8_tile_any<P>(tile, static_cast<int>(std::min<int64_t>(kX8Toks, t1 - t)), true);
      }
  }
}

// [sum of the lanes of v[0], ..., of v[7]] (integers: the order is free).
__m256i lane_sums8(const __m256i (&v)[kX8Rows]) {
  const __m256i h01 = _mm256_hadd_epi32(v[0], v[1]), h23 = _mm256_hadd_epi32(v[2], v[3]);
  const __m256i h45 = _mm256_hadd_epi32(v[4], v[5]), h67 = _mm256_hadd_epi32(v[6], v[7]);
  const __m256i lo = _mm256_hadd_epi32(h01, h23);  // [rows 0..3: lanes 0..3 | lanes 4..7]
  const __m256i hi = _mm256_hadd_epi32(h45, h67);  // rows 4..7
  return _mm256_add_epi32(_mm256_permute2x128_si256(lo, hi, 0x20), _mm256_permute2x128_si256(lo, hi, 0x31));
}

// One token over GGUF rows [r0, r1) (any): staging 8 rows into a record costs
// as much as the record's products with one token, so decode sums each row's
// block in its own vector and folds the 8 rows' lanes into one vector of block
// sums (lane_sums8). The same isum(r, t, b) and float update per block as the
// tiles, so the same bits.
template <class P>
void gemv_gguf(const Args& a, size_t block_bytes, int64_t r0, int64_t r1) {
  const int64_t n_blocks = a.n_in / 32;
  int32_t corr[P::kCorr ? kCorrInts : 1];
  if (P::kCorr) {
    CHECK(n_blocks <= kCorrInts);
    block_corr(a, n_blocks, 0, 1, corr);
  }
  const auto* x = reinterpret_cast<const ActQ8x64*>(a.xa);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t r = r0; r < r1; r += kX8Rows) {
    const int nr = static_cast<int>(std::min<int64_t>(kX8Rows, r1 - r));
    const uint8_t* row[kX8Rows];
    for (int i = 0; i < kX8Rows; ++i) row[i] = a.w + (r + (i < nr ? i : 0)) * a.w_row_bytes;
    const __m256i lanes = _mm256_cmpgt_epi32(_mm256_set1_epi32(nr), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n_blocks; ++b) {
      const size_t at = static_cast<size_t>(b) * block_bytes;
      const int h = static_cast<int>(b & 1);
      const __m256i xq = loadu256(x[b >> 1].q + 32 * h);
      __m256i v[kX8Rows];
      for (int i = 0; i < kX8Rows; ++i) v[i] = P::row_dot(row[i] + at, xq, ones);  // rows past nr repeat row 0
      __m256i isum = lane_sums8(v);
      if (P::kCorr) isum = _mm256_add_epi32(isum, _mm256_set1_epi32(corr[b]));
      auto d = [&](int i) {
        uint16_t h;
        std::memcpy(&h, row[i] + at, 2);
        return static_cast<short>(h);
      };
      const __m256 wd = _mm256_cvtph_ps(_mm_setr_epi16(d(0), d(1), d(2), d(3), d(4), d(5), d(6), d(7)));
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(wd, _mm256_set1_ps(x[b >> 1].d[8 * h])), acc);
    }
    if (nr == kX8Rows) _mm256_storeu_ps(a.y + r, acc);
    else _mm256_maskstore_ps(a.y + r, lanes, acc);
  }
}

// Rows [r0, r1) (any) of a matrix in GGUF rows: the same tiles on staged records.
template <class P>
void rows_gguf(const Args& a, size_t block_bytes, int64_t n_tok, int64_t r0, int64_t r1) {
  if (n_tok == 1) return gemv_gguf<P>(a, block_bytes, r0, r1);
  const int64_t n_blocks = a.n_in / 32;
  int32_t corr[P::kCorr ? kCorrInts : 1];
  alignas(64) uint8_t stage[kStageBlocks * P::kRecordBytes];
  const int64_t chunk = x8_chunk<P>(a, n_blocks);
  for (int64_t t0 = 0; t0 < n_tok; t0 += chunk) {
    const int64_t t1 = std::min(n_tok, t0 + chunk);
    if (P::kCorr) block_corr(a, n_blocks, t0, t1, corr);
    for (int64_t r = r0; r < r1; r += kX8Rows) {
      const int nr = static_cast<int>(std::min<int64_t>(kX8Rows, r1 - r));
      const uint8_t* row[kX8Rows];
      for (int i = 0; i < kX8Rows; ++i) row[i] = i < nr ? a.w + (r + i) * a.w_row_bytes : nullptr;
      for (int64_t b0 = 0; b0 < n_blocks; b0 += kStageBlocks) {
        const int64_t b1 = std::min(n_blocks, b0 + kStageBlocks);
        for (int64_t b = b0; b < b1; ++b)
          P::stage(row, static_cast<size_t>(b) * block_bytes, stage + (b - b0) * P::kRecordBytes);
        for (int64_t t = t0; t < t1; t += kX8Toks) {
          const X8Tile tile{.rec = stage, .b0 = b0, .b1 = b1, .xa = a.xa + t * a.xa_stride, .xa_stride = a.xa_stride,
                            .corr = P::kCorr ? corr + (t - t0) * n_blocks : nullptr, .n_blocks = n_blocks, .y = a.y + t * a.y_stride + r,
                            .y_stride = a.y_stride, .nr = nr, .next = nullptr};
          x8_tile_any<P>(tile, static_cast<int>(std::min<int64_t>(kX8Toks, t1 - t)), b0 == 0);
        }
      }
    }
  }
}

Args args(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa, size_t xa_stride, float* y,
          int64_t y_stride) {
  return Args{.w = w, .w_row_bytes = w_row_bytes, .n_in = n_in, .xa = xa, .xa_stride = xa_stride, .y = y,
              .y_stride = y_stride};
}

// rows() of GGUF rows, staged into K's records, and of a matrix repacked to them.
template <class K, size_t kBlockBytes>
void gguf_rows(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa, size_t xa_stride, int64_t n_tok,
               float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  rows_gguf<K>(args(w, w_row_bytes, n_in, xa, xa_stride, y, y_stride), kBlockBytes, n_tok, r0, r1);
}

template <class K>
void repacked_rows(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa, size_t xa_stride,
                   int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  CHECK(n_in % 32 == 0 && r0 % kX8Rows == 0 && r1 % kX8Rows == 0);
  rows_x8<K>(args(w, w_row_bytes, n_in, xa, xa_stride, y, y_stride), n_tok, r0, r1);
}

}  // namespace

const QuantRowsFn quant_rows_q8_0_avx2 = gguf_rows<Q8_0x8, sizeof(BlockQ8_0)>;
const QuantRowsFn quant_rows_q8_0x8_avx2 = repacked_rows<Q8_0x8>;
const QuantRowsFn quant_rows_q4_0_avx2 = gguf_rows<Q4_0x8, sizeof(BlockQ4_0)>;
const QuantRowsFn quant_rows_q4_0x8_avx2 = repacked_rows<Q4_0x8>;

}  // namespace sluice::cpu
