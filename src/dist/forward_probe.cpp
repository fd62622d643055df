#include "dist/forward_probe.h"

#include <algorithm>
#include <memory>
#include <random>
#include <vector>

#include "base/timer.h"
#include "dist/job_plan.h"
#include "format/model_file.h"
#include "model/hparams.h"
#include "model/model.h"
#include "plan/calibrate.h"

namespace sluice::dist {

ForwardProbe::~ForwardProbe() = default;

StatusOr<std::unique_ptr<ForwardProbe>> ForwardProbe::create(const std::string& path, int n_threads,
                                                             uint64_t cap_bytes, int64_t max_rows, bool repack) {
  ASSIGN_OR_RETURN(ModelFile mf, open_model_file(path));
  auto file = std::make_shared<const ModelFile>(std::move(mf));
  ASSIGN_OR_RETURN(const ModelHparams hp, hparams_from_metadata(file->metadata));
  if (hp.n_ctx_train > 0) max_rows = std::min(max_rows, hp.n_ctx_train);
  if (max_rows <= 0 || hp.n_layer <= 0) return std::unique_ptr<ForwardProbe>();
  const plan::PipelineInputs in = pipeline_inputs(*file, hp);

  // Layers [b, e): past layer 0 (no output head) when there is more than one,
  // as many as make the memory span, within the cap.
  const int64_t b = hp.n_layer > 1 ? 1 : 0;
  int64_t e = b;
  uint64_t bytes = 0;
  double flops_per_token = 0;
  while (e < hp.n_layer && bytes < plan::memory_span_bytes()) {
    const uint64_t next = bytes + in.layer_bytes[static_cast<size_t>(e)];
    if (cap_bytes > 0 && next > cap_bytes) break;
    bytes = next;
    flops_per_token += in.layer_flops_per_token[static_cast<size_t>(e)];
    ++e;
  }
  if (e == b || !(flops_per_token > 0)) return std::unique_ptr<ForwardProbe>();

  std::unique_ptr<ForwardProbe> p(new ForwardProbe());
  ASSIGN_OR_RETURN(p->model_, Model::load(file, {.n_threads = n_threads, .n_batch = max_rows, .n_ctx_max = max_rows,
                                                 .max_seqs = 1, .repack = repack, .layer_begin = b,
                                                 .layer_end = e}));
  p->kv_ = std::make_unique<KvCache>(p->model_->make_kv_cache(max_rows));
  p->path_ = path;
  p->n_threads_ = n_threads;
  p->cap_bytes_ = cap_bytes;
  p->flops_per_token_ = flops_per_token;
  p->n_layers_ = e - b;
  p->max_rows_ = max_rows;
  p->tokens_.assign(static_cast<size_t>(max_rows), 1);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-0.5f, 0.5f);
  p->hidden_.resize(static_cast<size_t>(max_rows * hp.n_embd));
  for (float& v : p->hidden_) v = dist(rng);
  return p;
}

StatusOr<double> ForwardProbe::pass_s(int64_t n, int64_t pos0) {
  const ForwardSeq seq{.tokens = std::span<const int32_t>(tokens_.data(), static_cast<size_t>(n)),
                       .pos0 = pos0, .block_table = kv_->block_table(), .n_logits = 0};
  Stopwatch sw;
  RETURN_IF_ERROR(model_->begin_step(std::span(&seq, 1), kv_->store(), /*embed=*/false));
  std::copy_n(hidden_.data(), n * model_->hparams().n_embd, model_->hidden());
  RETURN_IF_ERROR(model_->run_stage(0, 1, 0, n, kv_->store()));
  return sw.seconds();
}

StatusOr<double> ForwardProbe::median_pass_s(int64_t n, int64_t pos0, double min_seconds) {
  RETURN_IF_ERROR(pass_s(n, pos0).status());  // warm-up
  std::vector<double> times;
  Stopwatch window;
  while (times.size() < 3 || window.seconds() < min_seconds) {
    ASSIGN_OR_RETURN(const double s, pass_s(n, pos0));
    times.push_back(s);
  }
  std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
  return times[times.size() / 2];
}

StatusOr<plan::RateCurve> ForwardProbe::curve(std::span<const int64_t> rows, double min_seconds) {
  // A pass at the most rows first: the KV rows and scratch touched once.
  RETURN_IF_ERROR(pass_s(max_rows_, 0).status());
  std::vector<plan::RatePoint> points;
  for (int64_t n : rows) {
    if (n <= 0 || n > max_rows_) continue;
    ASSIGN_OR_RETURN(const double s, median_pass_s(n, 0, min_seconds));
    if (s > 0) points.push_back({n, flops_per_token_ * static_cast<double>(n) / s / 1e12});
  }
  return plan::RateCurve(std::move(points));
}

StatusOr<double> ForwardProbe::attention_pair_s(double min_seconds) {
  const int64_t n = std::max<int64_t>(1, max_rows_ / 4), keys = max_rows_ - n;
  if (keys <= 0) return 0.0;
  ASSIGN_OR_RETURN(const double first, median_pass_s(n, 0, min_seconds));
  // The later pass's keys at [0, keys) must be written: one pass over them.
  RETURN_IF_ERROR(pass_s(keys, 0).status());
  ASSIGN_OR_RETURN(const double later, median_pass_s(n, keys, min_seconds));
  return std::max(0.0, later - first) / (static_cast<double>(n) * static_cast<double>(keys) *
                                         static_cast<double>(n_layers_));
}

StatusOr<ForwardRates> ForwardProbe::time_alone(bool streamed, double min_seconds) {
  ForwardRates r;
  ASSIGN_OR_RETURN(r.curve, curve(kForwardProbeRows, min_seconds));
  ASSIGN_OR_RETURN(r.attention_pair_s, attention_pair_s(min_seconds));
  if (streamed) {
    ASSIGN_OR_RETURN(std::unique_ptr<ForwardProbe> rows, create(path_, n_threads_, cap_bytes_, max_rows_, false));
    if (rows) {
      ASSIGN_OR_RETURN(r.streamed, rows->curve(kForwardProbeRows, min_seconds));
    }
  }
  return r;
}

}  // namespace sluice::dist
