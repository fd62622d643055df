// Predicted versus measured: runs the engine on a model here and sets what it
// achieves beside what the performance model predicts from calibrated figures.
//
//   decode   median seconds per token over n_decode single-token steps after a
//            prefill of n_prompt tokens; predicted by the roofline on this
//            machine (memory read bandwidth x bytes per token, and the matmul
//            FLOP/s), and by the bandwidth bound alone
//   prefill  one warm forward pass over n_prompt tokens
//   stream   under a host memory budget: the plan_stream() figures for filling
//            a ring from disk at the calibrated disk bandwidth (predicted only
//            until the weight store runs streamed decode)
// The bytes per token come from the model file through the planner and are
// checked against the engine's own count (LlamaModel::weight_bytes()).
// Loads the model; takes seconds to minutes for large files. Not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "plan/calibrate.h"
#include "plan/model_shape.h"
#include "plan/roofline.h"
#include "plan/stream_plan.h"
#include "sluice/status.h"

namespace sluice::plan {

struct MeasureOptions {
  std::string model_path;
  int n_threads = 0;                // <= 0: one per core (use the calibration's count)
  int64_t n_prompt = 128;
  int64_t n_decode = 32;
  double stream_budget_bytes = 0;   // > 0: plan streaming under this host budget
};

struct MeasureResult {
  ModelShape shape;
  uint64_t engine_weight_bytes = 0; // LlamaModel::weight_bytes()
  double plan_weight_bytes = 0;     // planner's matrix bytes read per decode token
  double kv_bytes_per_token = 0;    // f32 KV cache
  Hardware hw;                      // the calibrated machine
  int64_t decode_ctx = 0;           // mean context length of the timed decode steps
  StepEstimate decode_predicted;
  double decode_bandwidth_tps = 0;  // memory bound alone
  double decode_measured_tps = 0;
  double decode_achieved_gbps = 0;  // bytes per token x measured tokens/s
  StepEstimate prefill_predicted;
  double prefill_measured_tps = 0;
  double prefill_achieved_tflops = 0;
  std::optional<StreamPlan> stream; // when a budget was given and a disk was probed
  std::string stream_note;
};

StatusOr<MeasureResult> measure_model(const MeasureOptions& options, const Calibration& calibration);

}  // namespace sluice::plan
