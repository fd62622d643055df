#include "model/decoder_blocks.h"

#include <cmath>

#include "base/check.h"
#include "kv/kv_store.h"

namespace sluice {

using R = TensorRole;

namespace {

// y += the step's adapters' terms for `role` (nothing without adapters).
void adapt(const LayerStep& s, TensorRole role, const float* x, float* y, int64_t n_in, int64_t n_out) {
  if (s.lora) s.lora->apply(s.be, s.layer, role, x, y, n_in, n_out);
}

// The profile's mark after an operator (nothing unprofiled).
void mark(const LayerStep& s, const char* op, OpWork work = {}) {
  if (s.profile) s.profile->mark(op, work);
}
void mark(const LayerStep& s, const char* op, std::span<const MatmulOut> mats) {
  if (s.profile) s.profile->mark(op, matmul_work(mats, s.n_tok));
}
// After the adapters' terms of a block's matmuls, when the step has any.
void mark_lora(const LayerStep& s) {
  if (s.lora) mark(s, "lora");
}

}  // namespace

void attention_block(const LayerStep& s) {
  const ModelHparams& h = s.hp;
  const LayerWeights& w = s.w;
  // The norm rides on the q/k/v dispatch (token by token before its conversion).
  const MatmulOut qkv[3] = {{w.mat(R::kAttnQ), s.q}, {w.mat(R::kAttnK), s.k}, {w.mat(R::kAttnV), s.v}};
  s.be.norm_matmul({.x = s.x, .norm = w.vec(R::kAttnNorm), .eps = h.rms_eps, .xn = s.xn, .n_embd = h.n_embd,
                    .n_tok = s.n_tok, .outs = qkv});
  mark(s, "attn norm + q/k/v", qkv);
  s.emit("attn_norm", s.layer, s.xn, s.n_tok, h.n_embd);
  adapt(s, R::kAttnQ, s.xn, s.q, h.n_embd, h.n_embd_q());
  adapt(s, R::kAttnK, s.xn, s.k, h.n_embd, h.n_embd_kv());
  adapt(s, R::kAttnV, s.xn, s.v, h.n_embd, h.n_embd_kv());
  mark_lora(s);
  s.be.qkv_store({.q = s.q, .k = s.k, .v = s.v, .bq = w.vec(R::kAttnQBias), .bk = w.vec(R::kAttnKBias),
                  .bv = w.vec(R::kAttnVBias), .q_norm = w.vec(R::kAttnQNorm), .k_norm = w.vec(R::kAttnKNorm),
                  .norm_eps = h.rms_eps, .cos_sin = s.cos_sin, .n_tok = s.n_tok, .n_head = h.n_head,
                  .n_head_kv = h.n_head_kv, .head_dim = h.head_dim, .n_rot = h.n_rot, .rope = h.rope_layout,
                  .kv = &s.kv, .layer = s.layer, .kv_rows = s.kv_rows});
  mark(s, "bias + rope + kv store");
  s.emit("q", s.layer, s.q, s.n_tok, h.n_embd_q());
  s.emit("k", s.layer, s.k, s.n_tok, h.n_embd_kv());
  s.emit("v", s.layer, s.v, s.n_tok, h.n_embd_kv());
  const int64_t window = h.layer_is_swa(s.layer) ? h.n_swa : 0;
  s.be.attention({.seqs = s.seqs, .kv = &s.kv, .layer = s.layer, .n_head = h.n_head, .n_head_kv = h.n_head_kv,
                  .head_dim = h.head_dim, .scale = h.attn_scale, .window = window, .softcap = h.attn_softcap});
  if (s.profile) {
    const StatusOr<int64_t> row = kv_row_bytes(s.kv.layout().dtype, h.n_embd_kv());
    mark(s, "attention",
         attention_work(s.seqs, h.n_head, h.head_dim, window, row.ok() ? static_cast<double>(*row) : 0.0));
  }
  s.emit("attn_out", s.layer, s.att, s.n_tok, h.n_embd_q());
  const MatmulOut wo[1] = {{w.mat(R::kAttnOutput), s.proj}};
  s.be.matmul(wo, s.att, h.n_embd_q(), s.n_tok);
  mark(s, "attn output", wo);
  adapt(s, R::kAttnOutput, s.att, s.proj, h.n_embd_q(), h.n_embd);
  mark_lora(s);
  if (const float* post = w.vec(R::kAttnPostNorm)) {
    s.be.rmsnorm(s.proj, post, h.rms_eps, s.proj, s.n_tok, h.n_embd);
    mark(s, "post-norm");
  }
  s.be.add(s.x, s.proj, s.n_tok * h.n_embd);
  mark(s, "residual add");
}

void dense_ffn_block(const LayerStep& s) {
  const ModelHparams& h = s.hp;
  const LayerWeights& w = s.w;
  // The norm rides on the gate/up dispatch and the activation on the down one.
  const MatmulOut gate_up[2] = {{w.mat(R::kFfnGate), s.gate}, {w.mat(R::kFfnUp), s.up}};
  s.be.norm_matmul({.x = s.x, .norm = w.vec(R::kFfnNorm), .eps = h.rms_eps, .xn = s.xn, .n_embd = h.n_embd,
                    .n_tok = s.n_tok, .outs = gate_up});
  mark(s, "ffn norm + gate/up", gate_up);
  adapt(s, R::kFfnGate, s.xn, s.gate, h.n_embd, h.n_ff);
  adapt(s, R::kFfnUp, s.xn, s.up, h.n_embd, h.n_ff);
  mark_lora(s);
  const MatmulOut down[1] = {{w.mat(R::kFfnDown), s.proj}};
  s.be.glu_matmul({.gate = s.gate, .up = s.up, .n_ff = h.n_ff, .n_tok = s.n_tok, .act = h.spec->act,
                   .out = down[0]});
  mark(s, "ffn act + down", down);
  adapt(s, R::kFfnDown, s.gate, s.proj, h.n_ff, h.n_embd);  // h = act(gate) * up, left in gate
  mark_lora(s);
  if (const float* post = w.vec(R::kFfnPostNorm)) {
    s.be.rmsnorm(s.proj, post, h.rms_eps, s.proj, s.n_tok, h.n_embd);
    mark(s, "post-norm");
  }
  s.be.add(s.x, s.proj, s.n_tok * h.n_embd);
  mark(s, "residual add");
}

namespace {

// The router on the FFN norm's dispatch (its weights are f32 in GGUF files).
void route_logits(const LayerStep& s, const MoeStep& m) {
  const ModelHparams& h = s.hp;
  const MatmulOut router[1] = {{s.w.mat(R::kFfnRouter), m.router}};
  s.be.norm_matmul({.x = s.x, .norm = s.w.vec(R::kFfnNorm), .eps = h.rms_eps, .xn = s.xn, .n_embd = h.n_embd,
                    .n_tok = s.n_tok, .outs = router});
  mark(s, "ffn norm + router", router);
}

// The routed FFN's FLOPs: each token's experts' three matmuls, and the shared expert's.
OpWork experts_work(const LayerStep& s) {
  const ModelHparams& h = s.hp;
  const double per_token = 6.0 * static_cast<double>(h.n_embd) *
                           static_cast<double>(h.n_expert_used * h.n_ff_expert +
                                               (s.w.has_mat(R::kFfnGateShexp) ? h.n_ff_shared : 0));
  return {.flops = per_token * static_cast<double>(s.n_tok)};
}

RouteArgs route_args(const LayerStep& s, const MoeStep& m) {
  const ModelHparams& h = s.hp;
  return {.logits = m.router, .n_tok = s.n_tok, .n_expert = h.n_expert, .n_used = h.n_expert_used,
          .renormalize = h.expert_weights_norm, .ids = m.ids, .weights = m.weights};
}

// The layer's routed FFN over s.xn; *shared holds the shared expert's views.
ExpertFfnArgs ffn_args(const LayerStep& s, const MoeStep& m, ExpertWeights* shared) {
  const ModelHparams& h = s.hp;
  const LayerWeights& w = s.w;
  *shared = {w.mat(R::kFfnGateShexp), w.mat(R::kFfnUpShexp), w.mat(R::kFfnDownShexp)};
  return {.x = s.xn, .out = s.proj, .ids = m.ids, .weights = m.weights, .n_tok = s.n_tok, .n_used = h.n_expert_used,
          .n_embd = h.n_embd, .n_ff = h.n_ff_expert, .act = h.spec->act, .experts = m.experts,
          .shared = w.has_mat(R::kFfnGateShexp) ? shared : nullptr, .n_ff_shared = h.n_ff_shared,
          .shared_gate = w.vec(R::kFfnSharedGate), .next = m.next, .layer = s.layer};
}

}  // namespace

void moe_route(const LayerStep& s, const MoeStep& m) {
  route_logits(s, m);
  s.be.route(route_args(s, m));
  mark(s, "routing top-k");
  s.emit("ffn_moe_logits", s.layer, m.router, s.n_tok, s.hp.n_expert);
}

void moe_experts(const LayerStep& s, const MoeStep& m) {
  ExpertWeights shared;
  s.be.expert_ffn(ffn_args(s, m, &shared));
  mark(s, "experts", experts_work(s));
  s.be.add(s.x, s.proj, s.n_tok * s.hp.n_embd);
  mark(s, "residual add");
}

void moe_routed(const LayerStep& s, const MoeStep& m) {
  CHECK(m.next == nullptr);
  route_logits(s, m);
  ExpertWeights shared;
  s.be.routed_ffn(route_args(s, m), ffn_args(s, m, &shared));
  mark(s, "routing + experts", experts_work(s));
  s.be.add(s.x, s.proj, s.n_tok * s.hp.n_embd);
  mark(s, "residual add");
}

}  // namespace sluice
