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
  p->flops_per_token_ = flops_per_token;
  p->max_rows_ = max_rows;
  p->tokens_.assign(static_cast<size_t>(max_rows), 1);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-0.5f, 0.5f);
  p->hidden_.resize(static_cast<size_t>(max_rows * hp.n_embd));
  for (float& v : p->hidden_) v = dist(rng);
  return p;
}

StatusOr<plan::RateCurve> ForwardProbe::curve(std::span<const int64_t> rows, double min_seconds) {
  const int64_t n_embd = model_->hparams().n_embd;
  // A pass at the most rows first: the KV rows and scratch touched once.
  {
    const ForwardSeq seq{.tokens = std::span<const int32_t>(tokens_.data(), static_cast<size_t>(max_rows_)),
                         .pos0 = 0, .block_table = kv_->block_table(), .n_logits = 0};
    RETURN_IF_ERROR(model_->begin_step(std::span(&seq, 1), kv_->store(), /*embed=*/false));
    std::copy_n(hidden_.data(), max_rows_ * n_embd, model_->hidden());
    RETURN_IF_ERROR(model_->run_stage(0, 1, 0, max_rows_, kv_->store()));
  }
  std::vector<plan::RatePoint> points;
  for (int64_t n : rows) {
    if (n <= 0 || n > max_rows_) continue;
    const ForwardSeq seq{.tokens = std::span<const int32_t>(tokens_.data(), static_cast<size_t>(n)),
                         .pos0 = 0, .block_table = kv_->block_table(), .n_logits = 0};
    std::vector<double> rates;
    Stopwatch window;
    // A warm-up pass, then at least 3 more over min_seconds.
    for (int pass = 0; pass < 4 || window.seconds() < min_seconds; ++pass) {
      Stopwatch sw;
      RETURN_IF_ERROR(model_->begin_step(std::span(&seq, 1), kv_->store(), /*embed=*/false));
      std::copy_n(hidden_.data(), n * n_embd, model_->hidden());
      RETURN_IF_ERROR(model_->run_stage(0, 1, 0, n, kv_->store()));
      const double s = sw.seconds();
      if (pass > 0 && s > 0) rates.push_back(flops_per_token_ * static_cast<double>(n) / s / 1e12);
      if (pass == 0) window.reset();
    }
    std::nth_element(rates.begin(), rates.begin() + static_cast<std::ptrdiff_t>(rates.size() / 2), rates.end());
    points.push_back({n, rates[rates.size() / 2]});
  }
  return plan::RateCurve(std::move(points));
}

}  // namespace sluice::dist
