// Engine: the serving engine's public API.
//
// One model, many requests. submit() and abort() are thread-safe and may be
// called from any thread; a single engine thread runs steps: the scheduler
// picks tokens for every running sequence under a per-step token budget
// (continuous batching, chunked prefill), one batched forward pass computes
// them over the paged KV cache, samplers draw next tokens, and each request's
// callback receives its new tokens and text. Finished requests report timings.
//
// Callbacks run on the engine thread: they must be quick (copy, enqueue,
// notify) and must not block; they may call abort().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sluice/finish_reason.h"
#include "sluice/lora.h"
#include "sluice/sampling.h"
#include "sluice/status.h"

namespace sluice {

class Tokenizer;
class Backend;
namespace plan {
struct Calibration;
}
namespace dist {
class Session;
}

using RequestId = int64_t;


struct Request {
  std::vector<int32_t> prompt;           // token ids, at least one (see Engine::tokenizer())
  int32_t max_tokens = 128;              // per output
  int32_t n = 1;                         // outputs sampled in parallel; they share the prompt's KV
  SamplingParams sampling;               // output i > 0 uses seed + i
  std::vector<int32_t> stop_tokens;      // in addition to the model's end-of-generation tokens
  std::vector<std::string> stop_strings; // output text ends before the first match
  bool ignore_eos = false;               // do not stop at end-of-generation tokens
  int32_t priority = 0;                  // higher is scheduled first
  int32_t top_logprobs = -1;             // -1: no logprobs; 0..20: sampled token's + this many alternatives
  bool speculative = true;               // false: never draft for this request (when the engine speculates)
  // LoRA adapters applied to this request: indices into EngineConfig::loras
  // (several: their deltas add up). Empty: the base model. Requests on
  // different adapters share a step; their KV blocks are never shared.
  std::vector<int32_t> loras;
};

struct RequestTimings {
  double queue_s = 0;  // submit -> first scheduled
  double ttft_s = 0;   // submit -> first token
  double tpot_s = 0;   // mean time per output token after the first
  double e2e_s = 0;    // submit -> finished
  int64_t n_prompt = 0;
  int64_t n_cached_prompt = 0;  // prompt tokens served by the prefix cache
  int64_t n_generated = 0;      // over all outputs
  int64_t n_preemptions = 0;
};

struct TokenEvent {
  RequestId request = 0;
  int32_t index = 0;       // which of the n outputs
  int32_t token = -1;      // the new token, or -1 on a final event that carries none
  // The token is a stop token of the request (its StopCondition: the request's
  // stop_tokens, and end-of-generation tokens unless ignore_eos). It ends the
  // output, adds no text, and is not part of the output a client sees.
  bool stop_token = false;
  std::string text;        // new text: whole UTF-8 characters; text that may start a stop string is held back
  float logprob = 0;       // log p(token) under the model (temperature 1), when logprobs were asked
  std::vector<std::pair<int32_t, float>> top_logprobs;
  bool finished = false;   // last event of this output
  FinishReason finish_reason = FinishReason::kNone;
  std::string error;       // for kError
  // On the last event of the whole request (all outputs finished):
  std::optional<RequestTimings> timings;
};

using EventCallback = std::function<void(const TokenEvent&)>;

struct EngineConfig {
  std::string model_path;          // GGUF file or HF folder
  std::string backend = "cpu";     // what the model runs on: cpu, cuda (a GPU), reference (scalar; for checking)
  int n_threads = 0;               // 0: one per core
  int64_t max_batch_tokens = 512;  // tokens per step over all sequences
  int64_t max_seqs = 64;           // sequences running at once
  int64_t ctx_size = 0;            // positions per sequence; 0: min(trained context, 4096)
  uint64_t kv_budget_bytes = 0;    // KV pool; 0: enough for max_seqs / 4 full contexts (windowed: windows), at most 4 GiB
  std::string kv_dtype = "auto";   // auto (f32 for F32 models, else f16), f32, f16, q8_0
  int64_t kv_block_size = 16;
  bool prefix_caching = true;
  bool preempt_swap = false;       // preempt by swapping KV to host (else recompute)
  uint64_t swap_budget_bytes = 0;  // host swap pool when preempt_swap; 0: same as kv_budget
  int64_t max_queued = 1024;       // submit() refuses more waiting requests (resource exhausted)
  uint64_t mem_budget_bytes = 0;   // weights beyond it stream from disk through the weight store; 0: all resident
  double disk_rate_cap_bytes_per_s = 0;  // under mem_budget_bytes: disk reads capped at this rate (a slower disk); 0: none
  uint64_t gpu_budget_bytes = 0;   // --backend cuda: weights beyond it stream from pinned host memory; 0: all resident
  // With mem_budget_bytes: the weight store's resident layers and the KV pool
  // share one host budget; layers stream instead of preempting requests when
  // the pool runs short, and come back when load drops (engine/fluid_control.h).
  // On a device with gpu_budget_bytes: its layers and its KV pool share that
  // budget, and a layer given up is copied in from host memory (which holds
  // every layer the device does not when there is no mem_budget_bytes).
  bool fluid_split = false;
  int64_t fluid_hold_steps = 8;    // calm steps before a layer comes back
  bool check_invariants = false;   // verify KV block accounting after every step (tests; slow)
  // Under mem_budget_bytes: this machine's rates for the weight store's
  // placement (a caller that measured them already; tests); null: probed at
  // load. Not owned; read during create().
  const plan::Calibration* calibration = nullptr;
  // Run on this backend instead of creating `backend` by name (a caller that
  // built its own; tests).
  std::shared_ptr<Backend> shared_backend;
  // Speculative decoding (lossless): "off", "lookup" (n-gram prompt lookup) or
  // "draft" (draft_model_path, a model with the same vocabulary, kept resident).
  std::string speculative = "off";
  std::string draft_model_path;
  int32_t spec_max_draft = 5;      // longest draft per sequence and step (1 .. 16)
  bool spec_adaptive = true;       // draft length from each sequence's acceptance (else always the max)
  int32_t spec_ngram_max = 3;      // prompt lookup: longest n-gram matched (down to 1)
  // LoRA adapters loaded beside the model, always resident; a request picks
  // its own (Request::loras). The draft model runs without them.
  std::vector<LoraSpec> loras;
  // Rank 0 of an MPI job (dist/session.h): the model's layers are spread over
  // the job's processes (a pipeline); null: this process alone.
  std::shared_ptr<dist::Session> parallel;
};

struct EngineStats {
  int64_t running = 0;
  int64_t waiting = 0;      // submitted, not yet running (including preempted)
  int64_t swapped = 0;
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_used = 0;
  int64_t kv_blocks_free = 0;
  int64_t kv_blocks_cached = 0;  // free but holding a reusable prefix
  double prefix_hit_rate = 0;    // prompt tokens served from cache / prompt tokens looked up
  int64_t preemptions = 0;
  int64_t steps = 0;
  int64_t generated_tokens = 0;
  int64_t finished_requests = 0;
  // The fluid split (EngineConfig::fluid_split), since start.
  int64_t fluid_demoted_units = 0;  // units given up to the KV pool now (layers, or groups of expert slots)
  int64_t fluid_demotions = 0;
  int64_t fluid_promotions = 0;
  // Speculative decoding, since start.
  int64_t spec_drafted = 0;    // draft tokens verified
  int64_t spec_accepted = 0;   // of them, accepted
  int64_t spec_passes = 0;     // sequence steps that verified drafts
  int64_t spec_emitted = 0;    // tokens those steps emitted (accepted + one each)
  double spec_acceptance_rate() const {
    return spec_drafted > 0 ? static_cast<double>(spec_accepted) / static_cast<double>(spec_drafted) : 0.0;
  }
  double spec_tokens_per_pass() const {
    return spec_passes > 0 ? static_cast<double>(spec_emitted) / static_cast<double>(spec_passes) : 0.0;
  }
};

class Engine {
 public:
  // Loads the model, sizes the KV pool and starts the engine thread.
  static StatusOr<std::unique_ptr<Engine>> create(const EngineConfig& config);
  // Aborts unfinished requests (their callbacks get kAbort) and joins the thread.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request. Errors: invalid parameters, prompt + max_tokens beyond the
  // context, too many queued requests (kResourceExhausted), engine draining.
  StatusOr<RequestId> submit(Request request, EventCallback on_event);
  // Ends a request early; its outputs finish with kAbort. Unknown ids are ignored.
  void abort(RequestId id);
  // Stops accepting requests and waits up to timeout_s for running ones to finish;
  // the rest are aborted. Returns true if all finished in time.
  bool drain(double timeout_s);

  EngineStats stats() const;
  const Tokenizer& tokenizer() const;
  const std::string& model_name() const;
  // The adapters' names, in EngineConfig::loras order (the index a request
  // names): each path's stem, or a PEFT folder's name.
  std::vector<std::string> lora_names() const;
  int64_t ctx_size() const;  // positions per sequence
  // The model's tokenizer.chat_template ("" if it has none).
  std::string chat_template() const;
  // The weight placement map when weights stream (else "").
  std::string placement_report() const;
  // When weights stream: the weight store's counters so far (bytes per tier
  // per token, stall) and, for experts streamed one by one, the per-layer
  // prediction and cache figures; as text, and as a JSON object. "" otherwise.
  std::string weights_report() const;
  std::string weights_json() const;
  // What the backend copied in and how it launched the steps (on a GPU:
  // streamed weights, expert slots, CUDA graphs; Backend::copy_summary), one
  // line, "" when nothing; read while the engine is idle.
  std::string backend_report() const;
  int64_t n_vocab() const;
  // The model, where its weights live and the KV pool, as one JSON object,
  // fixed after load (src/engine/engine_describe.cpp lists the fields): for
  // a live view beside the metric registry's counters.
  std::string describe_json() const;
  // The speculative decoding setup ("" when off), for the startup log.
  std::string speculative_summary() const;
  // The KV pool and batching limits, for the startup log.
  std::string summary() const;

  struct Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice
