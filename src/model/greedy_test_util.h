// Test helper: a greedy continuation decoded one token at a time, as the
// llama.cpp golden programs produce theirs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include <gtest/gtest.h>

#include "model/model.h"

namespace sluice::testing_util {

// n tokens: the first is the argmax of `last` ([n_vocab], the logits after the
// prompt); each later one the argmax after forwarding the previous through kv.
inline std::vector<int32_t> greedy_continuation(Model& m, KvCache& kv, const float* last, int64_t n_vocab,
                                                size_t n) {
  std::vector<int32_t> greedy;
  std::vector<float> step(static_cast<size_t>(n_vocab));
  for (size_t g = 0; g < n; ++g) {
    const auto tok = static_cast<int32_t>(std::max_element(last, last + n_vocab) - last);
    greedy.push_back(tok);
    if (g + 1 == n) break;
    const auto st = m.forward(std::span(&tok, 1), kv, step.data(), false);
    EXPECT_TRUE(st.ok()) << st.to_string();
    if (!st.ok()) break;
    last = step.data();
  }
  return greedy;
}

}  // namespace sluice::testing_util
