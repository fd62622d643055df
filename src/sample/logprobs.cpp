#include "sample/logprobs.h"

#include <algorithm>
#include <cmath>

namespace sluice {

float token_logprobs(const float* lg, int64_t n, int32_t token, int32_t k, std::vector<std::pair<int32_t, float>>* top) {
  float mx = lg[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max(mx, lg[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(lg[i] - mx));
  const float lse = mx + static_cast<float>(std::log(sum));
  const size_t first = top->size();
  for (int32_t j = 0; j < k; ++j) {
    int32_t best = -1;
    for (int32_t i = 0; i < n; ++i) {
      bool taken = false;
      for (size_t t = first; t < top->size(); ++t) taken |= (*top)[t].first == i;
      if (!taken && (best < 0 || lg[i] > lg[best])) best = i;
    }
    top->emplace_back(best, lg[best] - lse);
  }
  return lg[token] - lse;
}

}  // namespace sluice
