#include "engine/model_runner.h"

#include "base/check.h"
#include "base/timer.h"
#include "spec/verifier.h"

namespace sluice {

ModelRunner::ModelRunner(Model& model, KvStore& kv, KvStore* host_kv, const RunnerConfig& config)
    : model_(model), kv_(kv), host_kv_(host_kv), n_vocab_(model.hparams().n_vocab) {
  logits_ = model.backend().alloc_host(static_cast<size_t>(config.max_logits * n_vocab_) * sizeof(float));
  verify_scratch_.resize(static_cast<size_t>(n_vocab_));
  fseqs_.reserve(static_cast<size_t>(config.max_seqs));
  draws_.reserve(static_cast<size_t>(config.max_seqs));
}

Status ModelRunner::run(const StepPlan& plan, std::span<const SeqSampling> sampling, StepOutput* out) {
  CHECK(sampling.size() == plan.seqs.size());
  Backend& be = model_.backend();
  for (const BlockSwap& s : plan.swap_out) be.move_kv_block(kv_, s.device_block, *host_kv_, s.host_slot);
  for (const BlockSwap& s : plan.swap_in) be.move_kv_block(*host_kv_, s.host_slot, kv_, s.device_block);
  for (const BlockCopy& c : plan.copies) be.copy_kv_block(kv_, c.src, c.dst);
  if (StageRunner* stages = model_.stage_runner()) {  // a pipeline: the other stages copy in their pools
    if (!plan.swap_out.empty() || !plan.swap_in.empty())
      return unimplemented("KV swapping is not supported across pipeline stages");
    stages->copy_kv_blocks(plan.copies);
  }

  fseqs_.clear();
  for (const ScheduledSeq& s : plan.seqs) {
    fseqs_.push_back(ForwardSeq{.tokens = s.tokens, .pos0 = s.pos0, .block_table = s.block_table,
                                .n_logits = s.sample ? 1 + s.n_draft : 0, .loras = s.loras});
  }
  Stopwatch sw;
  const Status st = model_.forward(fseqs_, kv_, logits_->floats());
  last_forward_s_ = sw.seconds();
  RETURN_IF_ERROR(st);

  // Plain draws first, over the host threads: each sequence's sampler is its
  // own state (penalty counts, RNG), so the order they run in does not matter.
  draws_.clear();
  int64_t row = 0;
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const ScheduledSeq& s = plan.seqs[i];
    if (!s.sample) continue;
    const float* lg = logits_->floats() + row * n_vocab_;
    row += 1 + s.n_draft;
    if (sampling[i].sampler && s.n_draft == 0) draws_.push_back(Draw{sampling[i].sampler, lg, -1});
  }
  auto draw = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      Draw& d = draws_[static_cast<size_t>(i)];
      d.token = d.sampler->sample(d.logits);
      d.sampler->accept(d.token);
    }
  };
  const auto n_draws = static_cast<int64_t>(draws_.size());
  if (n_draws >= 2) be.host_pool().parallel_for(n_draws, draw);
  else draw(0, n_draws);

  // Outputs in plan order; drafts are verified here, one sequence at a time.
  size_t next_draw = 0;
  row = 0;
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const ScheduledSeq& s = plan.seqs[i];
    if (!s.sample) continue;
    const float* lg = logits_->floats() + row * n_vocab_;
    row += 1 + s.n_draft;
    if (!sampling[i].sampler) continue;
    SeqOutput so{.id = s.id, .logits = lg};
    if (s.n_draft > 0) {
      const std::span<const int32_t> draft = std::span<const int32_t>(s.tokens).last(static_cast<size_t>(s.n_draft));
      const spec::Verdict v = spec::verify(*sampling[i].sampler, lg, draft, sampling[i].draft_probs,
                                           verify_scratch_.data());
      so.tokens.assign(draft.begin(), draft.begin() + v.n_accepted);
      so.tokens.push_back(v.token);
      so.n_drafted = static_cast<int32_t>(s.n_draft);
      so.n_accepted = v.n_accepted;
    } else {
      so.tokens.push_back(draws_[next_draw++].token);
    }
    out->seqs.push_back(std::move(so));
  }
  return Status();
}

}  // namespace sluice
