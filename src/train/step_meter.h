// StepMeter: what a fine-tuning run's optimizer steps took and, with the base
// streamed under a memory budget, the weight store's prediction for them
// (weights/placement.h, training order) against what the store measured.
//
//   begin() -> LoraTrainer::train_step() -> end(step seconds)    per step
//
// The first step is not counted: it starts from the ring as the load left it.
// Held-out evaluations between steps fall outside begin()/end(). A step is
// grad_accum micro-batches, so the plan's per micro-batch figures are scaled
// by that. Not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/train_plan.h"
#include "sluice/status.h"
#include "weights/store_source.h"

namespace sluice {

class Backend;

struct StepFigures {
  int64_t n_steps = 0;            // steps measured (after the first)
  double median_step_s = 0;
  double mean_step_s = 0;
  // With the base streamed (the rest stay 0 otherwise): per optimizer step.
  bool streamed = false;
  int64_t micro_batches = 0;      // per step
  double predicted_step_s = 0;
  double predicted_compute_s = 0;
  double predicted_layer_forward_s = 0;   // one layer's forward visit, per micro-batch
  double predicted_layer_backward_s = 0;  // its backward visit (no rerun with the activations kept)
  double predicted_stall_s = 0;
  double predicted_read_bytes = 0;
  double predicted_step_at_run_disk_s = 0;  // the same plan at the disk rate the steps got
  double measured_stall_s = 0;    // mean: acquires waiting for reads
  double measured_read_bytes = 0; // mean
  double run_disk_gbps = 0;       // bytes / time with reads in flight (0: nothing read)
  // A device that copies the base in from host memory (0 otherwise), per
  // optimizer step: the layers outside the device tier once a visit, forward
  // and backward, or under --gpu-budget alone what the ring's schedule costs
  // (Backend::scheduled_copy_bytes).
  double predicted_copy_bytes = 0;
  double measured_copy_bytes = 0;  // mean (Backend::bytes_streamed)
};

class StepMeter {
 public:
  // stream: the run's weight source when the base streams, else null (not
  // owned; outlives the meter). micro_batches: per optimizer step. device:
  // the backend, when it copies the base in (not host-visible), and
  // layer_bytes the matrices' bytes of the layers it copies in at each visit
  // (those outside its device tier).
  StepMeter(const weights::StoreWeightSource* stream, int64_t micro_batches, const Backend* device = nullptr,
            uint64_t layer_bytes = 0);
  void begin();
  void end(double step_seconds);
  StepFigures figures() const;

 private:
  const weights::StoreWeightSource* stream_;
  int64_t micro_batches_;
  int64_t n_seen_ = 0;
  std::vector<double> step_s_;
  weights::WeightCountersSnapshot counters_begin_;
  weights::ArbiterStats io_begin_;
  double stall_s_ = 0;
  double read_bytes_ = 0;
  double busy_s_ = 0;
  const Backend* device_;
  uint64_t layer_bytes_;
  uint64_t copied_begin_ = 0;
  double copied_ = 0;
  double scheduled_ = 0;  // the backend's ring: its schedule's cost a period, summed over the steps
};

// Lines for the end of a streamed run: predicted against measured step time,
// stall and bytes read per step, and what the compute ran at against the plan.
std::string step_report(const StepFigures& f);

// The placement's view of a fine-tuning run: sequences of `seq` tokens and
// the adapter's rank and targets (from `targets`, or from `init_adapter`'s
// matrices when it is given). Errors: unknown targets, an unreadable adapter.
StatusOr<plan::TrainWorkload> train_workload(int64_t seq, int64_t rank, const std::string& targets,
                                             const std::string& init_adapter);

}  // namespace sluice
