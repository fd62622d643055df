// AVX2 + FMA + F16C kernels for F32 / F16 / BF16 weights (compiled with -mavx2
// -mfma -mf16c; only called when cpu_features() allows it). Every helper has
// internal linkage.
//
// One (row, token) dot product is an 8-lane chain, summed in blocks of 2048:
//
//   total = 0
//   for each block [kb, kb + 2048) of the row:
//     acc = 0
//     for i in kb, kb + 8, ...:           acc = fma(w[i..i+8), x[i..i+8), acc)
//                                          (the row's last step loads w masked
//                                           or through a zeroed copy; x is
//                                           zero-padded by convert_act)
//     total = total + acc
//   y = ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)) of total
//
// Register tiles of R rows x T tokens run R*T chains side by side; tiles change
// which chains run together, never the operations inside one, so results do not
// depend on the tiling (16 ymm registers):
//   GEMV (n_tok == 1): 4 rows x 1 token for rows of n_in >= kGemvMultiMinIn,
//                      else 1 row x 1 token, one sequential stream per thread
//                      (as in the AVX-512 file: 8 interleaved rows were up to
//                      2x slower at n_in = 768).
//   GEMM:              4 rows x 3 tokens (12 accumulators + 3 x + 1 weight).
//                      Each activation vector, read from L2, feeds 4 FMAs and
//                      each weight vector, read from L1, 3: 2 rows x 6 tokens
//                      (6 activation loads per 12 FMAs) was bound by L2 reads
//                      at 0.65x the 4 x 3 tile's rate on Zen 3.
#include <immintrin.h>

#include "backend/cpu/float_matmul.h"
#include "backend/cpu/vec_math_avx2.h"

namespace sluice::cpu {
namespace {

using avx2::hsum;

constexpr int kTileRows = 4;
constexpr int kTileTokens = 3;
// Rows at least this long decode 4 rows per tile (4 weight streams): on Zen 3
// one F16 stream per core read 12-15 GB/s and four 17-20 at n_in 2048-5632 (in
// a kernel benchmark, one thread); at n_in = 768 four were 0.85x of one.
constexpr int64_t kGemvMultiMinIn = 1024;
// Elements per partial sum: each chain sums kBlock elements into a fresh
// accumulator, then adds it to a running total (shorter rounding chains). Each
// block costs a fixed switch of accumulators: at 256 the 4 x 3 F16 tile ran
// 0.95x (0.86-0.97x) of its rate at 2048 (kernel benchmark, Zen 3, rows of
// 768-5632 from memory).
constexpr int64_t kBlock = 2048;
// Target bytes of activations per token block (a quarter of Zen 3's L2: the
// block is swept once per 4-row group, whose weights stay in L1), but at least
// kMinBlockTokens tokens: every block reads all the weights again, and with
// fewer tokens (3 at n_in = 5632) weights out of cache cost 0.6x the rate.
constexpr int64_t kActBlockBytes = 128 * 1024;
constexpr int64_t kMinBlockTokens = 48;

// Lane masks for a tail of k < 8 floats: load 8 ints at kTailMask + 8 - k.
alignas(32) const int32_t kTailMask[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

// The k < 8 trailing 16-bit weights at element i, zero-extended to 8 values.
__m128i load_u16_tail(const uint8_t* row, int64_t i, int64_t k) {
  alignas(16) uint16_t buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const uint8_t* src = row + i * 2;
  for (int64_t j = 0; j < k; ++j) buf[j] = static_cast<uint16_t>(src[2 * j] | (src[2 * j + 1] << 8));
  return _mm_load_si128(reinterpret_cast<const __m128i*>(buf));
}

// Weight loaders: 8 weights at element i of a row -> 8 floats; tail() loads the
// k < 8 remaining ones and zeros.
struct LoadF32 {
  static __m256 full(const uint8_t* row, int64_t i) { return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i); }
  static __m256 tail(const uint8_t* row, int64_t i, int64_t k) {
    const __m256i m = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kTailMask + 8 - k));
    return _mm256_maskload_ps(reinterpret_cast<const float*>(row) + i, m);
  }
};

struct LoadF16 {
  static __m256 full(const uint8_t* row, int64_t i) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + i * 2)));
  }
  static __m256 tail(const uint8_t* row, int64_t i, int64_t k) { return _mm256_cvtph_ps(load_u16_tail(row, i, k)); }
};

struct LoadBF16 {
  static __m256 widen(__m128i h) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); }
  static __m256 full(const uint8_t* row, int64_t i) {
    return widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + i * 2)));
  }
  static __m256 tail(const uint8_t* row, int64_t i, int64_t k) { return widen(load_u16_tail(row, i, k)); }
};

// Tile of R rows starting at r x T tokens starting at t, f32 activations.
template <class Load, int R, int T>
void tile_f32(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa, size_t xa_stride, float* y,
              int64_t y_stride, int64_t r, int64_t t) {
  const uint8_t* wr[R];
  const float* xt[T];
  __m256 acc[R][T], total[R][T];
#pragma GCC unroll 8
  for (int a = 0; a < R; ++a) wr[a] = w + static_cast<size_t>(r + a) * w_row_bytes;
#pragma GCC unroll 8
  for (int b = 0; b < T; ++b) xt[b] = reinterpret_cast<const float*>(xa + static_cast<size_t>(t + b) * xa_stride);
#pragma GCC unroll 8
  for (int a = 0; a < R; ++a)
#pragma GCC unroll 8
    for (int b = 0; b < T; ++b) total[a][b] = _mm256_setzero_ps();
  for (int64_t kb = 0; kb < n_in; kb += kBlock) {
    const int64_t kend = kb + kBlock < n_in ? kb + kBlock : n_in;
#pragma GCC unroll 8
    for (int a = 0; a < R; ++a)
#pragma GCC unroll 8
      for (int b = 0; b < T; ++b) acc[a][b] = _mm256_setzero_ps();
    int64_t i = kb;
    for (; i + 8 <= kend; i += 8) {
      // T activations in registers, then one weight vector at a time.
      __m256 xv[T];
#pragma GCC unroll 8
      for (int b = 0; b < T; ++b) xv[b] = _mm256_loadu_ps(xt[b] + i);
#pragma GCC unroll 8
      for (int a = 0; a < R; ++a) {
        const __m256 wv = Load::full(wr[a], i);
#pragma GCC unroll 8
        for (int b = 0; b < T; ++b) acc[a][b] = _mm256_fmadd_ps(wv, xv[b], acc[a][b]);
      }
    }
    if (i < kend) {
      __m256 wv[R];
#pragma GCC unroll 8
      for (int a = 0; a < R; ++a) wv[a] = Load::tail(wr[a], i, kend - i);
#pragma GCC unroll 8
      for (int b = 0; b < T; ++b) {
        const __m256 xv = _mm256_loadu_ps(xt[b] + i);
#pragma GCC unroll 8
        for (int a = 0; a < R; ++a) acc[a][b] = _mm256_fmadd_ps(wv[a], xv, acc[a][b]);
      }
    }
#pragma GCC unroll 8
    for (int a = 0; a < R; ++a)
#pragma GCC unroll 8
      for (int b = 0; b < T; ++b) total[a][b] = _mm256_add_ps(total[a][b], acc[a][b]);
  }
#pragma GCC unroll 8
  for (int a = 0; a < R; ++a)
#pragma GCC unroll 8
    for (int b = 0; b < T; ++b) y[(t + b) * y_stride + r + a] = hsum(total[a][b]);
}

// A tile function for R rows and T tokens.
using TileFn = void (*)(const uint8_t*, size_t, int64_t, const uint8_t*, size_t, float*, int64_t, int64_t, int64_t);

// Tiles indexed by token count 1..kTileTokens, for one row count.
struct TileSet {
  TileFn by_tokens[kTileTokens + 1];
};

template <class Load, int R>
constexpr TileSet f32_tiles() {
  return TileSet{{nullptr, tile_f32<Load, R, 1>, tile_f32<Load, R, 2>, tile_f32<Load, R, 3>}};
}

// Runs every token of [t0, t1) through tiles of one row count starting at row r.
void sweep_tokens(const TileSet& set, const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                  size_t xa_stride, float* y, int64_t y_stride, int64_t r, int64_t t0, int64_t t1) {
  int64_t t = t0;
  for (; t + kTileTokens <= t1; t += kTileTokens)
    set.by_tokens[kTileTokens](w, w_row_bytes, n_in, xa, xa_stride, y, y_stride, r, t);
  if (t < t1) set.by_tokens[t1 - t](w, w_row_bytes, n_in, xa, xa_stride, y, y_stride, r, t);
}

// Runs the tiles over rows [r0, r1) x all tokens.
//   multi: 4-row tiles (also the GEMV of long rows);  single: 1-row tiles.
void drive(const TileSet& multi, const TileSet& single, size_t act_bytes_per_token,
           const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa, size_t xa_stride, int64_t n_tok,
           float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  if (n_tok == 1) {
    int64_t r = r0;
    if (n_in >= kGemvMultiMinIn)
      for (; r + kTileRows <= r1; r += kTileRows) multi.by_tokens[1](w, w_row_bytes, n_in, xa, xa_stride, y, y_stride, r, 0);
    for (; r < r1; ++r) single.by_tokens[1](w, w_row_bytes, n_in, xa, xa_stride, y, y_stride, r, 0);
    return;
  }
  int64_t block = kActBlockBytes / static_cast<int64_t>(act_bytes_per_token);
  block = block < kMinBlockTokens ? kMinBlockTokens : block / kTileTokens * kTileTokens;
  for (int64_t tb = 0; tb < n_tok; tb += block) {
    const int64_t te = tb + block < n_tok ? tb + block : n_tok;
    int64_t r = r0;
    for (; r + kTileRows <= r1; r += kTileRows) sweep_tokens(multi, w, w_row_bytes, n_in, xa, xa_stride, y, y_stride, r, tb, te);
    for (; r < r1; ++r) sweep_tokens(single, w, w_row_bytes, n_in, xa, xa_stride, y, y_stride, r, tb, te);
  }
}

constexpr TileSet kF32Multi = f32_tiles<LoadF32, kTileRows>();
constexpr TileSet kF32Single = f32_tiles<LoadF32, 1>();
constexpr TileSet kF16Multi = f32_tiles<LoadF16, kTileRows>();
constexpr TileSet kF16Single = f32_tiles<LoadF16, 1>();
constexpr TileSet kBF16Multi = f32_tiles<LoadBF16, kTileRows>();
constexpr TileSet kBF16Single = f32_tiles<LoadBF16, 1>();

}  // namespace

void float_rows_f32_avx2(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                           size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  drive(kF32Multi, kF32Single, float_act_row_bytes_f32(n_in), w, w_row_bytes, n_in, xa,
        xa_stride, n_tok, y, y_stride, r0, r1);
}

void float_rows_f16_avx2(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                           size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  drive(kF16Multi, kF16Single, float_act_row_bytes_f32(n_in), w, w_row_bytes, n_in, xa,
        xa_stride, n_tok, y, y_stride, r0, r1);
}

void float_rows_bf16_avx2(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                            size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  drive(kBF16Multi, kBF16Single, float_act_row_bytes_f32(n_in), w, w_row_bytes, n_in, xa,
        xa_stride, n_tok, y, y_stride, r0, r1);
}

}  // namespace sluice::cpu
