// Engine: what it tells its callers about itself for logs and benchmarks
// (the KV pool and batching, speculation, the weight placement and counters),
// and the stats it publishes after every step (EngineStats, the metrics).
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/timer.h"
#include "engine/engine_impl.h"

namespace sluice {

std::string Engine::placement_report() const { return impl_->placement; }
std::string Engine::backend_report() const { return impl_->model->backend().copy_summary(); }

std::string Engine::weights_report() const {
  if (!impl_->stream) return "";
  const weights::WeightStore& store = impl_->stream->store();
  const weights::WeightCountersSnapshot w = store.counters();
  std::string out = w.summary() + "\n";
  if (store.streams_experts()) {
    const weights::ExpertStatsSnapshot ex = store.expert_stats();
    out += ex.per_token(w) + "\n" + ex.table();
  }
  return out;
}
std::string Engine::weights_json() const {
  if (!impl_->stream) return "";
  const weights::WeightStore& store = impl_->stream->store();
  const weights::WeightCountersSnapshot w = store.counters();
  nlohmann::ordered_json j{{"disk_bytes_per_token", w.disk_bytes_per_token()},
                           {"host_bytes_per_token", w.host_bytes_per_token()},
                           {"stall_s", w.stall_s},
                           {"resident_fraction", w.resident_fraction()}};
  if (store.streams_experts()) j["experts"] = store.expert_stats().json(w);
  return j.dump();
}
std::string Engine::speculative_summary() const {
  const Impl& e = *impl_;
  if (!e.proposer) return "";
  return fmt::format("speculative decoding: {}, drafts of up to {} tokens{}", e.proposer->describe(),
                     e.cfg.spec_max_draft, e.cfg.spec_adaptive ? ", length adapted to acceptance" : "");
}
std::vector<std::string> Engine::lora_names() const {
  std::vector<std::string> names;
  for (const LoraSpec& l : impl_->cfg.loras) {
    std::filesystem::path p(l.path);
    if (!p.has_filename()) p = p.parent_path();  // "folder/"
    names.push_back(std::filesystem::is_directory(p) ? p.filename().string() : p.stem().string());
  }
  return names;
}

std::string Engine::summary() const {
  const Impl& e = *impl_;
  const KvLayout& l = e.kv.layout();
  return fmt::format(
      "model {} | arch {} | tokenizer {} | context {} per sequence{} | KV {} in {} blocks of {} tokens ({} tokens, {:.1f} MiB){} | "
      "batch {} tokens, {} sequences | prefix caching {} | threads {}{}{}",
      e.name, e.model->arch().name, e.tok->summary(), e.ctx,
      e.model->longrope_factors() == LongRopeFactors::kNone
          ? ""
          : fmt::format(" (LongRoPE {} factors: {} the original {})", longrope_factors_name(e.model->longrope_factors()),
                        e.model->longrope_factors() == LongRopeFactors::kLong ? "past" : "within",
                        e.model->hparams().rope_orig_ctx),
      kv_dtype_name(l.dtype), e.sched->blocks().pool().n_total(), l.block_size,
      e.sched->blocks().pool().n_total() * l.block_size,
      static_cast<double>(e.kv.bytes()) * static_cast<double>(e.sched->blocks().pool().n_total()) /
          static_cast<double>(e.kv.n_blocks()) / (1 << 20),
      (e.host_kv ? fmt::format(", swap pool {} blocks", e.host_kv->n_blocks()) : "") +
          (e.sched->blocks().window() > 0
               ? fmt::format(", sliding window {}: blocks behind it freed", e.sched->blocks().window())
               : ""),
      e.cfg.max_batch_tokens,
      e.cfg.max_seqs, e.cfg.prefix_caching ? "on" : "off", e.model->n_threads(),
      e.model->repack_summary().empty() ? "" : " | " + e.model->repack_summary(),
      e.model->adapters().size() == 0 ? "" : " | " + e.model->adapters().summary());
}

void Engine::Impl::publish_stats() {
  const BlockStats b = sched->blocks().stats();
  const SchedulerStats s = sched->stats();
  EngineStats st;
  st.running = sched->n_running();
  st.waiting = sched->n_waiting();
  st.swapped = sched->n_swapped();
  st.kv_blocks_total = b.n_total;
  st.kv_blocks_used = b.n_used;
  st.kv_blocks_free = b.n_free;
  st.kv_blocks_cached = b.n_cached;
  st.prefix_hit_rate = b.n_prefix_queried_tokens > 0
                           ? static_cast<double>(b.n_prefix_hit_tokens) / static_cast<double>(b.n_prefix_queried_tokens)
                           : 0.0;
  st.preemptions = s.n_preempted_recompute + s.n_preempted_swap;
  st.steps = s.n_steps;
  st.generated_tokens = static_cast<int64_t>(metrics.generated_tokens->value());
  st.finished_requests = s.n_finished;
  if (fluid) {
    st.fluid_demoted_units = fluid->n_demoted();
    st.fluid_demotions = fluid->n_demotions();
    st.fluid_promotions = fluid->n_promotions();
  }
  st.spec_drafted = spec_drafted;
  st.spec_accepted = spec_accepted;
  st.spec_passes = spec_passes;
  st.spec_emitted = spec_emitted;
  metrics.publish(st);
  if (stream) metrics.publish_weights(stream->store().counters());
  metrics.publish_device_experts(model->backend().expert_slot_counts());
  // Per layer and expert: a few times a second is enough, and once more when
  // the engine goes idle, so what it shows then is final.
  if (stream && stream->store().streams_experts() &&
      (stop || !sched->has_unfinished() || now_seconds() - experts_published_s > 0.25)) {
    metrics.publish_experts(stream->store().expert_stats());
    experts_published_s = now_seconds();
  }
  std::lock_guard<std::mutex> lock(stats_mu);
  snapshot = st;
}

}  // namespace sluice
