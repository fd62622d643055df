#include "runtime/measure.h"

#include <algorithm>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "base/timer.h"
#include "plan/measure_rounds.h"
#include "runtime/load_model.h"

namespace sluice::plan {

StatusOr<MeasuredModel> load_for_measure(const MeasureOptions& o) {
  if (o.n_prompt < 1 || o.n_decode < 1) return invalid_argument("measure needs at least one prompt and one decode token");
  MeasuredModel m{.options = o};
  ASSIGN_OR_RETURN(LoadedModel lm, load_model(o.model_path, {.n_threads = o.n_threads, .n_batch = o.n_prompt}));
  m.file = lm.file;
  m.model = std::move(lm.model);
  ASSIGN_OR_RETURN(m.shape, shape_from_model_file(*m.file));
  m.shape.n_vocab = m.model->hparams().n_vocab;
  m.weights = weight_bytes_of_file(*m.file, m.shape);
  return m;
}

StatusOr<MeasureResult> measure_loaded(MeasuredModel& m, const Calibration& cal) {
  if (!(cal.decode_read_gbps() > 0) || !(cal.matmul_tflops > 0)) return invalid_argument("measure needs a calibration of this machine");
  const MeasureOptions& o = m.options;
  Model* model = m.model.get();
  const WeightBytes& wb = m.weights;
  MeasureResult r{.shape = m.shape};
  const WeightFormat kv_f32 = format_of(DType::kF32);
  const ModelCost cost = model_cost(r.shape, wb, kv_f32);
  r.engine_weight_bytes = model->weight_bytes();
  r.plan_weight_bytes = wb.matrix_read_bytes(1);
  r.kv_bytes_per_token = cost.kv_bytes_per_token;
  r.hw = cal.as_hardware();

  std::vector<int32_t> prompt(static_cast<size_t>(o.n_prompt));
  const int64_t n_vocab = model->hparams().n_vocab;
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 7919 + 13) % static_cast<size_t>(n_vocab));
  const std::unique_ptr<Buffer> logits_buf = model->backend().alloc_host(static_cast<size_t>(n_vocab) * sizeof(float));
  float* logits = logits_buf->floats();
  KvCache kv = model->make_kv_cache(o.n_prompt + o.n_decode + 1);

  // A first pass pages the weights in; the second is the timed prefill.
  RETURN_IF_ERROR(model->forward(prompt, kv, logits, false));
  kv.clear();
  Stopwatch sw;
  RETURN_IF_ERROR(model->forward(prompt, kv, logits, false));
  const double prefill_s = sw.seconds();
  r.prefill_measured_tps = static_cast<double>(o.n_prompt) / prefill_s;
  r.prefill_predicted = prefill_step(cost, r.hw, o.n_prompt);
  r.prefill_achieved_tflops = r.prefill_predicted.flops / prefill_s / 1e12;

  std::vector<double> step_s;
  int32_t token = prompt.back();
  for (int64_t i = 0; i < o.n_decode; ++i) {
    sw.reset();
    RETURN_IF_ERROR(model->forward(std::span<const int32_t>(&token, 1), kv, logits, false));
    step_s.push_back(sw.seconds());
    token = static_cast<int32_t>(std::max_element(logits, logits + n_vocab) - logits);
  }
  r.decode_measured_tps = 1.0 / median(step_s);
  r.decode_ctx = o.n_prompt + o.n_decode / 2;
  r.decode_predicted = decode_step(cost, r.hw, 1, r.decode_ctx);
  r.decode_bandwidth_tps = 1.0 / r.decode_predicted.memory_s;
  r.decode_achieved_gbps = (r.decode_predicted.weight_bytes + r.decode_predicted.kv_bytes) * r.decode_measured_tps / 1e9;

  return r;
}

StatusOr<MeasureResult> measure_model(const MeasureOptions& o, const Calibration& cal) {
  MeasureOptions load = o;
  if (load.n_threads <= 0) load.n_threads = cal.n_threads;
  ASSIGN_OR_RETURN(MeasuredModel m, load_for_measure(load));
  return measure_loaded(m, cal);
}

}  // namespace sluice::plan
