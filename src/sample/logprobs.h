// Log-probabilities the API reports with a token: the log-softmax of the
// model's logits at temperature 1, whatever the request sampled with.
// Pure; thread-safe.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace sluice {

// log p(token), and the k most likely tokens with theirs (most likely first,
// the lower id first among equals) appended to *top.
//   logits: [n_vocab]
float token_logprobs(const float* logits, int64_t n_vocab, int32_t token, int32_t k,
                     std::vector<std::pair<int32_t, float>>* top);

}  // namespace sluice
