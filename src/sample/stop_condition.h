// StopCondition: when one output ends, decided in one place.
//
// Built once when a request is admitted (for_request): the request's stop
// tokens plus the model's end-of-generation tokens (unless it ignores EOS),
// and its max_tokens. The scheduler asks it after every generated token; the
// engine asks it whether a token is a stop token (its text is not emitted);
// the single-sequence generate() loop asks it too. Stop strings are text, and
// are matched by the engine's OutputText; they end an output with kStop as well.
// Plain value; thread-compatible.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sluice/finish_reason.h"

namespace sluice {

struct StopCondition {
  std::vector<int32_t> stop_tokens;  // generation ends after emitting any of these
  int64_t max_tokens = 256;          // generated tokens at most

  // The request's stop tokens, then the end-of-generation ids unless ignore_eos.
  static StopCondition for_request(std::span<const int32_t> request_stop_tokens, std::span<const int32_t> eog,
                                   bool ignore_eos, int64_t max_tokens);

  bool is_stop_token(int32_t token) const;
  // Why generation ends after `token`, the n_generated-th generated token
  // (counting it): kStop for a stop token, else kLength at max_tokens, else kNone.
  FinishReason after(int32_t token, int64_t n_generated) const;
};

}  // namespace sluice
