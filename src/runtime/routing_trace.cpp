#include "runtime/routing_trace.h"

#include <algorithm>

namespace sluice {

StatusOr<weights::RoutingTrace> record_routing(Model& model, const std::vector<std::vector<int32_t>>& prompts,
                                               int64_t n_generate) {
  const ModelHparams& hp = model.hparams();
  if (!hp.is_moe()) return invalid_argument("record_routing needs a mixture-of-experts model");
  weights::RoutingTrace trace{.n_layer = hp.n_layer, .n_expert = hp.n_expert, .n_used = hp.n_expert_used};
  std::vector<weights::RoutingTrace::Layer> step(static_cast<size_t>(hp.n_layer));
  bool saw_prediction = false;
  model.set_activation_hook([&](std::string_view name, int64_t layer, const float* data, int64_t n_tok, int64_t k) {
    const bool chosen = name == "ffn_moe_ids";
    if (!chosen && name != "ffn_moe_pred") return;
    std::vector<int32_t>& dst = chosen ? step[static_cast<size_t>(layer)].chosen : step[static_cast<size_t>(layer)].predicted;
    dst.assign(data, data + n_tok * k);
    saw_prediction |= !chosen;
  });
  std::vector<float> logits(static_cast<size_t>(hp.n_vocab));
  Status status;
  for (const std::vector<int32_t>& prompt : prompts) {
    if (prompt.empty()) continue;
    KvCache kv = model.make_kv_cache(static_cast<int64_t>(prompt.size()) + n_generate);
    int32_t next = prompt[0];
    for (int64_t i = 0; i < static_cast<int64_t>(prompt.size()) + n_generate; ++i) {
      const int32_t tok = i < static_cast<int64_t>(prompt.size()) ? prompt[static_cast<size_t>(i)] : next;
      for (auto& l : step) l = {};
      status = model.forward(std::span(&tok, 1), kv, logits.data(), false);
      if (!status.ok()) break;
      trace.steps.push_back(step);
      next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
    if (!status.ok()) break;
  }
  model.set_activation_hook({});
  RETURN_IF_ERROR(status);
  if (!saw_prediction) return invalid_argument("the model was loaded without expert prediction (predict_experts)");
  return trace;
}

}  // namespace sluice
