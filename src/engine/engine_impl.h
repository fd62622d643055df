// Engine::Impl: the engine's state and the engine thread's steps, shared by
// the files that implement them (engine.cpp: the API, admission, the step and
// its outputs; engine_drafts.cpp: speculative drafting). Internal to src/engine.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sluice/engine.h"

#include "engine/engine_metrics.h"
#include "engine/fluid_control.h"
#include "engine/model_runner.h"
#include "engine/output_text.h"
#include "engine/scheduler.h"
#include "format/model_file.h"
#include "kv/kv_store.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "sample/stop_condition.h"
#include "spec/draft_length.h"
#include "spec/proposer.h"
#include "spec/verifier.h"
#include "tokenizer/tokenizer.h"
#include "weights/store_source.h"

namespace sluice {

// A submitted request waiting in the incoming queue.
struct Pending {
  RequestId id;
  Request request;
  EventCallback callback;
  double t_submit;
};

struct Engine::Impl {
  // One of a request's n outputs.
  struct Output {
    int32_t index = 0;
    SeqId seq = -1;  // -1 once finished
    std::unique_ptr<Sampler> sampler;
    OutputText text;
    int64_t n_generated = 0;
    int64_t gen_offset = 0;  // tokens generated before this sequence was (re)added
    bool done = false;
    bool stopped_by_string = false;
    double t_first = -1, t_last = -1;
    // Speculative decoding.
    spec::DraftLength draft_len;
    std::unique_ptr<Sampler> draft_sampler;  // draws drafts for sampled requests (no penalties)
    std::vector<int32_t> draft;              // the drafts last proposed
    std::vector<float> draft_probs;          // [max_draft, n_vocab] their distributions, if drawn
  };
  struct Req {
    RequestId id = 0;
    Request r;
    StopCondition stop;  // built at admission: every output's stop tokens and max_tokens
    EventCallback cb;
    double t_submit = 0, t_scheduled = -1, t_first_token = -1;
    std::vector<Output> outs;
    int n_done = 0;
    int64_t n_cached = 0;
    int64_t n_preemptions = 0;
    bool children_started = false;
  };

  EngineConfig cfg;
  std::shared_ptr<const ModelFile> file;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok;
  std::string name;
  int64_t ctx = 0;
  KvStore kv;
  std::unique_ptr<KvStore> host_kv;
  std::unique_ptr<Scheduler> sched;
  std::unique_ptr<ModelRunner> runner;
  std::vector<int32_t> eog;
  EngineMetrics metrics;
  std::shared_ptr<weights::StoreWeightSource> stream;
  std::string placement;
  std::unique_ptr<spec::Proposer> proposer;
  std::unique_ptr<FluidControl> fluid;  // EngineConfig::fluid_split; null: off
  // Held while the fluid split moves layers (the engine thread) and while
  // describe_json() reads the placement (any thread).
  mutable std::mutex placement_mu;

  std::mutex mu;
  std::condition_variable cv;
  std::deque<Pending> incoming;
  std::vector<RequestId> aborts;
  bool stop = false;
  bool accepting = true;
  RequestId next_id = 1;
  std::atomic<int64_t> n_unfinished{0};
  mutable std::mutex stats_mu;
  EngineStats snapshot;
  std::thread loop;

  // Engine thread only.
  std::unordered_map<RequestId, Req> reqs;
  std::unordered_map<SeqId, std::pair<RequestId, int32_t>> owner;
  SeqId next_seq = 1;
  std::vector<SeqSampling> sampling;  // [scheduled sequences] of the step being run
  std::vector<spec::DraftTask> tasks;
  spec::StepCost step_cost;
  double experts_published_s = 0;  // when the per-layer expert gauges were last set           // target forward seconds against batch tokens
  spec::DraftLength all_seqs_len{{.decay = 0.98}};  // acceptance over every sequence: the prior of new ones
  double draft_s_per_token = 0;       // proposer seconds per draft position (EMA)
  int64_t spec_drafted = 0, spec_accepted = 0, spec_passes = 0, spec_emitted = 0;

  void run();
  void admit(Pending p);
  Status add_sequence(Req& rq, Output& o, std::vector<int32_t> prompt, int64_t max_tokens);
  void step();
  // Gives every decoding sequence a draft (speculative decoding).
  void propose_drafts();
  // The cost of one draft token relative to a plain decode step.
  double spec_cost_ratio() const;
  // The output a sequence belongs to, or nullptr (finished, aborted).
  Output* output_of(SeqId seq);
  // Counts a step's drafts and their verdicts (metrics, draft lengths).
  void observe_drafts(const StepOutput& out);
  void start_children(Req& rq, const float* lg);
  void emit_token(Req& rq, Output& o, int32_t token, const float* lg);
  void finish_output(Req& rq, Output& o, FinishReason reason, const std::string& error = "");
  // Ends every output of a request now: kAbort, or kError with `error` (a
  // step that failed).
  void abort_request(RequestId id, FinishReason reason = FinishReason::kAbort, const std::string& error = "");
  void publish_stats();
  // The fluid split (engine_fluid.cpp): its setup when EngineConfig::fluid_split
  // (none: nullopt), then the control made over the engine's KV store and scheduler.
  StatusOr<std::optional<FluidSetup>> plan_fluid(const plan::TierInputs* tiers, int64_t n_blocks, int64_t block_bytes);
  void start_fluid(FluidSetup setup);
  // The fluid split's view of this step: what preempting or waiting would cost.
  FluidCosts fluid_costs() const;
  // One step of the fluid split under placement_mu; on an error it says so and stops the split.
  void fluid_step(const FluidCosts& costs);
};

}  // namespace sluice
