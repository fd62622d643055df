// Engine: request bookkeeping around the scheduler and the batched forward pass.
//
//   submit() --(incoming queue, mutex)--> engine thread:
//     admit -> Scheduler::schedule() -> ModelRunner::run (KV moves, one forward
//     pass over all scheduled sequences, draws / verification) ->
//     Scheduler::update() -> per-output text (stop strings) -> events ->
//     finished requests retired
//
// With speculative decoding, each step first asks the proposer for drafts for
// every decoding sequence (Scheduler::set_draft); the forward pass then returns
// logits for the last token and each draft, and the verifier replaces the
// sampler for those sequences (accepted drafts + one token, spec/verifier.h),
// inside the runner.
//
// Everything after the incoming queue runs on the engine thread only. The
// state lives in engine_impl.h; speculative drafting is engine_drafts.cpp.
#include "sluice/engine.h"

#include "engine/engine_impl.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <limits>
#include <optional>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>

#include "base/metrics.h"
#include "base/timer.h"
#include "engine/engine_metrics.h"
#include "engine/kv_pool.h"
#include "engine/output_text.h"
#include "engine/scheduler.h"
#include "format/model_file.h"
#include "kv/kv_store.h"
#include "model/model.h"
#include "dist/session.h"
#include "runtime/load_model.h"
#include "sample/logprobs.h"
#include "sample/sampler.h"
#include "spec/draft_length.h"
#include "spec/draft_model.h"
#include "spec/prompt_lookup.h"
#include "spec/verifier.h"
#include "tokenizer/tokenizer.h"
#include "weights/store_source.h"

namespace sluice {

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

StatusOr<std::unique_ptr<Engine>> Engine::create(const EngineConfig& config) {
  auto impl = std::make_unique<Impl>();
  Impl& e = *impl;
  e.cfg = config;
  if (config.max_batch_tokens <= 0 || config.max_seqs <= 0) {
    return invalid_argument("max_batch_tokens ({}) and max_seqs ({}) must be positive", config.max_batch_tokens,
                            config.max_seqs);
  }
  // Under --gpu-budget the KV pool is kept first and the weights get the rest:
  // a longer context or more sequences leave fewer layers resident.
  std::function<StatusOr<uint64_t>(const KvShape&)> kv_reserve;
  if (config.gpu_budget_bytes > 0) {
    kv_reserve = [&config](const KvShape& shape) -> StatusOr<uint64_t> {
      ASSIGN_OR_RETURN(const KvPool pool, plan_kv_pool(config, shape));
      return static_cast<uint64_t>(pool.n_blocks) * static_cast<uint64_t>(pool.block_bytes);
    };
  }
  if (config.parallel && config.preempt_swap)
    return unimplemented("preemption by swapping is not supported across processes (--parallel); drop --preempt-swap");
  const LoadOptions lo{.n_threads = config.n_threads,
                       .n_batch = config.max_batch_tokens,
                       .n_ctx_max = config.ctx_size,
                       .ctx_cap = 4096,
                       .max_seqs = config.max_seqs,
                       .backend = config.backend,
                       .shared_backend = config.shared_backend,
                       .mem_budget_bytes = config.mem_budget_bytes,
                       .disk_rate_cap_bytes_per_s = config.disk_rate_cap_bytes_per_s,
                       .gpu_budget_bytes = config.gpu_budget_bytes,
                       // The fluid split over --gpu-budget alone: the layers
                       // the device gives up go to host memory, which holds the rest.
                       .host_holds_rest = config.fluid_split && config.mem_budget_bytes == 0,
                       .device_reserve = kv_reserve,
                       .tokens_per_step = config.max_seqs,
                       .calibration = config.calibration,
                       .loras = config.loras,
                       .kv_budget_bytes = config.kv_budget_bytes};
  ASSIGN_OR_RETURN(LoadedModel lm, config.parallel ? dist::load_pipelined(config.model_path, lo, *config.parallel)
                                                   : load_model(config.model_path, lo));
  e.file = lm.file;
  e.tok = std::move(lm.tokenizer);
  e.model = std::move(lm.model);
  e.stream = lm.stream;
  e.placement = std::move(lm.placement_report);
  e.name = lm.name;
  e.ctx = e.model->n_ctx_max();
  if (config.speculative != "off" && config.speculative != "lookup" && config.speculative != "draft") {
    return invalid_argument("unknown speculative mode '{}' (off, lookup, draft)", config.speculative);
  }
  if (config.speculative != "off" && (config.spec_max_draft < 1 || config.spec_max_draft > 16)) {
    return invalid_argument("the longest draft must be in [1, 16], got {}", config.spec_max_draft);
  }
  if (config.speculative == "lookup") {
    const spec::PromptLookupConfig plc{.ngram_min = 1, .ngram_max = config.spec_ngram_max};
    RETURN_IF_ERROR(spec::validate_prompt_lookup_config(plc));
    e.proposer = std::make_unique<spec::PromptLookup>(plc);
  } else if (config.speculative == "draft") {
    if (config.draft_model_path.empty()) return invalid_argument("speculative mode 'draft' needs a draft model");
    ASSIGN_OR_RETURN(std::unique_ptr<spec::DraftModel> dm,
                     spec::DraftModel::create({.path = config.draft_model_path,
                                               .n_threads = config.n_threads,
                                               .backend = e.model->shared_backend(),
                                               .n_batch = config.max_batch_tokens,
                                               .max_seqs = config.max_seqs,
                                               .n_ctx = e.ctx + config.spec_max_draft},
                                              *e.tok));
    e.proposer = std::move(dm);
  } else if (!config.draft_model_path.empty()) {
    return invalid_argument("a draft model was given but speculative decoding is off");
  }
  ASSIGN_OR_RETURN(const KvPool pool, plan_kv_pool(config, e.model->kv_shape()));
  const KvLayout& layout = pool.layout;
  const int64_t block_bytes = pool.block_bytes, window = pool.window, n_blocks = pool.n_blocks;
  // The fluid split: the store and the pool are made for the most blocks it
  // can reach, the pool's limit starts where every layer is resident.
  ASSIGN_OR_RETURN(std::optional<FluidSetup> fluid,
                   e.plan_fluid(lm.tiers ? &lm.tiers->inputs : nullptr, n_blocks, block_bytes));
  const int64_t n_ids = fluid ? fluid->n_blocks_max : n_blocks, n_limit = fluid ? fluid->n_blocks_start : 0;
  if (fluid) {
    ASSIGN_OR_RETURN(e.kv, e.model->backend().create_kv_reserved(layout, n_ids, n_limit));
  } else {
    ASSIGN_OR_RETURN(e.kv, e.model->backend().create_kv(layout, n_ids));
  }
  int64_t n_host_blocks = 0;
  if (config.preempt_swap) {
    // The swap target is host memory, whatever memory the backend computes in.
    n_host_blocks = config.swap_budget_bytes > 0 ? config.swap_budget_bytes / block_bytes : n_blocks;
    ASSIGN_OR_RETURN(KvStore host, KvStore::create(layout, std::max<int64_t>(1, n_host_blocks)));
    e.host_kv = std::make_unique<KvStore>(std::move(host));
  }
  e.sched = std::make_unique<Scheduler>(
      SchedulerConfig{.max_batch_tokens = config.max_batch_tokens, .max_seqs = config.max_seqs,
                      .preemption_mode = config.preempt_swap ? PreemptionMode::kSwap : PreemptionMode::kRecompute},
      BlockManagerConfig{.n_blocks = n_ids, .n_blocks_limit = n_limit, .block_size = layout.block_size,
                         .n_host_blocks = n_host_blocks,
                         .enable_prefix_caching = config.prefix_caching,
                         .window = window});
  e.eog = e.tok->eog_ids();
  // Logits rows: one per sampling sequence, plus one per draft token verified.
  const int64_t n_rows = e.proposer ? std::max(config.max_seqs, std::min(config.max_batch_tokens,
                                                                         config.max_seqs * (1 + config.spec_max_draft)))
                                    : config.max_seqs;
  e.runner = std::make_unique<ModelRunner>(*e.model, e.kv, e.host_kv.get(),
                                           RunnerConfig{.max_seqs = config.max_seqs, .max_logits = n_rows});
  e.sampling.reserve(static_cast<size_t>(config.max_seqs));
  e.tasks.reserve(static_cast<size_t>(config.max_seqs));
  if (fluid) e.start_fluid(std::move(*fluid));
  e.metrics.kv_blocks_total->set(static_cast<double>(n_blocks));
  if (e.stream && e.stream->store().streams_experts()) e.metrics.init_experts(e.model->hparams());
  if (e.model->hparams().is_moe()) e.model->set_routing_counters(e.metrics.init_routing(e.model->hparams()));
  e.publish_stats();
  e.loop = std::thread([p = impl.get()] { p->run(); });
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  if (impl_->loop.joinable()) impl_->loop.join();
}

StatusOr<RequestId> Engine::submit(Request r, EventCallback on_event) {
  Impl& e = *impl_;
  if (r.prompt.empty()) return invalid_argument("the prompt is empty");
  for (int32_t t : r.prompt) {
    if (t < 0 || t >= e.model->hparams().n_vocab) return invalid_argument("prompt token id {} out of range", t);
  }
  if (r.max_tokens < 1) return invalid_argument("max_tokens must be at least 1, got {}", r.max_tokens);
  if (r.n < 1 || r.n > 16) return invalid_argument("n must be in [1, 16], got {}", r.n);
  if (r.top_logprobs > 20) return invalid_argument("top_logprobs must be at most 20, got {}", r.top_logprobs);
  if (static_cast<int64_t>(r.prompt.size()) + r.max_tokens > e.ctx) {
    return invalid_argument("prompt ({} tokens) + max_tokens ({}) exceeds the context of {} tokens", r.prompt.size(),
                            r.max_tokens, e.ctx);
  }
  RETURN_IF_ERROR(validate_sampling_params(r.sampling));
  uint64_t seen = 0;
  for (int32_t a : r.loras) {
    if (a < 0 || a >= e.model->adapters().size()) {
      return invalid_argument("adapter {} out of range: {} adapters are loaded", a, e.model->adapters().size());
    }
    if (seen & (uint64_t{1} << a)) return invalid_argument("adapter {} is named twice", a);
    seen |= uint64_t{1} << a;
  }
  for (const std::string& s : r.stop_strings)
    if (s.empty()) return invalid_argument("stop strings must not be empty");
  if (e.n_unfinished.load() >= e.cfg.max_seqs + e.cfg.max_queued) {
    return resource_exhausted("too many requests in flight ({}); try again later", e.n_unfinished.load());
  }
  RequestId id;
  {
    std::lock_guard<std::mutex> lock(e.mu);
    if (!e.accepting || e.stop) return Status(StatusCode::kResourceExhausted, "the engine is shutting down");
    id = e.next_id++;
    e.incoming.push_back(Pending{id, std::move(r), std::move(on_event), now_seconds()});
    e.n_unfinished.fetch_add(1);
  }
  e.cv.notify_one();
  return id;
}

void Engine::abort(RequestId id) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->aborts.push_back(id);
  }
  impl_->cv.notify_one();
}

bool Engine::drain(double timeout_s) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->accepting = false;
  }
  const double deadline = now_seconds() + timeout_s;
  while (impl_->n_unfinished.load() > 0 && now_seconds() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const bool all = impl_->n_unfinished.load() == 0;
  if (!all) {
    {
      std::lock_guard<std::mutex> lock(impl_->mu);
      for (RequestId id = 1; id < impl_->next_id; ++id) impl_->aborts.push_back(id);
    }
    impl_->cv.notify_one();
    const double hard = now_seconds() + 5.0;
    while (impl_->n_unfinished.load() > 0 && now_seconds() < hard) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return all;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(impl_->stats_mu);
  return impl_->snapshot;
}
const Tokenizer& Engine::tokenizer() const { return *impl_->tok; }
const std::string& Engine::model_name() const { return impl_->name; }
int64_t Engine::ctx_size() const { return impl_->ctx; }
std::string Engine::chat_template() const {
  return impl_->file->metadata.get_string("tokenizer.chat_template").value_or("");
}
int64_t Engine::n_vocab() const { return impl_->model->hparams().n_vocab; }

void Engine::Impl::run() {
  for (;;) {
    std::deque<Pending> in;
    std::vector<RequestId> ab;
    bool idle_tick = false;
    {
      std::unique_lock<std::mutex> lock(mu);
      auto ready = [&] { return stop || !incoming.empty() || !aborts.empty() || sched->has_unfinished(); };
      // Idle with layers demoted: the load has dropped, and every 50 ms
      // counts as a calm step of the fluid split, which brings them back.
      if (fluid && (fluid->n_demoted() > 0 || fluid->promotion_pending()))
        idle_tick = !cv.wait_for(lock, std::chrono::milliseconds(50), ready);
      else
        cv.wait(lock, ready);
      in.swap(incoming);
      ab.swap(aborts);
      if (stop) {
        for (auto& p : in) ab.push_back(p.id), reqs.emplace(p.id, Req{.id = p.id, .r = std::move(p.request), .cb = std::move(p.callback)});
        in.clear();
      }
    }
    for (Pending& p : in) admit(std::move(p));
    for (RequestId id : ab) abort_request(id);
    if (stop) {
      std::vector<RequestId> left;
      for (auto& [id, rq] : reqs) left.push_back(id);
      for (RequestId id : left) abort_request(id);
      publish_stats();
      return;
    }
    if (idle_tick) {
      fluid_step(FluidCosts{});
      publish_stats();
      continue;
    }
    if (sched->has_unfinished()) step();
    publish_stats();
  }
}

Status Engine::Impl::add_sequence(Req& rq, Output& o, std::vector<int32_t> prompt, int64_t max_tokens) {
  SequenceParams sp{.prompt = std::move(prompt), .stop = rq.stop, .priority = rq.r.priority};
  for (int32_t a : rq.r.loras) sp.loras |= uint64_t{1} << a;
  sp.stop.max_tokens = max_tokens;
  const SeqId seq = next_seq++;
  RETURN_IF_ERROR(sched->add(seq, std::move(sp)));
  o.seq = seq;
  owner[seq] = {rq.id, o.index};
  return Status();
}

void Engine::Impl::admit(Pending p) {
  Req& rq = reqs.emplace(p.id, Req{.id = p.id, .r = std::move(p.request), .cb = std::move(p.callback),
                                   .t_submit = p.t_submit}).first->second;
  rq.stop = StopCondition::for_request(rq.r.stop_tokens, eog, rq.r.ignore_eos, rq.r.max_tokens);
  rq.outs.resize(static_cast<size_t>(rq.r.n));
  for (int32_t i = 0; i < rq.r.n; ++i) {
    Output& o = rq.outs[static_cast<size_t>(i)];
    o.index = i;
    SamplingParams sp = rq.r.sampling;
    sp.seed += static_cast<uint64_t>(i);
    o.sampler = std::make_unique<Sampler>(sp, static_cast<int32_t>(model->hparams().n_vocab));
    for (int32_t t : rq.r.prompt) o.sampler->accept(t);
    o.text = OutputText(*tok, rq.r.stop_strings);
    if (proposer) {
      o.draft_len = spec::DraftLength({.max_k = cfg.spec_max_draft,
                                       .adaptive = cfg.spec_adaptive,
                                       .prior_acceptance = all_seqs_len.acceptance()});
      o.draft.reserve(static_cast<size_t>(cfg.spec_max_draft));
      if (sp.temperature > 0 && proposer->draws_from_sampler()) {
        // Drafts are drawn with the request's filters but no penalties: any
        // draft distribution is exact as long as the verifier sees it.
        SamplingParams dp = sp;
        dp.repeat_penalty = 1.0f;
        dp.frequency_penalty = 0.0f;
        dp.presence_penalty = 0.0f;
        dp.seed = sp.seed ^ 0x5bd1e995u;
        o.draft_sampler = std::make_unique<Sampler>(dp, static_cast<int32_t>(model->hparams().n_vocab));
        o.draft_probs.resize(static_cast<size_t>(cfg.spec_max_draft * model->hparams().n_vocab));
      }
    }
  }
  // Output 0 runs the prompt; the others fork from it once it has logits.
  if (Status st = add_sequence(rq, rq.outs[0], rq.r.prompt, rq.r.max_tokens); !st.ok()) {
    for (Output& o : rq.outs) finish_output(rq, o, FinishReason::kError, st.message());
  }
}

Engine::Impl::Output* Engine::Impl::output_of(SeqId seq) {
  auto it = owner.find(seq);
  if (it == owner.end()) return nullptr;
  return &reqs.at(it->second.first).outs[static_cast<size_t>(it->second.second)];
}

void Engine::Impl::step() {
  if (proposer) propose_drafts();
  if (fluid) fluid_step(fluid_costs());
  StepPlan plan = sched->schedule();
  if (plan.empty()) {
    // Nothing fits this step (e.g. waiting for blocks held by a step in flight).
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    return;
  }
  metrics.preemptions->add(static_cast<double>(plan.preempted.size()));

  // Who samples for each scheduled sequence: its output's sampler, and the
  // distributions its drafts were drawn from.
  const double now = now_seconds();
  sampling.clear();
  for (const ScheduledSeq& s : plan.seqs) {
    SeqSampling ss;
    if (auto it = owner.find(s.id); it != owner.end()) {
      Req& rq = reqs.at(it->second.first);
      if (rq.t_scheduled < 0) rq.t_scheduled = now;
      Output& o = rq.outs[static_cast<size_t>(it->second.second)];
      ss = SeqSampling{.sampler = o.sampler.get(), .draft_probs = o.draft_sampler ? o.draft_probs.data() : nullptr};
    }
    sampling.push_back(ss);
  }
  StepOutput out;
  const Status run_status = runner->run(plan, sampling, &out);
  step_cost.observe(static_cast<double>(plan.n_batch_tokens), runner->last_forward_s());
  if (!run_status.ok()) {
    // A bug, an impossible plan or a process of the job that failed: the
    // requests of this step end with the error (its code first:
    // "unavailable: ..." is the server's 503), the engine keeps serving.
    fmt::print(stderr, "[sluice] step failed: {}\n", run_status.message());
    for (const ScheduledSeq& s : plan.seqs) {
      auto it = owner.find(s.id);
      if (it != owner.end()) abort_request(it->second.first, FinishReason::kError, run_status.to_string());
      else (void)sched->abort(s.id);
    }
    // Every sequence of the step is aborted: the update ends the step (the
    // next schedule() needs none in flight) and frees their blocks.
    if (Status st = sched->update(StepOutput{}); !st.ok())
      fmt::print(stderr, "[sluice] scheduler update failed: {}\n", st.message());
    for (Sequence& f : sched->take_finished()) {
      owner.erase(f.id);
      if (proposer) proposer->release(f.id);
    }
    return;
  }
  observe_drafts(out);
  if (Status st = sched->update(out); !st.ok()) fmt::print(stderr, "[sluice] scheduler update failed: {}\n", st.message());
  if (cfg.check_invariants) {
    Status inv = sched->check_invariants();
    if (!inv.ok()) {
      fmt::print(stderr, "[sluice] KV accounting broken: {}\n", inv.message());
      std::abort();
    }
  }

  // Parallel samples: fork the other outputs from output 0 after its first
  // token, from the same logits; then stream every sampled token.
  for (const SeqOutput& so : out.seqs) {
    auto it = owner.find(so.id);
    if (it == owner.end()) continue;
    Req& rq = reqs.at(it->second.first);
    if (rq.r.n > 1 && !rq.children_started && it->second.second == 0) start_children(rq, so.logits);
  }
  const int64_t n_vocab = model->hparams().n_vocab;
  for (const SeqOutput& so : out.seqs) {
    auto it = owner.find(so.id);
    if (it == owner.end()) continue;
    const RequestId id = it->second.first;
    Output* o = &reqs.at(id).outs[static_cast<size_t>(it->second.second)];
    for (size_t i = 0; i < so.tokens.size(); ++i) {
      auto r = reqs.find(id);
      if (r == reqs.end() || o->done) break;
      emit_token(r->second, *o, so.tokens[i], so.logits + static_cast<int64_t>(i) * n_vocab);
      // The scheduler dropped what follows a stop token; a stop string ends it too.
      if (o->stopped_by_string || r->second.stop.is_stop_token(so.tokens[i])) break;
    }
  }
  for (Sequence& f : sched->take_finished()) {
    if (proposer) proposer->release(f.id);
    auto it = owner.find(f.id);
    if (it == owner.end()) continue;
    Req& rq = reqs.at(it->second.first);
    Output& o = rq.outs[static_cast<size_t>(it->second.second)];
    rq.n_preemptions += f.n_preemptions;
    const FinishReason reason = o.stopped_by_string ? FinishReason::kStop : f.finish_reason;
    owner.erase(it);
    o.seq = -1;
    finish_output(rq, o, reason);
  }
}

void Engine::Impl::observe_drafts(const StepOutput& out) {
  for (const SeqOutput& so : out.seqs) {
    if (so.n_drafted == 0) continue;
    spec_drafted += so.n_drafted;
    spec_accepted += so.n_accepted;
    spec_passes += 1;
    spec_emitted += so.n_accepted + 1;
    metrics.spec_drafted->add(so.n_drafted);
    metrics.spec_accepted->add(so.n_accepted);
    metrics.spec_passes->add(1);
    metrics.spec_emitted->add(so.n_accepted + 1);
    all_seqs_len.observe(so.n_drafted, so.n_accepted);
    if (Output* o = output_of(so.id)) o->draft_len.observe(so.n_drafted, so.n_accepted);
  }
}

void Engine::Impl::start_children(Req& rq, const float* lg) {
  rq.children_started = true;
  const Output& parent = rq.outs[0];
  for (size_t i = 1; i < rq.outs.size(); ++i) {
    Output& o = rq.outs[i];
    const int32_t first = o.sampler->sample(lg);
    o.sampler->accept(first);
    const SeqId child = next_seq++;
    Status st = parent.seq >= 0 ? sched->fork(parent.seq, child, first)
                                : Status(StatusCode::kNotFound, "parent finished");
    if (st.ok()) {
      o.seq = child;
      owner[child] = {rq.id, o.index};
    } else {
      // The parent already finished (or no room to fork): run the child as its
      // own sequence; the prefix cache still shares the prompt's full blocks.
      std::vector<int32_t> prompt = rq.r.prompt;
      prompt.push_back(first);
      o.gen_offset = 1;
      const FinishReason done_now = rq.stop.after(first, 1);
      emit_token(rq, o, first, lg);
      if (done_now != FinishReason::kNone || o.done) {
        if (!o.done) finish_output(rq, o, done_now);
        continue;
      }
      if (Status add = add_sequence(rq, o, std::move(prompt), rq.r.max_tokens - 1); !add.ok()) {
        finish_output(rq, o, FinishReason::kError, add.message());
      }
      continue;
    }
    emit_token(rq, o, first, lg);
  }
}

void Engine::Impl::emit_token(Req& rq, Output& o, int32_t token, const float* lg) {
  if (o.done) return;
  const double now = now_seconds();
  if (o.t_first < 0) o.t_first = now;
  o.t_last = now;
  if (rq.t_first_token < 0) {
    rq.t_first_token = now;
    metrics.ttft->observe(now - rq.t_submit);
  }
  ++o.n_generated;
  metrics.generated_tokens->add(1);
  TokenEvent ev{.request = rq.id, .index = o.index, .token = token, .stop_token = rq.stop.is_stop_token(token)};
  if (!ev.stop_token) {
    const bool hit = o.text.push(token, &ev.text);
    if (hit && !o.stopped_by_string) {
      o.stopped_by_string = true;
      if (o.seq >= 0) (void)sched->abort(o.seq);
    }
  }
  if (rq.r.top_logprobs >= 0) {
    ev.logprob = token_logprobs(lg, model->hparams().n_vocab, token, rq.r.top_logprobs, &ev.top_logprobs);
  }
  if (rq.cb) rq.cb(ev);
}

void Engine::Impl::finish_output(Req& rq, Output& o, FinishReason reason, const std::string& error) {
  if (o.done) return;
  o.done = true;
  if (o.seq >= 0) {
    owner.erase(o.seq);
    o.seq = -1;
  }
  TokenEvent ev{.request = rq.id, .index = o.index, .finished = true, .finish_reason = reason, .error = error};
  ev.text = o.text.finish(reason != FinishReason::kStop || !o.stopped_by_string);
  if (++rq.n_done == static_cast<int>(rq.outs.size())) {
    const double now = now_seconds();
    RequestTimings t;
    t.queue_s = rq.t_scheduled >= 0 ? rq.t_scheduled - rq.t_submit : now - rq.t_submit;
    t.ttft_s = rq.t_first_token >= 0 ? rq.t_first_token - rq.t_submit : 0.0;
    t.e2e_s = now - rq.t_submit;
    t.n_prompt = static_cast<int64_t>(rq.r.prompt.size());
    int64_t n_tpot = 0;
    double tpot_sum = 0;
    for (const Output& x : rq.outs) {
      t.n_generated += x.n_generated;
      if (x.n_generated > 1) {
        tpot_sum += (x.t_last - x.t_first);
        n_tpot += x.n_generated - 1;
      }
    }
    t.tpot_s = n_tpot > 0 ? tpot_sum / static_cast<double>(n_tpot) : 0.0;
    t.n_preemptions = rq.n_preemptions;
    ev.timings = t;
    metrics.observe_finished(t, reason);
    RequestId id = rq.id;
    EventCallback cb = std::move(rq.cb);
    reqs.erase(id);
    n_unfinished.fetch_sub(1);
    // A caller that reads stats() after the last event sees this request gone.
    publish_stats();
    if (cb) cb(ev);
    return;
  }
  if (rq.cb) rq.cb(ev);
}

void Engine::Impl::abort_request(RequestId id, FinishReason reason, const std::string& error) {
  auto it = reqs.find(id);
  if (it == reqs.end()) return;
  Req& rq = it->second;
  for (Output& o : rq.outs) {
    if (o.seq >= 0) (void)sched->abort(o.seq);
  }
  // Finish every output now; the scheduler frees the blocks of aborted sequences
  // (immediately, or at the end of a step in flight).
  const size_t n = rq.outs.size();
  for (size_t i = 0; i < n; ++i) {
    auto again = reqs.find(id);
    if (again == reqs.end()) break;
    finish_output(again->second, again->second.outs[i], reason, error);
  }
  for (Sequence& f : sched->take_finished()) {
    owner.erase(f.id);
    if (proposer) proposer->release(f.id);
  }
}


}  // namespace sluice
