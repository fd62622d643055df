#include "model/decoder_blocks.h"

#include <cmath>

#include "base/check.h"

namespace sluice {

using R = TensorRole;

namespace {

// y += the step's adapters' terms for `role` (nothing without adapters).
void adapt(const LayerStep& s, TensorRole role, const float* x, float* y, int64_t n_in, int64_t n_out) {
  if (s.lora) s.lora->apply(s.be, s.layer, role, x, y, n_in, n_out);
}

}  // namespace

void attention_block(const LayerStep& s) {
  const ModelHparams& h = s.hp;
  const LayerWeights& w = s.w;
  // The norm rides on the q/k/v dispatch (token by token before its conversion).
  const MatmulOut qkv[3] = {{w.mat(R::kAttnQ), s.q}, {w.mat(R::kAttnK), s.k}, {w.mat(R::kAttnV), s.v}};
  s.be.norm_matmul({.x = s.x, .norm = w.vec(R::kAttnNorm), .eps = h.rms_eps, .xn = s.xn, .n_embd = h.n_embd,
                    .n_tok = s.n_tok, .outs = qkv});
  s.emit("attn_norm", s.layer, s.xn, s.n_tok, h.n_embd);
  adapt(s, R::kAttnQ, s.xn, s.q, h.n_embd, h.n_embd_q());
  adapt(s, R::kAttnK, s.xn, s.k, h.n_embd, h.n_embd_kv());
  adapt(s, R::kAttnV, s.xn, s.v, h.n_embd, h.n_embd_kv());
  s.be.qkv_store({.q = s.q, .k = s.k, .v = s.v, .bq = w.vec(R::kAttnQBias), .bk = w.vec(R::kAttnKBias),
                  .bv = w.vec(R::kAttnVBias), .q_norm = w.vec(R::kAttnQNorm), .k_norm = w.vec(R::kAttnKNorm),
                  .norm_eps = h.rms_eps, .cos_sin = s.cos_sin, .n_tok = s.n_tok, .n_head = h.n_head,
                  .n_head_kv = h.n_head_kv, .head_dim = h.head_dim, .n_rot = h.n_rot, .rope = h.rope_layout,
                  .kv = &s.kv, .layer = s.layer, .kv_rows = s.kv_rows});
  s.emit("q", s.layer, s.q, s.n_tok, h.n_embd_q());
  s.emit("k", s.layer, s.k, s.n_tok, h.n_embd_kv());
  s.emit("v", s.layer, s.v, s.n_tok, h.n_embd_kv());
  s.be.attention({.seqs = s.seqs, .kv = &s.kv, .layer = s.layer, .n_head = h.n_head, .n_head_kv = h.n_head_kv,
                  .head_dim = h.head_dim, .scale = h.attn_scale,
                  .window = h.layer_is_swa(s.layer) ? h.n_swa : 0, .softcap = h.attn_softcap});
  s.emit("attn_out", s.layer, s.att, s.n_tok, h.n_embd_q());
  const MatmulOut wo[1] = {{w.mat(R::kAttnOutput), s.proj}};
  s.be.matmul(wo, s.att, h.n_embd_q(), s.n_tok);
  adapt(s, R::kAttnOutput, s.att, s.proj, h.n_embd_q(), h.n_embd);
  if (const float* post = w.vec(R::kAttnPostNorm)) s.be.rmsnorm(s.proj, post, h.rms_eps, s.proj, s.n_tok, h.n_embd);
  s.be.add(s.x, s.proj, s.n_tok * h.n_embd);
}

void dense_ffn_block(const LayerStep& s) {
  const ModelHparams& h = s.hp;
  const LayerWeights& w = s.w;
  // The norm rides on the gate/up dispatch and the activation on the down one.
  const MatmulOut gate_up[2] = {{w.mat(R::kFfnGate), s.gate}, {w.mat(R::kFfnUp), s.up}};
  s.be.norm_matmul({.x = s.x, .norm = w.vec(R::kFfnNorm), .eps = h.rms_eps, .xn = s.xn, .n_embd = h.n_embd,
                    .n_tok = s.n_tok, .outs = gate_up});
  adapt(s, R::kFfnGate, s.xn, s.gate, h.n_embd, h.n_ff);
  adapt(s, R::kFfnUp, s.xn, s.up, h.n_embd, h.n_ff);
  s.be.glu_matmul({.gate = s.gate, .up = s.up, .n_ff = h.n_ff, .n_tok = s.n_tok, .act = h.spec->act,
                   .out = {w.mat(R::kFfnDown), s.proj}});
  adapt(s, R::kFfnDown, s.gate, s.proj, h.n_ff, h.n_embd);  // h = act(gate) * up, left in gate
  if (const float* post = w.vec(R::kFfnPostNorm)) s.be.rmsnorm(s.proj, post, h.rms_eps, s.proj, s.n_tok, h.n_embd);
  s.be.add(s.x, s.proj, s.n_tok * h.n_embd);
}

namespace {

// The router on the FFN norm's dispatch (its weights are f32 in GGUF files).
void route_logits(const LayerStep& s, const MoeStep& m) {
  const ModelHparams& h = s.hp;
  const MatmulOut router[1] = {{s.w.mat(R::kFfnRouter), m.router}};
  s.be.norm_matmul({.x = s.x, .norm = s.w.vec(R::kFfnNorm), .eps = h.rms_eps, .xn = s.xn, .n_embd = h.n_embd,
                    .n_tok = s.n_tok, .outs = router});
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
  s.emit("ffn_moe_logits", s.layer, m.router, s.n_tok, s.hp.n_expert);
}

void moe_experts(const LayerStep& s, const MoeStep& m) {
  ExpertWeights shared;
  s.be.expert_ffn(ffn_args(s, m, &shared));
  s.be.add(s.x, s.proj, s.n_tok * s.hp.n_embd);
}

void moe_routed(const LayerStep& s, const MoeStep& m) {
  CHECK(m.next == nullptr);
  route_logits(s, m);
  ExpertWeights shared;
  s.be.routed_ffn(route_args(s, m), ffn_args(s, m, &shared));
  s.be.add(s.x, s.proj, s.n_tok * s.hp.n_embd);
}

}  // namespace sluice
