// ExpertFeed: how a routed (mixture-of-experts) layer gets its experts, for
// one Model. It owns everything of routing that is not the decoder blocks'
// arithmetic: the step's routing buffers, the routing counters, the predicted
// routing and, with a weight source that streams experts, the views of the
// experts it hands out and their reordering for the backend.
//
// The model's layer loop calls it twice per layer:
//
//   predict(l_first, x)          before the first layer of a stage
//   for l in stage:
//     attention_block
//     routed l: ffn_block(step)  route -> count -> experts (resident views, or
//                                streamed ones computed as they land) -> x += FFN
//     dense l:  dense_ffn_block
//     predict(l + 1, x)          the next routed layer's routing, from the
//                                state entering it (hook and weight source)
//
// Streamed (LayerWeightSource::streams_experts()): ffn_block asks the source
// for the distinct experts chosen, guesses the next routed layer's experts
// early (from the state before this layer's experts are added) so the disk
// does not idle, and computes each expert as it lands; while waiting it
// reorders experts that landed earlier (Backend::prepare_in_place) so a
// later hit runs the backend's fastest kernels. Results are bit-identical to
// resident experts either way. On a backend that is not host-visible (a GPU
// keeping experts in slots) the experts are copied as they land instead, not
// when their layer runs: each chosen one as next_expert() hands it out, and
// the coming layer's predicted ones once the source has them in memory
// (Backend::prefetch_experts, transient: the feed lets the device go of the
// ones a prediction or the routing drops before the source may reuse them).
//
// Buffers are planned at construction for n_batch tokens; predict() and
// ffn_block() allocate nothing (the activation hook's copies aside). Not
// thread-safe: called from the owning model's forward pass only.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "base/metrics.h"
#include "model/decoder_blocks.h"
#include "model/expert_dispatch.h"
#include "model/hparams.h"
#include "model/model_weights.h"
#include "model/weight_source.h"
#include "sluice/status.h"

namespace sluice {

struct ExpertFeedOptions {
  int64_t n_batch = 1;     // most tokens in one call
  int64_t layer_end = 0;   // the stage's end: layers at or past it are never predicted
  // Predict each routed layer's routing before it runs (ModelOptions::predict_experts;
  // always on with a source that streams experts).
  bool predict = false;
  float predict_margin = 0.0f;  // ModelOptions::expert_predict_margin
  bool repack = true;           // reorder streamed experts for the backend (ModelOptions::repack)
  // This process's experts (ModelOptions::expert_begin/end, resolved): with
  // a dispatch and a source that streams experts, only these are predicted
  // and read (the dispatch computes the others elsewhere).
  int64_t expert_begin = 0;
  int64_t expert_end = 0;
};

class ExpertFeed {
 public:
  // be, hp, weights and hook outlive the feed; source may be null (resident
  // weights). A dense model's feed holds nothing and does nothing.
  ExpertFeed(Backend& be, const ModelHparams& hp, const ModelWeights& weights, LayerWeightSource* source,
             const ActivationHook& hook, const ExpertFeedOptions& options);
  ~ExpertFeed();
  ExpertFeed(const ExpertFeed&) = delete;
  ExpertFeed& operator=(const ExpertFeed&) = delete;

  // Counters of token-to-expert assignments, [n_layer * n_expert] (null for
  // dense layers); each routed layer adds its step's counts. Empty: none.
  void set_routing_counters(std::vector<Counter*> counters);

  // Another computes the routed layers' experts from here on
  // (expert_dispatch.h); null: this feed does. With a source that streams
  // experts, the step's experts of this process's share are read and landed
  // before the dispatch gets them.
  void set_dispatch(ExpertDispatch* dispatch) { dispatch_ = dispatch; }

  // When prediction is on and `layer` is a routed layer of the stage: its
  // routing predicted from x, reported to the hook ("ffn_moe_pred") and to a
  // source that streams experts (a prefetch hint). Otherwise nothing.
  //   x: [n, n_embd] the rows entering the layer
  void predict(int64_t layer, const float* x, int64_t n);
  // Another process's prediction of routed layer `layer` (ids, -1: none):
  // with a source that streams experts, this process's share of them is read
  // ahead as predict() would (an expert rank of --parallel ep).
  void predict_experts(int64_t layer, std::span<const int32_t> ids);

  // x += the routed FFN of s's layer (s.w bound). Errors: the weight source's
  // (the caller releases the layer, and with it any experts it pinned).
  // Experts that need nothing of the host (resident, no dispatch, no hook,
  // no prediction) go through Backend::routed_ffn, which may route without
  // waiting for the device: their counts are taken at end_step() (or before
  // the layer routes again).
  Status ffn_block(const LayerStep& s);
  // The stage's layers are enqueued: the routing counts routed_ffn left
  // pending are added (waiting for the backend when it routed on the
  // device). Model::run_stage, at its end.
  void end_step();

  // The distinct experts among ids (negative ones skipped) of `layer`, ready
  // to compute: w's own views without a streaming source, else read from
  // the source and all landed (reordered for the backend as they land), as
  // views by expert id. Errors: the source's. Model::landed_experts().
  StatusOr<std::span<const ExpertWeights>> landed_experts(int64_t layer, std::span<const int32_t> ids,
                                                         const LayerWeights& w);

 private:
  // Candidates per token the prediction considers (2 x n_expert_used, at most n_expert).
  int64_t n_pred_candidates() const;
  bool streams() const { return source_ && source_->streams_experts(); }
  // The hook's view of a layer's expert ids (debug only: copies). ids: [n, width], -1: none.
  void emit_routing(const char* name, const int32_t* ids, int64_t layer, int64_t n, int64_t width) const;
  // Adds the assignments ids [n, n_expert_used] of routed layer `layer` to its counters.
  void count_routing(int64_t layer, const int32_t* ids, int64_t n);
  // Waits for the backend and counts every layer routed_ffn left pending.
  void count_pending();
  // The predicted routing of `layer` from x. `early`: a first guess from the
  // state before the previous layer's experts are added, for the weight
  // source only (a later call refines it).
  void predict_routing(int64_t layer, const float* x, int64_t n, bool early);
  // The distinct experts in ids[0 .. n_ids) of this process's share
  // (negative ids and the others skipped), into out.
  void distinct_experts(const int32_t* ids, int64_t n_ids, std::vector<int32_t>& out);
  // The distinct experts of ids[0 .. n_ids) in `layer` (the step's routing),
  // asked of the source (reads started; next_expert() hands them out as
  // they land), as views.
  Status begin_experts(int64_t layer, const int32_t* ids, int64_t n_ids, const LayerWeights& w);
  // Streamed expert i of the current begin_experts(), handed out: reorders
  // its bytes in place for the backend unless that was done when it landed
  // before, and tells the source.
  void prepare_expert(int64_t layer, int64_t i);
  // While the next of layer's streamed experts is still reading: reorders
  // experts that landed before and are not in use, so the wait does what a
  // later hit would do on the critical path.
  void prepare_while_waiting(int64_t layer);
  // Reorders one expert's bytes in place for the backend (the same bits).
  void reorder_expert(ExpertWeights& x);
  // Streamed experts go to a device that keeps them in slots as they land
  // (streams(), the backend not host-visible, no dispatch).
  bool copies_ahead() const { return streams() && !dispatch_ && !be_.host_visible(); }
  // `layer`'s prediction is now ids (distinct): the device lets go of the
  // experts it no longer names, the source is told, and those it has in
  // memory are copied ahead.
  void predict_to_source(int64_t layer, std::span<const int32_t> ids);
  // The tracked prediction's experts that have landed since: copied ahead.
  void copy_landed_predictions();
  // The device lets go of the tracked prediction but for `keep` (the
  // layer's routing), and it is tracked no more.
  void settle_ahead(std::span<const int32_t> keep);
  // The source is about to reuse the memory of expert e of `layer` (its
  // reuse hook): the device lets go of a copy ahead from it.
  void expert_reused(int64_t layer, int32_t expert);

  Backend& be_;
  const ModelHparams& hp_;
  const ModelWeights& weights_;
  LayerWeightSource* source_;
  const ActivationHook& hook_;
  const ExpertFeedOptions options_;
  ExpertDispatch* dispatch_ = nullptr;

  // The step's routing in a layer.
  std::unique_ptr<Buffer> router_;     // [n_batch, n_expert] router logits
  std::vector<int32_t> ids_;           // [n_batch, n_expert_used]
  std::vector<float> weights_used_;    // [n_batch, n_expert_used]
  std::vector<Counter*> routed_;       // [n_layer * n_expert] set_routing_counters(), or empty
  std::vector<uint32_t> routed_step_;  // [n_expert] a layer's assignments in the step
  // routed_ffn's ids, kept per layer until counted (with counters only).
  std::vector<int32_t> ids_pending_;     // [layer_end, n_batch, n_expert_used]
  std::vector<int64_t> n_pending_;       // [layer_end] tokens not counted yet (0: none)
  bool any_pending_ = false;
  // Prediction (options_.predict only).
  std::unique_ptr<Buffer> pred_router_;   // [n_batch, n_expert] predicted router logits
  std::unique_ptr<Buffer> pred_xn_;       // [n_batch, n_embd]
  std::vector<int32_t> pred_ids_;         // [n_batch, n_pred_candidates()] -1: not predicted
  std::vector<float> pred_weights_;       // [n_batch, n_pred_candidates()]
  std::vector<int32_t> pred_unique_ids_;  // [n_expert] distinct experts of a prediction
  // Streamed experts.
  std::vector<int32_t> unique_ids_;           // [n_expert] distinct experts of a step's layer
  std::vector<uint8_t> seen_;                 // [n_expert]
  std::vector<ExpertPointers> expert_ptrs_;   // [n_expert] begin_experts()'s, by index
  std::vector<ExpertWeights> streamed_;       // [n_expert] views of the layer's acquired experts, by id
  // Copies ahead (copies_ahead()): the one coming layer whose prediction the device may be copying.
  int64_t ahead_layer_ = -1;                 // -1: none
  std::vector<int32_t> ahead_ids_;           // [n_expert] its predicted experts
  std::vector<uint8_t> ahead_sent_;          // [n_expert] copied ahead (by id)
  std::vector<int32_t> ahead_new_;           // [n_expert] scratch: the ones handed over in one call
  std::vector<ExpertWeights> ahead_views_;   // [n_expert] their views, by id
  std::vector<int32_t> reuse_keep_;          // [n_expert] scratch: every expert but one
};

}  // namespace sluice
