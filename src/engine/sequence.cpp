#include "engine/sequence.h"

#include <algorithm>

#include "base/check.h"

namespace sluice {

const char* seq_state_name(SeqState state) {
  switch (state) {
    case SeqState::kWaiting: return "waiting";
    case SeqState::kRunning: return "running";
    case SeqState::kSwapped: return "swapped";
    case SeqState::kFinished: return "finished";
  }
  return "?";
}

const char* finish_reason_name(SeqFinish reason) {
  switch (reason) {
    case SeqFinish::kNone: return "none";
    case SeqFinish::kStop: return "stop";
    case SeqFinish::kLength: return "length";
    case SeqFinish::kAbort: return "abort";
  }
  return "?";
}

Status validate_sequence_params(const SequenceParams& params) {
  if (params.prompt.empty()) return invalid_argument("sequence: the prompt is empty");
  if (params.max_tokens < 1) {
    return invalid_argument("sequence: max_tokens must be at least 1, got {}", params.max_tokens);
  }
  return Status::ok_status();
}

Sequence Sequence::from_params(SeqId id, SequenceParams params, uint64_t arrival) {
  Sequence s;
  s.id = id;
  s.n_prompt = static_cast<int64_t>(params.prompt.size());
  s.tokens = std::move(params.prompt);
  s.tokens.reserve(static_cast<size_t>(s.n_prompt + std::min<int64_t>(params.max_tokens, 256)));
  s.max_tokens = params.max_tokens;
  s.stop_tokens = std::move(params.stop_tokens);
  s.priority = params.priority;
  s.arrival = arrival;
  return s;
}

SeqFinish Sequence::append_generated(std::span<const int32_t> new_tokens) {
  CHECK(!is_finished() && n_draft == 0);
  for (const int32_t t : new_tokens) {
    tokens.push_back(t);
    if (std::find(stop_tokens.begin(), stop_tokens.end(), t) != stop_tokens.end()) return SeqFinish::kStop;
    if (n_generated() >= max_tokens) return SeqFinish::kLength;
  }
  return SeqFinish::kNone;
}

bool schedules_before(const Sequence& a, const Sequence& b) {
  if (a.priority != b.priority) return a.priority > b.priority;
  return a.arrival < b.arrival;
}

}  // namespace sluice
