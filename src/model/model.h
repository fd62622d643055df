// Model: a decoder-only transformer described by an ArchSpec (arch/arch_spec.h),
// run on a Backend (backend/backend.h) over the paged KV cache.
//
// One forward pass takes the tokens of many sequences together (continuous
// batching): every weight matrix is read once per step for all of them, and
// attention is per sequence over its own KV blocks. Per layer, as the spec
// says (model/decoder_blocks.h):
//
//   x += attention_block(x)     norm -> q/k/v -> bias, RoPE, K/V store -> paged attention -> o
//   x += ffn_block(x)           norm -> gate/up -> activation -> down   (dense)
//                               or the routed experts' FFN (model/expert_feed.h:
//                               routing, its prediction, streamed experts)
// with each sequence's LoRA adapters' low-rank terms added after the adapted
// matmuls (model/model_adapters.h);
// then logits = output(norm(x)) for each sequence's trailing n_logits tokens.
//
// Weights are views of the ModelFile (kept alive by a shared_ptr), copies the
// backend prepared at load (repacking), or, with a weight source, bytes it
// acquires layer by layer. Activation buffers come from the backend, planned
// once at load for n_batch tokens: forward() allocates nothing. Not
// thread-safe: one forward() at a time per model (and per backend).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "base/metrics.h"
#include "format/model_file.h"
#include "kv/kv_cache.h"
#include "model/decoder_blocks.h"
#include "model/expert_feed.h"
#include "model/hparams.h"
#include "model/model_adapters.h"
#include "model/model_weights.h"
#include "model/rope_scaling.h"
#include "model/stage_runner.h"
#include "model/weight_source.h"

namespace sluice {

class Model;

// The default ModelOptions::expert_predict_margin: a close call is worth a
// prefetch (stories-moe, replayed by `sluice bench-experts`; see model.cpp).
inline constexpr float kExpertPredictMargin = 0.83f;

// What a KV cache's size depends on: the model's shape, the dtype it takes
// when none is asked for (f32 for F32 models, full precision end to end;
// f16 otherwise), the positions a query reads back (kv_window) and the
// longest context. Known from the model file before the weights are bound
// (kv_shape_of) and of a loaded model (Model::kv_shape): the same answer.
struct KvShape {
  int64_t n_layer = 0;
  int64_t n_embd_kv = 0;
  int64_t n_head_kv = 0;
  int64_t window = 0;     // ModelHparams::kv_window()
  int64_t n_ctx_max = 0;
  KvDtype default_dtype = KvDtype::kF16;
  KvLayout layout(KvDtype dtype, int64_t block_size = 16) const {
    return KvLayout{.n_layer = n_layer, .n_embd_kv = n_embd_kv, .block_size = block_size, .dtype = dtype,
                    .n_head_kv = n_head_kv};
  }
};
// n_ctx_max <= 0: the model's trained context. Errors: the file's
// hyperparameters or its token embedding table.
StatusOr<KvShape> kv_shape_of(const ModelFile& file, int64_t n_ctx_max);

struct ModelOptions {
  int n_threads = 0;      // threads of the CPU backend created when `backend` is null; <= 0: one per core
  int64_t n_batch = 256;  // most tokens in one forward pass (all sequences together)
  int64_t n_ctx_max = 0;  // longest context a sequence may reach (sizes attention scratch); 0: trained context
  int64_t max_seqs = 64;  // most sequences in one forward pass
  // Where layer matrices come from; null: resident in the ModelFile's mapping.
  // With a source, weight bytes are read only through it (never the mapping).
  std::shared_ptr<LayerWeightSource> weights;
  // The backend to run on, shareable with another model (a draft model runs
  // between the target's passes); null: a CPU backend of n_threads.
  std::shared_ptr<Backend> backend;
  // Let the backend copy resident matrices into its own memory and layouts at
  // load (Backend::prepare_weights; on the CPU a huge-page arena with
  // interleaved Q4_0/Q8_0 layouts). Results are bit-identical either way; the
  // copy costs memory. Never with a weight source; there, when set, experts
  // streamed from it are reordered where they land, and the matrices it keeps
  // resident in memory of its own once at load (Backend::prepare_in_place).
  // A backend that is not host-visible (a GPU) is given the matrices to copy
  // whatever this says: its kernels cannot read the file's memory.
  bool repack = true;
  // Mixture of experts: before each routed layer, predict its routing from the
  // hidden state entering the layer (the layer's router applied to its FFN norm
  // of that state) and report it: to a weight source that streams experts (it
  // prefetches them; always on then) and to the activation hook
  // ("ffn_moe_pred"). Costs one small matmul per routed layer.
  bool predict_experts = false;
  // Predicted experts past the top n_expert_used are kept while their
  // predicted probability is at least this fraction of the last of those.
  float expert_predict_margin = kExpertPredictMargin;
  // Device memory the caller keeps for itself out of the backend's budget
  // (Backend::set_device_reserve), asked once the model's shape is known and
  // before its weights are prepared: the engine's KV pool, so that under
  // --gpu-budget a longer context leaves fewer layers resident. It depends on
  // the KV shape alone (three tiers ask it before the model exists). Null: none.
  std::function<StatusOr<uint64_t>(const KvShape&)> device_reserve;
  // A pipeline stage (dist/): the layers [layer_begin, layer_end) this model
  // holds and runs; the others are bound as views but never read or prepared
  // (and the output head only by the stage that has layer 0). -1: n_layer.
  int64_t layer_begin = 0;
  int64_t layer_end = -1;
  // Expert parallelism (dist/expert_parallel.h): the routed experts
  // [expert_begin, expert_end) of every layer are this process's (-1: all);
  // the others are bound as views but never read or prepared. experts_only:
  // nothing else is held either (a process that computes experts alone).
  int64_t expert_begin = 0;
  int64_t expert_end = -1;
  bool experts_only = false;
};

// One sequence's part of a batched forward pass.
struct ForwardSeq {
  std::span<const int32_t> tokens;       // tokens to compute, at positions pos0 ..
  int64_t pos0 = 0;
  std::span<const int32_t> block_table;  // the sequence's KV blocks, covering pos0 + tokens.size()
  int64_t n_logits = 1;                  // logits for this many trailing tokens (0 = none)
  LoraMask loras = 0;                    // adapters applied (bit i: add_lora's i-th); 0: the base alone
};

class Model {
 public:
  // Validates hyper-parameters and every tensor's presence, type and shape
  // against the architecture's spec and what the backend supports.
  static StatusOr<std::unique_ptr<Model>> load(std::shared_ptr<const ModelFile> file,
                                               const ModelOptions& options = {});
  ~Model();

  const ModelHparams& hparams() const { return hp_; }
  const ArchSpec& arch() const { return *hp_.spec; }
  const ModelFile& file() const { return *file_; }
  Backend& backend() { return *backend_; }
  const Backend& backend() const { return *backend_; }
  // The backend, to share with another model.
  const std::shared_ptr<Backend>& shared_backend() const { return backend_; }
  int n_threads() const { return backend_->n_threads(); }
  // The longest context a sequence may reach (ModelOptions::n_ctx_max as resolved).
  int64_t n_ctx_max() const { return n_ctx_max_; }
  // The most sequences one forward pass takes (ModelOptions::max_seqs).
  int64_t max_seqs() const { return max_seqs_; }
  // The LongRoPE factor set chosen at load from n_ctx_max (kNone without
  // factors; model/rope_scaling.h says why it never changes afterwards).
  LongRopeFactors longrope_factors() const { return longrope_; }
  // Bytes of weights one forward pass reads (all matrices + embeddings row).
  uint64_t weight_bytes() const { return weights_.bytes_per_token; }
  // Bytes of matrices copied into a repacked layout at load (0 if none), and a
  // one-line description for load summaries ("" if none).
  uint64_t repacked_bytes() const { return prepared_.repacked_bytes; }
  const std::string& repack_summary() const { return prepared_.summary; }
  // Bytes of each layer's matrices the backend reads from host memory and
  // copies to its own at each use (prepare_weights left them there: cuda
  // under --gpu-budget; or a weight source's, three tiers: every layer
  // outside the device tier).  [n_layer], all 0 when none
  const std::vector<uint64_t>& host_layer_bytes() const { return host_layer_bytes_; }

  // The fluid split (engine/fluid_control.h), between steps, with a weight
  // source: the bytes demoting layer l frees in its tier (0: it cannot move):
  // a host-resident layer's buffer on a host-visible backend, or a device-tier
  // layer's arena (three tiers, a dense model); demote_layer streams it from
  // then on (its views back in the file's row layout, the arena freed);
  // promote_layer makes it resident again, reordered in place or copied to
  // the device as at load.
  uint64_t demotable_bytes(int64_t l) const;
  Status demote_layer(int64_t l);
  Status promote_layer(int64_t l);
  // A routed model's expert slots: a weight source's pool of experts (on a
  // host-visible backend, streaming experts), or the device's slots of
  // experts copied in from host memory (three tiers; the backend's
  // expert_slots()). Their range (all 0 when there is none; `min` is also the
  // step), and their count moved between steps (the split's units are slots).
  LayerWeightSource::ExpertSlotRange expert_slot_range() const;
  Status set_expert_slots(int64_t n);

  // The KV cache's shape (KvShape: its default dtype, layout, window).
  KvShape kv_shape() const;
  KvDtype default_kv_dtype() const { return kv_shape().default_dtype; }
  KvLayout kv_layout(KvDtype dtype, int64_t block_size = 16) const { return kv_shape().layout(dtype, block_size); }
  // A single-sequence KV cache for up to n_ctx positions (default dtype).
  KvCache make_kv_cache(int64_t n_ctx);
  StatusOr<KvCache> make_kv_cache(int64_t n_ctx, KvDtype dtype);

  // One step over many sequences: all their tokens go through the weight
  // matmuls together (each weight byte read once per step); attention is per
  // sequence over its own blocks. K/V of the new tokens are written to `kv`.
  //   logits: [sum of n_logits, n_vocab] host memory, sequences in order
  // Errors: more than n_batch tokens or max_seqs sequences, token ids out of
  // range, a block table too short, a KV store of another model, a weight
  // source that fails.
  Status forward(std::span<const ForwardSeq> seqs, KvStore& kv, float* logits);

  // Single-sequence convenience: runs `tokens` at positions kv.n_past() .. in
  // chunks of n_batch with the adapters `loras`, and advances kv.n_past().
  //   logits: [n, n_vocab] if all_logits, else [1, n_vocab] (last token only)
  Status forward(std::span<const int32_t> tokens, KvCache& kv, float* logits, bool all_logits, LoraMask loras = 0);

  void set_activation_hook(ActivationHook hook) { hook_ = std::move(hook); }
  // Times each operator of the steps that follow on `profile` (model/op_profile.h;
  // null: none, the default). The profile outlives its use here.
  void set_op_profile(OpProfile* profile) { profile_ = profile; }
  // Routed models: counters of token-to-expert assignments, [n_layer * n_expert]
  // (null for dense layers), each routed layer adding its step's counts (once
  // per expert and step). Empty: not counted. Set before the first forward().
  void set_routing_counters(std::vector<Counter*> counters);

  // Adds a LoRA adapter (model/model_adapters.h): its factors go to backend
  // memory, resident whatever the weights' placement; returns its index, the
  // bit ForwardSeq::loras selects it by. scale: the user's (1: the file's
  // alpha / rank). Errors: ModelAdapters::add's.
  StatusOr<int> add_lora(const LoraAdapter& adapter, float scale = 1.0f);
  const ModelAdapters& adapters() const { return adapters_; }

  // --- pipeline stages (dist/): one step split over processes ---------------
  // forward() is begin_step(embed) -> [the stage runner's run_step, or
  // run_stage over every sequence] -> finish_step. A stage that is not the
  // first fills hidden() itself and runs run_stage per micro-batch.
  int64_t layer_begin() const { return layer_begin_; }
  int64_t layer_end() const { return layer_end_; }
  // When set, forward() hands the step's layers to it (not owned; null: none).
  void set_stage_runner(StageRunner* runner) { stages_ = runner; }
  StageRunner* stage_runner() const { return stages_; }
  // Routed layers' experts computed by `dispatch` from here on
  // (expert_dispatch.h); null: by this model. With streamed experts, the
  // share of them this process holds is landed before the dispatch runs.
  void set_expert_dispatch(ExpertDispatch* dispatch);
  // Validates the step and lays out its host data (positions, KV rows,
  // attention sequences, RoPE tables); with `embed`, the tokens' embeddings
  // into hidden(). Errors: as forward().
  Status begin_step(std::span<const ForwardSeq> seqs, KvStore& kv, bool embed);
  // This model's layers over sequences [seq_begin, seq_end) of the step begun,
  // whose tokens are the hidden rows [t0, t0 + n) (contiguous, in order).
  // count_routing: the routing a device kept is counted at the stage's end
  // (forward() without stages counts it after the logits instead, in
  // finish_step, so that nothing waits for the device before them).
  Status run_stage(size_t seq_begin, size_t seq_end, int64_t t0, int64_t n, KvStore& kv, bool count_routing = true);
  // The logits of the step begun, from the hidden rows of the tokens that ask
  // for them (after the last layer). logits: [n_logits(), n_vocab].
  Status finish_step(float* logits);
  // The residual stream of the step begun: [n_batch, n_embd] host memory.
  float* hidden() { return x_->floats(); }
  // Rows of hidden() whose logits the step asks for, in output order.
  std::span<const int64_t> logit_rows() const { return {logit_rows_.data(), static_cast<size_t>(step_n_out_)}; }
  // Tokens of the step begun.
  int64_t step_tokens() const { return step_n_; }

  // --- training's view (train/): the frozen weights, layer by layer --------
  const ModelWeights& weights() const { return weights_; }
  // Layer l's matrices, acquired from the weight source when one streams them
  // (it may block until they land); valid until release_layer(l).
  StatusOr<const LayerWeights*> acquire_layer(int64_t l);
  void release_layer(int64_t l);
  // After acquire_layer(l): the experts `ids` of routed layer l (this
  // process's share; repeats allowed) ready to compute, indexed by expert id:
  // the layer's own views, or with a source that streams experts those read
  // into its slots, all landed (waited for here); valid until release_layer(l).
  // Errors: the source's (a read failed, an expert outside its share).
  StatusOr<std::span<const ExpertWeights>> landed_experts(int64_t l, std::span<const int32_t> ids);
  // Before routed layer l: the experts another process predicts it will
  // choose (ids, -1: none); those of this process's share that stream are
  // read ahead (ExpertFeed::predict_experts).
  void predict_experts(int64_t l, std::span<const int32_t> ids);
  // The RoPE layer l rotates with (gemma3's windowed layers have their own).
  const RopeFreqs& layer_rope(int64_t l) const;
  // The order the layers will be acquired in, one period repeating
  // (weight_source.h: forward_schedule, training_schedule), for what streams
  // them: the weight source, and a backend that streams dispatch groups from
  // host memory (Backend::set_weight_schedule). Errors: the source's (a
  // layer it does not know, one left out).
  Status set_layer_schedule(std::span<const int64_t> order);
  // Whether layer l's views point into the backend's memory for good (the
  // three tiers' device tier).
  bool on_device(int64_t l) const;
  // The weight source, or null when every matrix is resident.
  LayerWeightSource* weight_source() const { return source_.get(); }

 private:
  Model(std::shared_ptr<const ModelFile> file, const ModelHparams& hp, const ModelOptions& options);
  Status check_supported() const;
  void plan_buffers(const ModelOptions& options);
  ScratchNeeds scratch_needs() const;
  Status validate(std::span<const ForwardSeq> seqs, const KvStore& kv) const;
  // Whether a view is one this stage holds (its layers, or the output head at
  // the first stage): the only ones prepared at load.
  bool holds(const WeightView* v) const;
  void emit(std::string_view name, int64_t layer, const float* data, int64_t n_tokens, int64_t n) const;
  // With a weight source: the matrices it keeps resident in memory of its own
  // (LayerWeightSource::reorderable), reordered there once at load, as
  // prepare_weights() would have copied them; the rest stay as they are.
  void reorder_resident();
  // reorder_resident() for layer l's groups alone (-1: every layer's and the rest).
  void reorder_in_place(int64_t only_layer);
  // A weight source on a backend that is not host-visible (three tiers):
  // which layers are the device tier's, the host bytes one layer reads at
  // most, the source's host memory registered with the backend (before the
  // scratch is planned); then, after it, the device tier's layers and the
  // output head prepared in the backend's memory.
  Status plan_device_tiers();
  Status prepare_device_layers();
  // The groups prepare_device_layers() gives the backend (only_layer < 0: all
  // but those of layers with an arena of their own), or one layer's.
  std::vector<std::vector<WeightView*>> device_groups(int64_t only_layer);
  // The backend's prepare_weights() of those groups.
  PreparedWeights prepare_groups(int64_t only_layer);
  // A dense model's device-tier layers are prepared one arena each.
  bool per_layer_arenas() const { return !hp_.is_moe(); }

  std::shared_ptr<const ModelFile> file_;
  ModelHparams hp_;
  int64_t n_batch_;
  int64_t max_seqs_ = 0;
  int64_t n_ctx_max_ = 0;
  std::shared_ptr<Backend> backend_;
  std::shared_ptr<LayerWeightSource> source_;
  ModelWeights weights_;
  PreparedWeights prepared_;
  // With some of prepared_'s groups streamed by the backend: each group's
  // layer (-1: the output head), and the layer schedule last given for them.
  std::vector<int64_t> streamed_group_layer_, scheduled_layers_;
  std::vector<PreparedWeights> device_prepared_;  // [n_layer] a device-tier layer's own arena (dense models)
  bool repack_ = false;                     // ModelOptions::repack
  std::vector<uint64_t> host_layer_bytes_;  // [n_layer] host_layer_bytes()
  std::vector<uint8_t> device_layer_;       // [n_layer] the device tier's (empty: no device tiers)
  uint64_t host_weight_bytes_ = 0;          // ScratchNeeds::host_weight_bytes
  uint64_t host_expert_bytes_ = 0;          // ScratchNeeds::expert_bytes
  std::vector<const uint8_t*> registered_;  // Backend::register_host'ed, unregistered at destruction
  // Registers host memory weight views point into with the backend (registered_).
  void register_region(std::span<const uint8_t> r);
  LongRopeFactors longrope_ = LongRopeFactors::kNone;
  RopeFreqs rope_;      // inv_freq [n_rot / 2] after scaling, and the cos/sin magnitude
  RopeFreqs rope_swa_;  // windowed layers' own RoPE (gemma3), or empty inv_freq

  // Activations from the backend, [n_batch, ...] each, planned at load.
  std::unique_ptr<Buffer> x_;        // [n_batch, n_embd]   residual stream
  std::unique_ptr<Buffer> xn_;       // [n_batch, n_embd]   normed
  std::unique_ptr<Buffer> q_;        // [n_batch, n_embd_q]
  std::unique_ptr<Buffer> k_;        // [n_batch, n_embd_kv]  new keys, before the KV store
  std::unique_ptr<Buffer> v_;        // [n_batch, n_embd_kv]
  std::unique_ptr<Buffer> att_;      // [n_batch, n_embd_q]
  std::unique_ptr<Buffer> proj_;     // [n_batch, n_embd]   attention/ffn output before the residual add
  std::unique_ptr<Buffer> gate_;     // [n_batch, n_ff]
  std::unique_ptr<Buffer> up_;       // [n_batch, n_ff]
  std::unique_ptr<Buffer> cos_sin_;  // [n_batch, n_rot / 2, 2]
  std::unique_ptr<Buffer> cos_sin_swa_;  // [n_batch, n_rot / 2, 2] from rope_swa_, or null
  // Plain host data describing the step.
  std::vector<int64_t> positions_;   // [n_batch] each token's position
  std::vector<int64_t> kv_rows_;     // [n_batch] each token's row in the KV store
  std::vector<int64_t> logit_rows_;  // [n_batch] tokens whose logits are asked for
  std::vector<AttentionSeq> attn_seqs_;  // [max_seqs]
  ModelAdapters adapters_;
  std::vector<LoraMask> lora_masks_;     // [max_seqs] the step's sequences' adapters
  std::vector<int64_t> lora_lens_;       // [max_seqs] and their token counts
  // Routed layers' routing, prediction and experts (planned at load).
  std::unique_ptr<ExpertFeed> experts_;

  int64_t layer_begin_ = 0, layer_end_ = 0;  // ModelOptions::layer_begin/end, resolved
  int64_t expert_begin_ = 0, expert_end_ = 0;  // ModelOptions::expert_begin/end, resolved
  bool experts_only_ = false;
  StageRunner* stages_ = nullptr;
  int64_t step_n_ = 0, step_n_out_ = 0;       // tokens and logits rows of the step begun
  int64_t step_n_seqs_ = 0;

  ActivationHook hook_;
  OpProfile* profile_ = nullptr;  // set_op_profile's
  mutable std::vector<float> hook_copy_;  // emit(): a device buffer's floats on the host
};

}  // namespace sluice
