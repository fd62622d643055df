#include "runtime/load_model.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/timer.h"
#include "lora/lora_adapter.h"

namespace sluice {

StatusOr<LoadedModel> load_model(const std::string& path, const LoadOptions& o) {
  Stopwatch sw;
  LoadedModel lm;
  ASSIGN_OR_RETURN(ModelFile mf, open_model_file(path));
  lm.file = std::make_shared<const ModelFile>(std::move(mf));
  lm.name = lm.file->metadata.get_string("general.name").value_or(path);
  ASSIGN_OR_RETURN(lm.tokenizer, Tokenizer::from_metadata(lm.file->metadata));
  int64_t n_ctx = o.n_ctx_max;
  if (n_ctx <= 0 && o.ctx_cap > 0) {
    ASSIGN_OR_RETURN(const ModelHparams hp, hparams_from_metadata(lm.file->metadata));
    n_ctx = std::min(hp.n_ctx_train, o.ctx_cap);
  }
  ModelOptions mo{.n_threads = o.n_threads, .n_batch = o.n_batch, .n_ctx_max = n_ctx, .max_seqs = o.max_seqs,
                  .backend = o.shared_backend, .repack = o.repack, .predict_experts = o.predict_experts,
                  .expert_predict_margin = o.expert_predict_margin, .device_reserve = o.device_reserve,
                  .layer_begin = o.stage.layer_begin, .layer_end = o.stage.layer_end,
                  .expert_begin = o.stage.expert_begin, .expert_end = o.stage.expert_end,
                  .experts_only = o.stage.experts_only};
  if (!mo.backend) {
    ASSIGN_OR_RETURN(mo.backend, create_backend({.name = o.backend, .n_threads = o.n_threads,
                                                 .device_budget_bytes = o.gpu_budget_bytes}));
  } else if (o.gpu_budget_bytes > 0) {
    return invalid_argument("--gpu-budget is set where the model shares another model's backend (a draft model): "
                            "the budget belongs to the backend's creation");
  }
  if (o.mem_budget_bytes > 0 && !mo.backend->host_visible()) {
    return unimplemented("--mem-budget streams weights through host memory, which the {} backend does not read yet; "
                         "load the model whole on it (no --mem-budget) or use --backend cpu",
                         mo.backend->name());
  }
  if (o.disk_rate_cap_bytes_per_s > 0 && o.mem_budget_bytes == 0)
    return invalid_argument("--disk-rate-cap caps the reads of weights streamed under --mem-budget; give a memory "
                            "budget too (without one every weight is read once, at load)");
  if (o.mem_budget_bytes > 0) {
    ASSIGN_OR_RETURN(weights::StreamingSetup setup,
                     weights::open_streaming(lm.file, {.mem_budget_bytes = o.mem_budget_bytes,
                                                       .n_threads = o.n_threads,
                                                       .tokens_per_step = o.tokens_per_step,
                                                       .disk_rate_cap_bytes_per_s = o.disk_rate_cap_bytes_per_s,
                                                       .calibration = o.calibration,
                                                       .training = o.training,
                                                       .stage = o.stage}));
    lm.stream = setup.source;
    lm.placement_report = std::move(setup.report);
    mo.weights = setup.source;
  }
  ASSIGN_OR_RETURN(lm.model, Model::load(lm.file, mo));
  for (const LoraSpec& l : o.loras) {
    StatusOr<LoraAdapter> ad = read_lora(l.path, lm.file.get());
    Status st = ad.ok() ? lm.model->add_lora(*ad, l.scale).status() : ad.status();
    if (!st.ok()) return Status(st.code(), fmt::format("--lora {}: {}", l.path, st.message()));
  }
  lm.load_seconds = sw.seconds();
  return lm;
}

}  // namespace sluice
