#include "sample/sampler.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>

#include "base/check.h"
#include "sample/argmax.h"

namespace sluice {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

}  // namespace

Status validate_sampling_params(const SamplingParams& p) {
  if (!std::isfinite(p.temperature)) {
    return invalid_argument("temperature must be finite, got {}", p.temperature);
  }
  if (std::isnan(p.top_p) || p.top_p <= 0.0f) {
    return invalid_argument("top_p must be > 0 (>= 1 disables it), got {}", p.top_p);
  }
  if (std::isnan(p.min_p) || p.min_p > 1.0f) {
    return invalid_argument("min_p must be <= 1 (<= 0 disables it), got {}", p.min_p);
  }
  if (!std::isfinite(p.repeat_penalty) || p.repeat_penalty <= 0.0f) {
    return invalid_argument("repeat_penalty must be finite and > 0 (1 disables it), got {}",
                            p.repeat_penalty);
  }
  if (p.repeat_last_n < -1) {
    return invalid_argument("repeat_last_n must be >= -1 (-1: whole history), got {}",
                            p.repeat_last_n);
  }
  if (!std::isfinite(p.frequency_penalty)) {
    return invalid_argument("frequency_penalty must be finite, got {}", p.frequency_penalty);
  }
  if (!std::isfinite(p.presence_penalty)) {
    return invalid_argument("presence_penalty must be finite, got {}", p.presence_penalty);
  }
  return Status::ok_status();
}

Sampler::Sampler(const SamplingParams& params, int32_t n_vocab)
    : params_(params),
      n_vocab_(n_vocab),
      rng_(params.seed),
      logits_(static_cast<size_t>(n_vocab)),
      candidates_(static_cast<size_t>(n_vocab)),
      candidate_probs_(static_cast<size_t>(n_vocab)),
      probs_(static_cast<size_t>(n_vocab)),
      counts_(static_cast<size_t>(n_vocab), 0),
      history_(static_cast<size_t>(std::max(params.repeat_last_n, 0))) {
  CHECK(n_vocab > 0);
  CHECK(validate_sampling_params(params).ok());
}

bool Sampler::penalties_on() const {
  return params_.repeat_last_n != 0 &&
         (params_.repeat_penalty != 1.0f || params_.frequency_penalty != 0.0f ||
          params_.presence_penalty != 0.0f);
}

void Sampler::accept(int32_t token) {
  CHECK(token >= 0 && token < n_vocab_);
  if (params_.repeat_last_n == 0) return;
  if (params_.repeat_last_n < 0) {  // whole history: counts only
    ++counts_[token];
    return;
  }
  const int32_t cap = params_.repeat_last_n;
  if (history_len_ == cap) {
    --counts_[history_[history_pos_]];  // evict the oldest token of the window
  } else {
    ++history_len_;
  }
  history_[history_pos_] = token;
  ++counts_[token];
  history_pos_ = (history_pos_ + 1) % cap;
}

void Sampler::reset(uint64_t seed) {
  rng_.seed_with(seed);
  std::fill(counts_.begin(), counts_.end(), 0);
  history_pos_ = 0;
  history_len_ = 0;
}

void Sampler::penalize(const float* logits) {
  for (int32_t i = 0; i < n_vocab_; ++i) logits_[i] = std::isnan(logits[i]) ? kNegInf : logits[i];
  if (!penalties_on()) return;
  for (int32_t t = 0; t < n_vocab_; ++t) {
    const int32_t count = counts_[t];
    if (count == 0) continue;
    float l = logits_[t];
    l = l > 0.0f ? l / params_.repeat_penalty : l * params_.repeat_penalty;
    l -= static_cast<float>(count) * params_.frequency_penalty + params_.presence_penalty;
    logits_[t] = l;
  }
}

int32_t Sampler::argmax() const { return argmax_logits(logits_.data(), n_vocab_); }

int32_t Sampler::filter_candidates() {
  // Temperature. Overflow is clamped so that l - l_max never becomes inf - inf.
  const float inv_temp = 1.0f / params_.temperature;
  for (int32_t i = 0; i < n_vocab_; ++i) {
    const float v = logits_[i] * inv_temp;
    logits_[i] = v > FLT_MAX ? FLT_MAX : v;
  }
  const float* l = logits_.data();
  // Larger logit first; equal logits by lower id (a strict weak order: no NaN here).
  auto before = [l](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); };

  int32_t n = n_vocab_;
  for (int32_t i = 0; i < n; ++i) candidates_[i] = i;
  int32_t* c = candidates_.data();
  float* p = candidate_probs_.data();
  bool sorted = false;

  // Top-k.
  if (params_.top_k > 0 && params_.top_k < n) {
    std::nth_element(c, c + params_.top_k - 1, c + n, before);
    n = params_.top_k;
  }

  // Top-p: sort survivors, keep the shortest prefix reaching top_p.
  if (params_.top_p < 1.0f) {
    std::sort(c, c + n, before);
    sorted = true;
    const float l_max = l[c[0]];
    double sum = 0.0;
    for (int32_t i = 0; i < n; ++i) {
      p[i] = std::exp(l[c[i]] - l_max);
      sum += p[i];
    }
    double cum = 0.0;
    int32_t keep = n;
    for (int32_t i = 0; i < n; ++i) {
      cum += p[i] / sum;
      if (cum >= params_.top_p) {
        keep = i + 1;
        break;
      }
    }
    n = keep;
  }

  // Min-p: relative to the most likely survivor.
  if (params_.min_p > 0.0f) {
    float l_max = l[c[0]];
    if (!sorted) {
      for (int32_t i = 1; i < n; ++i) l_max = std::max(l_max, l[c[i]]);
    }
    const float threshold = l_max + std::log(params_.min_p);
    int32_t kept = 0;
    for (int32_t i = 0; i < n; ++i) {
      if (l[c[i]] >= threshold) c[kept++] = c[i];  // order-preserving compaction
    }
    n = kept;  // >= 1: l_max itself always passes (log(min_p) <= 0)
  }

  // Softmax over the survivors.
  float l_max = l[c[0]];
  for (int32_t i = 1; i < n; ++i) l_max = std::max(l_max, l[c[i]]);
  double sum = 0.0;
  for (int32_t i = 0; i < n; ++i) {
    p[i] = std::exp(l[c[i]] - l_max);
    sum += p[i];
  }
  const float inv_sum = static_cast<float>(1.0 / sum);
  for (int32_t i = 0; i < n; ++i) p[i] *= inv_sum;
  return n;
}

void Sampler::distribution(const float* logits, float* probs) {
  penalize(logits);
  std::fill(probs, probs + n_vocab_, 0.0f);
  const int32_t best = argmax();
  if (greedy() || logits_[best] == kNegInf) {
    probs[best] = 1.0f;
    return;
  }
  const int32_t n = filter_candidates();
  for (int32_t i = 0; i < n; ++i) probs[candidates_[i]] = candidate_probs_[i];
}

int32_t Sampler::sample(const float* logits) {
  if (greedy()) {  // no RNG draw
    // argmax() of penalize()'s copy, without the copy: argmax_logits counts
    // NaN as -inf and gives 0 for nothing above -inf, as the copy does.
    if (!penalties_on()) return argmax_logits(logits, n_vocab_);
    penalize(logits);
    return argmax();
  }
  distribution(logits, probs_.data());
  return sample_from(probs_.data());
}

int32_t Sampler::sample_from(const float* probs) {
  double total = 0.0;
  for (int32_t i = 0; i < n_vocab_; ++i) {
    CHECK(probs[i] >= 0.0f);
    total += probs[i];
  }
  CHECK(total > 0.0);
  const double target = rng_.uniform_double() * total;
  double cum = 0.0;
  int32_t last = -1;
  for (int32_t i = 0; i < n_vocab_; ++i) {
    if (probs[i] <= 0.0f) continue;
    cum += probs[i];
    last = i;
    if (target < cum) return i;
  }
  return last;  // rounding left target at the very top: the last non-zero token
}

}  // namespace sluice
