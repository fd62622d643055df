// The engine's own forward pass over a few of the model's layers, timed at a
// few row counts: what a pipeline stage's micro-batch of n rows costs a layer,
// as a rate the pipeline planner divides its FLOPs by (plan/pipeline_plan.h).
//
// Why not the matmul probe alone (plan/calibrate.h): it times the layer's
// matrix multiplications, and a stage runs the rest of the layer too (norms,
// rope, attention, the activation, the residual adds, the KV rows written).
// On Zen 5 with one thread a 110m Q8_0 layer's forward reached 0.48 TFLOP/s
// of its matrices' FLOPs at 16 rows against the matmul probe's 0.56, and 0.57
// against 0.65 at 64: about 13% of a micro-batch is outside the matmuls.
//
//   rate(n) = n x sum over the probed layers of 2 x (parameters a token
//             multiplies; a routed layer's experts x k / E, as
//             pipeline_inputs() counts them) / seconds of one pass
//
// The probe loads layers [b, e) as a pipeline stage would (b = 1 when the
// model has more than one layer, so no output head), repacked as a stage's
// are (or in the file's order, as a streamed layer runs), over as many layers as make memory_span_bytes() (weights read from
// memory, not cache) and at most `cap_bytes`; a pass is begin_step on rows of
// small random hidden values, then run_stage over [b, e), one sequence at
// position 0. Each size's rate is the median pass of at least 3 over
// min_seconds. For the job's start, before the rank's own load: the ranks
// time it one at a time, then all at once (dist/job_start.cpp).
#pragma once

#include <cstdint>
#include <span>
#include <memory>
#include <string>
#include <vector>

#include "kv/kv_cache.h"
#include "model/model.h"
#include "plan/rate_curve.h"
#include "sluice/status.h"

namespace sluice::dist {

// The row counts a rank's forward is timed at: a micro-batch's sizes.
inline constexpr int64_t kForwardProbeRows[] = {8, 16, 32, 64, 128};
inline constexpr int64_t kForwardProbeMaxRows = 128;

// A machine's forward timed alone (ForwardProbe::time_alone).
struct ForwardRates {
  plan::RateCurve curve;        // the layers as resident ones run, by rows
  plan::RateCurve streamed;     // in the file's row order, as streamed ones run (when asked)
  double attention_pair_s = 0;  // attention per query, per earlier key and per layer
};

class ForwardProbe {
 public:
  // Loads the probe's layers. Null (no error) when not even one layer fits
  // cap_bytes (0: no limit); rows up to max_rows may be timed.
  // Errors: the file cannot be opened or loaded as a model.
  // repack: as resident layers run (the backend's layouts); false: in the
  // file's row order, as a streamed layer runs.
  static StatusOr<std::unique_ptr<ForwardProbe>> create(const std::string& path, int n_threads, uint64_t cap_bytes,
                                                        int64_t max_rows, bool repack = true);
  ~ForwardProbe();

  // The rate at each of `rows` (> max_rows: skipped).
  StatusOr<plan::RateCurve> curve(std::span<const int64_t> rows, double min_seconds);
  // What attention adds per earlier key: a quarter of max_rows rows timed at
  // position 0 and after the other three quarters, the difference per query,
  // per key and per layer (seconds; >= 0). A prompt's later micro-batches
  // attend over the earlier ones' keys, which the curve (every pass at
  // position 0) does not see: on Zen 5 the f16 attention tile was 11% of a
  // 110m stage's time in 32-row micro-batches of a 128-token prompt.
  StatusOr<double> attention_pair_s(double min_seconds);
  // curve() and attention_pair_s() at kForwardProbeRows, and with `streamed`
  // the curve of the same layers loaded in the file's row order (a second
  // probe, within the same cap).
  StatusOr<ForwardRates> time_alone(bool streamed, double min_seconds);

 private:
  ForwardProbe() = default;
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvCache> kv_;
  // One pass of n rows at pos0 (seconds).
  StatusOr<double> pass_s(int64_t n, int64_t pos0);
  // The median of passes (a warm-up, then at least 3 over min_seconds).
  StatusOr<double> median_pass_s(int64_t n, int64_t pos0, double min_seconds);

  std::string path_;
  int n_threads_ = 0;
  uint64_t cap_bytes_ = 0;
  double flops_per_token_ = 0;
  int64_t n_layers_ = 0;
  int64_t max_rows_ = 0;
  std::vector<int32_t> tokens_;
  std::vector<float> hidden_;
};

}  // namespace sluice::dist
