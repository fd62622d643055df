#include "backend/reference_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/reference_ops.h"
#include "backend/rope_tables.h"
#include "base/check.h"
#include "kv/kv_store.h"
#include "quant/quant.h"

namespace sluice {
namespace {

class VectorBuffer final : public Buffer {
 public:
  explicit VectorBuffer(size_t bytes) : bytes_((bytes + 3) / 4) {}
  uint8_t* data() override { return reinterpret_cast<uint8_t*>(bytes_.data()); }
  size_t size() const override { return bytes_.size() * 4; }

 private:
  std::vector<float> bytes_;  // floats keep the data aligned for float access
};

float silu(float g) { return g / (1.0f + std::exp(-g)); }

}  // namespace

ReferenceBackend::ReferenceBackend() : pool_(std::make_unique<ThreadPool>(1)) {}

bool ReferenceBackend::supports(Op op, const OpTypes& types) const {
  // Every operator, training's included (ReferenceTrainOps); the experts'
  // activation is SwiGLU only so far.
  if (op == Op::kExpertFfn) return types.act == Activation::kSilu;
  return true;  // dot_row and dequantize_row cover every DType
}

std::unique_ptr<Buffer> ReferenceBackend::alloc(size_t bytes) { return std::make_unique<VectorBuffer>(bytes); }

void ReferenceBackend::reserve(const ScratchNeeds& n) {
  const auto kv = static_cast<size_t>(n.n_ctx * n.n_head_kv * n.head_dim);
  if (k_.size() < kv) k_.resize(kv), v_.resize(kv);
  if (scores_.size() < static_cast<size_t>(n.n_ctx)) scores_.resize(static_cast<size_t>(n.n_ctx));
  const int64_t ff = std::max(n.n_ff_expert, n.n_ff_shared);
  if (hidden_.size() < static_cast<size_t>(2 * ff)) hidden_.resize(static_cast<size_t>(2 * ff));
  if (y_.size() < static_cast<size_t>(n.n_embd)) y_.resize(static_cast<size_t>(n.n_embd));
}

StatusOr<KvStore> ReferenceBackend::create_kv(const KvLayout& layout, int64_t n_blocks) {
  return KvStore::create(layout, n_blocks);
}

void ReferenceBackend::copy_kv_block(KvStore& kv, int32_t src, int32_t dst) { kv.copy_block(src, dst); }

void ReferenceBackend::move_kv_block(const KvStore& from, int32_t src, KvStore& to, int32_t dst) {
  KvStore::move_block(from, src, to, dst);
}

void ReferenceBackend::embed(const WeightView& table, std::span<const int32_t> tokens, float scale, float* x) {
  const size_t rb = row_bytes(table.type, table.n_in);
  for (size_t t = 0; t < tokens.size(); ++t) {
    float* row = x + static_cast<int64_t>(t) * table.n_in;
    dequantize_row(table.type, table.data + static_cast<size_t>(tokens[t]) * rb, row, table.n_in);
    for (int64_t i = 0; i < table.n_in; ++i) row[i] *= scale;
  }
}

void ReferenceBackend::rope_tables(std::span<const int64_t> positions, std::span<const double> inv_freq, double magnitude,
                              float* cos_sin) {
  rope_cos_sin(positions, inv_freq, magnitude, cos_sin);
}

void ReferenceBackend::matmul(std::span<const MatmulOut> outs, const float* x, int64_t n_in, int64_t n_tok) {
  for (const MatmulOut& o : outs) {
    CHECK(o.w.n_in == n_in);
    reference_matmul_rows(o.w, x, o.y, n_tok);
  }
}

void ReferenceBackend::norm_matmul(const NormMatmulArgs& a) {
  ref::rmsnorm(a.x, a.norm, a.xn, a.n_tok, a.n_embd, a.eps);
  matmul(a.outs, a.xn, a.n_embd, a.n_tok);
}

void ReferenceBackend::glu_matmul(const GluMatmulArgs& a) {
  if (a.act == Activation::kGelu) ref::geglu(a.gate, a.up, a.gate, a.n_tok * a.n_ff);
  else ref::swiglu(a.gate, a.up, a.gate, a.n_tok * a.n_ff);
  reference_matmul_rows(a.out.w, a.gate, a.out.y, a.n_tok);
}

void ReferenceBackend::qkv_store(const QkvStoreArgs& a) {
  const int64_t n_q = a.n_head * a.head_dim;
  const int64_t n_kv = a.n_head_kv * a.head_dim;
  for (int64_t t = 0; t < a.n_tok; ++t) {
    float* q = a.q + t * n_q;
    float* k = a.k + t * n_kv;
    float* v = a.v + t * n_kv;
    for (int64_t i = 0; a.bq && i < n_q; ++i) q[i] += a.bq[i];
    for (int64_t i = 0; a.bk && i < n_kv; ++i) k[i] += a.bk[i];
    for (int64_t i = 0; a.bv && i < n_kv; ++i) v[i] += a.bv[i];
    for (int64_t h = 0; a.q_norm && h < a.n_head; ++h)
      ref::rmsnorm(q + h * a.head_dim, a.q_norm, q + h * a.head_dim, 1, a.head_dim, a.norm_eps);
    for (int64_t h = 0; a.k_norm && h < a.n_head_kv; ++h)
      ref::rmsnorm(k + h * a.head_dim, a.k_norm, k + h * a.head_dim, 1, a.head_dim, a.norm_eps);
    ref::rope(q, a.n_head, a.head_dim, a.n_rot, a.cos_sin + t * a.n_rot, a.rope);
    ref::rope(k, a.n_head_kv, a.head_dim, a.n_rot, a.cos_sin + t * a.n_rot, a.rope);
    a.kv->store_row(k, a.kv->k_layer(a.layer), a.kv_rows[t]);
    a.kv->store_row(v, a.kv->v_layer(a.layer), a.kv_rows[t]);
  }
}

void ReferenceBackend::attention(const AttentionArgs& a) {
  const KvStore& kv = *a.kv;
  const int64_t bs = kv.layout().block_size;
  const int64_t n_kv = a.n_head_kv * a.head_dim;
  const int64_t group = a.n_head / a.n_head_kv;
  // First position a query at position p attends to.
  auto lo_of = [&](int64_t p) { return a.window > 0 ? std::max<int64_t>(0, p - a.window + 1) : int64_t{0}; };
  for (const AttentionSeq& s : a.seqs) {
    const int64_t n_pos = s.pos0 + s.n_tok;
    CHECK(static_cast<size_t>(n_pos * n_kv) <= k_.size());
    // Rows before the first query's window are not read (their blocks may be freed).
    for (int64_t p = lo_of(s.pos0); p < n_pos; ++p) {
      const int64_t row = static_cast<int64_t>(s.block_table[p / bs]) * bs + p % bs;
      kv.load_row(kv.k_layer(a.layer), row, k_.data() + p * n_kv);
      kv.load_row(kv.v_layer(a.layer), row, v_.data() + p * n_kv);
    }
    for (int64_t t = 0; t < s.n_tok; ++t) {
      const int64_t last = s.pos0 + t;  // causal: positions first .. last
      const int64_t first = lo_of(last);
      for (int64_t h = 0; h < a.n_head; ++h) {
        const float* q = s.q + (t * a.n_head + h) * a.head_dim;
        const int64_t off = (h / group) * a.head_dim;
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t p = first; p <= last; ++p) {
          float dot = 0;
          for (int64_t i = 0; i < a.head_dim; ++i) dot += q[i] * k_[static_cast<size_t>(p * n_kv + off + i)];
          float sc = dot * a.scale;
          if (a.softcap > 0.0f) sc = a.softcap * std::tanh(sc / a.softcap);
          scores_[static_cast<size_t>(p)] = sc;
          mx = std::max(mx, sc);
        }
        double sum = 0;
        for (int64_t p = first; p <= last; ++p) sum += std::exp(static_cast<double>(scores_[static_cast<size_t>(p)] - mx));
        float* out = s.out + (t * a.n_head + h) * a.head_dim;
        for (int64_t i = 0; i < a.head_dim; ++i) {
          double acc = 0;
          for (int64_t p = first; p <= last; ++p)
            acc += std::exp(static_cast<double>(scores_[static_cast<size_t>(p)] - mx)) * v_[static_cast<size_t>(p * n_kv + off + i)];
          out[i] = static_cast<float>(acc / sum);
        }
      }
    }
  }
}

void ReferenceBackend::expert_ffn(const ExpertFfnArgs& a) {
  CHECK(a.act == Activation::kSilu);
  // One token through one expert of width n_ff, into y_.
  auto ffn = [&](const ExpertWeights& w, const float* x, int64_t n_ff) {
    float* g = hidden_.data();
    float* u = hidden_.data() + n_ff;
    reference_matmul_rows(w.gate, x, g, 1);
    reference_matmul_rows(w.up, x, u, 1);
    for (int64_t i = 0; i < n_ff; ++i) g[i] = silu(g[i]) * u[i];
    reference_matmul_rows(w.down, g, y_.data(), 1);
  };
  if (a.next)  // every selected expert handed out (landed) before any is read
    while ((*a.next)() >= 0) {
    }
  for (int64_t t = 0; t < a.n_tok; ++t) {
    const float* x = a.x + t * a.n_embd;
    float* o = a.out + t * a.n_embd;
    std::fill_n(o, a.n_embd, 0.0f);
    for (int64_t j = 0; j < a.n_used; ++j) {
      ffn(a.experts[static_cast<size_t>(a.ids[t * a.n_used + j])], x, a.n_ff);
      const float wt = a.weights[t * a.n_used + j];
      for (int64_t i = 0; i < a.n_embd; ++i) o[i] += wt * y_[static_cast<size_t>(i)];
    }
    if (a.shared) {
      ffn(*a.shared, x, a.n_ff_shared);
      const float g = a.shared_gate ? shared_gate_weight(a.shared_gate, x, a.n_embd) : 1.0f;
      for (int64_t i = 0; i < a.n_embd; ++i) o[i] += g * y_[static_cast<size_t>(i)];
    }
  }
}

void ReferenceBackend::add(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void ReferenceBackend::rmsnorm(const float* x, const float* norm, float eps, float* out, int64_t n_tok, int64_t n) {
  ref::rmsnorm(x, norm, out, n_tok, n, eps);
}

void ReferenceBackend::logits(const LogitsArgs& a) {
  for (int64_t i = 0; i < a.n_out; ++i) {
    ref::rmsnorm(a.x + a.rows[i] * a.n_embd, a.norm, a.xn + i * a.n_embd, 1, a.n_embd, a.eps);
  }
  reference_matmul_rows(a.output, a.xn, a.logits, a.n_out);
}

}  // namespace sluice
