#include "runtime/load_model.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/timer.h"
#include "lora/lora_adapter.h"
#include "weights/placement.h"

namespace sluice {
namespace {

// What a backend that is not host-visible needs to stream under --mem-budget:
// it reads host views, and the run is one the three tiers cover.
StatusOr<DeviceTiers> device_tiers_for(const ModelFile& file, const LoadOptions& o, uint64_t mem_budget, int64_t n_ctx,
                                       Backend& be) {
  if (!be.reads_host_weights()) {
    return unimplemented("--mem-budget streams weights through host memory, which the {} backend does not read; "
                         "load the model whole on it (no --mem-budget) or use --backend cpu",
                         be.name());
  }
  // The caller's share of --gpu-budget (the engine's KV pool) first, as the
  // model will keep it; the weights' tiers are planned in the rest.
  uint64_t gpu_weights = o.gpu_budget_bytes;
  if (o.device_reserve && o.gpu_budget_bytes > 0) {
    ASSIGN_OR_RETURN(const KvShape kv, kv_shape_of(file, n_ctx));
    ASSIGN_OR_RETURN(const uint64_t reserve, o.device_reserve(kv));
    if (reserve >= o.gpu_budget_bytes) {
      return resource_exhausted("--gpu-budget {:.2f} GiB leaves nothing for weights after the {:.2f} GiB kept for the "
                                "KV cache (a shorter context, fewer sequences or --kv-budget shrink it)",
                                static_cast<double>(o.gpu_budget_bytes) / (1 << 30),
                                static_cast<double>(reserve) / (1 << 30));
    }
    gpu_weights -= reserve;
  }
  if (!o.stage.whole())
    return unimplemented("a pipeline stage or expert share with --mem-budget on the {} backend", be.name());
  // The device's memory measured here; its FLOP/s an H200's as stated (plan
  // tiers --tflops takes a measured one); the disk as calibrated, else the
  // store's own reads replace it in the report.
  plan::TierRates rates = plan::h200_tier_rates();
  const Backend::MemoryRates m = be.measure_memory_rates();
  if (m.read_gbps > 0) rates.hbm_gbps = m.read_gbps;
  if (m.host_copy_gbps > 0) rates.h2d_gbps = m.host_copy_gbps;
  if (o.calibration && o.calibration->disk_read_gbps > 0) rates.disk_gbps = o.calibration->disk_read_gbps;
  ASSIGN_OR_RETURN(DeviceTiers t, plan_device_tiers(file, gpu_weights, mem_budget, rates));
  // Fine-tuning walks the layers forward and back: a dense model's device
  // layers stay in HBM for both visits, the store places the others for
  // training's order (placement.h, rules 5 and 8). A routed model's device
  // tier would copy experts in at each visit, which nothing plans yet.
  if (o.training) {
    ASSIGN_OR_RETURN(const ModelHparams hp, hparams_from_metadata(file.metadata));
    if (hp.is_moe()) {
      t.device_layers.clear();
      t.note = "fine-tuning a routed model: every layer is copied in from host memory at each visit (no device tier "
               "for it yet); the plan below is inference's";
    } else if (t.device_layers.empty()) {
      t.note = "fine-tuning: the device tier's 0 layers (the budget holds none beside the essentials and the staging "
               "ring): every layer is copied in from host memory at each visit (twice a micro-batch); the plan below "
               "is inference's";
    } else {
      t.note = fmt::format("fine-tuning: the device tier's {} layer{} stay{} in HBM for the forward and the backward; "
                           "every other layer is copied in from host memory at each visit (twice a micro-batch); "
                           "the plan below is inference's",
                           t.device_layers.size(), t.device_layers.size() == 1 ? "" : "s",
                           t.device_layers.size() == 1 ? "s" : "");
    }
  }
  t.rates_note = fmt::format("{} {} memory and host-to-device copies, FLOP/s an H200's as stated, disk the weight "
                             "store's own reads",
                             m.read_gbps > 0 ? "measured" : "an H200's stated", be.name());
  return t;
}

}  // namespace

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
  } else if (o.gpu_budget_bytes > 0 && o.mem_budget_bytes == 0 && !o.host_holds_rest) {
    // With --mem-budget too the budget still plans the three tiers' device
    // layers (below); alone it would only size a backend made elsewhere.
    return invalid_argument("--gpu-budget is set where the model shares another model's backend (a draft model): "
                            "the budget belongs to the backend's creation");
  }
  // The host tier's budget: the caller's, or with host_holds_rest the whole
  // model's (every layer in host buffers of its own, device ones included
  // once demoted), so that no layer is read from disk per step.
  uint64_t mem_budget = o.mem_budget_bytes;
  const bool whole_host =
      o.host_holds_rest && mem_budget == 0 && o.gpu_budget_bytes > 0 && !mo.backend->host_visible();
  if (whole_host) {
    ASSIGN_OR_RETURN(const weights::PlacementPlan whole, weights::plan_placement(*lm.file, {}));
    mem_budget = whole.resident_bytes;
  }
  // Three tiers: a device that copies host views in at each use.
  std::optional<DeviceTiers> tiers;
  if (mem_budget > 0 && !mo.backend->host_visible()) {
    ASSIGN_OR_RETURN(tiers, device_tiers_for(*lm.file, o, mem_budget, n_ctx, *mo.backend));
  }
  if (o.disk_rate_cap_bytes_per_s > 0 && o.mem_budget_bytes == 0)
    return invalid_argument("--disk-rate-cap caps the reads of weights streamed under --mem-budget; give a memory "
                            "budget too (without one every weight is read once, at load)");
  if (mem_budget > 0) {
    StatusOr<weights::StreamingSetup> opened =
        weights::open_streaming(lm.file, {.mem_budget_bytes = mem_budget,
                                          .n_threads = o.n_threads,
                                          .tokens_per_step = o.tokens_per_step,
                                          .disk_rate_cap_bytes_per_s = o.disk_rate_cap_bytes_per_s,
                                          .calibration = o.calibration,
                                          .training = o.training,
                                          .stage = o.stage,
                                          .device_layers = tiers ? tiers->device_layers : std::vector<int64_t>{}});
    if (!opened.ok() && whole_host)
      return opened.status().with_context(
          "--fluid-split under --gpu-budget alone keeps every layer the device does not in host memory (give "
          "--mem-budget to read part of them from disk instead)");
    ASSIGN_OR_RETURN(weights::StreamingSetup setup, std::move(opened));
    lm.stream = setup.source;
    lm.placement_report = std::move(setup.report);
    if (whole_host)
      lm.placement_report = fmt::format("host memory holds every layer the device does not ({:.2f} GiB, the whole "
                                        "model: no --mem-budget), so that layers can move between the two\n",
                                        static_cast<double>(mem_budget) / (1 << 30)) +
                            lm.placement_report;
    if (tiers) {
      lm.placement_report += device_tiers_report(*tiers, setup.source->store().plan().disk_gbps);
      lm.tiers = std::move(tiers);
    }
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
