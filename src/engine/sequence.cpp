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

Status validate_sequence_params(const SequenceParams& params) {
  if (params.prompt.empty()) return invalid_argument("sequence: the prompt is empty");
  if (params.stop.max_tokens < 1) {
    return invalid_argument("sequence: max_tokens must be at least 1, got {}", params.stop.max_tokens);
  }
  return Status::ok_status();
}

Sequence Sequence::from_params(SeqId id, SequenceParams params, uint64_t arrival) {
  Sequence s;
  s.id = id;
  s.n_prompt = static_cast<int64_t>(params.prompt.size());
  s.tokens = std::move(params.prompt);
  s.tokens.reserve(static_cast<size_t>(s.n_prompt + std::min<int64_t>(params.stop.max_tokens, 256)));
  s.stop = std::move(params.stop);
  s.priority = params.priority;
  s.loras = params.loras;
  s.arrival = arrival;
  return s;
}

FinishReason Sequence::append_generated(std::span<const int32_t> new_tokens) {
  CHECK(!is_finished() && n_draft == 0);
  for (const int32_t t : new_tokens) {
    tokens.push_back(t);
    if (const FinishReason why = stop.after(t, n_generated()); why != FinishReason::kNone) return why;
  }
  return FinishReason::kNone;
}

bool schedules_before(const Sequence& a, const Sequence& b) {
  if (a.priority != b.priority) return a.priority > b.priority;
  return a.arrival < b.arrival;
}

}  // namespace sluice
