// record_routing(): a model's routing, step by step, for replay_routing()
// (weights/expert_replay.h): what each routed layer chose and what was
// predicted for it, over decode steps (one token a step, as a server's decode
// runs: the prompt teacher-forced token by token, then greedy continuation).
#pragma once

#include <cstdint>
#include <vector>

#include "model/model.h"
#include "weights/expert_replay.h"

namespace sluice {

// The model must be routed and loaded with ModelOptions::predict_experts.
// Errors: a dense model, prediction off, a failed forward pass.
StatusOr<weights::RoutingTrace> record_routing(Model& model, const std::vector<std::vector<int32_t>>& prompts,
                                               int64_t n_generate);

}  // namespace sluice
