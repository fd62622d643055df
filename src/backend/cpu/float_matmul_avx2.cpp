// AVX2 + FMA + F16C kernels for F32 / F16 / BF16 weights (compiled with -mavx2
// -mfma -mf16c; only called when cpu_features() allows it) on the tiles and the
// driver of float_matmul_simd.h. Every helper has internal linkage.
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

#include <cstdint>

#include "backend/cpu/float_matmul.h"
#include "backend/cpu/float_matmul_simd.h"
#include "backend/cpu/vec_math_avx2.h"

namespace sluice::cpu {
namespace {

// Lane masks for a tail of k < 8 floats: load 8 ints at kTailMask + 8 - k.
alignas(32) const int32_t kTailMask[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

// The level struct of float_matmul_simd.h.
struct Avx2 {
  using F = __m256;
  using Tail = int64_t;  // the tail's element count
  static constexpr int kLanes = 8;
  static constexpr bool kActFirst = true;
  static constexpr int kTileRows = 4;
  static constexpr int kTileTokens = 3;
  // Rows at least this long decode 4 rows per tile (4 weight streams): on Zen 3
  // one F16 stream per core read 12-15 GB/s and four 17-20 at n_in 2048-5632 (in
  // a kernel benchmark, one thread); at n_in = 768 four were 0.85x of one.
  static constexpr int64_t kGemvMultiMinIn = 1024;
  // Elements per partial sum: each chain sums kBlock elements into a fresh
  // accumulator, then adds it to a running total (shorter rounding chains). Each
  // block costs a fixed switch of accumulators: at 256 the 4 x 3 F16 tile ran
  // 0.95x (0.86-0.97x) of its rate at 2048 (kernel benchmark, Zen 3, rows of
  // 768-5632 from memory).
  static constexpr int64_t kBlock = 2048;
  // Target bytes of activations per token block (a quarter of Zen 3's L2: the
  // block is swept once per 4-row group, whose weights stay in L1), but at least
  // kMinBlockTokens tokens: every block reads all the weights again, and with
  // fewer tokens (3 at n_in = 5632) weights out of cache cost 0.6x the rate.
  static constexpr int64_t kActBlockBytes = 128 * 1024;
  static constexpr int64_t kMinBlockTokens = 48;
  // No packed activations (float_matmul_simd.h): 3 strided rows a tile, and
  // packing ran this tile at 0.88-1.08x (Zen 5 at AVX2, rows of 768-5632) and
  // 0.8-1.2x on Zen 3 with 512 KB packs (behind at n_in 5632, where a pack
  // holds fewer tokens than a block; 128 KB packs: 0.4-0.8x). Taking a tile's
  // chains 512 elements at a time over every token tile, accumulators parked
  // in memory (the same bits, the tile's weights kept in L1), ran 0.85-0.9x.
  static constexpr size_t kPackBytes = 0;

  static F zero() { return _mm256_setzero_ps(); }
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static float hsum(F v) { return avx2::hsum(v); }
  static Tail tail(int64_t k) { return k; }
};

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

}  // namespace

RowsFn* const float_rows_f32_avx2 = float_rows<Avx2, F32Tile<Avx2, LoadF32>, float_act_row_bytes_f32>;
RowsFn* const float_rows_f16_avx2 = float_rows<Avx2, F32Tile<Avx2, LoadF16>, float_act_row_bytes_f32>;
RowsFn* const float_rows_bf16_avx2 = float_rows<Avx2, F32Tile<Avx2, LoadBF16>, float_act_row_bytes_f32>;

}  // namespace sluice::cpu
