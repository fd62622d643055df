#include "backend/reference_train_ops.h"

#include <algorithm>
#include <cmath>

#include "backend/train_math.h"
#include "base/check.h"
#include "quant/quant.h"

namespace sluice {
namespace {

constexpr double kSqrt2OverPi = 0.79788456080286535588;

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// act(g) and act'(g) as the forward's glu_matmul defines act.
double act_value(Activation act, double g) {
  if (act == Activation::kSilu) return g * sigmoid(g);
  return 0.5 * g * (1.0 + std::tanh(kSqrt2OverPi * (g + 0.044715 * g * g * g)));
}

double act_derivative(Activation act, double g) {
  if (act == Activation::kSilu) {
    const double s = sigmoid(g);
    return s * (1.0 + g * (1.0 - s));
  }
  const double th = std::tanh(kSqrt2OverPi * (g + 0.044715 * g * g * g));
  return 0.5 * (1.0 + th) + 0.5 * g * (1.0 - th * th) * kSqrt2OverPi * (1.0 + 3.0 * 0.044715 * g * g);
}

// The first position a query at position p reads.
int64_t first_position(int64_t p, int64_t window) { return window > 0 ? std::max<int64_t>(0, p - window + 1) : 0; }

// One score: scale * q . k, soft-capped.
double score(const float* q, const float* k, int64_t d, double scale, double softcap) {
  double s = 0;
  for (int64_t i = 0; i < d; ++i) s += static_cast<double>(q[i]) * k[i];
  s *= scale;
  if (softcap > 0) s = softcap * std::tanh(s / softcap);
  return s;
}

}  // namespace

void reference_lora(const LoraArgs& a) {
  for (const LoraSegment& sg : a.segs) {
    for (int64_t t = sg.tok0; t < sg.tok0 + sg.n_tok; ++t) {
      const float* x = a.x + t * a.n_in;
      double u[256];
      CHECK(sg.rank <= 256);
      for (int64_t r = 0; r < sg.rank; ++r) {
        double s = 0;
        for (int64_t i = 0; i < a.n_in; ++i) s += static_cast<double>(sg.a[r * a.n_in + i]) * x[i];
        u[r] = static_cast<float>(s);  // kept in f32, as u is
        if (a.u != nullptr) a.u[t * a.u_stride + r] = static_cast<float>(s);
      }
      float* y = a.y + t * a.n_out;
      for (int64_t o = 0; o < a.n_out; ++o) {
        double s = 0;
        for (int64_t r = 0; r < sg.rank; ++r) s += static_cast<double>(sg.b[o * sg.rank + r]) * u[r];
        y[o] += static_cast<float>(sg.scale * s);
      }
    }
  }
}

bool ReferenceTrainOps::supports_matmul_t(DType type, WeightLayout layout) const {
  return layout == WeightLayout::kRows;  // dequantize_row covers every type
}

bool ReferenceTrainOps::supports_forward_matmul(DType, WeightLayout layout) const {
  return layout == WeightLayout::kRows;
}

void reference_matmul_rows(const WeightView& w, const float* x, float* y, int64_t n_tok) {
  CHECK(w.layout == WeightLayout::kRows);
  const size_t rb = row_bytes(w.type, w.n_in);
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t r = 0; r < w.n_out; ++r)
      y[t * w.n_out + r] = dot_row(w.type, w.data + static_cast<size_t>(r) * rb, x + t * w.n_in, w.n_in);
}

void ReferenceTrainOps::forward_matmul(const ForwardMatmulArgs& a) { reference_matmul_rows(a.w, a.x, a.y, a.n_tok); }

void ReferenceTrainOps::reserve(const TrainScratchNeeds& n) {
  const auto width = static_cast<size_t>(std::max(n.n_in_max, n.n_ctx));
  if (row_.size() < static_cast<size_t>(n.n_in_max)) row_.resize(static_cast<size_t>(n.n_in_max));
  if (acc_.size() < width) acc_.resize(width);
  if (probs_.size() < static_cast<size_t>(n.n_ctx)) probs_.resize(static_cast<size_t>(n.n_ctx));
}

void ReferenceTrainOps::matmul_t(const MatmulTArgs& a) {
  CHECK(a.w.layout == WeightLayout::kRows);
  const int64_t n_in = a.w.n_in;
  const int64_t n_out = a.w.n_out;
  CHECK(static_cast<int64_t>(row_.size()) >= n_in && static_cast<int64_t>(acc_.size()) >= n_in);
  const size_t rb = row_bytes(a.w.type, n_in);
  for (int64_t t = 0; t < a.n_tok; ++t) {
    std::fill(acc_.begin(), acc_.begin() + n_in, 0.0);
    const float* dy = a.dy + t * n_out;
    for (int64_t r = 0; r < n_out; ++r) {
      dequantize_row(a.w.type, a.w.data + r * rb, row_.data(), n_in);
      const double g = dy[r];
      for (int64_t i = 0; i < n_in; ++i) acc_[i] += g * row_[i];
    }
    float* dx = a.dx + t * n_in;
    for (int64_t i = 0; i < n_in; ++i) dx[i] = static_cast<float>((a.accumulate ? dx[i] : 0.0) + acc_[i]);
  }
}

void ReferenceTrainOps::rmsnorm_backward(const RmsNormBackArgs& a) {
  for (int64_t t = 0; t < a.n_tok; ++t) {
    const float* x = a.x + t * a.n;
    const float* dy = a.dy + t * a.n;
    float* dx = a.dx + t * a.n;
    const RmsNormBackFactors f = rmsnorm_backward_factors(x, dy, a.w, a.n, a.eps);
    for (int64_t i = 0; i < a.n; ++i) {
      dx[i] = static_cast<float>(dx[i] + (f.r * static_cast<double>(dy[i]) * a.w[i] - f.c * x[i]));
    }
  }
}

void ReferenceTrainOps::rope(const RopeArgs& a) {
  const int64_t half = a.n_rot / 2;
  for (int64_t t = 0; t < a.n_tok; ++t) {
    const float* cs = a.cos_sin + t * half * 2;
    for (int64_t h = 0; h < a.n_head; ++h) {
      float* x = a.x + (t * a.n_head + h) * a.head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float c = cs[2 * i];
        const float s = a.inverse ? -cs[2 * i + 1] : cs[2 * i + 1];
        const int64_t i0 = a.layout == RopeLayout::kAdjacent ? 2 * i : i;
        const int64_t i1 = a.layout == RopeLayout::kAdjacent ? 2 * i + 1 : i + half;
        const float x0 = x[i0];
        const float x1 = x[i1];
        x[i0] = x0 * c - x1 * s;
        x[i1] = x0 * s + x1 * c;
      }
    }
  }
}

void ReferenceTrainOps::glu(const GluArgs& a) {
  for (int64_t i = 0; i < a.n_tok * a.n_ff; ++i) {
    a.h[i] = static_cast<float>(act_value(a.act, a.g[i]) * a.u[i]);
  }
}

void ReferenceTrainOps::glu_backward(const GluBackArgs& a) {
  for (int64_t i = 0; i < a.n_tok * a.n_ff; ++i) {
    const double g = a.g[i];
    const double dh = a.dh[i];
    const double u = a.u[i];
    a.dg[i] = static_cast<float>(dh * u * act_derivative(a.act, g));
    a.du[i] = static_cast<float>(dh * act_value(a.act, g));
  }
}

void ReferenceTrainOps::attention(const TrainAttentionArgs& a) {
  const int64_t group = a.n_head / a.n_head_kv;
  const int64_t q_stride = a.n_head * a.head_dim;
  const int64_t kv_stride = a.n_head_kv * a.head_dim;
  for (const TrainSeq& sq : a.seqs) {
    CHECK(static_cast<int64_t>(probs_.size()) >= sq.n_tok && static_cast<int64_t>(acc_.size()) >= a.head_dim);
    for (int64_t i = 0; i < sq.n_tok; ++i) {
      for (int64_t h = 0; h < a.n_head; ++h) {
        const float* q = a.q + (sq.tok0 + i) * q_stride + h * a.head_dim;
        const int64_t kvh = h / group;
        const int64_t lo = first_position(i, a.window);
        double m = -INFINITY;
        for (int64_t j = lo; j <= i; ++j) {
          probs_[j] = score(q, a.k + (sq.tok0 + j) * kv_stride + kvh * a.head_dim, a.head_dim, a.scale, a.softcap);
          m = std::max(m, probs_[j]);
        }
        double sum = 0;
        for (int64_t j = lo; j <= i; ++j) sum += std::exp(probs_[j] - m);
        const double lse = m + std::log(sum);
        std::fill(acc_.begin(), acc_.begin() + a.head_dim, 0.0);
        for (int64_t j = lo; j <= i; ++j) {
          const double p = std::exp(probs_[j] - lse);
          const float* v = a.v + (sq.tok0 + j) * kv_stride + kvh * a.head_dim;
          for (int64_t d = 0; d < a.head_dim; ++d) acc_[d] += p * v[d];
        }
        float* out = a.out + (sq.tok0 + i) * q_stride + h * a.head_dim;
        for (int64_t d = 0; d < a.head_dim; ++d) out[d] = static_cast<float>(acc_[d]);
        a.lse[(sq.tok0 + i) * a.n_head + h] = static_cast<float>(lse);
      }
    }
  }
}

void ReferenceTrainOps::attention_backward(const TrainAttentionBackArgs& b) {
  const TrainAttentionArgs& a = b.fwd;
  const int64_t group = a.n_head / a.n_head_kv;
  const int64_t q_stride = a.n_head * a.head_dim;
  const int64_t kv_stride = a.n_head_kv * a.head_dim;
  for (const TrainSeq& sq : a.seqs) {
    for (int64_t t = sq.tok0; t < sq.tok0 + sq.n_tok; ++t) {
      std::fill(b.dq + t * q_stride, b.dq + (t + 1) * q_stride, 0.0f);
      std::fill(b.dk + t * kv_stride, b.dk + (t + 1) * kv_stride, 0.0f);
      std::fill(b.dv + t * kv_stride, b.dv + (t + 1) * kv_stride, 0.0f);
    }
    for (int64_t i = 0; i < sq.n_tok; ++i) {
      for (int64_t h = 0; h < a.n_head; ++h) {
        const int64_t row = sq.tok0 + i;
        const float* q = a.q + row * q_stride + h * a.head_dim;
        const float* out = a.out + row * q_stride + h * a.head_dim;
        const float* dout = b.dout + row * q_stride + h * a.head_dim;
        float* dq = b.dq + row * q_stride + h * a.head_dim;
        const int64_t kvh = h / group;
        const double lse = a.lse[row * a.n_head + h];
        double dsum = 0;  // D = dout . out
        for (int64_t d = 0; d < a.head_dim; ++d) dsum += static_cast<double>(dout[d]) * out[d];
        for (int64_t j = first_position(i, a.window); j <= i; ++j) {
          const float* k = a.k + (sq.tok0 + j) * kv_stride + kvh * a.head_dim;
          const float* v = a.v + (sq.tok0 + j) * kv_stride + kvh * a.head_dim;
          float* dk = b.dk + (sq.tok0 + j) * kv_stride + kvh * a.head_dim;
          float* dv = b.dv + (sq.tok0 + j) * kv_stride + kvh * a.head_dim;
          const double s = score(q, k, a.head_dim, a.scale, a.softcap);
          const double p = std::exp(s - lse);
          double dp = 0;
          for (int64_t d = 0; d < a.head_dim; ++d) dp += static_cast<double>(dout[d]) * v[d];
          double ds = p * (dp - dsum);
          if (a.softcap > 0) ds *= 1.0 - (s / a.softcap) * (s / a.softcap);
          ds *= a.scale;
          for (int64_t d = 0; d < a.head_dim; ++d) {
            dq[d] = static_cast<float>(dq[d] + ds * k[d]);
            dk[d] = static_cast<float>(dk[d] + ds * q[d]);
            dv[d] = static_cast<float>(dv[d] + p * dout[d]);
          }
        }
      }
    }
  }
}

void ReferenceTrainOps::cross_entropy(const CrossEntropyArgs& a) {
  for (int64_t t = 0; t < a.n_tok; ++t) {
    if (cross_entropy_ignored_row(a, t)) continue;
    float* z = a.logits + t * a.n_vocab;
    const int32_t target = a.targets[t];
    double m = -INFINITY;
    for (int64_t i = 0; i < a.n_vocab; ++i) m = std::max(m, static_cast<double>(z[i]));
    double sum = 0;
    for (int64_t i = 0; i < a.n_vocab; ++i) sum += std::exp(z[i] - m);
    const double lse = m + std::log(sum);
    a.loss[t] = lse - z[target];
    for (int64_t i = 0; i < a.n_vocab; ++i) {
      const double p = std::exp(z[i] - lse) - (i == target ? 1.0 : 0.0);
      z[i] = static_cast<float>(p * a.grad_scale);
    }
  }
}

void ReferenceTrainOps::lora_backward(const LoraBackArgs& a) {
  CHECK(a.rank <= 256);
  // du[t] = scale * B^T dy[t], one token at a time; dx and dA from it.
  std::vector<double> da(static_cast<size_t>(a.rank * a.n_in), 0.0);
  std::vector<double> db(static_cast<size_t>(a.n_out * a.rank), 0.0);
  for (int64_t t = 0; t < a.n_tok; ++t) {
    const float* dy = a.dy + t * a.n_out;
    const float* x = a.x + t * a.n_in;
    const float* u = a.u + t * a.rank;
    double du[256];
    for (int64_t r = 0; r < a.rank; ++r) {
      double s = 0;
      for (int64_t o = 0; o < a.n_out; ++o) s += static_cast<double>(a.b[o * a.rank + r]) * dy[o];
      du[r] = a.scale * s;
    }
    for (int64_t o = 0; o < a.n_out; ++o) {
      for (int64_t r = 0; r < a.rank; ++r) db[o * a.rank + r] += a.scale * static_cast<double>(dy[o]) * u[r];
    }
    for (int64_t r = 0; r < a.rank; ++r) {
      for (int64_t i = 0; i < a.n_in; ++i) da[r * a.n_in + i] += du[r] * x[i];
    }
    if (a.dx != nullptr) {
      float* dx = a.dx + t * a.n_in;
      for (int64_t i = 0; i < a.n_in; ++i) {
        double s = 0;
        for (int64_t r = 0; r < a.rank; ++r) s += static_cast<double>(a.a[r * a.n_in + i]) * du[r];
        dx[i] = static_cast<float>(dx[i] + s);
      }
    }
  }
  for (size_t i = 0; i < da.size(); ++i) a.da[i] = static_cast<float>(a.da[i] + da[i]);
  for (size_t i = 0; i < db.size(); ++i) a.db[i] = static_cast<float>(a.db[i] + db[i]);
}

void ReferenceTrainOps::add_rows(const AddRowsArgs& a) {
  for (int64_t t = 0; t < a.n_tok; ++t)
    for (int64_t i = 0; i < a.n; ++i) a.x[t * a.n + i] += a.v[i];
}

void ReferenceTrainOps::adamw(const AdamWArgs& a) {
  const AdamWBias bias = adamw_bias(a);
  for (int64_t i = 0; i < a.n; ++i) adamw_update(a, bias, i);
}

void ReferenceTrainOps::gather_rows(const GatherRowsArgs& a) {
  for (int64_t r = 0; r < a.n_rows; ++r) gather_row(a, r);
}

void ReferenceTrainOps::slot_sum(const SlotSumArgs& a) {
  for (int64_t t = 0; t < a.n_tok; ++t) slot_sum_row(a, t);
}

void ReferenceTrainOps::slot_sum_backward(const SlotSumBackArgs& a) {
  for (int64_t t = 0; t < a.fwd.n_tok; ++t) slot_sum_backward_row(a, t);
}

void ReferenceTrainOps::gated_add(const GatedAddArgs& a) {
  for (int64_t t = 0; t < a.n_tok; ++t) gated_add_row(a, t);
}

void ReferenceTrainOps::gated_add_backward(const GatedAddBackArgs& a) {
  for (int64_t t = 0; t < a.fwd.n_tok; ++t) gated_add_backward_row(a, t);
}

}  // namespace sluice
