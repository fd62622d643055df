// SamplingParams: how the next token is drawn from the logits (public API).
//
// The chain, in order: penalties -> temperature -> top-k -> top-p -> min-p ->
// softmax -> draw. A seed makes every draw reproducible.
#pragma once

#include <cstdint>

namespace sluice {

struct SamplingParams {
  float temperature = 0.8f;        // <= 0: greedy (argmax, ties -> lowest id)
  int32_t top_k = 40;              // <= 0: off
  float top_p = 0.95f;             // >= 1: off; must be > 0
  float min_p = 0.05f;             // <= 0: off; must be <= 1
  float repeat_penalty = 1.0f;     // 1: off; must be > 0
  int32_t repeat_last_n = 64;      // window for all penalties; -1 = whole history, 0 = off
  float frequency_penalty = 0.0f;  // logit -= count * frequency_penalty
  float presence_penalty = 0.0f;   // logit -= (count > 0) * presence_penalty
  uint64_t seed = 0;
};

}  // namespace sluice
