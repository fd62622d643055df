// AVX-512 fast ops (compiled with -mavx512*; called only when the CPU has it).
// Every helper has internal linkage; tails use masked loads and stores.
#include <immintrin.h>

#include "backend/cpu/fast_ops_isa.h"

// GCC 12 reports the deliberately undefined lanes inside <immintrin.h> helpers
// as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace sluice::cpu::fast {
namespace {

// Positions per online-softmax block (one vector of scores).
constexpr int64_t kPosBlock = 16;
// K/V rows of a block are copied to buffers with rows kPackStride floats apart
// (not a power of two, so rows spread over L1 sets) for head_dim up to kMaxPackDim.
constexpr int64_t kMaxPackDim = 256;
constexpr int64_t kPackStride = kMaxPackDim + 16;

__mmask16 tail_mask(int64_t k) { return static_cast<__mmask16>((1u << k) - 1u); }

// Masked stores are slow on some cores (Zen 4): store plainly when all lanes are live.
inline void store_masked(float* p, __mmask16 m, __m512 v) {
  if (m == 0xFFFF) _mm512_storeu_ps(p, v);
  else _mm512_mask_storeu_ps(p, m, v);
}

float hsum(__m512 v) {
  const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  b = _mm_add_ps(b, _mm_movehl_ps(b, b));
  b = _mm_add_ss(b, _mm_movehdup_ps(b));
  return _mm_cvtss_f32(b);
}

float hmax(__m512 v) {
  const __m256 a = _mm256_max_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 b = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  b = _mm_max_ps(b, _mm_movehl_ps(b, b));
  b = _mm_max_ss(b, _mm_movehdup_ps(b));
  return _mm_cvtss_f32(b);
}

// e^x, relative error ~2 ulp: x = n ln2 + r, |r| <= ln2/2, e^r by its degree-7
// Taylor polynomial, scaled by 2^n with vscalefps (underflows to 0 below
// about -103, overflows to inf above 88.7). NaN propagates.
__m512 exp_ps(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);  // max(c, NaN) = NaN
  x = _mm512_min_ps(_mm512_set1_ps(89.0f), x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

float exp_scalar(float x) { return _mm_cvtss_f32(_mm512_castps512_ps128(exp_ps(_mm512_set1_ps(x)))); }

}  // namespace

void rmsnorm_avx512(const float* x, const float* weight, float* out, int64_t n_tokens, int64_t n, float eps) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xt = x + t * n;
    float* ot = out + t * n;
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
      const __m512 a = _mm512_loadu_ps(xt + i), b = _mm512_loadu_ps(xt + i + 16);
      s0 = _mm512_fmadd_ps(a, a, s0);
      s1 = _mm512_fmadd_ps(b, b, s1);
    }
    for (; i < n; i += 16) {
      const __m512 a = _mm512_maskz_loadu_ps(tail_mask(n - i < 16 ? n - i : 16), xt + i);
      s0 = _mm512_fmadd_ps(a, a, s0);
    }
    const float ss = hsum(_mm512_add_ps(s0, s1)) / static_cast<float>(n);
    const __m512 inv = _mm512_set1_ps(1.0f / _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(ss + eps))));
    for (i = 0; i < n; i += 16) {
      const __mmask16 m = tail_mask(n - i < 16 ? n - i : 16);
      const __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, xt + i), inv),
                                     _mm512_maskz_loadu_ps(m, weight + i));
      store_masked(ot + i, m, v);
    }
  }
}

void rope_avx512(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cos_sin, bool neox) {
  const int64_t half = n_rot / 2;
  // Lane i of even / odd: element 2i / 2i + 1 of a 32-float (cos, sin) pair run.
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  for (int64_t h = 0; h < n_heads; ++h) {
    float* xh = x + h * head_dim;
    if (!neox) {
      // x = [a0 b0 a1 b1 ...], cos_sin = [c0 s0 c1 s1 ...]: even lanes a c - b s, odd lanes b c + a s.
      for (int64_t e = 0; e < n_rot; e += 16) {
        const __mmask16 m = tail_mask(n_rot - e < 16 ? n_rot - e : 16);
        const __m512 v = _mm512_maskz_loadu_ps(m, xh + e);
        const __m512 cs = _mm512_maskz_loadu_ps(m, cos_sin + e);
        const __m512 c = _mm512_moveldup_ps(cs), s = _mm512_movehdup_ps(cs);
        const __m512 swapped = _mm512_permute_ps(v, 0xB1);
        store_masked(xh + e, m, _mm512_fmaddsub_ps(v, c, _mm512_mul_ps(swapped, s)));
      }
    } else {
      // a = x[i], b = x[i + half]: a c - b s, a s + b c.
      for (int64_t i = 0; i < half; i += 16) {
        const int64_t k = half - i < 16 ? half - i : 16;
        const __mmask16 m = tail_mask(k);
        const __m512 lo = _mm512_maskz_loadu_ps(tail_mask(2 * k < 16 ? 2 * k : 16), cos_sin + 2 * i);
        const __m512 hi = _mm512_maskz_loadu_ps(tail_mask(2 * k > 16 ? 2 * k - 16 : 0), cos_sin + 2 * i + 16);
        const __m512 c = _mm512_permutex2var_ps(lo, even, hi), s = _mm512_permutex2var_ps(lo, odd, hi);
        const __m512 a = _mm512_maskz_loadu_ps(m, xh + i), b = _mm512_maskz_loadu_ps(m, xh + i + half);
        store_masked(xh + i, m, _mm512_fmsub_ps(a, c, _mm512_mul_ps(b, s)));
        store_masked(xh + i + half, m, _mm512_fmadd_ps(a, s, _mm512_mul_ps(b, c)));
      }
    }
  }
}

void swiglu_avx512(const float* gate, const float* up, float* out, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i < 16 ? n - i : 16);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 silu = _mm512_div_ps(g, _mm512_add_ps(one, exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), g))));
    store_masked(out + i, m, _mm512_mul_ps(silu, _mm512_maskz_loadu_ps(m, up + i)));
  }
}

void add_avx512(const float* a, const float* b, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, _mm512_add_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(out + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i)));
  }
}

namespace {

// Sums of 16 vectors, lane j of the result = sum of the lanes of v[j], by a fixed
// tree (identical for every j): pairs within 128-bit lanes, then 128-bit lanes.
__attribute__((always_inline)) inline __m512 transpose_sum16(const __m512* v) {
  __m512 t[8], u[4];
  for (int i = 0; i < 8; ++i)  // per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3]
    t[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  for (int i = 0; i < 4; ++i) {  // per 128-bit lane L: [a_L, b_L, c_L, d_L] for positions 4i..4i+3
    const __m512d a = _mm512_castps_pd(t[2 * i]), b = _mm512_castps_pd(t[2 * i + 1]);
    u[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  // 128-bit lanes: (L0 + L1), (L2 + L3), then their sum, positions in order.
  const __m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88), _mm512_shuffle_f32x4(u[0], u[1], 0xDD));
  const __m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x88), _mm512_shuffle_f32x4(u[2], u[3], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, 0x88), _mm512_shuffle_f32x4(s01, s23, 0xDD));
}

// Scores q . k_j for the 16 K rows of a packed block (rows kPackStride apart,
// rows past the block's end zero): one accumulator per row over head_dim, then
// transpose_sum16.
__m512 scores16_packed(const float* q, const float* kp, int64_t hd) {
  __m512 acc[kPosBlock];
  for (int j = 0; j < kPosBlock; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t d = 0; d < hd; d += 16) {
    const __mmask16 m = tail_mask(hd - d < 16 ? hd - d : 16);
    const __m512 qv = _mm512_maskz_loadu_ps(m, q + d);
#pragma GCC unroll 16
    for (int j = 0; j < kPosBlock; ++j)
      acc[j] = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, kp + j * kPackStride + d), acc[j]);
  }
  return transpose_sum16(acc);
}

// The same sums for rows in place, kv_stride apart (head_dim > kMaxPackDim);
// rows past nb repeat row 0 (the caller masks their scores).
__m512 scores16_strided(const float* q, const float* kb, int64_t kv_stride, int64_t nb, int64_t hd) {
  const float* rows[kPosBlock];
  for (int64_t j = 0; j < kPosBlock; ++j) rows[j] = kb + (j < nb ? j : 0) * kv_stride;
  __m512 acc[kPosBlock];
  for (int j = 0; j < kPosBlock; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t d = 0; d < hd; d += 16) {
    const __mmask16 m = tail_mask(hd - d < 16 ? hd - d : 16);
    const __m512 qv = _mm512_maskz_loadu_ps(m, q + d);
#pragma GCC unroll 16
    for (int j = 0; j < kPosBlock; ++j) acc[j] = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, rows[j] + d), acc[j]);
  }
  return transpose_sum16(acc);
}

// acc[0 .. 16 NV) (masked to n floats) = acc * alpha + sum_j p[j] v_j, j in order.
template <int NV>
void update_acc(float* acc, int64_t n, float alpha, const float* p, const float* vb, int64_t kv_stride, int64_t nb) {
  __m512 a[NV];
  __mmask16 m[NV];
  const __m512 av = _mm512_set1_ps(alpha);
#pragma GCC unroll 8
  for (int i = 0; i < NV; ++i) {
    m[i] = tail_mask(n - 16 * i < 16 ? n - 16 * i : 16);
    a[i] = _mm512_mul_ps(_mm512_maskz_loadu_ps(m[i], acc + 16 * i), av);
  }
  for (int64_t j = 0; j < nb; ++j) {
    const __m512 pj = _mm512_set1_ps(p[j]);
    const float* vj = vb + j * kv_stride;
#pragma GCC unroll 8
    for (int i = 0; i < NV; ++i) a[i] = _mm512_fmadd_ps(pj, _mm512_maskz_loadu_ps(m[i], vj + 16 * i), a[i]);
  }
#pragma GCC unroll 8
  for (int i = 0; i < NV; ++i) store_masked(acc + 16 * i, m[i], a[i]);
}

using UpdateFn = void (*)(float*, int64_t, float, const float*, const float*, int64_t, int64_t);
constexpr UpdateFn kUpdate[9] = {nullptr,        update_acc<1>, update_acc<2>, update_acc<3>, update_acc<4>,
                                 update_acc<5>, update_acc<6>, update_acc<7>, update_acc<8>};

// Copies rows [0, nb) of hd floats, src_stride apart, to dst (kPackStride
// apart); rows nb .. kPosBlock-1 become zero when zero_tail.
void pack_rows(const float* src, int64_t src_stride, int64_t nb, int64_t hd, float* dst, bool zero_tail) {
  for (int64_t j = 0; j < kPosBlock; ++j) {
    if (j >= nb && !zero_tail) break;
    for (int64_t d = 0; d < hd; d += 16) {
      const __mmask16 m = tail_mask(hd - d < 16 ? hd - d : 16);
      // Whole vectors: the lanes past hd land in the row's padding.
      const __m512 v = j < nb ? _mm512_maskz_loadu_ps(m, src + j * src_stride + d) : _mm512_setzero_ps();
      _mm512_store_ps(dst + j * kPackStride + d, v);
    }
  }
}

}  // namespace

// Blocks of 16 positions; per block and head: a vector of 16 scores, the new
// max, one rescale of (l, acc) when it grew, then l += sum p and acc += p_j v_j
// in position order (see fast_ops.cpp for the scalar statement).
//
// Cached rows of one KV head sit kv_stride apart, typically a power of two
// (n_head_kv * head_dim * 4 bytes), so a block's rows map to the same few L1
// sets and evict each other before the group's next query head reads them. The
// block is first copied to two contiguous buffers that every head then reads
// (the arithmetic is the same either way); blocks are prefetched two ahead,
// since the stream prefetchers do not follow page-sized strides.
void attn_chunk_avx512(const AttnChunk& c) {
  const int64_t hd = c.head_dim;
  const float neg_inf = -__builtin_inff();
  for (int64_t g = 0; g < c.n_q; ++g) {
    float* st = c.state + g * c.state_stride;
    st[0] = neg_inf;
    st[1] = 0.0f;
    for (int64_t d = 0; d < hd; ++d) st[2 + d] = 0.0f;
  }
  alignas(64) float p[kPosBlock];
  alignas(64) float k_pack[kPosBlock * kPackStride];
  alignas(64) float v_pack[kPosBlock * kPackStride];
  const bool pack = hd <= kMaxPackDim;
  const int64_t v_stride = pack ? kPackStride : c.kv_stride;
  for (int64_t jb = c.j0; jb < c.j1; jb += kPosBlock) {
    const int64_t nb = c.j1 - jb < kPosBlock ? c.j1 - jb : kPosBlock;
    const __mmask16 live = tail_mask(nb);
    const float* kb = c.k + jb * c.kv_stride;
    const float* vb = c.v + jb * c.kv_stride;
    // Prefetch the block after next into L2 (T1): measured best on Zen 4.
    const int64_t ahead = jb + 2 * kPosBlock;
    const int64_t n_ahead = c.j1 - ahead < kPosBlock ? c.j1 - ahead : kPosBlock;
    for (int64_t j = 0; j < n_ahead; ++j) {
      const char* kn = reinterpret_cast<const char*>(c.k + (ahead + j) * c.kv_stride);
      const char* vn = reinterpret_cast<const char*>(c.v + (ahead + j) * c.kv_stride);
      for (int64_t off = 0; off < hd * 4; off += 64) {
        _mm_prefetch(kn + off, _MM_HINT_T1);
        _mm_prefetch(vn + off, _MM_HINT_T1);
      }
    }
    if (pack) {
      pack_rows(kb, c.kv_stride, nb, hd, k_pack, true);
      pack_rows(vb, c.kv_stride, nb, hd, v_pack, false);
      kb = k_pack;
      vb = v_pack;
    }
    for (int64_t g = 0; g < c.n_q; ++g) {
      const float* q = c.q + g * c.q_stride;
      float* st = c.state + g * c.state_stride;
      const __m512 raw = pack ? scores16_packed(q, kb, hd) : scores16_strided(q, kb, c.kv_stride, nb, hd);
      const __m512 sv = _mm512_mask_mov_ps(_mm512_set1_ps(neg_inf), live, _mm512_mul_ps(raw, _mm512_set1_ps(c.scale)));
      const float bm = hmax(sv);
      float alpha = 1.0f;
      if (bm > st[0]) {
        alpha = exp_scalar(st[0] - bm);
        st[0] = bm;
      }
      const __m512 pv = _mm512_maskz_mov_ps(live, exp_ps(_mm512_sub_ps(sv, _mm512_set1_ps(st[0]))));
      _mm512_store_ps(p, pv);
      st[1] = st[1] * alpha + hsum(pv);
      for (int64_t d = 0; d < hd; d += 128) {
        const int64_t n = hd - d < 128 ? hd - d : 128;
        kUpdate[(n + 15) / 16](st + 2 + d, n, alpha, p, vb + d, v_stride, nb);
      }
    }
  }
}

}  // namespace sluice::cpu::fast
