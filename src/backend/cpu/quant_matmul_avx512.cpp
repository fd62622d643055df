// AVX-512 VNNI kernels for quantized weights x ActQ8x64 / ActQ8x256 activations.
//
// Every type is written as one tile template over NR rows x NT tokens: the weight
// blocks of the NR rows are unpacked once per step and multiplied with the NT
// tokens' activations, so weights are reused across tokens and activations
// across rows. A single token (decode) runs the same template with NT = 1, and a
// (row, token) pair goes through the same instructions in any tile, which is what
// makes y independent of n_tok and of the row split. Compiled for AVX-512 only:
// everything here has internal linkage except the quant_rows_*_avx512 functions.
//
// Lanes:
//   Q8_0         one zmm = 16 rows (Q8_0x16 records, repack.h; GGUF rows are
//                staged into them): per block 8 vpdpbusd into one int32 per row,
//                then acc[row] += cvt(isum) * (wd * ad). See "Q8_0 (x16)" below.
//   Q4_0         one zmm = two blocks of 32 (bytes 0..31 block b, 32..63 block b+1);
//                weights as unsigned bytes (the nibbles = w + 8); vpdpbusd starts
//                from ActQ8x64::corr, so each int32 lane ends at the exact signed
//                dot of its 4 bytes; then acc[16 f32] += cvt(lane) * (wd * ad)
//                per block pair.
//   Q4_K         per 64 elements (sub-blocks 2c | 2c+1): maddubs, then vpdpwssd
//                with the 6-bit scales into 16 int32 lanes for the super-block;
//                folded to 8 lanes; acc[8 f32] += cvt * d*ad, -= cvt(mins) * dmin*ad.
//   Q6_K         per 64 elements (4 sub-blocks of 16): maddubs, vpdpwssd with the
//                int8 scales; folded to 8 lanes minus 32 * sum(sc * qsum);
//                acc[8 f32] += cvt * d*ad.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/quant_matmul.h"
#include "backend/cpu/repack.h"
#include "base/check.h"
#include "quant/blocks.h"

// GCC 12 reports the deliberately undefined lanes inside <immintrin.h> helpers
// as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace sluice::cpu {
namespace {

// The rows() arguments every tile needs.
struct Args {
  const uint8_t* w;
  size_t w_row_bytes;
  int64_t n_in;
  const uint8_t* xa;
  size_t xa_stride;
  float* y;
  int64_t y_stride;
};

// GEMM tiles of 4 rows x 4 tokens: 16 f32 accumulators plus the 4 rows'
// unpacked weights and scales fill the 32 zmm registers (4x3, 3x4 and 2x4 were
// no faster here). Decode streams one row at a time: with 2 or 4 rows
// interleaved the hardware prefetcher fell behind and GEMV from DRAM dropped
// from ~25 to ~14 GB/s on the Zen 4 this was tuned on.
constexpr int kTileRows = 4;
constexpr int kTileToks = 4;
constexpr int kGemvRows = 1;
constexpr size_t kChunkActBytes = 256 * 1024;  // a token chunk's activations stay in L2
constexpr int kPrefetchBytes = 512;            // software prefetch distance per row stream

void prefetch_ahead(const void* p) {
  _mm_prefetch(static_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T0);
}

// Sum of 16 lanes in a fixed order.
float hsum16(__m512 v) {
  __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
  return _mm_cvtss_f32(s4);
}

// Sum of 8 lanes in a fixed order.
float hsum8(__m256 v) {
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
  return _mm_cvtss_f32(s4);
}

float f16(uint16_t h) { return _cvtsh_ss(h); }

// Sum of the two 256-bit halves of 16 int32 lanes.
__m256i fold(__m512i v) {
  return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

// ---------------------------------------------------------------- Q8_0 / Q4_0 --

// The NR x NT block-pair step of Q4_0: wv[i] holds the unsigned
// (offset) weight bytes of row i, ws[i] its scales.
template <int NR, int NT>
[[gnu::always_inline]] inline void pair_step(__m512 (&acc)[NR][NT], const __m512i (&wv)[NR],
                                             const __m512 (&ws)[NR], const ActQ8x64* const (&xt)[NT],
                                             int64_t g) {
  for (int j = 0; j < NT; ++j) {
    const ActQ8x64& a = xt[j][g];
    const __m512i aq = _mm512_loadu_si512(a.q);
    const __m512i corr = _mm512_loadu_si512(a.corr);
    const __m512 ad = _mm512_loadu_ps(a.d);
    for (int i = 0; i < NR; ++i) {
      const __m512 lanes = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(corr, wv[i], aq));
      acc[i][j] = _mm512_fmadd_ps(lanes, _mm512_mul_ps(ws[i], ad), acc[i][j]);
    }
  }
}

template <int NR, int NT>
void store_acc16(const Args& a, int64_t r, int64_t t, const __m512 (&acc)[NR][NT]) {
  for (int j = 0; j < NT; ++j)
    for (int i = 0; i < NR; ++i) a.y[(t + j) * a.y_stride + r + i] = hsum16(acc[i][j]);
}

struct KernelQ4_0 {
  // Two consecutive blocks (36 bytes = words 0..17: d0, qs0[16], d1, qs1[16]) are
  // loaded once (masked, so nothing past them is touched) and rearranged by word
  // permutes: nibbles as [lo(qs0) | hi(qs0) | lo(qs1) | hi(qs1)], 16 bytes each
  // (the activations' element order), scales as [d0 x 8 | d1 x 8].
  struct Consts {
    __m512i nib_words = _mm512_setr_epi32(0x20001, 0x40003, 0x60005, 0x80007, 0x20001, 0x40003, 0x60005, 0x80007,
                                          0xB000A, 0xD000C, 0xF000E, 0x110010, 0xB000A, 0xD000C, 0xF000E, 0x110010);
    __m512i nib_shift = _mm512_setr_epi32(0, 0, 0, 0, 0x40004, 0x40004, 0x40004, 0x40004, 0, 0, 0, 0, 0x40004,
                                          0x40004, 0x40004, 0x40004);
    __m512i scale_words = _mm512_setr_epi32(0, 0, 0, 0, 0x90009, 0x90009, 0x90009, 0x90009, 0, 0, 0, 0, 0, 0, 0, 0);
    __m512i low4 = _mm512_set1_epi8(0x0F);
  };

  static void unpack(const Consts& k, const void* blk, __mmask32 words, __m512i* wv, __m512* ws) {
    const __m512i z = _mm512_maskz_loadu_epi16(words, blk);
    *wv = _mm512_and_si512(_mm512_srlv_epi16(_mm512_permutexvar_epi16(k.nib_words, z), k.nib_shift), k.low4);
    *ws = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(k.scale_words, z)));
  }

  template <int NR, int NT>
  static void tile(const Args& a, int64_t r, int64_t t) {
    const int64_t n_blocks = a.n_in / 32;
    const BlockQ4_0* wr[NR];
    for (int i = 0; i < NR; ++i) wr[i] = reinterpret_cast<const BlockQ4_0*>(a.w + (r + i) * a.w_row_bytes);
    const ActQ8x64* xt[NT];
    for (int j = 0; j < NT; ++j) xt[j] = reinterpret_cast<const ActQ8x64*>(a.xa + (t + j) * a.xa_stride);
    __m512 acc[NR][NT];
    for (int i = 0; i < NR; ++i)
      for (int j = 0; j < NT; ++j) acc[i][j] = _mm512_setzero_ps();
    const Consts k;
    int64_t b = 0;
    for (; b + 2 <= n_blocks; b += 2) {
      __m512i wv[NR];
      __m512 ws[NR];
      for (int i = 0; i < NR; ++i) {
        prefetch_ahead(wr[i] + b);
        unpack(k, wr[i] + b, 0x3FFFF, &wv[i], &ws[i]);  // 18 words: two blocks
      }
      pair_step<NR, NT>(acc, wv, ws, xt, b / 2);
    }
    if (b < n_blocks) {  // odd block count: words 9..17 read as zero
      __m512i wv[NR];
      __m512 ws[NR];
      for (int i = 0; i < NR; ++i) unpack(k, wr[i] + b, 0x1FF, &wv[i], &ws[i]);
      pair_step<NR, NT>(acc, wv, ws, xt, b / 2);
    }
    store_acc16<NR, NT>(a, r, t, acc);
  }
};

// Q4_0 repacked in groups of 4 rows (repack.h): one 144-byte record per block
// pair holds the 4 rows' scales and nibbles. The nibbles need one masked shift
// and one mask (low nibbles: block 2p, high: block 2p + 1, the activations'
// order); the scales one conversion for the 4 rows and one permute per row. wv
// and ws hold the same values as KernelQ4_0's, and pair_step is shared, so
// every (row, token) gets the same bits as from GGUF rows.
struct KernelQ4_0x4 {
  template <int NT>
  static void tile(const Args& a, int64_t r, int64_t t) {
    const int64_t n_pairs = a.n_in / 64;
    const uint8_t* rec = a.w + r * a.w_row_bytes;  // group r / 4 starts at 4 rows' bytes each
    const ActQ8x64* xt[NT];
    for (int j = 0; j < NT; ++j) xt[j] = reinterpret_cast<const ActQ8x64*>(a.xa + (t + j) * a.xa_stride);
    __m512 acc[4][NT];
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < NT; ++j) acc[i][j] = _mm512_setzero_ps();
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    __m512i pick[4];  // row i's scales: [d(2p) x 8 | d(2p+1) x 8]
    for (int i = 0; i < 4; ++i) pick[i] = _mm512_inserti64x4(_mm512_set1_epi32(2 * i), _mm256_set1_epi32(2 * i + 1), 1);
    for (int64_t p = 0; p < n_pairs; ++p, rec += kQ4_0x4RecordBytes) {
      prefetch_ahead(rec);
      prefetch_ahead(rec + 64);
      prefetch_ahead(rec + 128);
      const __m512 sc = _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec))));
      __m512i wv[4];
      __m512 ws[4];
      for (int i = 0; i < 4; ++i) {
        const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 16 + 32 * i)));
        wv[i] = _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xFFFF0000u, v, 4), low4);
        ws[i] = _mm512_permutexvar_ps(pick[i], sc);
      }
      pair_step<4, NT>(acc, wv, ws, xt, p);
    }
    store_acc16<4, NT>(a, r, t, acc);
  }
};

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
  int64_t chunk = static_cast<int64_t>(kChunkActBytes / (a.xa_stride ? a.xa_stride : 1));
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

// ------------------------------------------------------------------------ Q4_K --

struct KernelQ4_K {
  template <int NR, int NT>
  static void tile(const Args& a, int64_t r, int64_t t) {
    const int64_t n_blocks = a.n_in / 256;
    const BlockQ4_K* wr[NR];
    for (int i = 0; i < NR; ++i) wr[i] = reinterpret_cast<const BlockQ4_K*>(a.w + (r + i) * a.w_row_bytes);
    const ActQ8x256* xt[NT];
    for (int j = 0; j < NT; ++j) xt[j] = reinterpret_cast<const ActQ8x256*>(a.xa + (t + j) * a.xa_stride);
    __m256 acc[NR][NT];
    for (int i = 0; i < NR; ++i)
      for (int j = 0; j < NT; ++j) acc[i][j] = _mm256_setzero_ps();
    const __m512i nib = _mm512_set1_epi8(0x0F);
    // vpshufb controls picking the int16 scale of sub-block 2c (low 256 bits) and
    // 2c+1 (high 256 bits) out of [sc0 .. sc7] repeated in every 128-bit lane.
    __m512i pick[4];
    for (int c = 0; c < 4; ++c) {
      const int lo = (4 * c) | ((4 * c + 1) << 8), hi = (4 * c + 2) | ((4 * c + 3) << 8);
      pick[c] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(static_cast<short>(lo))),
                                   _mm256_set1_epi16(static_cast<short>(hi)), 1);
    }
    for (int64_t b = 0; b < n_blocks; ++b) {
      __m512i sc[NR];   // [sc0..sc7] int16 in each 128-bit lane
      __m256i mins[NR]; // [m0 m0 m1 m1 .. m7 m7] int16
      float d[NR], dmin[NR];
      for (int i = 0; i < NR; ++i) {
        const BlockQ4_K& blk = wr[i][b];
        uint32_t u[3];
        std::memcpy(u, blk.scales, 12);
        const uint32_t sc_lo = u[0] & 0x3f3f3f3fu, m_lo = u[1] & 0x3f3f3f3fu;
        const uint32_t sc_hi = (u[2] & 0x0f0f0f0fu) | ((u[0] >> 2) & 0x30303030u);
        const uint32_t m_hi = ((u[2] >> 4) & 0x0f0f0f0fu) | ((u[1] >> 2) & 0x30303030u);
        const __m128i s8 = _mm_cvtsi64_si128(static_cast<long long>(sc_lo | static_cast<uint64_t>(sc_hi) << 32));
        const __m128i m8 = _mm_cvtsi64_si128(static_cast<long long>(m_lo | static_cast<uint64_t>(m_hi) << 32));
        sc[i] = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(s8));
        const __m128i m16 = _mm_cvtepu8_epi16(m8);
        mins[i] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi16(m16, m16)),
                                          _mm_unpackhi_epi16(m16, m16), 1);
        d[i] = f16(blk.d);
        dmin[i] = f16(blk.dmin);
      }
      __m512i isum[NR][NT];
      for (int i = 0; i < NR; ++i)
        for (int j = 0; j < NT; ++j) isum[i][j] = _mm512_setzero_si512();
      for (int c = 0; c < 4; ++c) {
        __m512i wv[NR], scv[NR];
        for (int i = 0; i < NR; ++i) {
          const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr[i][b].qs + 32 * c));
          prefetch_ahead(wr[i][b].qs + 32 * c);
          wv[i] = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1), nib);
          scv[i] = _mm512_shuffle_epi8(sc[i], pick[c]);
        }
        for (int j = 0; j < NT; ++j) {
          const __m512i aq = _mm512_loadu_si512(xt[j][b].q + 64 * c);
          for (int i = 0; i < NR; ++i)
            isum[i][j] = _mm512_dpwssd_epi32(isum[i][j], _mm512_maddubs_epi16(wv[i], aq), scv[i]);
        }
      }
      for (int j = 0; j < NT; ++j) {
        const ActQ8x256& x = xt[j][b];
        const __m256i bsum = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsum));
        for (int i = 0; i < NR; ++i) {
          const __m256 dot = _mm256_cvtepi32_ps(fold(isum[i][j]));
          const __m256 msum = _mm256_cvtepi32_ps(_mm256_madd_epi16(bsum, mins[i]));
          acc[i][j] = _mm256_fmadd_ps(dot, _mm256_set1_ps(d[i] * x.d), acc[i][j]);
          acc[i][j] = _mm256_fnmadd_ps(msum, _mm256_set1_ps(dmin[i] * x.d), acc[i][j]);
        }
      }
    }
    for (int j = 0; j < NT; ++j)
      for (int i = 0; i < NR; ++i) a.y[(t + j) * a.y_stride + r + i] = hsum8(acc[i][j]);
  }
};

// ------------------------------------------------------------------------ Q6_K --

struct KernelQ6_K {
  template <int NR, int NT>
  static void tile(const Args& a, int64_t r, int64_t t) {
    const int64_t n_blocks = a.n_in / 256;
    const BlockQ6_K* wr[NR];
    for (int i = 0; i < NR; ++i) wr[i] = reinterpret_cast<const BlockQ6_K*>(a.w + (r + i) * a.w_row_bytes);
    const ActQ8x256* xt[NT];
    for (int j = 0; j < NT; ++j) xt[j] = reinterpret_cast<const ActQ8x256*>(a.xa + (t + j) * a.xa_stride);
    __m256 acc[NR][NT];
    for (int i = 0; i < NR; ++i)
      for (int j = 0; j < NT; ++j) acc[i][j] = _mm256_setzero_ps();
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const __m512i bits45 = _mm512_set1_epi8(0x30);
    // vpermw indices: 128-bit lane k of quarter p (64 elements) takes the scale of
    // sub-block 4p + k.
    const __m512i lane_k = _mm512_setr_epi32(0, 0, 0, 0, 0x10001, 0x10001, 0x10001, 0x10001, 0x20002, 0x20002,
                                             0x20002, 0x20002, 0x30003, 0x30003, 0x30003, 0x30003);
    for (int64_t b = 0; b < n_blocks; ++b) {
      __m256i sc16[NR];  // [16] int16 scales
      float d[NR];
      for (int i = 0; i < NR; ++i) {
        sc16[i] = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wr[i][b].scales)));
        d[i] = f16(wr[i][b].d);
      }
      __m512i isum[NR][NT];
      for (int i = 0; i < NR; ++i)
        for (int j = 0; j < NT; ++j) isum[i][j] = _mm512_setzero_si512();
      for (int h = 0; h < 2; ++h) {
        __m512i wa[NR], wb[NR], sa[NR], sb[NR];
        const __m512i idx_a = _mm512_add_epi16(lane_k, _mm512_set1_epi16(static_cast<short>(8 * h)));
        const __m512i idx_b = _mm512_add_epi16(lane_k, _mm512_set1_epi16(static_cast<short>(8 * h + 4)));
        for (int i = 0; i < NR; ++i) {
          const BlockQ6_K& blk = wr[i][b];
          prefetch_ahead(blk.ql + 64 * h);
          prefetch_ahead(blk.ql + 64 * h + 64);
          const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.ql + 64 * h));
          const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.ql + 64 * h + 32));
          const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh + 32 * h));
          const __m512i lo = _mm512_inserti64x4(_mm512_castsi256_si512(ql0), ql1, 1);
          const __m512i hi = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
          // elements 128h + 0..63 and 128h + 64..127 as 6-bit bytes
          wa[i] = _mm512_or_si512(_mm512_and_si512(lo, low4), _mm512_and_si512(_mm512_slli_epi16(hi, 4), bits45));
          wb[i] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(lo, 4), low4), _mm512_and_si512(hi, bits45));
          const __m512i s = _mm512_castsi256_si512(sc16[i]);
          sa[i] = _mm512_permutexvar_epi16(idx_a, s);
          sb[i] = _mm512_permutexvar_epi16(idx_b, s);
        }
        for (int j = 0; j < NT; ++j) {
          const __m512i qa = _mm512_loadu_si512(xt[j][b].q + 128 * h);
          const __m512i qb = _mm512_loadu_si512(xt[j][b].q + 128 * h + 64);
          for (int i = 0; i < NR; ++i) {
            isum[i][j] = _mm512_dpwssd_epi32(isum[i][j], _mm512_maddubs_epi16(wa[i], qa), sa[i]);
            isum[i][j] = _mm512_dpwssd_epi32(isum[i][j], _mm512_maddubs_epi16(wb[i], qb), sb[i]);
          }
        }
      }
      for (int j = 0; j < NT; ++j) {
        const ActQ8x256& x = xt[j][b];
        const __m256i bsum = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsum));
        for (int i = 0; i < NR; ++i) {
          const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(bsum, sc16[i]), 5);  // 32 * sc * qsum
          const __m256 dot = _mm256_cvtepi32_ps(_mm256_sub_epi32(fold(isum[i][j]), offset));
          acc[i][j] = _mm256_fmadd_ps(dot, _mm256_set1_ps(d[i] * x.d), acc[i][j]);
        }
      }
    }
    for (int j = 0; j < NT; ++j)
      for (int i = 0; i < NR; ++i) a.y[(t + j) * a.y_stride + r + i] = hsum8(acc[i][j]);
  }
};

// ---------------------------------------------------------------------- driver --

using TileFn = void (*)(const Args&, int64_t r, int64_t t);

// Tile of nr (1..kTileRows) rows x nt (1..kTileToks) tokens at (r, t).
template <class K>
void tile_any(const Args& a, int nr, int nt, int64_t r, int64_t t) {
  static constexpr TileFn kTable[4][4] = {
      {K::template tile<1, 1>, K::template tile<1, 2>, K::template tile<1, 3>, K::template tile<1, 4>},
      {K::template tile<2, 1>, K::template tile<2, 2>, K::template tile<2, 3>, K::template tile<2, 4>},
      {K::template tile<3, 1>, K::template tile<3, 2>, K::template tile<3, 3>, K::template tile<3, 4>},
      {K::template tile<4, 1>, K::template tile<4, 2>, K::template tile<4, 3>, K::template tile<4, 4>}};
  static_assert(kTileRows <= 4 && kTileToks <= 4 && kGemvRows <= 4, "table covers 4 x 4");
  kTable[nr - 1][nt - 1](a, r, t);
}

template <class K>
void rows(const Args& a, int64_t n_tok, int64_t r0, int64_t r1) {
  if (n_tok == 1) {
    for (int64_t r = r0; r < r1; r += kGemvRows) {
      const int nr = static_cast<int>(r1 - r < kGemvRows ? r1 - r : kGemvRows);
      tile_any<K>(a, nr, 1, r, 0);
    }
    return;
  }
  // Tokens in chunks whose activations stay in L2 while every row tile passes.
  int64_t chunk = static_cast<int64_t>(kChunkActBytes / (a.xa_stride ? a.xa_stride : 1));
  chunk = chunk < kTileToks ? kTileToks : chunk / kTileToks * kTileToks;
  for (int64_t t0 = 0; t0 < n_tok; t0 += chunk) {
    const int64_t t1 = t0 + chunk < n_tok ? t0 + chunk : n_tok;
    for (int64_t r = r0; r < r1; r += kTileRows) {
      const int nr = static_cast<int>(r1 - r < kTileRows ? r1 - r : kTileRows);
      for (int64_t t = t0; t < t1; t += kTileToks) {
        const int nt = static_cast<int>(t1 - t < kTileToks ? t1 - t : kTileToks);
        tile_any<K>(a, nr, nt, r, t);
      }
    }
  }
}


// Rows [r0, r1) (multiples of 4) of a 4-row interleaved layout: decode walks the
// groups with one token; batches take tiles of 4 rows x kTileToks tokens.
template <class K>
void rows_x4(const Args& a, int64_t n_tok, int64_t r0, int64_t r1) {
  static constexpr TileFn kTiles[4] = {K::template tile<1>, K::template tile<2>, K::template tile<3>,
                                       K::template tile<4>};
  static_assert(kTileToks == 4, "table covers 4 tokens");
  int64_t chunk = static_cast<int64_t>(kChunkActBytes / (a.xa_stride ? a.xa_stride : 1));
  chunk = chunk < kTileToks ? kTileToks : chunk / kTileToks * kTileToks;
  for (int64_t t0 = 0; t0 < n_tok; t0 += chunk) {
    const int64_t t1 = t0 + chunk < n_tok ? t0 + chunk : n_tok;
    for (int64_t r = r0; r < r1; r += 4) {
      for (int64_t t = t0; t < t1; t += kTileToks) {
        const int nt = static_cast<int>(t1 - t < kTileToks ? t1 - t : kTileToks);
        kTiles[nt - 1](a, r, t);
      }
    }
  }
}

}  // namespace

void quant_rows_q8_0_avx512(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                            size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0,
                            int64_t r1) {
  rows_q8_0(Args{.w = w, .w_row_bytes = w_row_bytes, .n_in = n_in, .xa = xa, .xa_stride = xa_stride, .y = y,
                 .y_stride = y_stride},
            n_tok, r0, r1);
}

void quant_rows_q4_0_avx512(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                            size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0,
                            int64_t r1) {
  rows<KernelQ4_0>(Args{.w = w, .w_row_bytes = w_row_bytes, .n_in = n_in, .xa = xa, .xa_stride = xa_stride, .y = y,
                        .y_stride = y_stride},
                   n_tok, r0, r1);
}

void quant_rows_q4_0x4_avx512(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                              size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0,
                              int64_t r1) {
  CHECK(n_in % 64 == 0 && r0 % 4 == 0 && r1 % 4 == 0);
  rows_x4<KernelQ4_0x4>(Args{.w = w, .w_row_bytes = w_row_bytes, .n_in = n_in, .xa = xa, .xa_stride = xa_stride,
                             .y = y, .y_stride = y_stride},
                        n_tok, r0, r1);
}

void quant_rows_q8_0x16_avx512(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                               size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0,
                               int64_t r1) {
  CHECK(n_in % 32 == 0 && r0 % kX16Rows == 0 && r1 % kX16Rows == 0);
  rows_q8_0x16(Args{.w = w, .w_row_bytes = w_row_bytes, .n_in = n_in, .xa = xa, .xa_stride = xa_stride, .y = y,
                    .y_stride = y_stride},
               n_tok, r0, r1);
}

void quant_rows_q4_k_avx512(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                            size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0,
                            int64_t r1) {
  rows<KernelQ4_K>(Args{.w = w, .w_row_bytes = w_row_bytes, .n_in = n_in, .xa = xa, .xa_stride = xa_stride, .y = y,
                        .y_stride = y_stride},
                   n_tok, r0, r1);
}

void quant_rows_q6_k_avx512(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                            size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0,
                            int64_t r1) {
  rows<KernelQ6_K>(Args{.w = w, .w_row_bytes = w_row_bytes, .n_in = n_in, .xa = xa, .xa_stride = xa_stride, .y = y,
                        .y_stride = y_stride},
                   n_tok, r0, r1);
}

}  // namespace sluice::cpu
