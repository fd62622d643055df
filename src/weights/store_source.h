// StoreWeightSource: the weight store as the model's LayerWeightSource, and the
// one-call setup `sluice run/bench --mem-budget` use.
//
// open_streaming() measures this machine with the planner's probes (the decode
// roof, matmul FLOP/s, O_DIRECT read rate of the model file itself), or takes
// a calibration the caller already has,
// estimates compute per layer for the expected tokens per step with the same
// roofline the planner uses, plans the placement (ring size from plan_stream)
// and opens the store, whose ring first reads the streamed layers as it will
// for options.ring_probe_s and re-rates the plan's disk figures with that. A
// budget that cannot work is refused with the smallest one that would.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "model/hparams.h"
#include "model/weight_source.h"
#include "plan/calibrate.h"
#include "plan/train_plan.h"
#include "weights/weight_store.h"

namespace sluice::weights {

// Hands the model each layer's matrices by role: the model file's ArchSpec
// says which tensors a layer has and under which names.
class StoreWeightSource : public LayerWeightSource {
 public:
  StoreWeightSource(std::unique_ptr<WeightStore> store, const ModelHparams& hp) : store_(std::move(store)), hp_(hp) {}
  const uint8_t* resident(const std::string& name) const override { return store_->resident_tensor(name); }
  bool reorderable(const uint8_t* data) const override { return store_->owns_resident(data); }
  Status acquire(int64_t layer, LayerWeightPointers* out) override;
  void release(int64_t layer) override { store_->release(layer); }
  bool device_resident(int64_t layer) const override { return store_->plan().layers[static_cast<size_t>(layer)].device; }
  std::vector<std::span<const uint8_t>> host_regions() const override { return store_->host_regions(); }
  void end_step(int64_t n_tokens) override { store_->end_step(n_tokens); }
  Status set_schedule(std::span<const int64_t> order) override { return store_->set_schedule(order); }
  bool streams_experts() const override { return store_->streams_experts(); }
  void predict_experts(int64_t layer, std::span<const int32_t> experts) override {
    store_->predict_experts(layer, experts);
  }
  Status begin_experts(int64_t layer, std::span<const int32_t> experts, ExpertPointers* out) override {
    return store_->begin_experts(layer, experts, out);
  }
  Status next_expert(int64_t layer, int64_t* index) override { return store_->next_expert(layer, index); }
  void expert_prepared(int64_t layer, int64_t index) override { store_->expert_prepared(layer, index); }
  bool next_expert_ready(int64_t layer) const override { return store_->next_expert_ready(layer); }
  bool unprepared_expert(int64_t* layer, int32_t* expert, ExpertPointers* out) const override {
    return store_->unprepared_expert(layer, expert, out);
  }
  bool landed_expert(int64_t layer, int32_t expert, ExpertPointers* out) const override {
    return store_->landed_expert(layer, expert, out);
  }
  void set_expert_reuse_hook(ExpertReuseHook hook) override { store_->set_expert_reuse_hook(std::move(hook)); }
  void unpinned_expert_prepared(int64_t layer, int32_t expert) override {
    store_->unpinned_expert_prepared(layer, expert);
  }
  uint64_t demotable_bytes(int64_t layer) const override { return store_->demotable_bytes(layer); }
  Status demote(int64_t layer) override { return store_->demote(layer); }
  std::span<const uint8_t> layer_region(int64_t layer) const override { return store_->layer_buffer(layer); }
  ExpertSlotRange expert_slot_range() const override {
    return {.now = store_->expert_slots(), .min = store_->min_expert_slots(), .max = store_->max_expert_slots(),
            .slot_bytes = store_->plan().expert_slot_bytes};
  }
  Status set_expert_slots(int64_t n) override { return store_->set_expert_slots(n); }
  Status promote(int64_t layer, LayerWeightPointers* out) override;
  WeightStore& store() { return *store_; }
  const WeightStore& store() const { return *store_; }

 private:
  // out's matrices from a view of layer `layer`.
  Status pointers(int64_t layer, const LayerView& v, LayerWeightPointers* out) const;

  std::unique_ptr<WeightStore> store_;
  ModelHparams hp_;
};

// The part of the model one process holds and runs (dist/): a pipeline
// stage's layers and an expert share of every routed layer. -1: to the last.
// The placement takes it field by field (PlacementInputs::layer_begin ..
// experts_only: rules 6 and 7), the model likewise (ModelOptions).
struct StageSlice {
  int64_t layer_begin = 0;    // layers [layer_begin, layer_end)
  int64_t layer_end = -1;
  int64_t expert_begin = 0;   // routed experts [expert_begin, expert_end)
  int64_t expert_end = -1;
  bool experts_only = false;  // the share alone: nothing else is held
  // No stage and no share: the whole model.
  bool whole() const {
    return layer_begin == 0 && layer_end < 0 && expert_begin == 0 && expert_end < 0 && !experts_only;
  }
};

struct StreamingOptions {
  uint64_t mem_budget_bytes = 0;  // compute-tier budget for weights
  int n_threads = 0;
  int64_t tokens_per_step = 1;    // what the compute estimate is for (1 = decode)
  bool direct = true;             // O_DIRECT (false: buffered reads, for filesystems without it)
  // Seconds of the ring's own reads before it starts, whose rate re-rates the
  // plan's predictions (WeightStoreOptions::ring_probe_s; 0: off).
  double ring_probe_s = 1.0;
  // A slower disk: the store's reads capped at this many bytes/s
  // (WeightStoreOptions::disk_rate_cap_bytes_per_s; 0: none). The placement
  // plans with the smaller of the calibrated rate and the cap.
  double disk_rate_cap_bytes_per_s = 0;
  // Figures to plan with (from calibrate_for_model on this file); null: probe
  // here. Not owned; read during the call.
  const plan::Calibration* calibration = nullptr;
  // Fine-tuning: the placement plans training's order and compute
  // (PlacementInputs::training) for micro-batches of tokens_per_step tokens.
  std::optional<plan::TrainWorkload> training;
  // A pipeline stage's layers and an expert share (the whole model by default).
  StageSlice stage;
  // Three tiers: the layers a device backend holds (PlacementInputs::device_layers).
  std::vector<int64_t> device_layers;
};

struct StreamingSetup {
  std::shared_ptr<StoreWeightSource> source;
  std::string report;  // measured rates, estimate and the placement map
};

// This machine measured for streaming `file`: the planner's probes on the
// model's own layer and weight type (plan::with_model_weights), and as the
// disk rate what the weight store's own reads get from the model file (its IO
// engine, read size and queue depth; a sequential O_DIRECT read at queue depth
// 1 gets much less than the store does). `sluice plan --measure` and
// open_streaming both calibrate through here, so the prediction and the
// placement use one set of figures. The memory probes allocate at most
// max_probe_bytes, but 32 MiB at least (0: no cap; streaming passes its
// budget, which is what the machine has to spare). Errors: the file cannot be read.
StatusOr<plan::Calibration> calibrate_for_model(const ModelFile& file, int n_threads, bool direct = true,
                                                uint64_t max_probe_bytes = 0);
// The disk half of calibrate_for_model: sets cal's disk_read_gbps,
// disk_direct and disk_note from the store's own reads of `file` (a pipeline
// rank that may stream measures only this beside its hello's probes).
// Errors: the file cannot be read, or is smaller than one read.
Status measure_store_reads(const ModelFile& file, bool direct, plan::Calibration* cal);
// The memory probes' options calibrate_for_model uses (no disk probe: the
// store measures its own reads).
plan::CalibrateOptions probe_options_for_model(const ModelFile& file, int n_threads, uint64_t max_probe_bytes = 0);

// The calibration as a disk capped at `cap_bytes_per_s` reads (--disk-rate-cap):
// disk_read_gbps lowered to the cap where it is above it, said in disk_note.
// The probe itself reads uncapped (at a low cap it would take minutes), so the
// figure is min(measured, cap). cap 0: unchanged.
void apply_disk_rate_cap(plan::Calibration& cal, double cap_bytes_per_s);

StatusOr<StreamingSetup> open_streaming(std::shared_ptr<const ModelFile> file, const StreamingOptions& options);

}  // namespace sluice::weights
