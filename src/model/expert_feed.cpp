#include "model/expert_feed.h"

#include <algorithm>

namespace sluice {
namespace {

// Reordering a landed expert in place (Backend::prepare_in_place) pays for
// itself within the step only from about this many tokens: one Mixtral
// expert in Q4_0 on 2 threads takes 5.5 ms to reorder, and the reordered
// kernel saves 1.8 ms per token against GGUF rows (Zen 5, AVX-512).
constexpr int64_t kReorderBreakEvenTokens = 4;

}  // namespace

ExpertFeed::ExpertFeed(Backend& be, const ModelHparams& hp, const ModelWeights& weights, LayerWeightSource* source,
                       const ActivationHook& hook, const ExpertFeedOptions& options)
    : be_(be), hp_(hp), weights_(weights), source_(source), hook_(hook), options_(options) {
  if (!hp.is_moe()) return;
  const auto nb = static_cast<size_t>(options.n_batch);
  const auto n_expert = static_cast<size_t>(hp.n_expert);
  auto floats = [&](int64_t n) { return be.alloc(nb * static_cast<size_t>(n) * sizeof(float)); };
  router_ = floats(hp.n_expert);
  ids_.resize(nb * static_cast<size_t>(hp.n_expert_used));
  weights_used_.resize(ids_.size());
  unique_ids_.reserve(n_expert);
  pred_unique_ids_.reserve(n_expert);
  seen_.resize(n_expert);
  expert_ptrs_.resize(n_expert);
  streamed_.resize(n_expert);
  ahead_ids_.reserve(n_expert);
  ahead_sent_.resize(n_expert);
  ahead_new_.reserve(n_expert);
  ahead_views_.resize(n_expert);
  reuse_keep_.reserve(n_expert);
  if (source_) source_->set_expert_reuse_hook([this](int64_t l, int32_t e) { expert_reused(l, e); });
  if (options.predict) {
    pred_router_ = floats(hp.n_expert);
    pred_xn_ = floats(hp.n_embd);
    pred_ids_.resize(nb * static_cast<size_t>(n_pred_candidates()));
    pred_weights_.resize(pred_ids_.size());
  }
}

ExpertFeed::~ExpertFeed() {
  if (source_ && hp_.is_moe()) source_->set_expert_reuse_hook(nullptr);
}

void ExpertFeed::set_routing_counters(std::vector<Counter*> counters) {
  count_pending();
  routed_ = std::move(counters);
  routed_step_.assign(static_cast<size_t>(hp_.n_expert), 0);
  const auto layers = static_cast<size_t>(options_.layer_end);
  ids_pending_.assign(routed_.empty() ? 0 : layers * ids_.size(), -1);
  n_pending_.assign(routed_.empty() ? 0 : layers, 0);
}

int64_t ExpertFeed::n_pred_candidates() const { return std::min(hp_.n_expert, 2 * hp_.n_expert_used); }

void ExpertFeed::emit_routing(const char* name, const int32_t* ids, int64_t layer, int64_t n, int64_t width) const {
  // The expert ids as floats (-1: none), [n, width].
  std::vector<float> f(ids, ids + n * width);
  hook_(name, layer, f.data(), n, width);
}

void ExpertFeed::count_routing(int64_t layer, const int32_t* ids, int64_t n) {
  if (routed_.empty()) return;
  for (int64_t i = 0; i < n * hp_.n_expert_used; ++i)
    if (ids[i] >= 0) ++routed_step_[static_cast<size_t>(ids[i])];
  for (int64_t e = 0; e < hp_.n_expert; ++e) {
    uint32_t& c = routed_step_[static_cast<size_t>(e)];
    Counter* counter = routed_[static_cast<size_t>(layer * hp_.n_expert + e)];
    if (c > 0 && counter) counter->add(c);
    c = 0;
  }
}

void ExpertFeed::count_pending() {
  if (!any_pending_) return;
  be_.wait_idle();
  for (size_t l = 0; l < n_pending_.size(); ++l) {
    if (n_pending_[l] == 0) continue;
    count_routing(static_cast<int64_t>(l), ids_pending_.data() + l * ids_.size(), n_pending_[l]);
    n_pending_[l] = 0;
  }
  any_pending_ = false;
}

void ExpertFeed::end_step() {
  settle_ahead({});
  count_pending();
}

void ExpertFeed::predict_to_source(int64_t layer, std::span<const int32_t> ids) {
  if (!copies_ahead()) {
    source_->predict_experts(layer, ids);
    return;
  }
  if (ahead_layer_ != layer) settle_ahead({});
  // What this prediction drops loses the source's protection: the device
  // lets go of its bytes first. Those it keeps stay copied or copying.
  be_.settle_expert_prefetches(layer, ids);
  for (int32_t e : ahead_ids_)
    if (std::find(ids.begin(), ids.end(), e) == ids.end()) ahead_sent_[static_cast<size_t>(e)] = 0;
  ahead_layer_ = layer;
  ahead_ids_.assign(ids.begin(), ids.end());
  source_->predict_experts(layer, ids);
  copy_landed_predictions();
}

void ExpertFeed::copy_landed_predictions() {
  if (ahead_layer_ < 0) return;
  ahead_new_.clear();
  const LayerWeights& w = weights_.layers[static_cast<size_t>(ahead_layer_)];
  for (int32_t e : ahead_ids_) {
    const auto ei = static_cast<size_t>(e);
    ExpertPointers p;
    if (ahead_sent_[ei] || !source_->landed_expert(ahead_layer_, e, &p)) continue;
    ahead_sent_[ei] = 1;
    ExpertWeights& x = ahead_views_[ei];
    x = w.experts[ei];  // shapes and types; a device never reorders host experts in place
    x.gate.data = p.gate;
    x.up.data = p.up;
    x.down.data = p.down;
    ahead_new_.push_back(e);
  }
  if (!ahead_new_.empty()) be_.prefetch_experts(ahead_layer_, ahead_new_, ahead_views_, /*transient=*/true);
}

void ExpertFeed::expert_reused(int64_t layer, int32_t expert) {
  if (!copies_ahead()) return;
  // A copy ahead of it may be the tracked prediction's, or a chosen
  // expert's of a layer whose routing was just settled: the backend knows.
  reuse_keep_.clear();
  for (int32_t e = 0; e < hp_.n_expert; ++e)
    if (e != expert) reuse_keep_.push_back(e);
  be_.settle_expert_prefetches(layer, reuse_keep_);
  if (layer == ahead_layer_) ahead_sent_[static_cast<size_t>(expert)] = 0;
}

void ExpertFeed::settle_ahead(std::span<const int32_t> keep) {
  if (ahead_layer_ < 0) return;
  be_.settle_expert_prefetches(ahead_layer_, keep);
  for (int32_t e : ahead_ids_) ahead_sent_[static_cast<size_t>(e)] = 0;
  ahead_ids_.clear();
  ahead_layer_ = -1;
}

void ExpertFeed::distinct_experts(const int32_t* ids, int64_t n_ids, std::vector<int32_t>& out) {
  out.clear();
  std::fill(seen_.begin(), seen_.end(), 0);
  for (int64_t i = 0; i < n_ids; ++i) {
    if (ids[i] < options_.expert_begin || ids[i] >= options_.expert_end || seen_[static_cast<size_t>(ids[i])]) continue;
    seen_[static_cast<size_t>(ids[i])] = 1;
    out.push_back(ids[i]);
  }
}

void ExpertFeed::predict(int64_t layer, const float* x, int64_t n) {
  if (!options_.predict || layer >= options_.layer_end || !hp_.layer_is_moe(layer)) return;
  predict_routing(layer, x, n, /*early=*/false);
}

void ExpertFeed::predict_routing(int64_t layer, const float* x, int64_t n, bool early) {
  const ModelHparams& h = hp_;
  const LayerWeights& w = weights_.layers[static_cast<size_t>(layer)];
  const MatmulOut router[1] = {{w.mat(TensorRole::kFfnRouter), pred_router_->floats()}};
  be_.norm_matmul({.x = x, .norm = w.vec(TensorRole::kFfnNorm), .eps = h.rms_eps, .xn = pred_xn_->floats(),
                   .n_embd = h.n_embd, .n_tok = n, .outs = router});
  // The top n_expert_used, and beyond them any candidate whose predicted
  // probability is at least predict_margin of the last of those: a close
  // call is worth a prefetch. stories-moe, replayed (`sluice bench-experts
  // --predict-margin M`), recall at layers 1-3 and what the predictor alone
  // fetches at layer 3 per chosen expert: top-k alone 82/88/74%; 0.8
  // 92/97/82%, 1.54x; 0.83 91/96/81%, 1.49x; 0.85 90/95/80.5%, 1.47x; 0.9
  // 88/94/79%, 1.39x. 0.83 keeps layer 3 within both 80% recall and 1.5x on
  // the 837 steps of bench-experts and on tests/expert_prediction_test.cpp's
  // 480 (80.5%, 1.498x): a narrow window.
  const int64_t k = h.n_expert_used, c = early ? k : n_pred_candidates();
  be_.route({.logits = pred_router_->floats(), .n_tok = n, .n_expert = h.n_expert, .n_used = c,
             .renormalize = false, .ids = pred_ids_.data(), .weights = pred_weights_.data()});
  const float margin = options_.predict_margin;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = k; j < c; ++j)
      if (pred_weights_[static_cast<size_t>(t * c + j)] < margin * pred_weights_[static_cast<size_t>(t * c + k - 1)])
        pred_ids_[static_cast<size_t>(t * c + j)] = -1;
  if (hook_ && !early) emit_routing("ffn_moe_pred", pred_ids_.data(), layer, n, c);
  if (streams()) {
    distinct_experts(pred_ids_.data(), n * c, pred_unique_ids_);
    predict_to_source(layer, pred_unique_ids_);
  } else if (!early && source_ && !be_.host_visible()) {  // experts in the source's host memory: the device's copies
    distinct_experts(pred_ids_.data(), n * c, pred_unique_ids_);
    be_.prefetch_experts(layer, pred_unique_ids_, weights_.layers[static_cast<size_t>(layer)].experts,
                         /*transient=*/false);
  }
  if (dispatch_) dispatch_->predict(layer, std::span<const int32_t>(pred_ids_.data(), static_cast<size_t>(n * c)));
}

void ExpertFeed::predict_experts(int64_t layer, std::span<const int32_t> ids) {
  if (!streams() || layer >= options_.layer_end || !hp_.layer_is_moe(layer)) return;
  distinct_experts(ids.data(), static_cast<int64_t>(ids.size()), pred_unique_ids_);
  predict_to_source(layer, pred_unique_ids_);
}

Status ExpertFeed::ffn_block(const LayerStep& s) {
  const int64_t l = s.layer, n = s.n_tok;
  MoeStep moe{.router = router_->floats(), .ids = ids_.data(), .weights = weights_used_.data(), .experts = s.w.experts};
  if (!streams() && !dispatch_ && !hook_ && !options_.predict) {
    // Nothing here reads the routing before the experts run: the backend may
    // keep it on the device; it is counted once the step is over.
    if (!routed_.empty()) {
      if (n_pending_[static_cast<size_t>(l)] > 0) count_pending();  // a step that did not end_step()
      moe.ids = ids_pending_.data() + static_cast<size_t>(l) * ids_.size();
      n_pending_[static_cast<size_t>(l)] = n;
      any_pending_ = true;
    }
    moe_routed(s, moe);
    return Status();
  }
  moe_route(s, moe);
  if (hook_) emit_routing("ffn_moe_ids", ids_.data(), l, n, hp_.n_expert_used);
  count_routing(l, ids_.data(), n);
  if (dispatch_) {
    if (streams()) {  // this process's share of the chosen experts, landed
      ASSIGN_OR_RETURN(moe.experts, landed_experts(l, std::span(ids_.data(), static_cast<size_t>(n * hp_.n_expert_used)),
                                                   s.w));
    }
    // A first guess at the next routed layer's experts before this layer's
    // rows go out: the other processes' reads of theirs start ahead of the
    // rows (predict() refines it once the layer is done).
    if (options_.predict && l + 1 < options_.layer_end && hp_.layer_is_moe(l + 1))
      predict_routing(l + 1, s.x, n, /*early=*/true);
    return dispatch_->experts(s, moe);
  }
  if (!streams()) {
    moe_experts(s, moe);
    return Status();
  }
  // Streamed experts are computed one by one as they land, so the ones
  // already in memory run while the others are still reading.
  Status read_status;
  size_t n_handed = 0;
  auto next = [&]() -> int64_t {
    int64_t i = -1;
    prepare_while_waiting(l);
    if (read_status.ok()) read_status = source_->next_expert(l, &i);
    if (!read_status.ok() || i < 0) return -1;
    // Landed from disk in GGUF rows: reordered once, where it lies, for the
    // backend's fastest kernels (the same bits as rows); a later hit on the
    // same slot finds it so. Except the step's last expert in a small step:
    // no read follows it until the next step routes, so the disk would idle
    // through the reorder, which costs more than the faster kernel saves at
    // a few tokens; it is left to a later wait.
    const bool last_of_step = l == options_.layer_end - 1 && ++n_handed == unique_ids_.size();
    if (!(last_of_step && n < kReorderBreakEvenTokens)) prepare_expert(l, i);
    const int32_t e = unique_ids_[static_cast<size_t>(i)];
    if (copies_ahead()) {  // to the device now, while the others still read; the next layer's too
      be_.prefetch_experts(l, std::span(&e, 1), streamed_, /*transient=*/true);
      copy_landed_predictions();
    }
    return int64_t{e};
  };
  const FunctionRef<int64_t()> next_ref(next);
  RETURN_IF_ERROR(begin_experts(l, ids_.data(), n * hp_.n_expert_used, s.w));
  moe.experts = streamed_;
  moe.next = &next_ref;
  // A first guess at the next routed layer's experts, from the state before
  // this layer's experts are added: its reads queue behind this layer's
  // (prefetch after critical), so the disk does not idle while the last of
  // them computes. predict() refines it once the layer is done.
  if (l + 1 < options_.layer_end && hp_.layer_is_moe(l + 1)) predict_routing(l + 1, s.x, n, /*early=*/true);
  moe_experts(s, moe);
  return read_status;
}

StatusOr<std::span<const ExpertWeights>> ExpertFeed::landed_experts(int64_t layer, std::span<const int32_t> ids,
                                                                     const LayerWeights& w) {
  if (!streams()) return std::span<const ExpertWeights>(w.experts);
  RETURN_IF_ERROR(begin_experts(layer, ids.data(), static_cast<int64_t>(ids.size()), w));
  for (;;) {
    int64_t i = -1;
    prepare_while_waiting(layer);
    RETURN_IF_ERROR(source_->next_expert(layer, &i));
    if (i < 0) break;
    prepare_expert(layer, i);
  }
  return std::span<const ExpertWeights>(streamed_);
}

Status ExpertFeed::begin_experts(int64_t layer, const int32_t* ids, int64_t n_ids, const LayerWeights& w) {
  distinct_experts(ids, n_ids, unique_ids_);
  // The routing is known: the device lets go of the wrong predictions'
  // bytes before the source may reuse them (the chosen stay pinned).
  settle_ahead(ahead_layer_ == layer ? std::span<const int32_t>(unique_ids_) : std::span<const int32_t>());
  RETURN_IF_ERROR(source_->begin_experts(layer, unique_ids_, expert_ptrs_.data()));
  // Experts reordered for the backend when they first landed (prepare_expert)
  // are in the layouts it gives; the others are still GGUF rows.
  const ExpertWeights& any = w.experts[0];
  const WeightView gate_up[2] = {any.gate, any.up};
  WeightLayout gate_up_layouts[2], down_layout;
  be_.in_place_layouts(gate_up, gate_up_layouts);
  be_.in_place_layouts(std::span(&any.down, 1), &down_layout);
  for (size_t i = 0; i < unique_ids_.size(); ++i) {
    const auto e = static_cast<size_t>(unique_ids_[i]);
    ExpertWeights& x = streamed_[e];
    x = w.experts[e];  // shapes and types
    x.gate.data = expert_ptrs_[i].gate;
    x.up.data = expert_ptrs_[i].up;
    x.down.data = expert_ptrs_[i].down;
    if (expert_ptrs_[i].prepared) {
      x.gate.layout = gate_up_layouts[0];
      x.up.layout = gate_up_layouts[1];
      x.down.layout = down_layout;
    }
  }
  return Status();
}

void ExpertFeed::reorder_expert(ExpertWeights& x) {
  WeightView gate_up[2] = {x.gate, x.up};
  be_.prepare_in_place(gate_up);
  x.gate = gate_up[0];
  x.up = gate_up[1];
  be_.prepare_in_place(std::span(&x.down, 1));
}

void ExpertFeed::prepare_expert(int64_t layer, int64_t i) {
  if (!options_.repack || expert_ptrs_[static_cast<size_t>(i)].prepared) return;
  reorder_expert(streamed_[static_cast<size_t>(unique_ids_[static_cast<size_t>(i)])]);
  source_->expert_prepared(layer, i);
}

void ExpertFeed::prepare_while_waiting(int64_t layer) {
  if (!options_.repack) return;
  int64_t l = -1;
  int32_t e = -1;
  ExpertPointers p;
  while (!source_->next_expert_ready(layer) && source_->unprepared_expert(&l, &e, &p)) {
    ExpertWeights x = weights_.layers[static_cast<size_t>(l)].experts[static_cast<size_t>(e)];  // shapes and types
    x.gate.data = p.gate;
    x.up.data = p.up;
    x.down.data = p.down;
    reorder_expert(x);
    source_->unpinned_expert_prepared(l, e);
  }
}

}  // namespace sluice
