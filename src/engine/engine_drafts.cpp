// Speculative decoding on the engine thread: drafts for every decoding
// sequence before a step, with the draft length priced against a plain step.
#include <algorithm>

#include <fmt/format.h>

#include "base/timer.h"
#include "engine/engine_impl.h"

namespace sluice {

double Engine::Impl::spec_cost_ratio() const {
  // A plain decode step of the running sequences, and what a draft token adds:
  // the proposer's time per draft position plus the target's time per token.
  const double base = step_cost.seconds(static_cast<double>(std::max<int64_t>(1, sched->n_running())));
  if (base <= 0) return 0.0;
  return (draft_s_per_token + step_cost.per_token()) / base;
}

void Engine::Impl::propose_drafts() {
  tasks.clear();
  const double r = spec_cost_ratio();
  int32_t k_max = 0;
  for (const SeqId id : sched->running()) {
    const Sequence* s = sched->find(id);
    if (!s || s->n_committed() - s->n_computed != 1) continue;  // prefill, or waiting for a step
    auto it = owner.find(id);
    if (it == owner.end()) continue;
    Req& rq = reqs.at(it->second.first);
    if (!rq.r.speculative) continue;
    Output& o = rq.outs[static_cast<size_t>(it->second.second)];
    const int64_t room = s->stop.max_tokens - s->n_generated() - 1;
    const int32_t k = static_cast<int32_t>(std::min<int64_t>(o.draft_len.next(r), room));
    if (k < 1) continue;
    k_max = std::max(k_max, k);
    tasks.push_back(spec::DraftTask{.seq = id,
                                    .tokens = s->committed(),
                                    .max_draft = k,
                                    .sampler = o.draft_sampler.get(),
                                    .draft = &o.draft,
                                    .probs = o.draft_sampler ? o.draft_probs.data() : nullptr});
  }
  if (tasks.empty()) return;
  const double t0 = now_seconds();
  if (Status st = proposer->propose(tasks); !st.ok()) {
    fmt::print(stderr, "[sluice] drafting failed, decoding without drafts this step: {}\n", st.message());
    return;
  }
  // The price of one draft position in steady drafting: a round is a short
  // catch-up (last round's accepted tokens) plus k - 1 single-token passes. A
  // long catch-up (a sequence's first round, or after drafting paused) is a
  // one-off, not the price of drafting, so it is left out when steps exist.
  const spec::ProposeCost c = proposer->last_cost();
  double per_token = -1;
  if (c.n_steps == 0 && c.catch_up_s == 0) {
    per_token = (now_seconds() - t0) / k_max;  // no passes (prompt lookup)
  } else if (c.catch_up_tokens <= k_max + 1) {
    per_token = (c.catch_up_s + c.steps_s) / (1 + c.n_steps);
  } else if (c.n_steps > 0) {
    per_token = c.steps_s / c.n_steps;
  }
  if (per_token >= 0) {
    draft_s_per_token = draft_s_per_token > 0 ? 0.9 * draft_s_per_token + 0.1 * per_token : per_token;
  }
  for (const spec::DraftTask& t : tasks) {
    if (t.draft->empty()) continue;
    StatusOr<int64_t> kept = sched->set_draft(t.seq, *t.draft);
    if (!kept.ok()) fmt::print(stderr, "[sluice] draft refused: {}\n", kept.status().message());
  }
}

}  // namespace sluice
