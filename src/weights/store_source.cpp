#include "weights/store_source.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "base/timer.h"
#include "model/model_weights.h"
#include "weights/placement.h"

namespace sluice::weights {

Status StoreWeightSource::acquire(int64_t layer, LayerWeightPointers* out) {
  ASSIGN_OR_RETURN(LayerView v, store_->acquire(layer));
  return pointers(layer, v, out);
}

Status StoreWeightSource::promote(int64_t layer, LayerWeightPointers* out) {
  RETURN_IF_ERROR(store_->promote(layer));
  return pointers(layer, store_->resident_view(layer), out);
}

Status StoreWeightSource::pointers(int64_t layer, const LayerView& v, LayerWeightPointers* out) const {
  const bool experts_apart = store_->streams_experts();
  for (const TensorSpec& t : hp_.spec->tensors) {
    if (!t.per_layer || t.kind == TensorKind::kVector || !applies_to_layer(t, hp_, layer)) continue;
    if (experts_apart && t.kind == TensorKind::kExperts) continue;  // begin_experts() brings them
    const uint8_t* p = v.find(t.gguf);
    if (!p && !t.optional) return internal_error("weight store: layer {} has no tensor {}", layer, t.gguf);
    out->by_role[static_cast<size_t>(t.role)] = p;
  }
  return Status();
}

plan::CalibrateOptions probe_options_for_model(const ModelFile& file, int n_threads, uint64_t max_probe_bytes) {
  plan::CalibrateOptions probes = plan::with_model_weights({.n_threads = n_threads, .probe_disk = false}, file);
  if (max_probe_bytes > 0) {
    // At least 32 MiB, so that a pass still takes measurable time (a budget
    // that small is refused by the placement right after).
    const uint64_t cap = std::max<uint64_t>(max_probe_bytes, 32u << 20);
    probes.mem_bytes = std::min(probes.mem_bytes, cap);
    probes.weight_read_bytes = std::min(probes.weight_read_bytes, cap);
  }
  return probes;
}

StatusOr<plan::Calibration> calibrate_for_model(const ModelFile& file, int n_threads, bool direct,
                                                uint64_t max_probe_bytes) {
  ASSIGN_OR_RETURN(plan::Calibration cal, plan::calibrate(probe_options_for_model(file, n_threads, max_probe_bytes)));
  RETURN_IF_ERROR(measure_store_reads(file, direct, &cal));
  return cal;
}

Status measure_store_reads(const ModelFile& file, bool direct, plan::Calibration* cal) {
  const WeightStoreOptions store;  // the store's defaults: read size and queue depth
  ASSIGN_OR_RETURN(std::unique_ptr<IoEngine> io, IoEngine::open({.path = file.source_path, .backend = store.io,
                                                                 .queue_depth = store.queue_depth, .direct = direct}));
  // Passes of 64 MiB over successive regions of the file, at least 3 and half
  // a second of them, and the median: a virtual disk's rate swings from one
  // second to the next, and one short read would catch a single moment.
  const uint64_t pass_bytes = std::min<uint64_t>(64ull << 20, io->file_size()) / store.chunk_bytes * store.chunk_bytes;
  if (pass_bytes == 0) return invalid_argument("{}: too small for the disk probe", file.source_path);
  const uint64_t n_regions = std::max<uint64_t>(1, io->file_size() / pass_bytes);
  std::vector<double> rates;
  Stopwatch window;
  while (rates.size() < 3 || (window.seconds() < 0.5 && rates.size() < 64)) {
    const uint64_t offset = rates.size() % n_regions * pass_bytes;
    ASSIGN_OR_RETURN(double gbps, probe_read_gbps(*io, store.chunk_bytes, offset, pass_bytes));
    rates.push_back(gbps);
  }
  std::sort(rates.begin(), rates.end());
  cal->disk_read_gbps = rates[rates.size() / 2];
  cal->disk_direct = io->direct();
  cal->disk_note = fmt::format("median of {} reads of {} MiB of {} as the weight store reads it: {} KiB reads, {}",
                              rates.size(), pass_bytes >> 20, file.source_path, store.chunk_bytes >> 10,
                              io->describe());
  return Status();
}

void apply_disk_rate_cap(plan::Calibration& cal, double cap_bytes_per_s) {
  if (!(cap_bytes_per_s > 0)) return;
  const double cap_gbps = cap_bytes_per_s / 1e9;
  if (cal.disk_read_gbps > 0 && cal.disk_read_gbps <= cap_gbps) {
    cal.disk_note += fmt::format("; below the read-rate cap of {:.4g} MB/s", cap_bytes_per_s / 1e6);
    return;
  }
  cal.disk_note = fmt::format("capped at {:.4g} MB/s (--disk-rate-cap; the disk measured {:.2f} GB/s: {})",
                              cap_bytes_per_s / 1e6, cal.disk_read_gbps, cal.disk_note);
  cal.disk_read_gbps = cap_gbps;
}

StatusOr<StreamingSetup> open_streaming(std::shared_ptr<const ModelFile> file, const StreamingOptions& o) {
  if (o.mem_budget_bytes == 0) return invalid_argument("open_streaming needs a memory budget");
  ASSIGN_OR_RETURN(const ModelHparams hp, hparams_from_metadata(file->metadata));
  plan::Calibration cal;
  if (o.calibration) {
    cal = *o.calibration;
  } else {
    ASSIGN_OR_RETURN(cal, calibrate_for_model(*file, o.n_threads, o.direct, o.mem_budget_bytes));
  }
  apply_disk_rate_cap(cal, o.disk_rate_cap_bytes_per_s);
  // Roofline: the larger of reading the bytes at memory bandwidth and their
  // matmul FLOPs at the measured rate.
  auto roofline_s = [&](double bytes, double params, double tokens) {
    return std::max(bytes / (cal.decode_read_gbps() * 1e9), 2.0 * params * tokens / (cal.matmul_tflops * 1e12));
  };
  // Compute per layer: its matrices as a step reads and multiplies them; of
  // stacked experts, the experts the step's tokens route to (uniform routing).
  // And what the disk waits for at a step boundary when experts stream
  // (PlacementPlan::predicted_boundary_s): one expert with its share of the
  // step's tokens, and the output head over the step's tokens.
  const double experts_read = hp.n_expert > 0 ? static_cast<double>(hp.n_expert) *
                                                    (1.0 - std::pow(1.0 - static_cast<double>(hp.n_expert_used) / hp.n_expert,
                                                                    static_cast<double>(o.tokens_per_step)))
                                              : 0.0;
  double layer_bytes = 0, layer_params = 0, expert_bytes = 0, expert_params = 0;
  const TensorInfo* output = nullptr;
  const TensorInfo* embd = nullptr;
  for (const TensorInfo& t : file->tensors) {
    const TensorSpec* spec = hp.spec ? hp.spec->find_tensor(t.name) : nullptr;
    if (spec && spec->role == TensorRole::kOutput) output = &t;
    if (spec && spec->role == TensorRole::kTokenEmbd) embd = &t;
    const int64_t layer = split_layer_name(t.name).first;
    const bool stacked = t.ne.size() == 3 && hp.n_expert > 0;
    if (stacked && layer == hp.n_layer_dense) {
      expert_bytes += static_cast<double>(t.n_bytes) / static_cast<double>(hp.n_expert);
      expert_params += static_cast<double>(t.n_elements() / hp.n_expert);
    }
    if (layer != 0) continue;
    if (t.ne.size() == 2) {
      layer_params += static_cast<double>(t.n_elements());
      layer_bytes += static_cast<double>(t.n_bytes);
    } else if (stacked) {
      layer_params += static_cast<double>(t.n_elements() / hp.n_expert * hp.n_expert_used);
      layer_bytes += static_cast<double>(t.n_bytes) / static_cast<double>(hp.n_expert) * experts_read;
    }
  }
  const double tokens = static_cast<double>(o.tokens_per_step);
  const double compute_s = roofline_s(layer_bytes, layer_params, tokens);
  const double expert_s =
      experts_read > 0 ? roofline_s(expert_bytes, expert_params, tokens * static_cast<double>(hp.n_expert_used) / experts_read)
                       : 0.0;
  const TensorInfo* head = output ? output : embd;
  const double head_s =
      head ? roofline_s(static_cast<double>(head->n_bytes), static_cast<double>(head->n_elements()), tokens) : 0.0;
  PlacementInputs pin{.mem_budget_bytes = o.mem_budget_bytes,
                       .disk_gbps = cal.disk_read_gbps,
                       .layer_compute_s = compute_s,
                       .tokens_per_step = o.tokens_per_step,
                       .expert_compute_s = expert_s,
                       .head_compute_s = head_s,
                       .layer_begin = o.stage.layer_begin,
                       .layer_end = o.stage.layer_end,
                       .expert_begin = o.stage.expert_begin,
                       .expert_end = o.stage.expert_end,
                       .experts_only = o.stage.experts_only,
                       .device_layers = o.device_layers};
  std::string compute_line = fmt::format("compute per layer at {} token(s)/step: {:.2f} ms (estimate)",
                                         o.tokens_per_step, compute_s * 1e3);
  if (o.training) {
    // Training's FLOPs at the matmul rate (plan/train_plan.h), visit by visit.
    ASSIGN_OR_RETURN(const plan::TrainVisitTimes t,
                     plan::train_visit_times(*file, *o.training, o.tokens_per_step, cal.matmul_tflops));
    pin.training = true;
    pin.layer_compute_s = t.forward_s;
    pin.train_backward_s = t.backward_s;
    pin.head_compute_s = t.head_s;
    compute_line = fmt::format("training compute per layer at {} tokens a micro-batch: forward {:.2f} ms, backward "
                               "{:.2f} ms; loss head {:.2f} ms (estimate: the FLOPs at the matmul rate)",
                               o.tokens_per_step, t.forward_s * 1e3, t.backward_s * 1e3, t.head_s * 1e3);
  }
  ASSIGN_OR_RETURN(PlacementPlan plan, plan_placement(*file, pin));
  ASSIGN_OR_RETURN(std::unique_ptr<WeightStore> store,
                   WeightStore::open(file, std::move(plan),
                                     WeightStoreOptions{.direct = o.direct,
                                                        .disk_rate_cap_bytes_per_s = o.disk_rate_cap_bytes_per_s,
                                                        .ring_probe_s = o.ring_probe_s}));
  StreamingSetup setup;
  setup.report = fmt::format(
      "[sluice] machine: decode roof {:.1f} GB/s ({}), matmul {:.1f} GFLOP/s, disk read {:.2f} GB/s ({})\n"
      "[sluice] {}\n{}",
      cal.decode_read_gbps(), cal.weight_read_gbps > 0 ? "weight read" : "memory read", cal.matmul_tflops * 1e3,
      cal.disk_read_gbps, cal.disk_note, compute_line, store->placement_map());
  setup.source = std::make_shared<StoreWeightSource>(std::move(store), hp);
  return setup;
}

}  // namespace sluice::weights
