#include "sample/stop_condition.h"

#include <algorithm>

namespace sluice {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
    case FinishReason::kNone: return "";
  }
  return "";
}

StopCondition StopCondition::for_request(std::span<const int32_t> request_stop_tokens, std::span<const int32_t> eog,
                                         bool ignore_eos, int64_t max_tokens) {
  StopCondition c{.stop_tokens = {request_stop_tokens.begin(), request_stop_tokens.end()}, .max_tokens = max_tokens};
  if (!ignore_eos) c.stop_tokens.insert(c.stop_tokens.end(), eog.begin(), eog.end());
  return c;
}

bool StopCondition::is_stop_token(int32_t token) const {
  return std::find(stop_tokens.begin(), stop_tokens.end(), token) != stop_tokens.end();
}

FinishReason StopCondition::after(int32_t token, int64_t n_generated) const {
  if (is_stop_token(token)) return FinishReason::kStop;
  if (n_generated >= max_tokens) return FinishReason::kLength;
  return FinishReason::kNone;
}

}  // namespace sluice
