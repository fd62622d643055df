#include "weights/store_source.h"

#include <algorithm>

#include <fmt/format.h>

#include "plan/calibrate.h"
#include "weights/placement.h"

namespace sluice::weights {

Status StoreWeightSource::acquire(int64_t layer, LayerWeightPointers* out) {
  ASSIGN_OR_RETURN(LayerView v, store_->acquire(layer));
  struct Slot {
    const char* suffix;
    const uint8_t** dst;
  };
  const Slot slots[] = {{"attn_q.weight", &out->attn_q},           {"attn_k.weight", &out->attn_k},
                        {"attn_v.weight", &out->attn_v},           {"attn_output.weight", &out->attn_output},
                        {"ffn_gate.weight", &out->ffn_gate},       {"ffn_up.weight", &out->ffn_up},
                        {"ffn_down.weight", &out->ffn_down}};
  for (const Slot& s : slots) {
    *s.dst = v.find(s.suffix);
    if (!*s.dst) return internal_error("weight store: layer {} has no tensor {}", layer, s.suffix);
  }
  return Status();
}

StatusOr<StreamingSetup> open_streaming(std::shared_ptr<const ModelFile> file, const StreamingOptions& o) {
  if (o.mem_budget_bytes == 0) return invalid_argument("open_streaming needs a memory budget");
  // The probes run the model's own layer and weight type, as `sluice plan
  // --measure` does, so placement and planner share one figure per machine.
  ASSIGN_OR_RETURN(plan::Calibration cal,
                   plan::calibrate(plan::with_model_weights(
                       {.n_threads = o.n_threads, .n_repeats = 3, .probe_disk = true, .disk_path = file->source_path,
                        .disk_bytes = 256ull << 20},
                       *file)));
  // Compute per layer (roofline): the larger of reading the layer's weights at
  // memory bandwidth and its matmul FLOPs at the measured rate.
  auto layout = plan_placement(*file, {});
  if (!layout.ok()) return layout.status();
  uint64_t layer_bytes = 0;
  for (const LayerPlacement& l : layout->layers) layer_bytes = std::max(layer_bytes, l.matrix_bytes);
  int64_t layer_params = 0;
  for (const TensorInfo& t : file->tensors)
    if (t.name.rfind("blk.0.", 0) == 0 && t.ne.size() == 2) layer_params += t.n_elements();
  const double mem_s = static_cast<double>(layer_bytes) / (cal.decode_read_gbps() * 1e9);
  const double flop_s = 2.0 * static_cast<double>(layer_params) * static_cast<double>(o.tokens_per_step) /
                        (cal.matmul_tflops * 1e12);
  const double compute_s = std::max(mem_s, flop_s);
  ASSIGN_OR_RETURN(PlacementPlan plan, plan_placement(*file, {.mem_budget_bytes = o.mem_budget_bytes,
                                                               .disk_gbps = cal.disk_read_gbps,
                                                               .layer_compute_s = compute_s,
                                                               .tokens_per_step = o.tokens_per_step}));
  StreamingSetup setup;
  setup.report = fmt::format(
      "[sluice] machine: decode roof {:.1f} GB/s ({}), matmul {:.1f} GFLOP/s, disk read {:.2f} GB/s ({})\n"
      "[sluice] compute per layer at {} token(s)/step: {:.2f} ms (estimate)\n{}",
      cal.decode_read_gbps(), cal.weight_read_gbps > 0 ? "weight read" : "memory read", cal.matmul_tflops * 1e3,
      cal.disk_read_gbps, cal.disk_note, o.tokens_per_step,
      compute_s * 1e3, placement_map(plan));
  ASSIGN_OR_RETURN(std::unique_ptr<WeightStore> store,
                   WeightStore::open(file, std::move(plan), WeightStoreOptions{.direct = o.direct}));
  setup.source = std::make_shared<StoreWeightSource>(std::move(store));
  return setup;
}

}  // namespace sluice::weights
