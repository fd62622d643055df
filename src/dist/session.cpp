#include "dist/session.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/metrics.h"
#include "dist/job_plan.h"
#include "dist/job_start.h"
#include "dist/link_probe.h"
#include "dist/protocol.h"
#include "dist/worker.h"
#include "format/model_file.h"
#include "model/hparams.h"
#include "plan/calibrate.h"
#include "plan/pipeline_expert_plan.h"
#include "weights/store_source.h"

namespace sluice::dist {
namespace {

// A pipelined job's load options: its models take a step's sequences in up to
// kMaxMicroBatches - 1 more pieces (PipelineDriver::pieces), on every rank.
LoadOptions with_pieces(const LoadOptions& o) {
  LoadOptions p = o;
  p.max_seqs = o.max_seqs + kMaxMicroBatches - 1;
  return p;
}

// Why a rank's model cannot combine experts' outputs across processes ("":
// it can): its backend's buffers are not host memory.
std::string host_memory_failure(const LoadedModel& lm) {
  if (lm.model->backend().host_visible()) return "";
  return fmt::format("--parallel ep combines the experts' outputs in host memory, which the {} backend does not use; "
                     "use --backend cpu",
                     lm.model->backend().name());
}

// Rank 0's load failure as start_job() takes it ("": none), a model that
// combines experts' outputs included.
std::string rank0_expert_failure(const StatusOr<LoadedModel>& lm) {
  const std::string why = lm.ok() ? host_memory_failure(*lm) : lm.status().message();
  return why.empty() ? "" : "rank 0: " + why;
}

// An expert driver's summary: routed layers, rows per rank of its group (c:
// the group's communicator, its links named by job ranks), bytes per link.
std::string expert_summary(const ExpertParallelDriver& d, const Comm& c) {
  std::string links;
  for (int r = 1; r < d.n_ranks(); ++r)
    links += fmt::format("{}{}->{} {} B, {}->{} {} B", links.empty() ? "" : ", ", c.world_rank(0), c.world_rank(r),
                         d.link_bytes(0, r), c.world_rank(r), c.world_rank(0), d.link_bytes(r, 0));
  std::string rows;
  for (int r = 0; r < d.n_ranks(); ++r) rows += fmt::format("{}{}", r ? "/" : "", d.rows(r));
  return fmt::format("[sluice] experts: {} routed layers dispatched, expert rows per rank {}; sent {}\n", d.layers(),
                     rows, links.empty() ? "nothing (one rank)" : links);
}

// The job's plan over its ranks and links, or its refusal (the job's own, or
// the planner's) after telling the workers (refuse_job).
template <class Plan, class Inputs>
StatusOr<Plan> plan_job(Comm& c, const JobStart& job, Inputs& in, StatusOr<Plan> (*plan)(const Inputs&)) {
  in.ranks = job.ranks;
  in.links = job.links;
  StatusOr<Plan> p = job.refusal.ok() ? plan(in) : StatusOr<Plan>(job.refusal);
  if (!p.ok()) return refuse_job(c, p.status());
  return p;
}

void publish_job(int n_ranks, double decode_step_s) {
  MetricRegistry& reg = global_metrics();
  reg.gauge("sluice_dist_ranks", "Processes of the job")->set(n_ranks);
  reg.gauge("sluice_dist_predicted_step_seconds", "The pipeline plan's step time", "phase=\"decode\"")
      ->set(decode_step_s);
}

}  // namespace

Status check_parallel_mode(const std::string& mode, int64_t ep_size) {
  if (mode == "pp,ep" || mode == "ep,pp") {
    if (ep_size < 1)
      return invalid_argument("--parallel {} needs --ep-size E: the ranks of each pipeline stage (its lead and its "
                              "expert ranks; the job's ranks = stages x E)",
                              mode);
    return Status();
  }
  if (mode != "pp" && mode != "ep")
    return invalid_argument("unknown --parallel mode '{}' (pp: pipeline; ep: experts; pp,ep: both)", mode);
  if (ep_size != 0) return invalid_argument("--ep-size applies to --parallel pp,ep only, not {}", mode);
  return Status();
}

Status check_ep_attention(const std::string& mode, const std::string& ep_attention) {
  ASSIGN_OR_RETURN(const plan::EpAttention a, plan::parse_ep_attention(ep_attention));
  if (a != plan::EpAttention::kAuto && mode != "ep")
    return invalid_argument("--ep-attention {} places attention for --parallel ep, not --parallel {}", ep_attention,
                            mode);
  return Status();
}

StatusOr<std::shared_ptr<Session>> Session::start(const ParallelOptions& options) {
  RETURN_IF_ERROR(check_parallel_mode(options.mode, options.ep_size));
  RETURN_IF_ERROR(check_ep_attention(options.mode, options.ep_attention));
  if (!(options.timeout_s > 0)) return invalid_argument("the parallel timeout must be positive");
  if (options.micro_batches < 0 || options.micro_batches > kMaxMicroBatches)
    return invalid_argument("--micro-batches {} is outside 0 (the plan's choice) to {}", options.micro_batches,
                            kMaxMicroBatches);
  if (options.micro_batches > 0 && options.mode == "ep")
    return invalid_argument("--micro-batches cuts a pipeline's steps (--parallel pp or pp,ep), not --parallel ep");
  std::shared_ptr<Session> s(new Session());
  s->options_ = options;
  if (s->options_.mode == "ep,pp") s->options_.mode = "pp,ep";
  ASSIGN_OR_RETURN(s->comm_, Comm::init(options.timeout_s));
  if (s->pipeline_experts()) {
    // Stage g = job ranks g x E .. g x E + E - 1, its lead the first
    // (plan/pipeline_expert_plan.h). Every rank refuses a bad size alike.
    const int n = s->comm_->size(), r = s->comm_->rank(), E = static_cast<int>(options.ep_size);
    RETURN_IF_ERROR(plan::check_stage_groups(n, E));
    ASSIGN_OR_RETURN(s->stage_comm_, s->comm_->split(r % E == 0 ? 0 : -1, r));
    ASSIGN_OR_RETURN(s->group_comm_, s->comm_->split(r / E, r));
  }
  return s;
}

Session::~Session() {
  // pp,ep: the pipeline ends first (its leads then end their groups).
  if (driver_) end_pipeline();
  if (ep_driver_) end_experts();
}

void Session::end_experts() {
  if (ep_driver_->failed()) comm_->abort(1);
  fmt::print(stderr, "{}", expert_summary(*ep_driver_, group_comm()));
  if (Status st = ep_driver_->shutdown(); !st.ok()) {
    fmt::print(stderr, "error: ending the job: {}\n", st.message());
    comm_->abort(1);
  }
}

void Session::end_pipeline() {
  if (driver_->failed()) comm_->abort(1);
  // What crossed each link, per token computed, against the plan's count of
  // hidden rows (the step plans add their tokens and block tables); links
  // named by job ranks (pp,ep: stage g's lead is rank g x E).
  const PipelineDriver& d = *driver_;
  const Comm& pc = stage_comm_ ? *stage_comm_ : *comm_;
  const int S = static_cast<int>(d.plan().n_stages());
  if (S > 1 && d.tokens() > 0) {
    std::string links;
    auto add = [&](int src, int dst, uint64_t planned) {
      const double per = static_cast<double>(d.link_bytes(src, dst)) / static_cast<double>(d.tokens());
      links += fmt::format("{}{}->{} {:.0f} B/token (hidden rows {} B)", links.empty() ? "" : ", ", pc.world_rank(src),
                           pc.world_rank(dst), per, planned);
    };
    for (int r = 1; r < S; ++r) add(r - 1, r, d.plan().hop_bytes(r, 1, 1));
    for (int r = 2; r < S; ++r) add(0, r, 0);
    add(S - 1, 0, d.plan().hop_bytes(0, 1, 1));
    fmt::print(stderr, "[sluice] pipeline: {} steps in {:.0f} micro-batches, {} tokens; sent {}\n", d.steps(),
               global_metrics().value("sluice_dist_micro_batches_total"), d.tokens(), links);
  }
  if (Status st = driver_->shutdown(); !st.ok()) {
    fmt::print(stderr, "error: ending the job: {}\n", st.message());
    comm_->abort(1);
  }
}

StatusOr<LoadedModel> load_pipelined(const std::string& path, const LoadOptions& o, Session& session) {
  if (session.options().mode == "ep") return load_expert_parallel(path, o, session);
  if (session.pipeline_experts()) return load_pipeline_experts(path, o, session);
  Comm& c = session.comm();
  ASSIGN_OR_RETURN(const JobStart job, gather_job(c, path, o));
  plan::PipelineInputs in = pipeline_inputs(job.file, job.hp);
  const StatusOr<plan::PipelinePlan> plan = plan_job(c, job, in, plan::plan_pipeline);
  if (!plan.ok()) return plan.status();
  json ranges = json::array(), streams = json::array();
  for (const plan::LayerRange& g : plan->ranges) ranges.push_back({g.begin, g.end});
  for (int64_t r = 0; r < plan->n_stages(); ++r) streams.push_back(plan->streams(r));
  const LoadOptions po = with_pieces(o);
  json setup = setup_message(po);
  setup["ranges"] = ranges;
  setup["streams"] = streams;
  setup["predict_experts"] = o.predict_experts;
  RETURN_IF_ERROR(send_to_workers(c, kTagControl, setup, "setup"));
  LoadOptions mine_opts = po;
  stream_under_budget(&mine_opts, plan->streams(0), o.mem_budget_bytes, o.disk_rate_cap_bytes_per_s, &job.cal);
  mine_opts.stage.layer_begin = plan->ranges[0].begin;
  mine_opts.stage.layer_end = plan->ranges[0].end;
  StatusOr<LoadedModel> lm = load_model(path, mine_opts);
  ASSIGN_OR_RETURN(const std::string failures,
                   start_job(c, lm.ok() ? "" : fmt::format("rank 0: {}", lm.status().message())));
  if (!failures.empty()) return unavailable("loading the pipeline's stages failed: {}", failures);
  session.driver_ = std::make_unique<PipelineDriver>(c, *plan, job.hp.n_embd, o.n_batch, session.options().abort_grace_s,
                                                     session.options().micro_batches);
  lm->model->set_stage_runner(session.driver_.get());
  // The job's map, then rank 0's own weight store's when its range streams.
  const std::string own = lm->placement_report;
  lm->placement_report = pipeline_map(*plan, in, o.n_batch, session.options().micro_batches);
  if (!own.empty()) lm->placement_report += "[sluice] rank 0's range streams from its disk:\n" + own;
  publish_job(c.size(), plan->step_s(1, 1, 1));
  return lm;
}

StatusOr<LoadedModel> load_expert_parallel(const std::string& path, const LoadOptions& o, Session& session) {
  Comm& c = session.comm();
  ASSIGN_OR_RETURN(const JobStart job, gather_job(c, path, o));
  plan::ExpertParallelInputs in = expert_parallel_inputs(job.file, job.hp);
  ASSIGN_OR_RETURN(in.attention, plan::parse_ep_attention(session.options().ep_attention));
  in.kv_bytes = o.kv_budget_bytes > 0 ? o.kv_budget_bytes
                                      : ep_kv_bytes(job.file, job.hp, o.n_ctx_max, o.ctx_cap, o.max_seqs);
  const StatusOr<plan::ExpertParallelPlan> plan = plan_job(c, job, in, plan::plan_expert_parallel);
  if (!plan.ok()) return plan.status();
  json experts = json::array(), streams = json::array();
  for (const plan::ExpertRange& g : plan->shares) experts.push_back({g.begin, g.end});
  for (int64_t r = 0; r < plan->n_ranks(); ++r) streams.push_back(plan->streams(r));
  json setup = setup_message(o);
  setup["experts"] = experts;
  setup["streams"] = streams;
  setup["attention"] = plan::ep_attention_name(plan->attention);
  RETURN_IF_ERROR(send_to_workers(c, kTagControl, setup, "setup"));
  LoadOptions mine_opts = o;
  stream_under_budget(&mine_opts, plan->streams(0), o.mem_budget_bytes, o.disk_rate_cap_bytes_per_s, &job.cal);
  mine_opts.stage.expert_begin = plan->shares[0].begin;
  mine_opts.stage.expert_end = plan->shares[0].end;
  // With attention on rank 0, the ranks that stream read ahead what rank 0
  // predicts (expert_parallel.h): rank 0 predicts for them.
  std::vector<char> read_ahead(static_cast<size_t>(plan->n_ranks()), 0);
  for (int64_t r = 1; r < plan->n_ranks() && !plan->every(); ++r) read_ahead[static_cast<size_t>(r)] = plan->streams(r);
  mine_opts.predict_experts = o.predict_experts || std::count(read_ahead.begin(), read_ahead.end(), 1) > 0;
  StatusOr<LoadedModel> lm = load_model(path, mine_opts);
  const std::string mine_failure = rank0_expert_failure(lm);
  ASSIGN_OR_RETURN(const std::string failures, start_job(c, mine_failure));
  if (!failures.empty()) return unavailable("loading the experts' shares failed: {}", failures);
  session.ep_driver_ = std::make_unique<ExpertParallelDriver>(c, lm->model->hparams(), plan->shares, plan->attention,
                                                              session.options().abort_grace_s);
  session.ep_driver_->set_read_ahead(std::move(read_ahead));
  lm->model->set_expert_dispatch(session.ep_driver_.get());
  if (plan->every()) lm->model->set_stage_runner(session.ep_driver_.get());  // the step to every rank
  const std::string own = lm->placement_report;
  lm->placement_report = expert_parallel_map(*plan, o.n_batch);
  if (!own.empty()) lm->placement_report += "[sluice] rank 0's share streams from its disk:\n" + own;
  publish_job(c.size(), plan->step_s(1));
  return lm;
}

StatusOr<LoadedModel> load_pipeline_experts(const std::string& path, const LoadOptions& o, Session& session) {
  Comm& c = session.comm();
  ASSIGN_OR_RETURN(const JobStart job, gather_job(c, path, o));
  plan::PipelineExpertInputs in = pipeline_expert_inputs(job.file, job.hp, session.options().ep_size);
  const StatusOr<plan::PipelineExpertPlan> plan = plan_job(c, job, in, plan::plan_pipeline_experts);
  if (!plan.ok()) return plan.status();
  json ranges = json::array(), experts = json::array(), streams = json::array();
  for (int64_t g = 0; g < plan->n_stages(); ++g) {
    const plan::LayerRange r = plan->pipeline.ranges[static_cast<size_t>(g)];
    ranges.push_back({r.begin, r.end});
    json shares = json::array();
    const plan::ExpertParallelPlan& e = plan->stages[static_cast<size_t>(g)];
    for (const plan::ExpertRange& x : e.shares) shares.push_back({x.begin, x.end});
    experts.push_back(shares);
    for (int64_t m = 0; m < e.n_ranks(); ++m) streams.push_back(plan->streams(g, m));
  }
  const LoadOptions po = with_pieces(o);
  json setup = setup_message(po);
  setup["ep_size"] = plan->ep_size;
  setup["stage_ranges"] = ranges;
  setup["stage_experts"] = experts;
  setup["streams"] = streams;
  setup["predict_experts"] = o.predict_experts;
  RETURN_IF_ERROR(send_to_workers(c, kTagControl, setup, "setup"));
  LoadOptions mine_opts = po;
  stream_under_budget(&mine_opts, plan->streams(0, 0), o.mem_budget_bytes, o.disk_rate_cap_bytes_per_s, &job.cal);
  mine_opts.stage.layer_begin = plan->pipeline.ranges[0].begin;
  mine_opts.stage.layer_end = plan->pipeline.ranges[0].end;
  mine_opts.stage.expert_begin = plan->stages[0].shares[0].begin;
  mine_opts.stage.expert_end = plan->stages[0].shares[0].end;
  std::vector<char> read_ahead(static_cast<size_t>(plan->ep_size), 0);
  for (int64_t m = 1; m < plan->ep_size; ++m) read_ahead[static_cast<size_t>(m)] = plan->streams(0, m);
  mine_opts.predict_experts = o.predict_experts || std::count(read_ahead.begin(), read_ahead.end(), 1) > 0;
  StatusOr<LoadedModel> lm = load_model(path, mine_opts);
  const std::string mine_failure = rank0_expert_failure(lm);
  ASSIGN_OR_RETURN(const std::string failures, start_job(c, mine_failure));
  if (!failures.empty()) return unavailable("loading the stages and their experts failed: {}", failures);
  const double grace = session.options().abort_grace_s;
  session.driver_ = std::make_unique<PipelineDriver>(*session.stage_comm_, plan->pipeline, job.hp.n_embd, o.n_batch,
                                                     grace, session.options().micro_batches);
  session.ep_driver_ =
      std::make_unique<ExpertParallelDriver>(*session.group_comm_, lm->model->hparams(), plan->stages[0].shares,
                                             plan::EpAttention::kRank0, grace);
  session.ep_driver_->set_read_ahead(std::move(read_ahead));
  lm->model->set_stage_runner(session.driver_.get());
  lm->model->set_expert_dispatch(session.ep_driver_.get());
  const std::string own = lm->placement_report;
  lm->placement_report = pipeline_expert_map(*plan, o.n_batch);
  if (!own.empty()) lm->placement_report += "[sluice] rank 0's part streams from its disk:\n" + own;
  publish_job(c.size(), plan->step_s(1));
  return lm;
}

namespace {

// A rank > 0 of a pp,ep job (load_pipeline_experts()'s setup): stage g's
// layers with its share of their experts; the lead of a later stage runs the
// pipeline's worker loop with its group's experts dispatched, the others the
// expert worker loop for the lead.
// An expert rank's store at the job's end, when it streamed: what it read,
// what it found in its slots, and per layer what was predicted, ready, late.
void print_streamed_experts(int rank, const LoadedModel& lm) {
  if (!lm.stream || !lm.stream->store().streams_experts()) return;
  const weights::ExpertStatsSnapshot ex = lm.stream->store().expert_stats();
  fmt::print(stderr, "[sluice] rank {}'s {}", rank, ex.table());
}

Status run_stage_rank(const std::string& path, LoadOptions lo, const json& setup, const WorkerOptions& o,
                      const plan::Calibration& cal, Session& session) {
  Comm& c = session.comm();
  const int64_t E = setup.at("ep_size").get<int64_t>();
  const auto g = static_cast<size_t>(c.rank() / E), m = static_cast<size_t>(c.rank() % E);
  const json& range = setup.at("stage_ranges").at(g);
  std::vector<plan::ExpertRange> shares;
  for (const json& x : setup.at("stage_experts").at(g)) shares.push_back({x.at(0).get<int64_t>(), x.at(1).get<int64_t>()});
  lo.stage.layer_begin = range.at(0).get<int64_t>();
  lo.stage.layer_end = range.at(1).get<int64_t>();
  lo.stage.expert_begin = shares.at(m).begin;
  lo.stage.expert_end = shares.at(m).end;
  lo.stage.experts_only = m > 0;
  // A lead predicts for its expert ranks that stream (they read ahead).
  std::vector<char> read_ahead(static_cast<size_t>(E), 0);
  for (size_t k = 1; k < static_cast<size_t>(E); ++k)
    read_ahead[k] = setup.at("streams").at(g * static_cast<size_t>(E) + k).get<bool>();
  lo.predict_experts = m == 0 && (setup.at("predict_experts").get<bool>() ||
                                  std::count(read_ahead.begin(), read_ahead.end(), 1) > 0);
  stream_as_setup_says(&lo, setup, c.rank(), o, &cal);
  StatusOr<LoadedModel> lm = load_model(path, lo);
  if (m == 0 && lm.ok())
    if (const std::string why = host_memory_failure(*lm); !why.empty()) lm = invalid_argument("{}", why);
  if (lm.ok() && !lm->placement_report.empty())
    fmt::print(stderr, "[sluice] rank {}'s part streams from its disk:\n{}", c.rank(), lm->placement_report);
  RETURN_IF_ERROR(report_load(c, lm));
  if (m > 0) {
    const Status st = run_expert_worker_loop(session.group_comm(), *lm->model, shares[m]);
    print_streamed_experts(c.rank(), *lm);
    return st;
  }
  // The group's driver needs its shares only: the plan's figures stay on rank 0.
  const double grace = session.options().abort_grace_s;
  ExpertParallelDriver ep(session.group_comm(), lm->model->hparams(), shares, plan::EpAttention::kRank0, grace);
  ep.set_read_ahead(std::move(read_ahead));
  lm->model->set_expert_dispatch(&ep);
  const Status st = run_worker_loop(*session.stage_comm(), *lm->model, session.stage_comm()->size());
  if (ep.failed()) {
    // Its watchdog ends the job after the grace (rank 0 answers its requests
    // meanwhile); the driver must outlive it.
    std::this_thread::sleep_for(std::chrono::duration<double>(2 * grace));
    c.abort(1);
  }
  fmt::print(stderr, "{}", expert_summary(ep, session.group_comm()));
  const Status ended = ep.shutdown();  // the group's ranks stop, after a failure of the pipeline too
  return st.ok() ? ended : st;
}

}  // namespace

Status run_worker(const std::string& path, const WorkerOptions& o, Session& session) {
  Comm& c = session.comm();
  ASSIGN_OR_RETURN(ModelFile mf, open_model_file(path));
  plan::Calibration cal;
  ASSIGN_OR_RETURN(const json mine,
                   hello(c, path, mf, o.n_threads, o.mem_budget_bytes, o.disk_rate_cap_bytes_per_s, &cal));
  RETURN_IF_ERROR(send_json(c, 0, kTagHello, mine, "hello"));
  RETURN_IF_ERROR(answer_link_probe(c));
  ASSIGN_OR_RETURN(const json setup, recv_json(c, 0, kTagControl, "setup", c.timeout_s() * kLoadTimeoutFactor));
  if (!setup.value("ok", false)) return invalid_argument("rank 0 refused the job: {}", setup.value("error", "?"));
  LoadOptions lo = worker_load_options(o, setup);
  if (setup.contains("ep_size")) return run_stage_rank(path, lo, setup, o, cal, session);  // pp,ep
  if (setup.contains("experts")) {  // --parallel ep: its experts of every routed layer
    const json& shares = setup.at("experts");
    std::vector<plan::ExpertRange> ranges;
    for (const json& g : shares) ranges.push_back({g.at(0).get<int64_t>(), g.at(1).get<int64_t>()});
    const plan::ExpertRange range = ranges.at(static_cast<size_t>(c.rank()));
    // With attention on every rank it holds the rest of the model as rank 0 does.
    const bool every = setup.value("attention", "rank0") == plan::ep_attention_name(plan::EpAttention::kEvery);
    lo.stage.expert_begin = range.begin;
    lo.stage.expert_end = range.end;
    lo.stage.experts_only = !every;
    stream_as_setup_says(&lo, setup, c.rank(), o, &cal);
    StatusOr<LoadedModel> lm = load_model(path, lo);
    if (lm.ok() && !lm->placement_report.empty())
      fmt::print(stderr, "[sluice] rank {}'s share streams from its disk:\n{}", c.rank(), lm->placement_report);
    RETURN_IF_ERROR(report_load(c, lm));
    if (!every) {
      const Status st = run_expert_worker_loop(c, *lm->model, range);
      print_streamed_experts(c.rank(), *lm);
      return st;
    }
    ExpertParallelDriver driver(c, lm->model->hparams(), ranges, plan::EpAttention::kEvery,
                                session.options().abort_grace_s);
    lm->model->set_expert_dispatch(&driver);
    return run_replica_worker_loop(c, *lm->model);
  }
  const json& ranges = setup.at("ranges");
  const json& mine_range = ranges.at(static_cast<size_t>(c.rank()));
  lo.predict_experts = setup.at("predict_experts").get<bool>();
  lo.stage.layer_begin = mine_range.at(0).get<int64_t>();
  lo.stage.layer_end = mine_range.at(1).get<int64_t>();
  stream_as_setup_says(&lo, setup, c.rank(), o, &cal);
  StatusOr<LoadedModel> lm = load_model(path, lo);
  if (lm.ok() && !lm->placement_report.empty())
    fmt::print(stderr, "[sluice] rank {}'s range streams from its disk:\n{}", c.rank(), lm->placement_report);
  RETURN_IF_ERROR(report_load(c, lm));
  return run_worker_loop(c, *lm->model, static_cast<int>(ranges.size()));
}

}  // namespace sluice::dist
