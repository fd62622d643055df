// Engine::describe_json: what was loaded and where it lives, for a live view
// (the server's /stats) beside the metric registry's moving figures.
//
//   {"name", "arch", "backend", "format", "n_layer", "n_embd", "n_head", "n_head_kv",
//    "head_dim", "n_ff", "n_vocab", "n_ctx_train", "ctx",
//    "n_expert", "n_expert_used", "n_layer_dense",             (0 for dense models)
//    "weight_types": {"Q8_0": bytes, ...},  "weight_bytes",
//    "kv": {"dtype", "block_size", "n_blocks", "bytes", "swap_blocks", "window"},
//    "batch": {"max_batch_tokens", "max_seqs", "prefix_caching"},
//    "adapters": [ids], "speculative": "" or what it is,
//    "placement": per layer, the bytes each tier holds (engine/placement_json.h)}
#include <map>

#include <nlohmann/json.hpp>

#include "engine/engine_impl.h"
#include "engine/placement_json.h"
#include "quant/dtype.h"

namespace sluice {

std::string Engine::describe_json() const {
  const Impl& e = *impl_;
  const ModelHparams& hp = e.model->hparams();
  const KvLayout& kv = e.kv.layout();
  nlohmann::ordered_json j;
  j["name"] = e.name;
  j["arch"] = e.model->arch().name;
  j["backend"] = e.cfg.backend;
  j["format"] = e.file->format;
  j["n_layer"] = hp.n_layer;
  j["n_embd"] = hp.n_embd;
  j["n_head"] = hp.n_head;
  j["n_head_kv"] = hp.n_head_kv;
  j["head_dim"] = hp.head_dim;
  j["n_ff"] = hp.n_ff;
  j["n_vocab"] = hp.n_vocab;
  j["n_ctx_train"] = hp.n_ctx_train;
  j["ctx"] = e.ctx;
  j["n_expert"] = hp.n_expert;
  j["n_expert_used"] = hp.n_expert_used;
  j["n_layer_dense"] = hp.is_moe() ? hp.n_layer_dense : 0;

  // Bytes per weight type, and per layer from the tensor names ("blk.N.").
  std::map<std::string, uint64_t> by_type;
  std::vector<uint64_t> layer_bytes(static_cast<size_t>(hp.n_layer), 0);
  uint64_t total = 0;
  for (const TensorInfo& t : e.file->tensors) {
    by_type[dtype_name(t.type)] += t.n_bytes;
    total += t.n_bytes;
    const int64_t layer = split_layer_name(t.name).first;
    if (layer >= 0 && layer < hp.n_layer) layer_bytes[static_cast<size_t>(layer)] += t.n_bytes;
  }
  j["weight_types"] = by_type;
  j["weight_bytes"] = total;

  j["kv"] = {{"dtype", kv_dtype_name(kv.dtype)},
             {"block_size", kv.block_size},
             {"n_blocks", e.kv.n_blocks()},
             {"bytes", e.kv.bytes()},
             {"swap_blocks", e.host_kv ? e.host_kv->n_blocks() : 0},
             {"window", e.sched->blocks().window()}};
  j["batch"] = {{"max_batch_tokens", e.cfg.max_batch_tokens},
                {"max_seqs", e.cfg.max_seqs},
                {"prefix_caching", e.cfg.prefix_caching}};
  j["adapters"] = lora_names();
  j["speculative"] = e.proposer ? e.proposer->describe() : "";

  // Placement: per layer, the bytes each tier holds (the fluid split moves
  // it between steps, under placement_mu).
  std::lock_guard<std::mutex> placement_lock(e.placement_mu);
  const weights::PlacementPlan* plan = e.stream ? &e.stream->store().plan() : nullptr;
  PlacementFacts f{.gpu = e.cfg.backend == "cuda", .layer_bytes = layer_bytes,
                   .layer_host_bytes = e.model->host_layer_bytes(), .layer_begin = e.model->layer_begin(),
                   .layer_end = e.model->layer_end(), .weights_streamed = plan != nullptr,
                   .n_expert_slots = plan ? plan->n_expert_slots : 0, .expert_bytes = plan ? plan->expert_bytes : 0};
  f.layer_expert_bytes.assign(static_cast<size_t>(hp.n_layer), 0);
  f.layer_moe.assign(static_cast<size_t>(hp.n_layer), 0);
  f.layer_streamed.assign(static_cast<size_t>(hp.n_layer), 0);
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    const auto i = static_cast<size_t>(l);
    f.layer_moe[i] = hp.layer_is_moe(l);
    if (plan && f.n_expert_slots == 0 && i < plan->layers.size()) f.layer_streamed[i] = plan->layers[i].streamed;
    if (!hp.layer_is_moe(l)) continue;
    for (TensorRole role : {TensorRole::kFfnGateExps, TensorRole::kFfnUpExps, TensorRole::kFfnDownExps}) {
      const TensorSpec* spec = hp.spec->find(role);
      const TensorInfo* t = spec ? e.file->find(gguf_tensor_name(*spec, l)) : nullptr;
      if (t) f.layer_expert_bytes[i] += t->n_bytes;
    }
  }
  nlohmann::ordered_json placement = placement_json(f);
  j["placement"] = std::move(placement);
  return j.dump();
}

}  // namespace sluice
