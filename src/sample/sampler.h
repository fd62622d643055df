// Sampler: turns one step's logits into a token, with repetition penalties,
// temperature, top-k, top-p and min-p, from a seeded, reproducible RNG.
//
// The chain, applied in this order to a private copy of the logits:
//
//   logits -> penalties -> temperature -> top-k -> top-p -> min-p -> softmax -> draw
//
//   penalties    for every token t seen c > 0 times in the last repeat_last_n
//                accepted tokens (all of them if -1, none if 0):
//                  l = l > 0 ? l / repeat_penalty : l * repeat_penalty
//                  l = l - (c * frequency_penalty + presence_penalty)
//   temperature  temperature <= 0: greedy -- argmax of the penalized logits
//                (ties -> lowest id), nothing else applies, no RNG draw.
//                Otherwise l = l / temperature.
//   top-k        keep the k largest (ties -> lower id first); off if k <= 0 or
//                k >= n_vocab.
//   top-p        softmax over the survivors, sorted by probability; keep the
//                smallest prefix whose cumulative probability reaches top_p
//                (at least one token); off if top_p >= 1.
//   min-p        keep tokens with p >= min_p * p_max (p_max: the most likely
//                survivor), i.e. l >= l_max + log(min_p); off if min_p <= 0.
//   softmax      over the survivors; every other token has probability 0.
//   draw         u = rng.uniform_double() * sum(p); the first token id (in id
//                order) whose running sum of p exceeds u.
//
// NaN logits are treated as -inf. If every logit is -inf the result is greedy.
//
// sample(logits) == sample_from(distribution(logits)) for the same RNG state:
// sample() is exactly distribution() followed by sample_from().
//
// All buffers are allocated once in the constructor; sample(), distribution(),
// sample_from() and accept() allocate nothing. Not thread-safe: one Sampler per
// sequence.
#pragma once

#include <cstdint>
#include <vector>

#include "sample/rng.h"
#include "sluice/sampling.h"
#include "sluice/status.h"

namespace sluice {

// SamplingParams is part of the public API: include/sluice/sampling.h.


// OK, or invalid_argument naming the first bad field (e.g. "top_p must be > 0, got -1").
Status validate_sampling_params(const SamplingParams& params);

class Sampler {
 public:
  // params must pass validate_sampling_params (CHECKed); n_vocab > 0.
  Sampler(const SamplingParams& params, int32_t n_vocab);

  const SamplingParams& params() const { return params_; }
  int32_t n_vocab() const { return n_vocab_; }

  // Draws the next token. logits: [n_vocab]. Does not record it (see accept()).
  int32_t sample(const float* logits);

  // Records a token (prompt or generated) in the penalty history. 0 <= token < n_vocab.
  void accept(int32_t token);

  // Clears the penalty history and restarts the RNG from seed.
  void reset(uint64_t seed);

  // The exact distribution sample() draws from for these logits (current penalty
  // history included): renormalized, zeros where filtered, a one-hot for greedy.
  // logits: [n_vocab]; probs: [n_vocab].
  void distribution(const float* logits, float* probs);

  // One uniform draw in [0, 1) from this sampler's RNG (speculative verification).
  double uniform() { return rng_.uniform_double(); }
  // temperature <= 0: sample() is the argmax and draws nothing.
  bool is_greedy() const { return greedy(); }

  // Draws a token id from probs (non-negative, not all zero; need not sum to 1)
  // with this sampler's RNG: one uniform draw, scanned in id order.
  // probs: [n_vocab].
  int32_t sample_from(const float* probs);

 private:
  bool greedy() const { return !(params_.temperature > 0.0f); }
  bool penalties_on() const;
  // Copies logits to logits_ (NaN -> -inf) and applies the penalties.
  void penalize(const float* logits);
  // Lowest id with the largest value in logits_.
  int32_t argmax() const;
  // Runs temperature .. softmax on logits_; leaves the survivors' ids in
  // candidates_[0, n) and their normalized probabilities in candidate_probs_[0, n).
  // Returns n (>= 1).
  int32_t filter_candidates();

  SamplingParams params_;
  int32_t n_vocab_;
  Rng rng_;
  std::vector<float> logits_;           // [n_vocab] working copy of the logits
  std::vector<int32_t> candidates_;     // [n_vocab] surviving token ids
  std::vector<float> candidate_probs_;  // [n_vocab] probabilities of candidates_
  std::vector<float> probs_;            // [n_vocab] full distribution for sample()
  std::vector<int32_t> counts_;         // [n_vocab] occurrences in the penalty window
  std::vector<int32_t> history_;        // [repeat_last_n] ring of the window's tokens
  int32_t history_pos_ = 0;             // next slot of history_ to write
  int32_t history_len_ = 0;             // filled slots of history_
};

}  // namespace sluice
