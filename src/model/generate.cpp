#include "model/generate.h"

#include "base/timer.h"

namespace sluice {

StatusOr<GenerateResult> generate(Model& model, KvCache& kv, const std::vector<int32_t>& prompt,
                                  Sampler& sampler, const GenerateParams& params,
                                  const TokenCallback& on_token) {
  if (prompt.empty()) return invalid_argument("the prompt is empty (no tokens to condition on)");
  if (static_cast<int64_t>(prompt.size()) > kv.n_ctx()) {
    return invalid_argument("prompt of {} tokens does not fit the context of {}", prompt.size(), kv.n_ctx());
  }
  const StopCondition& stop = params.stop;
  GenerateResult result;
  result.n_prompt = static_cast<int64_t>(prompt.size());
  const int64_t n_vocab = model.hparams().n_vocab;
  const std::unique_ptr<Buffer> logits_buf = model.backend().alloc_host(static_cast<size_t>(n_vocab) * sizeof(float));
  float* logits = logits_buf->floats();
  kv.clear();
  for (int32_t t : prompt) sampler.accept(t);

  Stopwatch sw;
  RETURN_IF_ERROR(model.forward(prompt, kv, logits, /*all_logits=*/false, params.loras));
  bool first = true;
  while (static_cast<int64_t>(result.tokens.size()) < stop.max_tokens) {
    const int32_t tok = sampler.sample(logits);
    sampler.accept(tok);
    if (first) {
      result.prompt_seconds = sw.seconds();
      sw.reset();
      first = false;
    }
    result.tokens.push_back(tok);
    if (on_token && !on_token(tok)) {
      result.finish_reason = FinishReason::kAbort;
      break;
    }
    const FinishReason why = stop.after(tok, static_cast<int64_t>(result.tokens.size()));
    if (why != FinishReason::kNone) {
      result.finish_reason = why;
      break;
    }
    if (kv.n_past() >= kv.n_ctx()) break;  // the context is full: kLength
    const int32_t next[1] = {tok};
    RETURN_IF_ERROR(model.forward(next, kv, logits, /*all_logits=*/false, params.loras));
  }
  result.decode_seconds = first ? 0.0 : sw.seconds();
  if (first) result.prompt_seconds = sw.seconds();
  return result;
}

}  // namespace sluice
