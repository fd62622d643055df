#include "quant/k_quant_search.h"

#include <algorithm>
#include <cmath>

namespace sluice {
namespace {


// Round to nearest, ties to even (the default FP rounding mode).
inline int round_int(float v) { return static_cast<int>(std::lrintf(v)); }

inline int clamp_int(int v, int lo, int hi) { return std::min(hi, std::max(lo, v)); }

}  // namespace

float weighted_error_type1(int n, const float* x, const float* weights, const uint8_t* q,
                           float scale, float min) {
  float err = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float diff = scale * q[i] - min - x[i];
    err += weights[i] * diff * diff;
  }
  return err;
}

float search_scale_min(int n, int nmax, const float* x, const float* weights, uint8_t* q_out,
                       uint8_t* q_tmp, float* min_out, float rmin, float rdelta, int n_steps) {
  float lo = x[0];
  float hi = x[0];
  float sum_w = 0.0f;   // sum w
  float sum_x = 0.0f;   // sum w * x
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    sum_w += weights[i];
    sum_x += weights[i] * x[i];
  }
  // The offset is only ever subtracted (min_out >= 0), so the range must include 0.
  if (lo > 0.0f) lo = 0.0f;
  if (hi == lo) {
    std::fill(q_out, q_out + n, uint8_t{0});
    *min_out = -lo;
    return 0.0f;
  }

  // Naive fit: map [lo, hi] onto [0, nmax].
  float inv_scale = static_cast<float>(nmax) / (hi - lo);
  float best_scale = 1.0f / inv_scale;
  float best_min = lo;  // x ~= scale * q + best_min (best_min <= 0)
  for (int i = 0; i < n; ++i) {
    q_out[i] = static_cast<uint8_t>(clamp_int(round_int(inv_scale * (x[i] - lo)), 0, nmax));
  }
  float best_err = weighted_error_type1(n, x, weights, q_out, best_scale, -best_min);

  // Candidate inverse scales; for each, the quants it induces and then the
  // least-squares (scale, min) for those quants:
  //   minimize sum w (s*q + m - x)^2  ->  [sum_l2 sum_l; sum_l sum_w] [s; m] = [sum_xl; sum_x]
  for (int step = 0; step <= n_steps && n_steps > 0; ++step) {
    inv_scale = (rmin + rdelta * static_cast<float>(step) + static_cast<float>(nmax)) / (hi - lo);
    float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_int(round_int(inv_scale * (x[i] - lo)), 0, nmax);
      q_tmp[i] = static_cast<uint8_t>(l);
      const float wl = weights[i] * static_cast<float>(l);
      sum_l += wl;
      sum_l2 += wl * static_cast<float>(l);
      sum_xl += wl * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det <= 0.0f) continue;
    float scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (min > 0.0f) {  // a positive offset is not representable: refit with min = 0
      min = 0.0f;
      scale = sum_xl / sum_l2;
    }
    const float err = weighted_error_type1(n, x, weights, q_tmp, scale, -min);
    if (err < best_err) {
      std::copy(q_tmp, q_tmp + n, q_out);
      best_err = err;
      best_scale = scale;
      best_min = min;
    }
  }
  *min_out = -best_min;
  return best_scale;
}

float search_scale_symmetric(int n, int nmax, const float* x, uint8_t* q_out, int n_steps) {
  float amax = 0.0f;
  float max = 0.0f;  // the signed value of largest magnitude
  for (int i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (a > amax) {
      amax = a;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::fill(q_out, q_out + n, static_cast<uint8_t>(nmax));
    return 0.0f;
  }

  // Weighted (w = x^2) least-squares scale for the quants of one inverse scale:
  // scale = sum w x l / sum w l^2; the error drop it achieves is sum_lx^2 / sum_l2.
  auto fit = [&](float inv_scale, float* sum_lx, float* sum_l2) {
    *sum_lx = 0.0f;
    *sum_l2 = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_int(round_int(inv_scale * x[i]), -nmax, nmax - 1);
      const float w = x[i] * x[i];
      *sum_lx += w * x[i] * static_cast<float>(l);
      *sum_l2 += w * static_cast<float>(l) * static_cast<float>(l);
    }
  };
  auto assign = [&](float inv_scale) {
    for (int i = 0; i < n; ++i) {
      const int l = clamp_int(round_int(inv_scale * x[i]), -nmax, nmax - 1);
      q_out[i] = static_cast<uint8_t>(l + nmax);
    }
  };

  float inv_scale = -static_cast<float>(nmax) / max;
  float sum_lx = 0.0f, sum_l2 = 0.0f;
  fit(inv_scale, &sum_lx, &sum_l2);
  assign(inv_scale);
  float scale = sum_l2 > 0.0f ? sum_lx / sum_l2 : 0.0f;
  float best = scale * sum_lx;
  for (int step = -n_steps; step <= n_steps; ++step) {
    if (step == 0) continue;  // the naive scale, already evaluated
    inv_scale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(step)) / max;
    fit(inv_scale, &sum_lx, &sum_l2);
    if (sum_l2 > 0.0f && sum_lx * sum_lx > best * sum_l2) {
      assign(inv_scale);
      scale = sum_lx / sum_l2;
      best = scale * sum_lx;
    }
  }
  return scale;
}

}  // namespace sluice
