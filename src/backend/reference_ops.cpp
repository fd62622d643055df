#include "backend/reference_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/check.h"
#include "quant/quant.h"

namespace sluice::ref {

float dot_f32(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  }
  for (int j = 0; i < n; ++i, ++j) acc[j] += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

void matmul(const WeightView& w, const float* x, float* y, int64_t n_tokens, float* scratch,
            ThreadPool& pool) {
  CHECK(w.layout == WeightLayout::kRows);
  const size_t row_size = row_bytes(w.type, w.n_in);
  pool.run_on_all([&](int ti, int nt) {
    const int64_t chunk = (w.n_out + nt - 1) / nt;
    const int64_t r0 = std::min<int64_t>(w.n_out, chunk * ti);
    const int64_t r1 = std::min<int64_t>(w.n_out, r0 + chunk);
    float* row = scratch + static_cast<int64_t>(ti) * w.n_in;
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* src = w.data + static_cast<size_t>(r) * row_size;
      const float* wr;
      if (w.type == DType::kF32) {
        wr = reinterpret_cast<const float*>(src);
      } else {
        dequantize_row(w.type, src, row, w.n_in);
        wr = row;
      }
      for (int64_t t = 0; t < n_tokens; ++t) {
        y[t * w.n_out + r] = dot_f32(wr, x + t * w.n_in, w.n_in);
      }
    }
  });
}

void rmsnorm(const float* x, const float* weight, float* out, int64_t n_tokens, int64_t n, float eps) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xt = x + t * n;
    float* ot = out + t * n;
    const float ss = dot_f32(xt, xt, n) / static_cast<float>(n);
    const float inv = 1.0f / std::sqrt(ss + eps);
    for (int64_t i = 0; i < n; ++i) ot[i] = xt[i] * inv * weight[i];
  }
}

void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cos_sin,
          RopeLayout layout) {
  const int64_t half = n_rot / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* xh = x + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const float c = cos_sin[2 * i];
      const float s = cos_sin[2 * i + 1];
      const int64_t i0 = layout == RopeLayout::kAdjacent ? 2 * i : i;
      const int64_t i1 = layout == RopeLayout::kAdjacent ? 2 * i + 1 : i + half;
      const float a = xh[i0];
      const float b = xh[i1];
      xh[i0] = a * c - b * s;
      xh[i1] = a * s + b * c;
    }
  }
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

float gelu_tanh(float x) {
  constexpr float kSqrt2OverPi = 0.79788456080286535588f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}

void geglu(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gelu_tanh(gate[i]) * up[i];
}

void attention(const AttentionArgs& a, float* scratch, ThreadPool& pool) {
  const int64_t group = a.n_head / a.n_head_kv;
  const int64_t kv_stride = a.n_head_kv * a.head_dim;  // floats per cached position
  const int64_t n_items = a.n_tokens * a.n_head;
  pool.run_on_all([&](int ti, int nt) {
    float* acc = scratch + static_cast<int64_t>(ti) * a.head_dim;
    for (int64_t item = ti; item < n_items; item += nt) {
      const int64_t t = item / a.n_head;
      const int64_t h = item % a.n_head;
      const int64_t kvh = h / group;
      const float* q = a.q + (t * a.n_head + h) * a.head_dim;
      const int64_t n_pos = a.pos0 + t + 1;  // causal: positions lo .. pos0 + t
      const int64_t lo = a.window > 0 ? std::max<int64_t>(0, n_pos - a.window) : 0;
      float m = -std::numeric_limits<float>::infinity();
      float l = 0.0f;
      for (int64_t d = 0; d < a.head_dim; ++d) acc[d] = 0.0f;
      for (int64_t j = lo; j < n_pos; ++j) {
        const float* k = a.k + j * kv_stride + kvh * a.head_dim;
        const float* v = a.v + j * kv_stride + kvh * a.head_dim;
        float s = dot_f32(q, k, a.head_dim) * a.scale;
        if (a.softcap > 0.0f) s = a.softcap * std::tanh(s / a.softcap);
        if (s > m) {
          const float rescale = std::exp(m - s);  // 0 on the first position
          for (int64_t d = 0; d < a.head_dim; ++d) acc[d] *= rescale;
          l *= rescale;
          m = s;
        }
        const float p = std::exp(s - m);
        for (int64_t d = 0; d < a.head_dim; ++d) acc[d] += p * v[d];
        l += p;
      }
      float* o = a.out + (t * a.n_head + h) * a.head_dim;
      const float inv = 1.0f / l;
      for (int64_t d = 0; d < a.head_dim; ++d) o[d] = acc[d] * inv;
    }
  });
}

}  // namespace sluice::ref
