// plan_expert_placement(): the placement of a routed model under a budget,
// expert by expert (placement.h, expert_store.h).
//
//   budget = resident (globals + every layer's dense tensors, as loaded)
//          + n_slots x slot (one expert's aligned extents)
//   n_slots >= n_expert, so one routed layer can always hold every expert a
//   step of many tokens may route to; the pool is shared by all layers.
// Expected reads per step, before any prediction, as the planner reckons them
// (plan/expert_plan.h): with s = n_slots / n_layer_moe slots per routed layer
// and uniform routing, a chosen expert is in a slot with probability
// h = s / n_expert; a step of T tokens chooses distinct_experts(T) per routed
// layer, and reads (1 - h) of them. The step is max(compute, disk + boundary):
// at each step boundary the disk waits for the step's last expert, the head
// and any dense layers before the first routed one (placement.h).
//
// An expert share (rule 7; dist/expert_parallel.h) of E_s of the E experts:
// the pool holds at least E_s slots, at most L x E_s; a step chooses
// distinct(T) x E_s / E of them per routed layer. A share with the rest of
// the model routes and predicts as above; a share alone (experts_only) reads
// ahead what the routing process predicts (dist/expert_parallel.h), found in
// a slot at the same h.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "model/hparams.h"
#include "model/model_weights.h"
#include "plan/expert_plan.h"
#include "weights/expert_store.h"
#include "weights/placement.h"

namespace sluice::weights {

StatusOr<PlacementPlan> plan_expert_placement(const ModelFile& file, const PlacementInputs& in, PlacementPlan p) {
  ASSIGN_OR_RETURN(const ModelHparams hp, hparams_from_metadata(file.metadata));
  if (file.format != "gguf") return unimplemented("only single GGUF files stream (this is {})", file.format);
  if (!(in.disk_gbps > 0) || !(in.layer_compute_s > 0))
    return invalid_argument("streaming needs the disk read rate and the compute time per layer (both > 0)");
  // Expert tensors go to the disk tier; everything else stays resident.
  std::vector<std::vector<TensorRange>> dense(static_cast<size_t>(p.n_layer));
  p.expert_share = in.expert_begin != 0 || in.expert_end >= 0 || in.experts_only;
  p.experts_only = in.experts_only;
  p.expert_begin = in.expert_begin;
  p.expert_end = in.expert_end < 0 ? hp.n_expert : in.expert_end;
  const int64_t n_share = p.n_share();
  const double share = static_cast<double>(n_share) / static_cast<double>(hp.n_expert);
  for (TensorPlacement& t : p.tensors) {
    if (t.layer < 0 || t.elsewhere) continue;
    const TensorInfo& info = file.tensors[t.index];
    const TensorSpec* spec = hp.spec->find_tensor(info.name);
    if (spec && spec->kind == TensorKind::kExperts) {
      if (!t.from_file) return unimplemented("tensor '{}' cannot be read expert by expert from the file", info.name);
      t.tier = Tier::kDisk;
    } else if (!is_essential_tensor(t, info) && t.tier != Tier::kDevice) {  // the device tier's: rule 8
      dense[static_cast<size_t>(t.layer)].push_back({static_cast<uint64_t>(info.file_offset), info.n_bytes});
    }
  }
  // A pipeline stage (rule 6) streams the experts of its own layers.
  const int64_t first = p.layer_begin, last = p.layer_end > p.layer_begin ? p.layer_end : p.n_layer;
  p.resident_layer_bytes = 0;
  for (int64_t l = first; l < last; ++l) {
    LayerPlacement& lp = p.layers[static_cast<size_t>(l)];
    const ExtentLayout lay = layout_extents(dense[static_cast<size_t>(l)], kDirectAlign, in.max_gap);
    lp.streamed = false;
    lp.matrix_bytes = lay.tensor_bytes;
    lp.extent_bytes = lay.buffer_bytes;
    p.resident_layer_bytes += lay.buffer_bytes;
  }
  p.slot_bytes = 0;
  p.n_ring_slots = p.n_ring_slots_planned = 0;
  p.resident_bytes = p.essentials_bytes + p.resident_layer_bytes;
  p.n_expert = hp.n_expert;
  p.n_expert_used = hp.n_expert_used;
  int64_t n_dense_first = 0;  // dense layers of the range before its first routed one
  for (int64_t l = first; l < last; ++l) {
    p.n_layer_moe += hp.layer_is_moe(l);
    if (p.n_layer_moe == 0) ++n_dense_first;
  }
  p.n_experts_total = p.n_layer_moe * n_share;
  p.expert_slot_bytes = ExpertStore::slot_bytes_for(file, hp);
  p.expert_bytes = ExpertStore::expert_bytes_for(file, hp);
  if (p.expert_slot_bytes == 0) return unimplemented("this model's experts cannot be read one by one from the file");

  p.min_budget_bytes = p.resident_bytes + static_cast<uint64_t>(n_share) * p.expert_slot_bytes;
  p.budget_bytes = in.mem_budget_bytes;
  if (in.mem_budget_bytes < p.min_budget_bytes) {
    return resource_exhausted(
        "--mem-budget {} cannot work: the resident part ({}) takes {} and a pool of expert slots must hold one "
        "routed layer's {} experts{} x {} = {}; the smallest budget that works is {} bytes ({})",
        format_bytes(static_cast<double>(in.mem_budget_bytes)),
        in.experts_only ? "none: the rest of the model is another process's"
                        : hp.n_ff_shared > 0 ? "embeddings, attention, norms, routers, shared experts"
                                             : "embeddings, attention, norms, routers",
        format_bytes(static_cast<double>(p.resident_bytes)), n_share,
        p.expert_share ? fmt::format(" of this share ({}-{})", p.expert_begin, p.expert_end - 1) : std::string(),
        format_bytes(static_cast<double>(p.expert_slot_bytes)),
        format_bytes(static_cast<double>(n_share * p.expert_slot_bytes)), p.min_budget_bytes,
        format_bytes(static_cast<double>(p.min_budget_bytes)));
  }
  p.n_expert_slots = std::min<int64_t>(p.n_experts_total,
                                       static_cast<int64_t>((in.mem_budget_bytes - p.resident_bytes) / p.expert_slot_bytes));
  p.host_bytes = p.resident_bytes + static_cast<uint64_t>(p.n_expert_slots) * p.expert_slot_bytes;
  // The share's bytes of each stacked tensor (all of them when not a share).
  p.total_tensor_bytes = 0;
  for (const TensorPlacement& t : p.tensors) {
    if (t.elsewhere) continue;
    const uint64_t own = t.tier == Tier::kDisk ? t.n_bytes / static_cast<uint64_t>(hp.n_expert) * n_share : t.n_bytes;
    p.total_tensor_bytes += own;
    if (t.tier == Tier::kDisk) p.streamed_bytes += own;
  }

  const double distinct = plan::distinct_experts(hp.n_expert, hp.n_expert_used, p.tokens_per_step) * share;
  // A share alone reads ahead what the process that routes predicts
  // (dist/expert_parallel.h), as one that routes does its own prediction.
  p.expected_hit_rate = plan::expected_hit_rate(p.n_expert_slots, p.n_layer_moe, n_share, distinct);
  p.experts_per_step = static_cast<double>(p.n_layer_moe) * distinct;
  p.expert_disk_bytes_per_step = p.experts_per_step * (1.0 - p.expected_hit_rate) * static_cast<double>(p.expert_bytes);
  p.predicted_compute_s = static_cast<double>(last - first) * in.layer_compute_s;
  // A stage past the first does not run the output head (rank 0 does).
  p.predicted_boundary_s = in.expert_compute_s + (first == 0 ? in.head_compute_s : 0.0) +
                           static_cast<double>(n_dense_first) * in.layer_compute_s;
  if (in.experts_only) {  // the share's experts are all it computes; it waits for rows, not a boundary
    p.predicted_compute_s = p.experts_per_step * in.expert_compute_s;
    p.predicted_boundary_s = 0;
  }
  if (in.training) {
    // Per micro-batch (train/train_step.h): every layer's forward and
    // backward visits and the loss head; each visit of a routed layer reads
    // the chosen experts it misses (tokens_per_step of them route).
    p.training = true;
    p.train_backward_s = in.train_backward_s;
    p.train_head_s = in.head_compute_s;
    p.train.compute_s =
        static_cast<double>(last - first) * (in.layer_compute_s + in.train_backward_s) + in.head_compute_s;
    p.train.read_bytes = 2 * p.expert_disk_bytes_per_step;
    p.predicted_compute_s = p.train.compute_s;
  }
  set_disk_figures(p, in.disk_gbps);
  return p;
}

}  // namespace sluice::weights
