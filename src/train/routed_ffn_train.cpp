#include "train/routed_ffn_train.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "base/check.h"
#include "model/model.h"
#include "train/base_matmul.h"

namespace sluice {
namespace {

using R = TensorRole;

}  // namespace

RoutedFfnTrain::RoutedFfnTrain(Backend& be, TrainOps& ops, const ModelHparams& hp, int64_t max_tokens, VecFn vec)
    : be_(be), ops_(ops), hp_(hp), max_tokens_(max_tokens), vec_(std::move(vec)) {
  CHECK(hp.is_moe());
  const int64_t T = max_tokens, k = hp.n_expert_used, E = hp.n_embd;
  auto floats = [&](int64_t n) { return be_.alloc(static_cast<size_t>(n) * sizeof(float)); };
  logits_ = floats(T * hp.n_expert);
  dlogits_ = floats(T * hp.n_expert);
  for (auto* b : {&xg_, &yg_, &dyg_}) *b = floats(T * k * E);
  for (auto* b : {&g_, &u_, &h_, &dg_, &du_, &dh_}) *b = floats(T * k * hp.n_ff_expert);
  if (hp.n_ff_shared > 0) {
    for (auto* b : {&gs_, &us_, &hs_, &dgs_, &dus_, &dhs_}) *b = floats(T * hp.n_ff_shared);
    for (auto* b : {&ys_, &dys_}) *b = floats(T * E);
    sg_ = floats(T);
  }
  stride_ = T * k;
  w_.resize(static_cast<size_t>(stride_));
  dw_.resize(w_.size());
  guess_ids_.resize(w_.size());
  if (!be.host_visible()) {
    host_logits_.resize(static_cast<size_t>(T * hp.n_expert));
    host_dlogits_.resize(host_logits_.size());
  }
  start_.resize(static_cast<size_t>(hp.n_expert + 1));
  fill_.resize(static_cast<size_t>(hp.n_expert));
  row_.resize(w_.size());
  token_.resize(w_.size());
  layer_ids_.resize(static_cast<size_t>(hp.n_layer) * w_.size());
  layer_n_.assign(static_cast<size_t>(hp.n_layer), 0);
  prefetched_.assign(static_cast<size_t>(hp.n_layer), 0);
}

void RoutedFfnTrain::new_pass() {
  std::fill(layer_n_.begin(), layer_n_.end(), 0);
  std::fill(prefetched_.begin(), prefetched_.end(), 0);
}

void RoutedFfnTrain::prefetch(Model& model, int64_t l) {
  if (l < 0 || layer_n_[static_cast<size_t>(l)] == 0 || prefetched_[static_cast<size_t>(l)]) return;
  prefetched_[static_cast<size_t>(l)] = 1;
  const size_t n_ids = static_cast<size_t>(layer_n_[static_cast<size_t>(l)] * hp_.n_expert_used);
  model.predict_experts(l, std::span(layer_ids_.data() + l * stride_, n_ids));
}

RoutedFfnTrain::~RoutedFfnTrain() = default;

void RoutedFfnTrain::group(int64_t n) {
  const int64_t k = hp_.n_expert_used;
  std::fill(start_.begin(), start_.end(), 0);
  for (int64_t i = 0; i < n * k; ++i) ++start_[static_cast<size_t>(ids_[i]) + 1];
  for (size_t e = 1; e < start_.size(); ++e) start_[e] += start_[e - 1];
  // Each expert's rows from its start, in (t, j) order: ascending tokens.
  std::copy(start_.begin(), start_.end() - 1, fill_.begin());
  for (int64_t i = 0; i < n * k; ++i) {
    const int64_t r = fill_[static_cast<size_t>(ids_[i])]++;
    row_[static_cast<size_t>(i)] = static_cast<int32_t>(r);
    token_[static_cast<size_t>(r)] = static_cast<int32_t>(i / k);
  }
}

void RoutedFfnTrain::guess(Model& model, int64_t l, const float* m, int64_t n) {
  const LayerWeightSource* source = model.weight_source();
  if (source == nullptr || !source->streams_experts() || l < 0 || !hp_.layer_is_moe(l)) return;
  // Streamed experts keep every layer's dense tensors resident: l's router and norm are bound.
  const LayerWeights& w = model.weights().layers[static_cast<size_t>(l)];
  const ModelHparams& h = hp_;
  // Scratch free in a forward: dlogits_ is the backward's, xg_ is written by the gather next.
  const MatmulOut router[1] = {{w.mat(R::kFfnRouter), dlogits_->floats()}};
  be_.norm_matmul({.x = m, .norm = w.vec(R::kFfnNorm), .eps = h.rms_eps, .xn = xg_->floats(), .n_embd = h.n_embd,
                   .n_tok = n, .outs = router});
  be_.route({.logits = dlogits_->floats(), .n_tok = n, .n_expert = h.n_expert, .n_used = h.n_expert_used,
             .renormalize = false, .ids = guess_ids_.data(), .weights = dw_.data()});
  model.predict_experts(l, std::span(guess_ids_.data(), static_cast<size_t>(n * h.n_expert_used)));
}

Status RoutedFfnTrain::forward(Model& model, int64_t l, const LayerWeights& w, const float* m, float* xn, float* out,
                               int64_t n, int64_t then, int64_t guess_layer) {
  CHECK(n <= max_tokens_);
  const ModelHparams& h = hp_;
  const int64_t E = h.n_embd, F = h.n_ff_expert, k = h.n_expert_used;
  // The router through the Backend's matmul (not base_matmul): the experts
  // chosen in training are the ones inference chooses, bit for bit.
  const MatmulOut router[1] = {{w.mat(R::kFfnRouter), logits_->floats()}};
  be_.norm_matmul({.x = m, .norm = w.vec(R::kFfnNorm), .eps = h.rms_eps, .xn = xn, .n_embd = E, .n_tok = n,
                   .outs = router});
  ids_ = layer_ids_.data() + l * stride_;  // kept for prefetch()
  be_.route({.logits = logits_->floats(), .n_tok = n, .n_expert = h.n_expert, .n_used = k,
             .renormalize = h.expert_weights_norm, .ids = ids_, .weights = w_.data()});
  layer_n_[static_cast<size_t>(l)] = n;
  ASSIGN_OR_RETURN(experts_, model.landed_experts(l, std::span(ids_, static_cast<size_t>(n * k))));
  prefetch(model, then);
  guess(model, guess_layer, m, n);
  group(n);
  float *xg = xg_->floats(), *yg = yg_->floats(), *g = g_->floats(), *u = u_->floats(), *hh = h_->floats();
  ops_.gather_rows({.src = xn, .idx = token_.data(), .dst = xg, .n_rows = n * k, .n = E});
  for (int64_t e = 0; e < h.n_expert; ++e) {
    const int64_t r0 = start_[static_cast<size_t>(e)], c = start_[static_cast<size_t>(e) + 1] - r0;
    if (c == 0) continue;
    const ExpertWeights& x = experts_[static_cast<size_t>(e)];
    const MatmulOut gate_up[2] = {{x.gate, g + r0 * F}, {x.up, u + r0 * F}};
    base_matmul(be_, ops_, gate_up, xg + r0 * E, E, c);
  }
  ops_.glu({.g = g, .u = u, .h = hh, .n_tok = n * k, .n_ff = F, .act = h.spec->act});
  for (int64_t e = 0; e < h.n_expert; ++e) {
    const int64_t r0 = start_[static_cast<size_t>(e)], c = start_[static_cast<size_t>(e) + 1] - r0;
    if (c == 0) continue;
    const MatmulOut down[1] = {{experts_[static_cast<size_t>(e)].down, yg + r0 * E}};
    base_matmul(be_, ops_, down, hh + r0 * F, F, c);
  }
  // out[t] = sum over slots j, in slot order, of w[t][j] y[t][j].
  ops_.slot_sum({.y = yg, .row = row_.data(), .w = w_.data(), .out = out, .n_tok = n, .k = k, .n = E});
  if (w.has_mat(R::kFfnGateShexp)) shared_forward(w, xn, out, n);
  return Status();
}

void RoutedFfnTrain::shared_forward(const LayerWeights& w, const float* xn, float* out, int64_t n) {
  const ModelHparams& h = hp_;
  const int64_t E = h.n_embd, F = h.n_ff_shared;
  const MatmulOut gate_up[2] = {{w.mat(R::kFfnGateShexp), gs_->floats()}, {w.mat(R::kFfnUpShexp), us_->floats()}};
  base_matmul(be_, ops_, gate_up, xn, E, n);
  ops_.glu({.g = gs_->floats(), .u = us_->floats(), .h = hs_->floats(), .n_tok = n, .n_ff = F, .act = h.spec->act});
  const MatmulOut down[1] = {{w.mat(R::kFfnDownShexp), ys_->floats()}};
  base_matmul(be_, ops_, down, hs_->floats(), F, n);
  ops_.gated_add({.x = xn, .gate = vec_(w.vec(R::kFfnSharedGate), E), .y = ys_->floats(), .out = out,
                  .s = sg_->floats(), .n_tok = n, .n = E});
}

void RoutedFfnTrain::routing_backward(int64_t n) {
  const int64_t X = hp_.n_expert, k = hp_.n_expert_used;
  const bool host = be_.host_visible();
  const float* logits = logits_->floats();  // read only without renormalization
  if (!host && !hp_.expert_weights_norm) {
    be_.read_floats(logits, host_logits_.data(), n * X);
    logits = host_logits_.data();
  }
  float* dl = host ? dlogits_->floats() : host_dlogits_.data();
  std::fill(dl, dl + n * X, 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    const float* w = w_.data() + t * k;
    const float* dw = dw_.data() + t * k;
    const int32_t* ids = ids_ + t * k;
    double s = 0;  // sum_j w_j dw_j
    for (int64_t j = 0; j < k; ++j) s += static_cast<double>(w[j]) * dw[j];
    float* d = dl + t * X;
    if (hp_.expert_weights_norm) {
      // w_j = softmax over the k chosen logits: d l_{e_j} = w_j (dw_j - s); the others 0.
      for (int64_t j = 0; j < k; ++j) d[ids[j]] = static_cast<float>(w[j] * (dw[j] - s));
      continue;
    }
    // w_j = p_{e_j}, p = softmax over every logit: d l_i = p_i (dp_i - s), dp_i = dw_j at i = e_j.
    const float* lg = logits + t * X;
    const float mx = *std::max_element(lg, lg + X);
    double sum = 0;
    for (int64_t e = 0; e < X; ++e) sum += std::exp(static_cast<double>(lg[e] - mx));
    for (int64_t e = 0; e < X; ++e) d[e] = static_cast<float>(std::exp(static_cast<double>(lg[e] - mx)) / sum * -s);
    for (int64_t j = 0; j < k; ++j) {
      const double p = std::exp(static_cast<double>(lg[ids[j]] - mx)) / sum;
      d[ids[j]] = static_cast<float>(p * (dw[j] - s));
    }
  }
  if (!host) be_.write_floats(dl, dlogits_->floats(), n * X);
}

void RoutedFfnTrain::backward(const LayerWeights& w, const float* dout, float* dxn, int64_t n) {
  const ModelHparams& h = hp_;
  const int64_t E = h.n_embd, F = h.n_ff_expert, k = h.n_expert_used;
  const float* yg = yg_->floats();
  float *dyg = dyg_->floats(), *dh = dh_->floats(), *dg = dg_->floats(), *du = du_->floats();
  // The routing weights' gradient, and each grouped row's dy = w dout.
  ops_.slot_sum_backward({.fwd = {.y = yg, .row = row_.data(), .w = w_.data(), .n_tok = n, .k = k, .n = E},
                          .dout = dout, .dy = dyg, .dw = dw_.data()});
  for (int64_t e = 0; e < h.n_expert; ++e) {
    const int64_t r0 = start_[static_cast<size_t>(e)], c = start_[static_cast<size_t>(e) + 1] - r0;
    if (c == 0) continue;
    ops_.matmul_t({.w = experts_[static_cast<size_t>(e)].down, .dy = dyg + r0 * E, .dx = dh + r0 * F, .n_tok = c});
  }
  ops_.glu_backward({.g = g_->floats(), .u = u_->floats(), .dh = dh, .dg = dg, .du = du, .n_tok = n * k, .n_ff = F,
                     .act = h.spec->act});
  float* dxg = dyg;  // dy is spent: the grouped rows' dxn
  for (int64_t e = 0; e < h.n_expert; ++e) {
    const int64_t r0 = start_[static_cast<size_t>(e)], c = start_[static_cast<size_t>(e) + 1] - r0;
    if (c == 0) continue;
    const ExpertWeights& x = experts_[static_cast<size_t>(e)];
    ops_.matmul_t({.w = x.gate, .dy = dg + r0 * F, .dx = dxg + r0 * E, .n_tok = c});
    ops_.matmul_t({.w = x.up, .dy = du + r0 * F, .dx = dxg + r0 * E, .n_tok = c, .accumulate = true});
  }
  ops_.slot_sum({.y = dxg, .row = row_.data(), .out = dxn, .n_tok = n, .k = k, .n = E});
  routing_backward(n);
  ops_.matmul_t({.w = w.mat(R::kFfnRouter), .dy = dlogits_->floats(), .dx = dxn, .n_tok = n, .accumulate = true});
  if (w.has_mat(R::kFfnGateShexp)) shared_backward(w, dout, dxn, n);
}

void RoutedFfnTrain::shared_backward(const LayerWeights& w, const float* dout, float* dxn, int64_t n) {
  const ModelHparams& h = hp_;
  const int64_t E = h.n_embd, F = h.n_ff_shared;
  // dys = g dout, and through the gate g = sigmoid(gate . xn): dxn += (dout . ys) g (1 - g) gate.
  ops_.gated_add_backward({.fwd = {.gate = vec_(w.vec(R::kFfnSharedGate), E), .y = ys_->floats(), .s = sg_->floats(),
                                   .n_tok = n, .n = E},
                           .dout = dout, .dy = dys_->floats(), .dx = dxn});
  ops_.matmul_t({.w = w.mat(R::kFfnDownShexp), .dy = dys_->floats(), .dx = dhs_->floats(), .n_tok = n});
  ops_.glu_backward({.g = gs_->floats(), .u = us_->floats(), .dh = dhs_->floats(), .dg = dgs_->floats(),
                     .du = dus_->floats(), .n_tok = n, .n_ff = F, .act = h.spec->act});
  ops_.matmul_t({.w = w.mat(R::kFfnGateShexp), .dy = dgs_->floats(), .dx = dxn, .n_tok = n, .accumulate = true});
  ops_.matmul_t({.w = w.mat(R::kFfnUpShexp), .dy = dus_->floats(), .dx = dxn, .n_tok = n, .accumulate = true});
}

}  // namespace sluice
