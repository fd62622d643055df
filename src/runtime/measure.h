// Predicted versus measured: runs the engine on a model here and sets what it
// achieves beside what the performance model predicts from calibrated figures.
//
//   decode   median seconds per token over n_decode single-token steps after a
//            prefill of n_prompt tokens; predicted by the roofline on this
//            machine (bytes per token at the decode roof, calibrate.h's weight
//            read, and the matmul FLOP/s), and by the bandwidth bound alone
//   prefill  one warm forward pass over n_prompt tokens
// Streaming under a memory budget is predicted by the weight store's own
// placement (weights/placement.h, from the same calibration) and measured by
// running the store: `sluice plan --measure --budget-gb` does both.
// The bytes per token come from the model file through the planner and are
// checked against the engine's own count (Model::weight_bytes()).
// Loading takes seconds to minutes for large files, so a model is loaded once
// (load_for_measure) and measured as often as wanted (measure_loaded), each
// time beside a fresh calibration. Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "format/model_file.h"
#include "model/model.h"
#include "plan/calibrate.h"
#include "plan/model_shape.h"
#include "plan/roofline.h"
#include "plan/weight_bytes.h"
#include "sluice/status.h"

namespace sluice::plan {

struct MeasureOptions {
  std::string model_path;
  int n_threads = 0;                // <= 0: one per core (measure_model: the calibration's count)
  int64_t n_prompt = 128;
  int64_t n_decode = 32;
};

struct MeasureResult {
  ModelShape shape;
  uint64_t engine_weight_bytes = 0; // Model::weight_bytes()
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
};

// A model loaded for measuring: the engine's model over the file (resident,
// with the options it was loaded with) and the planner's figures of the file.
// Owns the model; the file is shared (a streamed measurement may reuse it).
struct MeasuredModel {
  MeasureOptions options;
  std::shared_ptr<const ModelFile> file;
  std::unique_ptr<Model> model;
  ModelShape shape;     // from the file's metadata, n_vocab from the engine
  WeightBytes weights;  // of the file's tensors
};

// Opens and loads options.model_path (options.n_threads; <= 0: one per core)
// for passes of up to options.n_prompt tokens. Errors: fewer than one prompt or
// decode token; the file cannot be opened or is not a model the engine loads.
StatusOr<MeasuredModel> load_for_measure(const MeasureOptions& options);

// One measurement of `model` (its options' n_prompt and n_decode) beside the
// predictions from `calibration`; repeatable. Errors: a calibration without a
// decode roof or matmul rate; a failed forward pass.
StatusOr<MeasureResult> measure_loaded(MeasuredModel& model, const Calibration& calibration);

// load_for_measure then measure_loaded; n_threads <= 0 takes the calibration's.
StatusOr<MeasureResult> measure_model(const MeasureOptions& options, const Calibration& calibration);

}  // namespace sluice::plan
