// AVX-512 VNNI kernel for Q8_0 weights x ActQ8x64 activations, 16 rows per
// zmm (Q8_0x16 records, repack.h; GGUF rows are staged into them). Tiling,
// sums and the quant_rows_* contract as in quant_rows32_avx512.cpp.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/quant_rows.h"
#include "backend/cpu/quant_tile_avx512.h"
#include "backend/cpu/repack.h"
#include "base/check.h"
#include "quant/blocks.h"

// GCC 12 reports the deliberately undefined lanes inside <immintrin.h> helpers
// as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace sluice::cpu {
namespace {

// ---------------------------------------------------------------- Q8_0 (x16) --
//
// Q8_0 at this level holds one row per int32 lane: 16 rows side by side in the
// record layout of repack.h (Q8_0x16). One vpdpbusd multiplies 4 biased weight
// bytes of each of the 16 rows by the same 4 activation bytes (broadcast), so a
// block's dot product is summed in integers for 16 rows at once and each
// (row, token) takes one float update per block, in block order:
//
//   isum(r, t, b) = corr(t, b) + sum over k = 0..7 of lane r of
//                   dpbusd(chunk k of block b, q(t, b)[4k .. 4k+3])
//   acc(r, t)     = fma(float(isum), wd(r, b) * ad(t, b), acc(r, t)),  b = 0, 1, ...
//
// where corr(t, b) = -128 * sum of q(t, b) undoes the +128 bias of the weight
// bytes (the sum of the ActQ8x64 lane corrections of the block). Repacked
// weights are read as they are; GGUF rows are staged into the same records on
// the stack, a run of blocks at a time, with acc carried through y between runs,
// so both layouts take exactly these operations per (row, token).

constexpr int kX16Toks = 8;               // tokens per tile: 8 float + 8 int accumulators
constexpr int kCorrInts = 16384;          // corr(t, b) of one token chunk, on the stack
constexpr int64_t kStageBlocks = 32;      // blocks of 16 GGUF rows staged at a time (17 KiB)

struct X16Tile {
  const uint8_t* rec;          // record of block b0 of the 16 rows
  int64_t b0, b1;              // blocks [b0, b1)
  const uint8_t* xa;           // token t0's activations
  size_t xa_stride;
  const int32_t* corr;         // corr of token t0: [n_tok][n_blocks] from block 0
  int64_t n_blocks;
  float* y;                    // y of token t0, row r
  int64_t y_stride;
  __mmask16 lanes;             // rows of the group that exist
};

template <int NT>
void x16_tile(const X16Tile& a, bool first) {
  __m512 acc[NT];
  for (int j = 0; j < NT; ++j)
    acc[j] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(a.lanes, a.y + j * a.y_stride);
  const uint8_t* rec = a.rec;
  for (int64_t b = a.b0; b < a.b1; ++b, rec += kQ8_0x16RecordBytes) {
    const __m512 wd = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec)));
    const int h = static_cast<int>(b & 1);
    const int8_t* q[NT];
    __m512i s[NT];
    for (int j = 0; j < NT; ++j) {
      q[j] = reinterpret_cast<const ActQ8x64*>(a.xa + j * a.xa_stride)[b >> 1].q + 32 * h;
      s[j] = _mm512_set1_epi32(a.corr[j * a.n_blocks + b]);
    }
    if constexpr (NT == 1) {
      // One token: two independent chains (integer sums, so the split is exact).
      __m512i s1 = _mm512_setzero_si512();
      for (int k = 0; k < 8; k += 2) {
        int32_t q0, q1;
        std::memcpy(&q0, q[0] + 4 * k, 4);
        std::memcpy(&q1, q[0] + 4 * k + 4, 4);
        s[0] = _mm512_dpbusd_epi32(s[0], _mm512_loadu_si512(rec + 32 + 64 * k), _mm512_set1_epi32(q0));
        s1 = _mm512_dpbusd_epi32(s1, _mm512_loadu_si512(rec + 96 + 64 * k), _mm512_set1_epi32(q1));
      }
      s[0] = _mm512_add_epi32(s[0], s1);
    } else {
      for (int k = 0; k < 8; ++k) {
        const __m512i w = _mm512_loadu_si512(rec + 32 + 64 * k);
        for (int j = 0; j < NT; ++j) {
          int32_t qk;
          std::memcpy(&qk, q[j] + 4 * k, 4);
          s[j] = _mm512_dpbusd_epi32(s[j], w, _mm512_set1_epi32(qk));
        }
      }
    }
    for (int j = 0; j < NT; ++j) {
      const float ad = reinterpret_cast<const ActQ8x64*>(a.xa + j * a.xa_stride)[b >> 1].d[8 * h];
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[j]), _mm512_mul_ps(wd, _mm512_set1_ps(ad)), acc[j]);
    }
  }
  for (int j = 0; j < NT; ++j) _mm512_mask_storeu_ps(a.y + j * a.y_stride, a.lanes, acc[j]);
}

void x16_tile_any(const X16Tile& a, int nt, bool first) {
  static constexpr void (*kTable[kX16Toks])(const X16Tile&, bool) = {
      x16_tile<1>, x16_tile<2>, x16_tile<3>, x16_tile<4>, x16_tile<5>, x16_tile<6>, x16_tile<7>, x16_tile<8>};
  kTable[nt - 1](a, first);
}

// Two groups of 16 rows (records `a.rec` and `a.rec + group_bytes`) x NT tokens,
// for batches of repacked weights: each activation broadcast feeds two vpdpbusd,
// which halves the broadcasts per product (the 16 x 8 tile issues more loads than
// vpdpbusd). Per (row, token) the same operations as x16_tile, so the same bits.
//
// The first token tile over a pair of groups reads their records from memory,
// the later ones from cache. Each group is 3-4 pages of records, and the
// hardware prefetcher stops at page ends, so the first tile prefetches both
// groups kX16PrefetchBlocks records ahead (kAhead): on the Zen 5 here this
// took 2048 x 768 x 16 tokens from DRAM on 2 threads from ~570 to ~730 GOP/s
// (6 records ahead; 5, 8 and 10 were slower, and so were hints to L2 only).
// The second token tile, which otherwise leaves memory idle, asks for the next
// pair's records into L2 (kNextPair), so that the next first tile starts from
// there: the 110m step's matmuls from memory went 8-15% faster
// (QuantMatmul.DISABLED_StepFromMemory; into L1 instead gained nothing).
constexpr int kX16PairToks = 6;  // 12 int + 12 float accumulators
constexpr int kX16PrefetchBlocks = 6;
enum class X16Prefetch { kNone, kAhead, kNextPair };

template <int NT>
void x16_tile_pair(const X16Tile& a, size_t group_bytes, X16Prefetch prefetch) {
  __m512 acc[2][NT];
  for (int g = 0; g < 2; ++g)
    for (int j = 0; j < NT; ++j) acc[g][j] = _mm512_setzero_ps();
  const uint8_t* rec = a.rec;
  for (int64_t b = a.b0; b < a.b1; ++b, rec += kQ8_0x16RecordBytes) {
    const uint8_t* rec1 = rec + group_bytes;
    // 9 lines cover a record at any alignment.
    if (prefetch == X16Prefetch::kAhead) {
      constexpr size_t kAhead = kX16PrefetchBlocks * kQ8_0x16RecordBytes;
      for (size_t c = 0; c < kQ8_0x16RecordBytes; c += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(rec + kAhead + c), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(rec1 + kAhead + c), _MM_HINT_T0);
      }
    } else if (prefetch == X16Prefetch::kNextPair) {  // the same block of the next two groups
      for (size_t c = 0; c < kQ8_0x16RecordBytes; c += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(rec + 2 * group_bytes + c), _MM_HINT_T1);
        _mm_prefetch(reinterpret_cast<const char*>(rec1 + 2 * group_bytes + c), _MM_HINT_T1);
      }
    }
    const int h = static_cast<int>(b & 1);
    const int8_t* q[NT];
    __m512i s[2][NT];
    for (int j = 0; j < NT; ++j) {
      q[j] = reinterpret_cast<const ActQ8x64*>(a.xa + j * a.xa_stride)[b >> 1].q + 32 * h;
      s[0][j] = s[1][j] = _mm512_set1_epi32(a.corr[j * a.n_blocks + b]);
    }
    for (int k = 0; k < 8; ++k) {
      const __m512i w0 = _mm512_loadu_si512(rec + 32 + 64 * k);
      const __m512i w1 = _mm512_loadu_si512(rec1 + 32 + 64 * k);
      for (int j = 0; j < NT; ++j) {
        int32_t qk;
        std::memcpy(&qk, q[j] + 4 * k, 4);
        const __m512i x = _mm512_set1_epi32(qk);
        s[0][j] = _mm512_dpbusd_epi32(s[0][j], w0, x);
        s[1][j] = _mm512_dpbusd_epi32(s[1][j], w1, x);
      }
    }
    const __m512 wd0 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec)));
    const __m512 wd1 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec1)));
    for (int j = 0; j < NT; ++j) {
      const __m512 ad = _mm512_set1_ps(reinterpret_cast<const ActQ8x64*>(a.xa + j * a.xa_stride)[b >> 1].d[8 * h]);
      acc[0][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[0][j]), _mm512_mul_ps(wd0, ad), acc[0][j]);
      acc[1][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[1][j]), _mm512_mul_ps(wd1, ad), acc[1][j]);
    }
  }
  for (int j = 0; j < NT; ++j) {
    _mm512_storeu_ps(a.y + j * a.y_stride, acc[0][j]);
    _mm512_storeu_ps(a.y + j * a.y_stride + kX16Rows, acc[1][j]);
  }
}

void x16_tile_pair_any(const X16Tile& a, size_t group_bytes, int nt, X16Prefetch prefetch) {
  static constexpr void (*kTable[kX16PairToks])(const X16Tile&, size_t, X16Prefetch) = {
      x16_tile_pair<1>, x16_tile_pair<2>, x16_tile_pair<3>, x16_tile_pair<4>, x16_tile_pair<5>, x16_tile_pair<6>};
  kTable[nt - 1](a, group_bytes, prefetch);
}

// corr(t, b) for tokens [t0, t1): the sum of block b's 8 lane corrections.
void x16_block_corr(const Args& a, int64_t n_blocks, int64_t t0, int64_t t1, int32_t* corr) {
  for (int64_t t = t0; t < t1; ++t) {
    const auto* x = reinterpret_cast<const ActQ8x64*>(a.xa + t * a.xa_stride);
    int32_t* c = corr + (t - t0) * n_blocks;
    int64_t b = 0;
    for (; b + 2 <= n_blocks; b += 2) {  // a pair's 16 lanes: block b is lanes 0..7, block b + 1 lanes 8..15
      const __m512i v = _mm512_loadu_si512(x[b >> 1].corr);
      const __m256i lo = _mm512_castsi512_si256(v), hi = _mm512_extracti64x4_epi64(v, 1);
      const __m256i h1 = _mm256_hadd_epi32(lo, hi);  // [lo01 lo23 hi01 hi23 | lo45 lo67 hi45 hi67]
      const __m256i h2 = _mm256_hadd_epi32(h1, h1);  // [lo0-3 hi0-3 .. .. | lo4-7 hi4-7 .. ..]
      const __m128i sums = _mm_add_epi32(_mm256_castsi256_si128(h2), _mm256_extracti128_si256(h2, 1));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(c + b), sums);
    }
    for (; b < n_blocks; ++b) {
      const int32_t* lane = x[b >> 1].corr + 8 * (b & 1);
      c[b] = lane[0] + lane[1] + lane[2] + lane[3] + lane[4] + lane[5] + lane[6] + lane[7];
    }
  }
}

// Tokens per chunk: activations within L2 and corr within the stack buffer.
int64_t x16_chunk(const Args& a, int64_t n_blocks) {
  CHECK(n_blocks <= kCorrInts);
  int64_t chunk = static_cast<int64_t>(Avx512Tiles::kChunkActBytes / (a.xa_stride ? a.xa_stride : 1));
  chunk = std::min<int64_t>(chunk, kCorrInts / n_blocks);
  return chunk < 1 ? 1 : chunk;
}

// Rows [r0, r1) (multiples of 16) of a Q8_0x16 matrix.
void rows_q8_0x16(const Args& a, int64_t n_tok, int64_t r0, int64_t r1) {
  const int64_t n_blocks = a.n_in / 32;
  int32_t corr[kCorrInts];
  const int64_t chunk = x16_chunk(a, n_blocks);
  for (int64_t t0 = 0; t0 < n_tok; t0 += chunk) {
    const int64_t t1 = std::min(n_tok, t0 + chunk);
    x16_block_corr(a, n_blocks, t0, t1, corr);
    auto tile_at = [&](int64_t r, int64_t t) {
      return X16Tile{.rec = a.w + r * a.w_row_bytes, .b0 = 0, .b1 = n_blocks, .xa = a.xa + t * a.xa_stride,
                     .xa_stride = a.xa_stride, .corr = corr + (t - t0) * n_blocks, .n_blocks = n_blocks,
                     .y = a.y + t * a.y_stride + r, .y_stride = a.y_stride, .lanes = 0xFFFF};
    };
    int64_t r = r0;
    // Batches: two groups of rows at a time (decode keeps one sequential stream).
    for (; n_tok > 1 && r + 2 * kX16Rows <= r1; r += 2 * kX16Rows) {
      const bool next_pair = r + 4 * kX16Rows <= r1;
      for (int64_t t = t0; t < t1; t += kX16PairToks) {
        const X16Prefetch pf = t == t0                                   ? X16Prefetch::kAhead
                               : t == t0 + kX16PairToks && next_pair ? X16Prefetch::kNextPair
                                                                       : X16Prefetch::kNone;
        x16_tile_pair_any(tile_at(r, t), kX16Rows * a.w_row_bytes,
                          static_cast<int>(std::min<int64_t>(kX16PairToks, t1 - t)), pf);
      }
    }
    for (; r < r1; r += kX16Rows)
      for (int64_t t = t0; t < t1; t += kX16Toks)
        x16_tile_any(tile_at(r, t), static_cast<int>(std::min<int64_t>(kX16Toks, t1 - t)), true);
  }
}

// Blocks [b0, b1) of GGUF rows [r, r + nr) -> Q8_0x16 records (rows past nr read
// nothing and hold zero). Per block, a 16 x 8 transpose of dwords: vector i holds
// rows i and i + 8 (one per 256-bit half), and the two halves are transposed as
// 8 x 8 side by side; the last step puts rows 0..7 of a column next to rows 8..15.
//
//   in:   v[i] = [ row i: dwords 0..7 | row i+8: dwords 0..7 ]
//   out:  chunk k = [ dword k of rows 0..15 ]
void x16_stage(const Args& a, int64_t r, int nr, int64_t b0, int64_t b1, uint8_t* out) {
  const uint8_t* row[kX16Rows];
  __mmask32 keep[kX16Rows];
  for (int i = 0; i < kX16Rows; ++i) {
    row[i] = a.w + (r + (i < nr ? i : 0)) * a.w_row_bytes;
    keep[i] = i < nr ? ~__mmask32{0} : 0;
  }
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);   // 128-bit lanes 0, 2 of each
  const __m512i hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);  // lanes 1, 3
  uint8_t* rec = out;
  for (int64_t b = b0; b < b1; ++b, rec += kQ8_0x16RecordBytes) {
    const size_t at = static_cast<size_t>(b) * sizeof(BlockQ8_0);
    uint16_t d[kX16Rows];
    for (int i = 0; i < kX16Rows; ++i) {
      uint16_t h = 0;
      if (i < nr) std::memcpy(&h, row[i] + at, 2);
      d[i] = h;
    }
    std::memcpy(rec, d, sizeof(d));
    __m512i v[8];
    for (int i = 0; i < 8; ++i) {
      const __m256i x = _mm256_maskz_loadu_epi8(keep[i], row[i] + at + 2);
      const __m256i y = _mm256_maskz_loadu_epi8(keep[i + 8], row[i + 8] + at + 2);
      v[i] = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(x), y, 1), bias);
    }
    __m512i t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
      t[i] = _mm512_unpacklo_epi32(v[i], v[i + 1]);
      t[i + 1] = _mm512_unpackhi_epi32(v[i], v[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
      u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);      // dword 0 (and 4) of rows i..i+3
      u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);  // dword 1 (5)
      u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);  // dword 2 (6)
      u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);  // dword 3 (7)
    }
    for (int k = 0; k < 4; ++k) {
      _mm512_storeu_si512(rec + 32 + 64 * k, _mm512_permutex2var_epi64(u[k], lo, u[k + 4]));
      _mm512_storeu_si512(rec + 32 + 64 * (k + 4), _mm512_permutex2var_epi64(u[k], hi, u[k + 4]));
    }
  }
}

// Rows [r0, r1) (any) of a Q8_0 matrix in GGUF rows: the same tiles on staged records.
void rows_q8_0(const Args& a, int64_t n_tok, int64_t r0, int64_t r1) {
  const int64_t n_blocks = a.n_in / 32;
  int32_t corr[kCorrInts];
  alignas(64) uint8_t stage[kStageBlocks * kQ8_0x16RecordBytes];
  const int64_t chunk = x16_chunk(a, n_blocks);
  for (int64_t t0 = 0; t0 < n_tok; t0 += chunk) {
    const int64_t t1 = std::min(n_tok, t0 + chunk);
    x16_block_corr(a, n_blocks, t0, t1, corr);
    for (int64_t r = r0; r < r1; r += kX16Rows) {
      const int nr = static_cast<int>(std::min<int64_t>(kX16Rows, r1 - r));
      for (int64_t b0 = 0; b0 < n_blocks; b0 += kStageBlocks) {
        const int64_t b1 = std::min(n_blocks, b0 + kStageBlocks);
        x16_stage(a, r, nr, b0, b1, stage);
        for (int64_t t = t0; t < t1; t += kX16Toks) {
          const X16Tile tile{.rec = stage, .b0 = b0, .b1 = b1, .xa = a.xa + t * a.xa_stride,
                             .xa_stride = a.xa_stride, .corr = corr + (t - t0) * n_blocks, .n_blocks = n_blocks,
                             .y = a.y + t * a.y_stride + r, .y_stride = a.y_stride,
                             .lanes = static_cast<__mmask16>((1u << nr) - 1)};
          x16_tile_any(tile, static_cast<int>(std::min<int64_t>(kX16Toks, t1 - t)), b0 == 0);
        }
      }
    }
  }
}

// rows() of GGUF rows (staged into Q8_0x16 records) and of a repacked matrix.
void gguf_rows(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa, size_t xa_stride,
               int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  rows_q8_0(Args{.w = w, .w_row_bytes = w_row_bytes, .n_in = n_in, .xa = xa, .xa_stride = xa_stride, .y = y,
                 .y_stride = y_stride},
            n_tok, r0, r1);
}

void repacked_rows(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa, size_t xa_stride,
                   int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  CHECK(n_in % 32 == 0 && r0 % kX16Rows == 0 && r1 % kX16Rows == 0);
  rows_q8_0x16(Args{.w = w, .w_row_bytes = w_row_bytes, .n_in = n_in, .xa = xa, .xa_stride = xa_stride, .y = y,
                    .y_stride = y_stride},
               n_tok, r0, r1);
}

}  // namespace

const QuantRowsFn quant_rows_q8_0_avx512 = gguf_rows;
const QuantRowsFn quant_rows_q8_0x16_avx512 = repacked_rows;

}  // namespace sluice::cpu
