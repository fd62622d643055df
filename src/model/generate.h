// generate(): prompt prefill followed by token-by-token decode of one sequence.
//
// The single-sequence generation loop used by `sluice run`, the demo and the
// golden tests (the serving engine generalizes it to many sequences). When to
// stop is the StopCondition's decision, as in the engine. Logits buffers are
// allocated once per call, never per token.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kv/kv_cache.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "sample/stop_condition.h"

namespace sluice {

struct GenerateParams {
  // When generation ends: after a stop token, or at max_tokens (as in the
  // engine; StopCondition::for_request adds the model's end-of-generation ids).
  StopCondition stop{.max_tokens = 128};
  LoraMask loras = 0;  // the model's adapters applied (ForwardSeq::loras)
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated tokens only (no prompt)
  // kStop (stop token), kLength (max_tokens, or the context is full), kAbort
  // (the callback ended it).
  FinishReason finish_reason = FinishReason::kLength;
  int64_t n_prompt = 0;
  double prompt_seconds = 0;    // prefill time = time to first token
  double decode_seconds = 0;    // time for the remaining tokens
};

// Called for each generated token in order; returning false ends generation.
using TokenCallback = std::function<bool(int32_t token)>;

// Clears `kv`, prefills `prompt` (must be non-empty) and generates up to
// stop.max_tokens tokens with `sampler`, which also sees the prompt as history.
StatusOr<GenerateResult> generate(Model& model, KvCache& kv, const std::vector<int32_t>& prompt,
                                  Sampler& sampler, const GenerateParams& params,
                                  const TokenCallback& on_token = {});

}  // namespace sluice
