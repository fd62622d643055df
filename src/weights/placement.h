// Placement: which tensors stay resident in the compute tier and which stream
// from disk through a ring of K layer slots, from a memory budget, the model
// layout and two measured rates (disk read GB/s, compute seconds per layer).
//
// Tiers, slowest first: disk (the model file, read with O_DIRECT), host RAM,
// device. On a CPU-only machine host RAM is the compute tier and the budget
// (--mem-budget) limits it; the device tier exists in the interface only.
//
// Rules, in order:
//   1. Resident always: every tensor outside the blocks (token_embd, output,
//      output_norm, rope_freqs) and every 1-D block tensor (norms, biases):
//      the "essentials". Tensors the file cannot serve by offset (transformed
//      at import) are resident too.
//   2. Budget 0, or enough for everything: all resident, no ring.
//   3. Otherwise the block matrices of a layer stream as one unit into a slot
//      of slot_bytes (the largest streamed layer, extents aligned). The ring
//      size K comes from plan::plan_stream (transfer = slot / disk rate):
//      K = max(2, ceil(transfer / compute) + 1). K > 2 only when a transfer
//      outlasts a layer's compute, i.e. when the step is disk-bound anyway; a
//      budget that holds 2 slots but not K trims the ring (and the map says so),
//      because more slots would not make a disk-bound step faster.
//   4. A budget below essentials + 2 slots cannot work and is refused with the
//      smallest budget that would.
//   5. Whole layers fill what is left after the ring; resident layers are spread
//      evenly between streamed ones, so each run of streamed layers has
//      resident compute around it to hide transfers behind. Training
//      (in.training) walks the layers forward and then back: there the first
//      and the last layer stream and the resident ones are spread evenly
//      between them, because at each turn the ring's slots hold the layers
//      the schedule comes back to and the disk waits until the turn's layer
//      has been computed both ways; a resident layer next to a turn would only
//      lengthen that wait. (Which layers are resident does not change the
//      reads: a resident layer and a ring slot each spare two reads a step.)
//   6. A pipeline stage (in.layer_begin/layer_end, dist/session.h) places only
//      its own layers by these rules; with layer_begin > 0 the tensors outside
//      the blocks are rank 0's too. The other processes' tensors are
//      `elsewhere`: served from the file's memory map, never read, not counted.
//      A routed model's stage streams the experts of its own routed layers
//      (rule 7's pool over them alone); training a stage is refused.
//   7. An expert share (in.expert_begin/expert_end, dist/expert_parallel.h)
//      of a routed model always streams expert by expert (plan_expert_
//      placement): the pool holds only the share's experts, at least one
//      routed layer's share of slots, and the store never reads another
//      expert. With experts_only every other tensor is elsewhere, as in
//      rule 6 (a rank r > 0 of --parallel ep holds its experts alone). With
//      a layer range too (--parallel pp,ep), the share of that range's
//      routed layers.
//   8. The device tier's layers (in.device_layers, chosen by plan::plan_tiers
//      for the GPU's budget) are the backend's: their matrices Tier::kDevice,
//      served from the file's memory map for the backend's copy at load,
//      counted in no host figure; rules 2-5 place the other layers (rule 5's
//      training spread among those alone: the store's schedule skips the
//      device's layers, so its turns are the host layers'). A routed layer's
//      experts stay the store's: resident when they all fit, else rule 7's
//      pool (the device tier of a routed model is every layer's dense
//      part).
// Predicted per step: compute = n_layer x compute_s, disk = n_streamed x
// transfer_s, step = max of the two, stall = step - compute. This assumes the
// ring lets the disk run ahead across resident layers. Training predicts per
// micro-batch with plan::plan_train_stream (plan/train_plan.h): compute of
// both visits of every layer and the loss head, 2 max(0, S - K) layer reads,
// and the boundary at the two turns.
//
// Pure functions over plain data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "arch/arch_spec.h"  // split_layer_name
#include "format/model_file.h"
#include "plan/stream_plan.h"
#include "plan/train_plan.h"
#include "sluice/status.h"
#include "weights/extent_layout.h"

namespace sluice::weights {

enum class Tier { kDisk, kHost, kDevice };
const char* tier_name(Tier t);

struct PlacementInputs {
  uint64_t mem_budget_bytes = 0;     // compute tier (host RAM here); 0: unlimited
  double disk_gbps = 0;              // measured O_DIRECT read rate; needed when streaming
  double layer_compute_s = 0;        // compute per layer per step; needed when streaming
  int64_t tokens_per_step = 1;       // what layer_compute_s was measured for (shown in the map)
  // Experts streamed one by one: one expert's compute and the output head's,
  // at tokens_per_step (PlacementPlan::predicted_boundary_s).
  double expert_compute_s = 0;
  double head_compute_s = 0;
  // Training: layer_compute_s is a layer's forward visit (the ring is sized
  // on it), train_backward_s its backward visit, head_compute_s the loss head
  // (forward and backward), all at tokens_per_step tokens a micro-batch.
  bool training = false;
  double train_backward_s = 0;
  uint64_t max_gap = kDefaultMaxGap; // extent merging (extent_layout.h)
  bool stream_all = false;           // benchmarks: stream every layer through the full planned
                                     // ring, trimmed to mem_budget_bytes when that is not 0
  int64_t layer_begin = 0;           // a pipeline stage's layers [layer_begin, layer_end)
  int64_t layer_end = -1;            // (-1: to the last); rule 6
  int64_t expert_begin = 0;          // an expert share [expert_begin, expert_end) of every
  int64_t expert_end = -1;           // routed layer (-1: to the last); rule 7
  bool experts_only = false;         // the share alone: every other tensor elsewhere
  // The device tier (three tiers on a GPU: --gpu-budget with --mem-budget):
  // these layers' matrices are copied into the backend's memory at load from
  // the file's memory map, and the store neither holds nor reads them (rule 8).
  std::vector<int64_t> device_layers;
};

struct TensorPlacement {
  size_t index = 0;        // in ModelFile::tensors
  std::string suffix;      // "attn_q.weight" in a block, else the full name
  int64_t layer = -1;      // -1 outside the blocks
  Tier tier = Tier::kHost; // kHost: resident; kDisk: streamed through the ring; kDevice: rule 8
  bool from_file = true;   // false: bytes only in memory (file_offset < 0)
  uint64_t n_bytes = 0;
  bool elsewhere = false;  // another process's (outside this stage): mapped, never read
};

struct LayerPlacement {
  bool streamed = false;
  bool elsewhere = false;     // outside this stage's layers
  bool device = false;        // the device tier's (rule 8)
  uint64_t matrix_bytes = 0;  // the streamable tensors' own bytes
  uint64_t extent_bytes = 0;  // their aligned buffer size (what a slot or resident copy takes)
};

struct PlacementPlan {
  int64_t n_layer = 0;                   // the model's
  int64_t layer_begin = 0;               // this stage's layers [layer_begin, layer_end)
  int64_t layer_end = 0;                 // (0 in a plan not made by plan_placement: all)
  int64_t n_stage_layers() const { return layer_end > layer_begin ? layer_end - layer_begin : n_layer; }
  std::vector<TensorPlacement> tensors;  // one per ModelFile tensor, same order
  std::vector<LayerPlacement> layers;    // [n_layer]
  int64_t n_streamed = 0;
  uint64_t budget_bytes = 0;             // 0: unlimited
  uint64_t essentials_bytes = 0;         // aligned, as loaded
  uint64_t resident_layer_bytes = 0;     // aligned, as loaded
  uint64_t resident_bytes = 0;           // essentials + resident layers
  uint64_t streamed_bytes = 0;           // tensor bytes of streamed layers
  uint64_t slot_bytes = 0;
  int64_t n_ring_slots = 0;              // K in use; 0 when nothing streams
  int64_t n_ring_slots_planned = 0;      // plan_stream's K
  uint64_t ring_bytes = 0;
  uint64_t host_bytes = 0;               // resident + ring: what the budget holds
  uint64_t total_tensor_bytes = 0;
  uint64_t min_budget_bytes = 0;         // essentials + 2 slots (streaming at all)
  uint64_t full_ring_budget_bytes = 0;   // essentials + K planned slots
  double disk_gbps = 0;                  // the rate the predictions use
  double sized_disk_gbps = 0;            // the rate the ring was sized with (the file probe)
  std::string disk_note;                 // where disk_gbps came from, when not the file probe
  double layer_compute_s = 0;
  int64_t tokens_per_step = 1;
  double transfer_s = 0;                 // per streamed layer
  double predicted_compute_s = 0;        // per step
  double predicted_disk_s = 0;           // per step
  double predicted_stall_s = 0;          // per step (one token in decode)
  // Experts streamed one by one: what the disk cannot overlap at each step
  // boundary. The next step's first routed layer can be predicted only once
  // its tokens are known, so from the last expert read of a step to the first
  // of the next the disk waits for: that last expert's compute, the output
  // head (sampling is negligible), and the dense layers before the first
  // routed one. The step is then max(compute, disk + boundary). 0 otherwise.
  double predicted_boundary_s = 0;
  double predicted_step_s() const { return predicted_compute_s + predicted_stall_s; }
  // The same plan with the disk at `gbps` instead of disk_gbps (the rate a run
  // actually got): transfers take disk_gbps / gbps times as long, compute is
  // unchanged; the step is the longer of the two (the disk's side with the
  // boundary). gbps > 0.
  double predicted_step_s_at(double gbps) const;
  // The same plan with experts found in a slot at `hit_rate` (the share a run
  // measured) instead of expected_hit_rate, the disk at `gbps`: the planner's
  // step time given a hit rate. Plans without expert slots ignore hit_rate.
  double predicted_step_s_given(double hit_rate, double gbps) const;
  // Re-derives the disk figures (transfer_s, predicted_disk_s and _stall_s)
  // at `gbps`, keeping the ring and its sizing; `note` says where the rate
  // came from. For a rate measured after sizing. gbps > 0.
  void rerate_disk(double gbps, std::string note);
  // Expert-granular streaming (a routed model under a budget): every layer's
  // dense tensors stay resident and each routed layer's experts live in a
  // pool of slots, one expert each, filled from disk (expert_store.h).
  int64_t n_expert_slots = 0;            // 0: experts are not streamed one by one
  uint64_t expert_slot_bytes = 0;        // one slot (an expert's aligned extents)
  uint64_t expert_bytes = 0;             // one expert's own bytes
  int64_t n_experts_total = 0;           // routed layers x experts per layer (of the share)
  int64_t n_expert = 0;                  // experts per routed layer
  int64_t expert_begin = 0;              // the share streamed (rule 7): [expert_begin,
  int64_t expert_end = 0;                // expert_end), all n_expert when not a share
  bool expert_share = false;             // rule 7
  bool experts_only = false;             // rule 7, the share alone
  int64_t n_share() const { return expert_end - expert_begin; }
  int64_t n_expert_used = 0;
  int64_t n_layer_moe = 0;
  double expected_hit_rate = 0;          // plan::expected_hit_rate (uniform routing, the prediction's read-ahead)
  double expert_disk_bytes_per_step = 0; // expected expert bytes read per step at that hit rate
  double experts_per_step = 0;           // distinct experts a step chooses over all routed layers
  plan::StreamPlan stream;               // plan_stream over the streamed layers
  // Training order (PlacementInputs::training): the step is a micro-batch,
  // its prediction plan_train_stream's (compute, reads, boundary, stall at
  // the disk rate the plan was made with; the fields above follow the disk).
  bool training = false;
  double train_backward_s = 0;  // a layer's backward visit (layer_compute_s: its forward)
  double train_head_s = 0;      // the loss head
  plan::TrainStreamPlan train;
  std::string note;                      // why the ring was trimmed, or empty
  std::string io_note;                   // filled by whoever opens the store (io backend)
};

// Errors: a budget that cannot work (resource exhausted, naming the smallest
// that would); a device budget (unimplemented); missing rates when streaming;
// a model without blocks.
StatusOr<PlacementPlan> plan_placement(const ModelFile& file, const PlacementInputs& in);

// The expert-granular variant plan_placement() takes for a routed model whose
// weights exceed the budget: dense tensors resident, the budget's rest a pool
// of expert slots (at least one routed layer's worth, so any step fits).
//   p: the plan with its tensors and layers listed (plan_placement's first part)
StatusOr<PlacementPlan> plan_expert_placement(const ModelFile& file, const PlacementInputs& in, PlacementPlan p);

// The placement map printed at start: per tier bytes, tensors, ring slots and
// the predicted stall per step.
std::string placement_map(const PlacementPlan& plan);

// "600M" -> 600e6, "2G", "1.5GB", "512MiB" -> 512 * 2^20, "123" -> bytes.
// K/M/G/T are decimal, Ki/Mi/Gi/Ti binary; a trailing "B" is optional.
StatusOr<uint64_t> parse_byte_size(const std::string& text);

// Sets the plan's disk figures (transfer, predicted disk and stall per step)
// at `gbps`, from its streamed layers and expected expert reads.
void set_disk_figures(PlacementPlan& p, double gbps);
// "1.2 GB", "340.0 MB"; "12.3 ms", "1.20 s" (the placement map's units).
std::string format_bytes(double bytes);
std::string format_seconds(double s);

// True for tensors that stay resident whatever the budget (rule 1 above).
bool is_essential_tensor(const TensorPlacement& t, const TensorInfo& info);


}  // namespace sluice::weights
