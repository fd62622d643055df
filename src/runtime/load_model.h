// load_model(): the one composition root that turns a path into a runnable
// model. Every tool, the engine (and so the server), the planner's measurements
// and the draft model load through it, so a flag means the same everywhere.
//
//   path -> open_model_file (GGUF, HF folder, llama2.c) -> tokenizer
//        -> [mem_budget > 0: weights::open_streaming: calibrate, place, open
//            the weight store; its placement map is in the result]
//        -> backend (shared with another model, or created by name)
//        -> Model::load (bind by ArchSpec, prepare weights on the backend)
//        -> LoRA adapters (read_lora, Model::add_lora; resident in backend memory)
//
// Thread-compatible: call from one thread; the result is independent.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "format/model_file.h"
#include "model/model.h"
#include "plan/calibrate.h"
#include "runtime/device_tiers.h"
#include "sluice/lora.h"
#include "tokenizer/tokenizer.h"
#include "weights/store_source.h"

namespace sluice {

struct LoadOptions {
  int n_threads = 0;       // backend threads (and calibration's); <= 0: one per core
  int64_t n_batch = 256;   // tokens per forward pass
  int64_t n_ctx_max = 0;   // longest context; 0: the model's trained context, at most ctx_cap
  int64_t ctx_cap = 0;     // caps the trained context when n_ctx_max is 0 (0: no cap)
  int64_t max_seqs = 64;   // sequences per forward pass
  bool repack = true;      // let the backend prepare resident weights (ModelOptions::repack)
  bool predict_experts = false;  // ModelOptions::predict_experts
  float expert_predict_margin = kExpertPredictMargin;  // ModelOptions::expert_predict_margin
  std::string backend = "cpu";            // create_backend() name, when `shared_backend` is null
  std::shared_ptr<Backend> shared_backend;  // run on this backend (a draft model beside its target)
  // Weights beyond this many bytes stream from disk through the weight store
  // (0: all resident). tokens_per_step is what the placement's compute
  // estimate is for (1: decode); calibration, when set, replaces the probes.
  uint64_t mem_budget_bytes = 0;
  // Under mem_budget_bytes: the weight store's disk reads capped at this many
  // bytes/s, a slower disk (weights::StreamingOptions; 0: none). Without a
  // memory budget nothing streams, and a cap is refused.
  double disk_rate_cap_bytes_per_s = 0;
  // --backend cuda: GPU memory for the weights; those beyond it stream from
  // pinned host memory (BackendOptions::device_budget_bytes; 0: all resident).
  uint64_t gpu_budget_bytes = 0;
  // With gpu_budget_bytes on a device backend and no mem_budget_bytes: run
  // the three tiers with host memory holding every layer the device does not
  // (a host budget of the whole model, nothing read from disk per step) in
  // place of the backend's own pinned ring, so that device layers can move to
  // host memory and back (the fluid split over --gpu-budget alone).
  bool host_holds_rest = false;
  // Out of gpu_budget_bytes, what the caller keeps (ModelOptions::device_reserve).
  std::function<StatusOr<uint64_t>(const KvShape&)> device_reserve;
  int64_t tokens_per_step = 1;
  const plan::Calibration* calibration = nullptr;
  // Adapters added to the model in this order (Model::add_lora: bit i is loras[i]).
  std::vector<LoraSpec> loras;
  // Fine-tuning under mem_budget_bytes: the placement plans training's order
  // and compute for micro-batches of tokens_per_step tokens
  // (weights::StreamingOptions::training).
  std::optional<plan::TrainWorkload> training;
  // This process's part of the model (ModelOptions::layer_begin ..
  // experts_only): a pipeline stage's layers (dist/session.h) and an expert
  // share (dist/expert_parallel.h). Under mem_budget_bytes the stage's own
  // layers stream (weights/placement.h, rule 6), and the share expert by
  // expert, only its experts ever read (rule 7).
  weights::StageSlice stage;
  // The engine's KV pool when its caller fixed it (EngineConfig::kv_budget_bytes;
  // 0: the engine's default): what --parallel ep plans every rank to mirror
  // with attention on every rank. Nothing here allocates it.
  uint64_t kv_budget_bytes = 0;
};

struct LoadedModel {
  std::shared_ptr<const ModelFile> file;
  std::unique_ptr<Tokenizer> tokenizer;
  std::shared_ptr<weights::StoreWeightSource> stream;  // set when weights stream under a budget
  std::string placement_report;                        // the streaming report ("" when resident)
  std::optional<DeviceTiers> tiers;                    // three tiers on a device (--gpu-budget with --mem-budget)
  std::unique_ptr<Model> model;
  double load_seconds = 0;
  std::string name;  // general.name, else the path
};

// Errors: the file cannot be read or is malformed, an unsupported
// architecture or weight type, a budget that cannot work (naming the smallest
// that would), an unknown backend, an adapter that cannot be read or does not
// fit the model (named by its path).
StatusOr<LoadedModel> load_model(const std::string& path, const LoadOptions& options);

}  // namespace sluice
