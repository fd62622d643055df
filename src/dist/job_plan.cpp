#include "dist/job_plan.h"

#include <algorithm>

#include <fmt/format.h>

#include "arch/arch_spec.h"
#include "dist/pipeline.h"
#include "weights/expert_store.h"
#include "weights/extent_layout.h"
#include "weights/io_engine.h"

namespace sluice::dist {
namespace {

double gib(uint64_t b) { return static_cast<double>(b) / (1ull << 30); }
double mib(uint64_t b) { return static_cast<double>(b) / (1ull << 20); }
// "rank(s) a, b <what>" for the ranks r < n_ranks where streams(r), or
// `none` when none does (the maps' first lines).
template <class Streams>
std::string streaming_note(int64_t n_ranks, Streams streams, const char* none, const char* what) {
  std::string list;
  for (int64_t r = 0; r < n_ranks; ++r)
    if (streams(r)) list += fmt::format("{}{}", list.empty() ? "" : ", ", r);
  return list.empty() ? std::string(none) : fmt::format("rank(s) {} {}", list, what);
}

// A memory cap: GiB, or MiB below one GiB (a small --mem-budget).
std::string job_plan_cap_text(uint64_t b) {
  return b >= (1ull << 30) ? fmt::format("{:.2f} GiB", gib(b)) : fmt::format("{:.1f} MiB", mib(b));
}

}  // namespace

plan::PipelineInputs pipeline_inputs(const ModelFile& file, const ModelHparams& hp) {
  plan::PipelineInputs in;
  in.n_embd = hp.n_embd;
  in.layer_bytes.assign(static_cast<size_t>(hp.n_layer), 0);
  in.layer_flops_per_token.assign(static_cast<size_t>(hp.n_layer), 0.0);
  auto role_is = [&](const TensorInfo& t, TensorRole role) {
    const TensorSpec* s = hp.spec ? hp.spec->find_tensor(t.name) : nullptr;
    return s && s->role == role;
  };
  for (const TensorInfo& t : file.tensors) {
    const auto [layer, suffix] = split_layer_name(t.name);
    const bool matrix = t.ne.size() >= 2;
    double flops = matrix ? 2.0 * static_cast<double>(t.n_elements()) : 0.0;
    if (matrix && t.ne.size() == 3 && hp.n_expert > 0)
      flops *= static_cast<double>(hp.n_expert_used) / static_cast<double>(hp.n_expert);
    if (layer >= 0 && layer < hp.n_layer) {
      in.layer_bytes[static_cast<size_t>(layer)] += t.n_bytes;
      in.layer_flops_per_token[static_cast<size_t>(layer)] += flops;
    } else {
      in.head_bytes += t.n_bytes;
      if (role_is(t, TensorRole::kOutput)) {
        in.head_flops_per_token += flops;
        in.head_read_bytes += t.n_bytes;
      }
    }
  }
  // Streaming per rank (plan/pipeline_plan.h): what a ring slot takes of each
  // layer and what stays resident, laid out as the weight store lays them
  // out. Only single GGUF files of dense models stream a stage.
  if (file.format == "gguf" && !hp.is_moe()) {
    std::vector<std::vector<weights::TensorRange>> mats(static_cast<size_t>(hp.n_layer)),
        pinned(static_cast<size_t>(hp.n_layer));
    bool streamable = true;
    for (const TensorInfo& t : file.tensors) {
      const int64_t layer = split_layer_name(t.name).first;
      if (layer < 0 || layer >= hp.n_layer) continue;
      if (t.file_offset < 0) {
        streamable = streamable && t.ne.size() < 2;
        continue;
      }
      (t.ne.size() >= 2 ? mats : pinned)[static_cast<size_t>(layer)].push_back(
          {static_cast<uint64_t>(t.file_offset), t.n_bytes});
    }
    for (int64_t l = 0; l < hp.n_layer && streamable; ++l) {
      in.layer_slot_bytes.push_back(
          weights::layout_extents(mats[static_cast<size_t>(l)], weights::kDirectAlign).buffer_bytes);
      in.layer_pinned_bytes.push_back(
          weights::layout_extents(pinned[static_cast<size_t>(l)], weights::kDirectAlign).buffer_bytes);
    }
    if (!streamable) {
      in.layer_slot_bytes.clear();
      in.layer_pinned_bytes.clear();
    }
  }
  // A routed model streams a range expert by expert (plan/pipeline_plan.h),
  // its layers' dense parts resident as the expert placement lays them out
  // (weights/expert_placement.cpp: each layer's matrices in one aligned
  // buffer, its vectors among the essentials). A decode token reads its
  // chosen experts of a routed layer, not all of them.
  if (hp.is_moe()) {
    in.n_expert = hp.n_expert;
    in.expert_pick = static_cast<double>(hp.n_expert_used) / static_cast<double>(hp.n_expert);
    in.layer_read_bytes = in.layer_bytes;
    in.layer_dense_bytes.assign(static_cast<size_t>(hp.n_layer), 0);
    std::vector<std::vector<weights::TensorRange>> dense(static_cast<size_t>(hp.n_layer));
    std::vector<uint64_t> vectors(static_cast<size_t>(hp.n_layer), 0);
    uint64_t expert_total = 0;
    int64_t n_routed = 0;
    bool streamable = file.format == "gguf";
    for (int64_t l = 0; l < hp.n_layer; ++l) {
      in.layer_routed.push_back(hp.layer_is_moe(l) ? 1 : 0);
      n_routed += hp.layer_is_moe(l) ? 1 : 0;
    }
    for (const TensorInfo& t : file.tensors) {
      const int64_t layer = split_layer_name(t.name).first;
      if (layer < 0 || layer >= hp.n_layer) continue;
      const auto i = static_cast<size_t>(layer);
      const TensorSpec* sp = hp.spec ? hp.spec->find_tensor(t.name) : nullptr;
      if (sp && sp->kind == TensorKind::kExperts) {
        expert_total += t.n_bytes;
        in.layer_read_bytes[i] -= t.n_bytes - t.n_bytes / static_cast<uint64_t>(hp.n_expert) *
                                                 static_cast<uint64_t>(hp.n_expert_used);
        streamable = streamable && t.file_offset >= 0;
      } else if (t.file_offset < 0 || t.ne.size() <= 1) {
        vectors[i] += t.n_bytes;
      } else {
        dense[i].push_back({static_cast<uint64_t>(t.file_offset), t.n_bytes});
      }
    }
    for (int64_t l = 0; l < hp.n_layer; ++l) {
      const auto i = static_cast<size_t>(l);
      in.layer_dense_bytes[i] = weights::layout_extents(dense[i], weights::kDirectAlign).buffer_bytes + vectors[i];
    }
    if (streamable && n_routed > 0) {
      in.expert_slot_bytes = weights::ExpertStore::slot_bytes_for(file, hp);
      in.expert_bytes = expert_total / static_cast<uint64_t>(n_routed * hp.n_expert);
    }
  }
  if (in.head_flops_per_token == 0) {  // output tied to the embeddings: the head reads the table
    for (const TensorInfo& t : file.tensors)
      if (role_is(t, TensorRole::kTokenEmbd)) {
        in.head_flops_per_token = 2.0 * static_cast<double>(t.n_elements());
        in.head_read_bytes += t.n_bytes;
      }
  }
  return in;
}

plan::ExpertParallelInputs expert_parallel_inputs(const ModelFile& file, const ModelHparams& hp) {
  plan::ExpertParallelInputs in;
  in.n_expert = hp.n_expert;
  in.n_expert_used = hp.n_expert_used;
  in.n_embd = hp.n_embd;
  for (int64_t l = 0; l < hp.n_layer; ++l) in.n_routed_layers += hp.is_moe() && hp.layer_is_moe(l) ? 1 : 0;
  uint64_t expert_total = 0;
  double expert_flops_total = 0;
  for (const TensorInfo& t : file.tensors) {
    const TensorSpec* s = hp.spec ? hp.spec->find_tensor(t.name) : nullptr;
    const double flops = t.ne.size() >= 2 ? 2.0 * static_cast<double>(t.n_elements()) : 0.0;
    if (s && s->kind == TensorKind::kExperts && hp.n_expert > 0) {
      expert_total += t.n_bytes;
      expert_flops_total += flops;
      continue;
    }
    in.dense_bytes += t.n_bytes;
    if (!(s && s->role == TensorRole::kTokenEmbd)) {
      in.dense_read_bytes += t.n_bytes;
      in.dense_flops_per_token += flops;
    }
  }
  if (in.n_expert > 0 && in.n_routed_layers > 0) {
    const auto per = static_cast<uint64_t>(in.n_expert * in.n_routed_layers);
    in.expert_bytes = expert_total / per;
    in.expert_flops = expert_flops_total / static_cast<double>(per);
  }
  // Streaming a share (plan/expert_parallel_plan.h): a pool slot, and rank
  // 0's dense part laid out as the expert placement holds it resident
  // (weights/expert_placement.cpp): the essentials in one aligned buffer,
  // each layer's dense matrices in another. Only single GGUF files stream.
  if (file.format == "gguf" && in.n_expert > 0 && in.n_routed_layers > 0) {
    in.expert_slot_bytes = weights::ExpertStore::slot_bytes_for(file, hp);
    std::vector<weights::TensorRange> essentials;
    std::vector<std::vector<weights::TensorRange>> dense(static_cast<size_t>(hp.n_layer));
    uint64_t in_memory = 0;
    for (const TensorInfo& t : file.tensors) {
      const TensorSpec* s = hp.spec ? hp.spec->find_tensor(t.name) : nullptr;
      if (s && s->kind == TensorKind::kExperts) continue;
      const int64_t layer = split_layer_name(t.name).first;
      if (t.file_offset < 0) {
        in_memory += t.n_bytes;
      } else if (layer < 0 || layer >= hp.n_layer || t.ne.size() <= 1) {
        essentials.push_back({static_cast<uint64_t>(t.file_offset), t.n_bytes});
      } else {
        dense[static_cast<size_t>(layer)].push_back({static_cast<uint64_t>(t.file_offset), t.n_bytes});
      }
    }
    in.dense_resident_bytes = weights::layout_extents(essentials, weights::kDirectAlign).buffer_bytes + in_memory;
    for (const auto& d : dense) in.dense_resident_bytes += weights::layout_extents(d, weights::kDirectAlign).buffer_bytes;
  }
  return in;
}

uint64_t ep_kv_bytes(const ModelFile& file, const ModelHparams& hp, int64_t n_ctx_max, int64_t ctx_cap,
                     int64_t max_seqs) {
  int64_t n_ctx = n_ctx_max > 0 ? n_ctx_max : hp.n_ctx_train;
  if (n_ctx_max <= 0 && ctx_cap > 0) n_ctx = std::min(n_ctx, ctx_cap);
  if (hp.kv_window() > 0) n_ctx = std::min(n_ctx, hp.kv_window());
  // The model's default KV type (Model::default_kv_dtype): f32 for an f32 model, else f16.
  uint64_t elem = 2;
  for (const TensorInfo& t : file.tensors) {
    const TensorSpec* s = hp.spec ? hp.spec->find_tensor(t.name) : nullptr;
    if (s && s->role == TensorRole::kTokenEmbd && t.type == DType::kF32) elem = 4;
  }
  const uint64_t per_token = 2 * static_cast<uint64_t>(hp.n_layer) * static_cast<uint64_t>(hp.n_embd_kv()) * elem;
  const uint64_t bytes = per_token * static_cast<uint64_t>(std::max<int64_t>(1, n_ctx)) *
                         static_cast<uint64_t>(std::max<int64_t>(1, max_seqs / 4));
  return std::min(bytes, std::max(per_token * static_cast<uint64_t>(std::max<int64_t>(1, n_ctx)), uint64_t{4} << 30));
}

plan::PipelineExpertInputs pipeline_expert_inputs(const ModelFile& file, const ModelHparams& hp, int64_t ep_size) {
  plan::PipelineExpertInputs in{.layers = pipeline_inputs(file, hp), .experts = expert_parallel_inputs(file, hp),
                                .ep_size = ep_size};
  for (int64_t l = 0; l < hp.n_layer; ++l) in.routed.push_back(hp.is_moe() && hp.layer_is_moe(l) ? 1 : 0);
  return in;
}

PredictedSteps predicted_steps(const plan::PipelinePlan& p, int64_t n_batch, int64_t micro_batches) {
  PredictedSteps d{.decode_s = p.step_s(1, 1, 1),
                   .prefill_tokens = n_batch,
                   .micro_batches = micro_batches > 0 ? micro_batches
                                                      : p.best_micro_batches(n_batch, 1, kMaxMicroBatches,
                                                                             /*one_prompt=*/true)};
  for (int64_t r = 0; r < p.n_stages() && p.n_stages() > 1; ++r) d.decode_network_s += p.hop_s(r, 1);
  for (int64_t r = 0; r < p.n_stages(); ++r) d.decode_disk_s += p.stage_s(r, 1) - p.in_memory_s(r, 1);
  d.prefill_s = p.step_s(n_batch, 1, d.micro_batches, /*one_prompt=*/true);
  return d;
}

PredictedSteps predicted_steps(const plan::ExpertParallelPlan& p, int64_t n_batch) {
  const auto nb = static_cast<double>(n_batch);
  return PredictedSteps{.decode_s = p.step_s(1),
                        .decode_network_s = p.network_s(1),
                        .decode_disk_s = p.disk_wait_s(1),
                        .prefill_tokens = n_batch,
                        .prefill_s = p.step_s(nb)};
}

PredictedSteps predicted_steps(const plan::PipelineExpertPlan& p, int64_t n_batch) {
  const auto nb = static_cast<double>(n_batch);
  return PredictedSteps{.decode_s = p.step_s(1),
                        .decode_network_s = p.network_s(1),
                        .prefill_tokens = n_batch,
                        .prefill_s = p.step_s(nb)};
}

std::string pipeline_map(const plan::PipelinePlan& p, const plan::PipelineInputs& in, int64_t n_batch,
                         int64_t micro_batches) {
  std::string s = fmt::format(
      "[sluice] pipeline of {} ranks (pp); {}\n", p.n_stages(),
      streaming_note(p.n_stages(), [&](int64_t r) { return p.streams(r); }, "every stage's weights in memory",
                     "stream part of their range from their own disk under --mem-budget"));
  s += "  rank  host              layers        tier    weights     memory cap              read GB/s  TFLOP/s"
       "  link to rank 0\n";
  for (int64_t r = 0; r < p.n_stages(); ++r) {
    const plan::RankResources& k = in.ranks[static_cast<size_t>(r)];
    const plan::LayerRange g = p.ranges[static_cast<size_t>(r)];
    const std::string layers = fmt::format("{}-{}{}", g.begin, g.end - 1, r == 0 ? " +head" : "");
    const std::string cap = fmt::format("{} {}", job_plan_cap_text(k.mem_cap_bytes), k.budget_given ? "budget" : "available");
    const plan::LinkFigures& l = p.links[static_cast<size_t>(r)];
    const std::string link = r == 0 ? "-" : fmt::format("{:.0f} us, {:.2f} GB/s", l.latency_s * 1e6, l.gbps);
    s += fmt::format("  {:<5} {:<17} {:<13} {:<7} {:>8.1f} MiB {:<23} {:>9.2f}  {:>7.3f}  {}\n", r, k.host.substr(0, 17),
                     layers, p.streams(r) ? "+disk" : "memory", mib(p.stage_bytes[static_cast<size_t>(r)]), cap,
                     k.read_gbps, k.tflops, link);
  }
  // The rate by rows at once that the micro-batches are planned at.
  for (int64_t r = 0; r < p.n_stages(); ++r) {
    const plan::RateCurve& c = p.stage_tflops_curve[static_cast<size_t>(r)];
    if (c.points().size() < 2) continue;
    s += fmt::format("  rank {} {} TFLOP/s by rows at once:", r,
                     in.ranks[static_cast<size_t>(r)].forward_curve.empty() ? "matmul" : "forward");
    for (const plan::RatePoint& q : c.points()) s += fmt::format(" {} {:.3f}", q.n_tokens, q.rate);
    auto more = [&](const plan::RateCurve& more_curve, const char* what) {
      if (more_curve.empty()) return;
      s += what;
      for (const plan::RatePoint& q : more_curve.points()) s += fmt::format(" {} {:.3f}", q.n_tokens, q.rate);
    };
    more(p.stage_tflops_curve_shared[static_cast<size_t>(r)], "; every rank at once:");
    if (p.stage_streamed[static_cast<size_t>(r)] > 0)
      more(p.stage_streamed_curve[static_cast<size_t>(r)], "; streamed layers (not repacked):");
    if (const double a = p.stage_attention_s[static_cast<size_t>(r)]; a > 0)
      s += fmt::format("; attention {:.3g} ns a query per earlier key", a * 1e9);
    s += "\n";
  }
  // A streaming rank: which of its layers stay in memory, which stream (the
  // placement's spread; its weight store prints the same at load).
  for (int64_t r = 0; r < p.n_stages(); ++r) {
    if (!p.streams(r)) continue;
    const auto i = static_cast<size_t>(r);
    const plan::LayerRange g = p.ranges[i];
    if (p.streams_experts(r)) {
      const int64_t routed = p.stage_routed_layers[i];
      s += fmt::format("  rank {} layers {}-{}: experts stream from its disk at {:.2f} GB/s into a pool of {} expert "
                       "slots ({:.1f} per routed layer of {}, {} routed layers); a decode token finds {:.0f}% of its "
                       "experts in a slot and reads the rest ({:.2f} ms); it holds {:.1f} MiB of the range's {:.1f} "
                       "MiB\n",
                       r, g.begin, g.end - 1, p.disk_gbps[i], p.stage_expert_slots[i],
                       static_cast<double>(p.stage_expert_slots[i]) / static_cast<double>(routed), p.n_expert, routed,
                       p.expert_hit_rate(r, 1) * 100.0, p.disk_s(r, 1) * 1e3, mib(p.stage_bytes[i]),
                       mib(p.range_bytes[i]));
      continue;
    }
    std::string row;
    for (int64_t l = g.begin; l < g.end; ++l) row += p.layer_streamed(r, l) ? 'S' : 'R';
    s += fmt::format("  rank {} layers {}-{}: {}  (R resident, S streamed): {} of its {} layers stream from its disk at "
                     "{:.2f} GB/s through a ring of {} slots ({:.2f} ms a pass); it holds {:.1f} MiB of the range's "
                     "{:.1f} MiB\n",
                     r, g.begin, g.end - 1, row, p.stage_streamed[i], g.end - g.begin, p.disk_gbps[i],
                     p.stage_ring_slots[i], p.stage_disk_s[i] * 1e3, mib(p.stage_bytes[i]), mib(p.range_bytes[i]));
  }
  const PredictedSteps d = predicted_steps(p, n_batch, micro_batches);
  s += fmt::format(
      "[sluice] predicted: decode {:.2f} ms/token ({:.2f} ms of it on links, {:.2f} ms waiting on disks), prefill {} "
      "tokens {:.1f} ms ({:.0f} tokens/s, in {} micro-batches); {} bytes per token per hop\n",
      d.decode_s * 1e3, d.decode_network_s * 1e3, d.decode_disk_s * 1e3, n_batch, d.prefill_s * 1e3,
      static_cast<double>(n_batch) / d.prefill_s, d.micro_batches, p.hop_bytes(1, 1, 1));
  return s;
}

std::string expert_parallel_map(const plan::ExpertParallelPlan& p, int64_t n_batch) {
  std::string s = fmt::format(
      "[sluice] experts over {} ranks (ep): every routed layer's experts split, the rest on {}; {}\n", p.n_ranks(),
      p.every() ? "every rank" : "rank 0",
      streaming_note(p.n_ranks(), [&](int64_t r) { return p.streams(r); }, "every weight in memory",
                     "stream their share from their own disk under --mem-budget"));
  s += "  rank  host              experts       tier    weights     memory cap              read GB/s  TFLOP/s"
       "  link to rank 0\n";
  for (int64_t r = 0; r < p.n_ranks(); ++r) {
    const plan::RankResources& k = p.in.ranks[static_cast<size_t>(r)];
    const plan::ExpertRange g = p.shares[static_cast<size_t>(r)];
    const std::string experts = fmt::format("{}-{}{}", g.begin, g.end - 1, p.runs_attention(r) ? " +rest" : "");
    const std::string cap = fmt::format("{} {}", job_plan_cap_text(k.mem_cap_bytes), k.budget_given ? "budget" : "available");
    const plan::LinkFigures& l = p.in.links[static_cast<size_t>(r)];
    const std::string link = r == 0 ? "-" : fmt::format("{:.0f} us, {:.2f} GB/s", l.latency_s * 1e6, l.gbps);
    s += fmt::format("  {:<5} {:<17} {:<13} {:<7} {:>8.1f} MiB {:<23} {:>9.2f}  {:>7.3f}  {}\n", r,
                     k.host.substr(0, 17), experts, p.streams(r) ? "+disk" : "memory",
                     mib(p.rank_bytes[static_cast<size_t>(r)]), cap, k.read_gbps, k.tflops, link);
  }
  // A streaming rank: its pool, the share of its experts a decode token
  // finds there, and what the rest cost from its disk (its weight store
  // prints its own placement at load).
  for (int64_t r = 0; r < p.n_ranks(); ++r) {
    if (!p.streams(r)) continue;
    const auto i = static_cast<size_t>(r);
    const plan::ExpertRange g = p.shares[i];
    const double missed = (1.0 - p.hit_rate(r, 1)) * p.used_experts(r, 1) * static_cast<double>(p.in.n_routed_layers);
    s += fmt::format("  rank {} experts {}-{}: a pool of {} expert slots of {:.3f} MiB ({:.1f} per routed layer of its "
                     "{}){}; a decode token finds {:.0f}% of its experts there and reads {:.2f} more from its disk at "
                     "{:.2f} GB/s ({:.2f} ms); it holds {:.1f} MiB of the share's {:.1f} MiB\n",
                     r, g.begin, g.end - 1, p.slots[i], mib(p.in.expert_slot_bytes),
                     static_cast<double>(p.slots[i]) / static_cast<double>(p.in.n_routed_layers), g.end - g.begin,
                     p.runs_attention(r) ? ", read ahead by routing prediction" : ", read ahead by rank 0's prediction",
                     100 * p.hit_rate(r, 1), missed, p.in.ranks[i].disk_gbps,
                     p.disk_s(r, 1) * static_cast<double>(p.in.n_routed_layers) * 1e3, mib(p.rank_bytes[i]),
                     mib(p.share_bytes[i]));
  }
  // Where attention runs, and why (the planner's choice or the flag's).
  s += fmt::format("[sluice] attention on {}{}: {}\n", p.every() ? "every rank" : "rank 0",
                   p.every() ? fmt::format(" (each worker also holds a KV pool of {:.1f} MiB mirroring rank 0's)",
                                           mib(p.in.kv_bytes))
                             : "",
                   p.attention_why);
  double out = 0, back = 0;
  for (int64_t r = 1; r < p.n_ranks(); ++r) {
    out += p.bytes_out(r, 1);
    back += p.bytes_back(r, 1);
  }
  const PredictedSteps d = predicted_steps(p, n_batch);
  s += fmt::format(
      "[sluice] predicted: decode {:.2f} ms/token ({:.2f} ms of it on links, {:.2f} ms waiting on disks), prefill {} "
      "tokens {:.1f} ms ({:.0f} tokens/s); per token and routed layer {:.0f} B out, {:.0f} B back\n",
      d.decode_s * 1e3, d.decode_network_s * 1e3, d.decode_disk_s * 1e3, n_batch, d.prefill_s * 1e3,
      static_cast<double>(n_batch) / d.prefill_s, out, back);
  return s;
}

}  // namespace sluice::dist

namespace sluice::dist {

std::string pipeline_expert_map(const plan::PipelineExpertPlan& p, int64_t n_batch) {
  const int64_t E = p.ep_size;
  std::string s = fmt::format(
      "[sluice] pipeline of {} stages x {} ranks (pp,ep): each stage's lead (its first rank) runs the stage's layers, "
      "every routed layer's experts split over the stage's ranks; {}\n",
      p.n_stages(), E,
      streaming_note(p.n_stages() * E, [&](int64_t r) { return p.streams(r / E, r % E); }, "every weight in memory",
                     "stream their share's experts from their own disk under --mem-budget"));
  s += "  rank  host              stage  role     layers        experts     tier    weights     memory cap              "
       "read GB/s  TFLOP/s  link to rank 0\n";
  for (int64_t g = 0; g < p.n_stages(); ++g) {
    const plan::ExpertParallelPlan& e = p.stages[static_cast<size_t>(g)];
    const plan::LayerRange range = p.pipeline.ranges[static_cast<size_t>(g)];
    for (int64_t m = 0; m < E; ++m) {
      const auto i = static_cast<size_t>(m);
      const plan::RankResources& k = e.in.ranks[i];
      const plan::ExpertRange x = e.shares[i];
      const std::string layers = fmt::format("{}-{}{}", range.begin, range.end - 1, g == 0 && m == 0 ? " +head" : "");
      const std::string experts = fmt::format("{}-{}{}", x.begin, x.end - 1, m == 0 ? " +rest" : "");
      const std::string cap =
          fmt::format("{} {}", job_plan_cap_text(k.mem_cap_bytes), k.budget_given ? "budget" : "available");
      const plan::LinkFigures& l = e.in.links[i];
      const std::string link =
          p.rank_of(g, m) == 0 ? "-" : fmt::format("{:.0f} us, {:.2f} GB/s", l.latency_s * 1e6, l.gbps);
      // A lead the cut fitted streaming holds what the cut counted.
      const uint64_t held = m == 0 && p.pipeline.streams(g) ? p.pipeline.stage_bytes[static_cast<size_t>(g)]
                                                            : e.rank_bytes[i];
      s += fmt::format("  {:<5} {:<17} {:<6} {:<8} {:<13} {:<11} {:<7} {:>8.1f} MiB {:<23} {:>9.2f}  {:>7.3f}  {}\n",
                       p.rank_of(g, m), k.host.substr(0, 17), g, m == 0 ? "lead" : "experts", layers, experts,
                       p.streams(g, m) ? "+disk" : "memory", mib(held), cap, k.read_gbps, k.tflops, link);
    }
  }
  // A streaming rank: its pool and what a decode token reads from its disk.
  for (int64_t g = 0; g < p.n_stages(); ++g) {
    const plan::ExpertParallelPlan& e = p.stages[static_cast<size_t>(g)];
    for (int64_t m = 0; m < E; ++m) {
      if (!e.streams(m)) continue;
      const auto i = static_cast<size_t>(m);
      const plan::ExpertRange x = e.shares[i];
      s += fmt::format("  rank {} experts {}-{}: a pool of {} expert slots ({:.1f} per routed layer of its {} routed "
                       "layers' {} experts); a decode token finds {:.0f}% of its experts in a slot and reads the rest "
                       "({:.2f} ms a step)\n",
                       p.rank_of(g, m), x.begin, x.end - 1, e.slots[i],
                       static_cast<double>(e.slots[i]) / static_cast<double>(e.in.n_routed_layers),
                       e.in.n_routed_layers, x.end - x.begin, e.hit_rate(m, 1) * 100.0,
                       e.disk_s(m, 1) * static_cast<double>(e.in.n_routed_layers) * 1e3);
    }
  }
  double out = 0;  // every stage's group alike: the same shares
  const plan::ExpertParallelPlan& e0 = p.stages[0];
  for (int64_t r = 1; r < e0.n_ranks(); ++r) out += e0.bytes_out(r, 1) + e0.bytes_back(r, 1);
  const PredictedSteps d = predicted_steps(p, n_batch);
  s += fmt::format(
      "[sluice] predicted: decode {:.2f} ms/token ({:.2f} ms of it on links), prefill {} tokens {:.1f} ms ({:.0f} "
      "tokens/s as one micro-batch); per token {} B per hop between stages, {:.0f} B per routed layer to and from "
      "the stages' expert ranks\n",
      d.decode_s * 1e3, d.decode_network_s * 1e3, n_batch, d.prefill_s * 1e3,
      static_cast<double>(n_batch) / d.prefill_s, p.pipeline.hop_bytes(1, 1, 1), out);
  return s;
}

}  // namespace sluice::dist
