#include "backend/cpu/train_attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "base/check.h"

namespace sluice::cpu {
namespace {

constexpr int64_t kMaxNr = 32;  // the widest register tile of any level
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

int64_t round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

// Scratch handed out in 64-byte aligned pieces.
struct Carver {
  float* p;
  float* take(int64_t n) {
    float* r = p;
    p += round_up(n, 16);
    return r;
  }
};

// Floats of an A block of up to `rows` rows by k (pack_a pads rows to mr).
int64_t a_block(int64_t rows, int64_t k) { return (rows + 8) * k + kPackSlackFloats; }

// The keys [lo, hi) of a tile starting at position j0 with bk keys that the
// query at position p reads (causal, within the window); lo >= hi if none.
struct Span {
  int64_t lo, hi;
};
Span key_span(int64_t p, int64_t j0, int64_t bk, int64_t window) {
  const int64_t first = window > 0 ? std::max<int64_t>(0, p - window + 1) : 0;
  return {std::clamp<int64_t>(first - j0, 0, bk), std::clamp<int64_t>(p + 1 - j0, 0, bk)};
}

// Forward of queries [i0, i0 + bq) of head h of sequence sq.
void forward_block(const TrainKernels& kn, const TrainAttentionArgs& a, const TrainSeq& sq, int64_t h, int64_t i0,
                   float* scratch) {
  const int64_t hd = a.head_dim, hp = round_up(hd, kMaxNr);
  const int64_t q_stride = a.n_head * hd, kv_stride = a.n_head_kv * hd;
  const int64_t kvh = h / (a.n_head / a.n_head_kv);
  const int64_t bq = std::min(kAttnQueries, sq.n_tok - i0);
  Carver cv{scratch};
  float* qa = cv.take(a_block(kAttnQueries, hd));
  float* kt = cv.take(kAttnKeys * hp);
  float* vb = cv.take(kAttnKeys * hp);
  float* s = cv.take(kAttnQueries * kAttnKeys);
  float* pa = cv.take(a_block(kAttnQueries, kAttnKeys));
  float* o = cv.take(kAttnQueries * hp);
  float* m = cv.take(kAttnQueries);
  float* l = cv.take(kAttnQueries);

  const float* q = a.q + sq.tok0 * q_stride + h * hd;  // row i: q + i * q_stride
  const float* k = a.k + sq.tok0 * kv_stride + kvh * hd;
  const float* v = a.v + sq.tok0 * kv_stride + kvh * hd;
  pack_a(kn, {.p = q, .rs = q_stride, .cs = 1, .scale = a.scale}, i0, bq, 0, hd, qa);
  std::fill(o, o + bq * hp, 0.0f);
  std::fill(m, m + bq, kNegInf);
  std::fill(l, l + bq, 0.0f);
  const int64_t lo = a.window > 0 ? std::max<int64_t>(0, i0 - a.window + 1) : 0;
  for (int64_t j0 = lo; j0 < i0 + bq; j0 += kAttnKeys) {
    const int64_t bk = std::min(kAttnKeys, i0 + bq - j0);
    pack_b(kn, {.p = k, .rs = 1, .cs = kv_stride}, 0, hd, j0, bk, kt);  // K^T: [hd, bk]
    gemm_packed(kn, bq, bk, hd, qa, kt, s, kAttnKeys, false);
    for (int64_t r = 0; r < bq; ++r) {
      float* row = s + r * kAttnKeys;
      const Span sp = key_span(i0 + r, j0, bk, a.window);
      if (sp.lo >= sp.hi) {
        std::fill(row, row + bk, 0.0f);
        continue;
      }
      const int64_t n = sp.hi - sp.lo;
      if (a.softcap > 0) kn.softcap(row + sp.lo, n, a.softcap);
      const float m_new = std::max(m[r], kn.max(row + sp.lo, n));
      const float alpha = m[r] == kNegInf ? 0.0f : std::exp(m[r] - m_new);
      const double sum = kn.exp_sum(row + sp.lo, m_new, row + sp.lo, n);
      std::fill(row, row + sp.lo, 0.0f);
      std::fill(row + sp.hi, row + bk, 0.0f);
      l[r] = l[r] * alpha + static_cast<float>(sum);
      m[r] = m_new;
      if (alpha != 1.0f)
        for (int64_t d = 0; d < hd; ++d) o[r * hp + d] *= alpha;
    }
    pack_a(kn, {.p = s, .rs = kAttnKeys, .cs = 1}, 0, bq, 0, bk, pa);
    pack_b(kn, {.p = v, .rs = kv_stride, .cs = 1}, j0, bk, 0, hd, vb);
    gemm_packed(kn, bq, hd, bk, pa, vb, o, hp, true);
  }
  for (int64_t r = 0; r < bq; ++r) {
    const int64_t t = sq.tok0 + i0 + r;
    const float inv = 1.0f / l[r];
    float* out = a.out + t * q_stride + h * hd;
    for (int64_t d = 0; d < hd; ++d) out[d] = o[r * hp + d] * inv;
    a.lse[t * a.n_head + h] = m[r] + std::log(l[r]);
  }
}

// Backward of kv head g of sequence sq: its dK and dV rows and the dQ rows of
// the query heads that read it.
void backward_unit(const TrainKernels& kn, const TrainAttentionBackArgs& b, const TrainSeq& sq, int64_t g,
                   float* scratch) {
  const TrainAttentionArgs& a = b.fwd;
  const int64_t hd = a.head_dim, hp = round_up(hd, kMaxNr);
  const int64_t q_stride = a.n_head * hd, kv_stride = a.n_head_kv * hd;
  const int64_t group = a.n_head / a.n_head_kv;
  const int64_t n_tok = sq.n_tok;
  Carver cv{scratch};
  float* qa = cv.take(a_block(kAttnQueries, hd));
  float* doa = cv.take(a_block(kAttnQueries, hd));
  float* kt = cv.take(kAttnKeys * hp);
  float* vt = cv.take(kAttnKeys * hp);
  float* kb = cv.take(kAttnKeys * hp);
  float* s = cv.take(kAttnQueries * kAttnKeys);
  float* p = cv.take(kAttnQueries * kAttnKeys);
  float* ds = cv.take(kAttnQueries * kAttnKeys);  // dP, then dS in place
  float* pa = cv.take(a_block(kAttnQueries, kAttnKeys));
  float* pt = cv.take(a_block(kAttnKeys, kAttnQueries));
  float* rows_b = cv.take(kAttnQueries * hp);  // dO_i, then Q_i as a B panel
  float* dk_acc = cv.take(kAttnKeys * hp);
  float* dv_acc = cv.take(kAttnKeys * hp);
  float* dsum = cv.take(n_tok * group);  // [n_tok, group] D = dO . out

  for (int64_t i = 0; i < n_tok; ++i) {
    for (int64_t h = 0; h < group; ++h) {
      const int64_t at = (sq.tok0 + i) * q_stride + (g * group + h) * hd;
      double d = 0;
      for (int64_t e = 0; e < hd; ++e) d += static_cast<double>(b.dout[at + e]) * a.out[at + e];
      dsum[i * group + h] = static_cast<float>(d);
    }
  }

  const float* k = a.k + sq.tok0 * kv_stride + g * hd;
  const float* v = a.v + sq.tok0 * kv_stride + g * hd;
  for (int64_t i = 0; i < n_tok; ++i) {
    float* dq = b.dq + (sq.tok0 + i) * q_stride + g * group * hd;
    std::fill(dq, dq + group * hd, 0.0f);
  }
  for (int64_t j0 = 0; j0 < n_tok; j0 += kAttnKeys) {
    const int64_t bk = std::min(kAttnKeys, n_tok - j0);
    pack_b(kn, {.p = k, .rs = 1, .cs = kv_stride}, 0, hd, j0, bk, kt);  // K_j^T: [hd, bk]
    pack_b(kn, {.p = v, .rs = 1, .cs = kv_stride}, 0, hd, j0, bk, vt);  // V_j^T: [hd, bk]
    pack_b(kn, {.p = k, .rs = kv_stride, .cs = 1}, j0, bk, 0, hd, kb);  // K_j:   [bk, hd]
    std::fill(dk_acc, dk_acc + bk * hp, 0.0f);
    std::fill(dv_acc, dv_acc + bk * hp, 0.0f);
    // Queries that read a key of this tile: from j0 up to the window's reach.
    const int64_t q_end = a.window > 0 ? std::min(n_tok, j0 + bk - 1 + a.window) : n_tok;
    for (int64_t i0 = j0; i0 < q_end; i0 += kAttnQueries) {
      const int64_t bq = std::min(kAttnQueries, q_end - i0);
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        const float* q = a.q + sq.tok0 * q_stride + h * hd;
        const float* dout = b.dout + sq.tok0 * q_stride + h * hd;
        float* dq = b.dq + sq.tok0 * q_stride + h * hd;
        pack_a(kn, {.p = q, .rs = q_stride, .cs = 1, .scale = a.scale}, i0, bq, 0, hd, qa);
        gemm_packed(kn, bq, bk, hd, qa, kt, s, kAttnKeys, false);    // S = scale Q K^T
        pack_a(kn, {.p = dout, .rs = q_stride, .cs = 1}, i0, bq, 0, hd, doa);
        gemm_packed(kn, bq, bk, hd, doa, vt, ds, kAttnKeys, false);  // dP = dO V^T
        for (int64_t r = 0; r < bq; ++r) {
          float* srow = s + r * kAttnKeys;
          float* prow = p + r * kAttnKeys;
          float* drow = ds + r * kAttnKeys;
          const int64_t t = i0 + r;
          const Span sp = key_span(t, j0, bk, a.window);
          std::fill(prow, prow + bk, 0.0f);
          if (sp.lo >= sp.hi) {
            std::fill(drow, drow + bk, 0.0f);
            continue;
          }
          const int64_t n = sp.hi - sp.lo;
          if (a.softcap > 0) kn.softcap(srow + sp.lo, n, a.softcap);
          kn.exp_sum(srow + sp.lo, a.lse[(sq.tok0 + t) * a.n_head + h], prow + sp.lo, n);
          const float dd = dsum[t * group + h - g * group];
          std::fill(drow, drow + sp.lo, 0.0f);
          std::fill(drow + sp.hi, drow + bk, 0.0f);
          for (int64_t j = sp.lo; j < sp.hi; ++j) {
            float x = prow[j] * (drow[j] - dd);
            if (a.softcap > 0) {
              const float c = srow[j] / a.softcap;
              x *= 1.0f - c * c;
            }
            drow[j] = x * a.scale;
          }
        }
        pack_a(kn, {.p = p, .rs = 1, .cs = kAttnKeys}, 0, bk, 0, bq, pt);  // P^T
        pack_b(kn, {.p = dout, .rs = q_stride, .cs = 1}, i0, bq, 0, hd, rows_b);
        gemm_packed(kn, bk, hd, bq, pt, rows_b, dv_acc, hp, true);  // dV += P^T dO
        pack_a(kn, {.p = ds, .rs = 1, .cs = kAttnKeys}, 0, bk, 0, bq, pt);  // dS^T
        pack_b(kn, {.p = q, .rs = q_stride, .cs = 1}, i0, bq, 0, hd, rows_b);
        gemm_packed(kn, bk, hd, bq, pt, rows_b, dk_acc, hp, true);  // dK += dS^T Q
        pack_a(kn, {.p = ds, .rs = kAttnKeys, .cs = 1}, 0, bq, 0, bk, pa);
        gemm_packed(kn, bq, hd, bk, pa, kb, dq + i0 * q_stride, q_stride, true);  // dQ += dS K
      }
    }
    for (int64_t r = 0; r < bk; ++r) {
      const int64_t row = (sq.tok0 + j0 + r) * kv_stride + g * hd;
      std::copy(dk_acc + r * hp, dk_acc + r * hp + hd, b.dk + row);
      std::copy(dv_acc + r * hp, dv_acc + r * hp + hd, b.dv + row);
    }
  }
}

void check_args(const TrainAttentionArgs& a) {
  CHECK(a.n_head > 0 && a.n_head_kv > 0 && a.n_head % a.n_head_kv == 0 && a.head_dim > 0);
  CHECK(a.window >= 0);
}

}  // namespace

size_t train_attention_scratch_floats(int64_t head_dim, int64_t n_ctx, int64_t n_head) {
  const int64_t hp = round_up(head_dim, kMaxNr);
  auto r = [](int64_t n) { return round_up(n, 16); };
  const int64_t backward = 2 * r(a_block(kAttnQueries, head_dim)) + 3 * r(kAttnKeys * hp) +
                           3 * r(kAttnQueries * kAttnKeys) + r(a_block(kAttnQueries, kAttnKeys)) +
                           r(a_block(kAttnKeys, kAttnQueries)) + r(kAttnQueries * hp) + 2 * r(kAttnKeys * hp) +
                           r(n_ctx * n_head);
  const int64_t forward = r(a_block(kAttnQueries, head_dim)) + 2 * r(kAttnKeys * hp) + r(kAttnQueries * kAttnKeys) +
                          r(a_block(kAttnQueries, kAttnKeys)) + r(kAttnQueries * hp) + 2 * r(kAttnQueries);
  return static_cast<size_t>(std::max(forward, backward));
}

void train_attention(const TrainKernels& kn, ThreadPool& pool, const TrainAttentionArgs& a, float* scratch,
                     size_t per_thread) {
  check_args(a);
  int64_t n_ctx = 0;
  for (const TrainSeq& sq : a.seqs) n_ctx = std::max(n_ctx, sq.n_tok);
  CHECK(per_thread >= train_attention_scratch_floats(a.head_dim, n_ctx, a.n_head));
  // Units: (sequence, query block, head), the last query blocks (the longest)
  // first so the threads finish together.
  int64_t n_units = 0;
  for (const TrainSeq& sq : a.seqs) n_units += (sq.n_tok + kAttnQueries - 1) / kAttnQueries * a.n_head;
  std::atomic<int64_t> next{0};
  pool.run_on_all([&](int ti, int) {
    float* mine = scratch + static_cast<size_t>(ti) * per_thread;
    for (;;) {
      int64_t u = next.fetch_add(1, std::memory_order_relaxed);
      if (u >= n_units) return;
      for (const TrainSeq& sq : a.seqs) {
        const int64_t n_blocks = (sq.n_tok + kAttnQueries - 1) / kAttnQueries;
        if (u < n_blocks * a.n_head) {
          const int64_t blk = n_blocks - 1 - u / a.n_head;
          forward_block(kn, a, sq, u % a.n_head, blk * kAttnQueries, mine);
          break;
        }
        u -= n_blocks * a.n_head;
      }
    }
  });
}

void train_attention_backward(const TrainKernels& kn, ThreadPool& pool, const TrainAttentionBackArgs& b,
                              float* scratch, size_t per_thread) {
  const TrainAttentionArgs& a = b.fwd;
  check_args(a);
  int64_t n_ctx = 0;
  for (const TrainSeq& sq : a.seqs) n_ctx = std::max(n_ctx, sq.n_tok);
  CHECK(per_thread >= train_attention_scratch_floats(a.head_dim, n_ctx, a.n_head));
  const int64_t n_units = static_cast<int64_t>(a.seqs.size()) * a.n_head_kv;
  std::atomic<int64_t> next{0};
  pool.run_on_all([&](int ti, int) {
    float* mine = scratch + static_cast<size_t>(ti) * per_thread;
    for (;;) {
      const int64_t u = next.fetch_add(1, std::memory_order_relaxed);
      if (u >= n_units) return;
      backward_unit(kn, b, a.seqs[static_cast<size_t>(u / a.n_head_kv)], u % a.n_head_kv, mine);
    }
  });
}

}  // namespace sluice::cpu
