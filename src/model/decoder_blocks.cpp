#include "model/decoder_blocks.h"

#include <cmath>

namespace sluice {

using R = TensorRole;

void attention_block(const LayerStep& s) {
  const ModelHparams& h = s.hp;
  const LayerWeights& w = s.w;
  // The norm rides on the q/k/v dispatch (token by token before its conversion).
  const MatmulOut qkv[3] = {{w.mat(R::kAttnQ), s.q}, {w.mat(R::kAttnK), s.k}, {w.mat(R::kAttnV), s.v}};
  s.be.norm_matmul({.x = s.x, .norm = w.vec(R::kAttnNorm), .eps = h.rms_eps, .xn = s.xn, .n_embd = h.n_embd,
                    .n_tok = s.n_tok, .outs = qkv});
  s.emit("attn_norm", s.layer, s.xn, s.n_tok, h.n_embd);
  s.be.qkv_store({.q = s.q, .k = s.k, .v = s.v, .bq = w.vec(R::kAttnQBias), .bk = w.vec(R::kAttnKBias),
                  .bv = w.vec(R::kAttnVBias), .cos_sin = s.cos_sin, .n_tok = s.n_tok, .n_head = h.n_head,
                  .n_head_kv = h.n_head_kv, .head_dim = h.head_dim, .n_rot = h.n_rot, .rope = h.rope_layout,
                  .kv = &s.kv, .layer = s.layer, .kv_rows = s.kv_rows});
  s.emit("q", s.layer, s.q, s.n_tok, h.n_embd_q());
  s.emit("k", s.layer, s.k, s.n_tok, h.n_embd_kv());
  s.emit("v", s.layer, s.v, s.n_tok, h.n_embd_kv());
  s.be.attention({.seqs = s.seqs, .kv = &s.kv, .layer = s.layer, .n_head = h.n_head, .n_head_kv = h.n_head_kv,
                  .head_dim = h.head_dim, .scale = 1.0f / std::sqrt(static_cast<float>(h.head_dim))});
  s.emit("attn_out", s.layer, s.att, s.n_tok, h.n_embd_q());
  const MatmulOut wo[1] = {{w.mat(R::kAttnOutput), s.proj}};
  s.be.matmul(wo, s.att, h.n_embd_q(), s.n_tok);
  s.be.add(s.x, s.proj, s.n_tok * h.n_embd);
}

void dense_ffn_block(const LayerStep& s) {
  const ModelHparams& h = s.hp;
  const LayerWeights& w = s.w;
  // The norm rides on the gate/up dispatch and the activation on the down one.
  const MatmulOut gate_up[2] = {{w.mat(R::kFfnGate), s.gate}, {w.mat(R::kFfnUp), s.up}};
  s.be.norm_matmul({.x = s.x, .norm = w.vec(R::kFfnNorm), .eps = h.rms_eps, .xn = s.xn, .n_embd = h.n_embd,
                    .n_tok = s.n_tok, .outs = gate_up});
  s.be.glu_matmul({.gate = s.gate, .up = s.up, .n_ff = h.n_ff, .n_tok = s.n_tok, .act = h.spec->act,
                   .out = {w.mat(R::kFfnDown), s.proj}});
  s.be.add(s.x, s.proj, s.n_tok * h.n_embd);
}

}  // namespace sluice
