#include "train/train_step.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "base/check.h"
#include "model/weight_source.h"
#include "train/base_matmul.h"

namespace sluice {
namespace {

using R = TensorRole;

// The matrices the training forward adapts, in the order of their u rows.
constexpr R kAdaptable[] = {R::kAttnQ, R::kAttnK, R::kAttnV, R::kAttnOutput, R::kFfnGate, R::kFfnUp, R::kFfnDown};

int adaptable_index(R role) {
  for (int i = 0; i < 7; ++i) {
    if (kAdaptable[i] == role) return i;
  }
  return -1;
}

}  // namespace

int64_t TrainBatch::n_counted() const {
  return std::count_if(targets.begin(), targets.end(), [](int32_t t) { return t >= 0; });
}

Status check_trainable(const Model& model) {
  const ModelHparams& h = model.hparams();
  const ArchSpec& spec = model.arch();
  auto refuse = [&](const char* what) {
    return unimplemented("fine-tuning {} models is not supported yet: {}", h.arch, what);
  };
  if (spec.norm != NormKind::kRms) return refuse("a norm other than RMSNorm");
  if (spec.qk_norm) return refuse("per-head q/k norms");
  if (h.final_softcap > 0.0f) return refuse("soft-capped output logits");
  if (h.rope_freq_base_swa > 0.0f) return refuse("layers with a RoPE of their own");
  for (const LayerWeights& w : model.weights().layers) {
    if (w.vec(R::kAttnPostNorm) || w.vec(R::kFfnPostNorm)) return refuse("post-norms");
  }
  return Status();
}

TrainStep::TrainStep(Model& model, LoraParams& params, const TrainStepOptions& options)
    : model_(model), params_(params), opt_(options), be_(model.backend()), ops_(*model.backend().train_ops()),
      forward_order_(forward_schedule(model.hparams().n_layer)),
      train_order_(training_schedule(model.hparams().n_layer)) {}

TrainStep::~TrainStep() = default;

StatusOr<std::unique_ptr<TrainStep>> TrainStep::create(Model& model, LoraParams& params,
                                                       const TrainStepOptions& options) {
  RETURN_IF_ERROR(check_trainable(model));
  Backend& be = model.backend();
  TrainOps* ops = be.train_ops();
  if (ops == nullptr) return unimplemented("the {} backend has no training operators", be.name());
  if (!be.supports(Op::kLora, {})) return unimplemented("the {} backend has no LoRA operator", be.name());
  if (options.max_tokens <= 0 || options.max_seq <= 0 || options.max_seq > options.max_tokens) {
    return invalid_argument("a micro-batch needs 0 < max_seq <= max_tokens, got max_seq {} and max_tokens {}",
                            options.max_seq, options.max_tokens);
  }
  for (const LoraSlot& s : params.slots()) {
    if (adaptable_index(s.role) < 0) {
      return unimplemented("training an adapter on {} is not supported (targets: attn_q, attn_k, attn_v, "
                           "attn_output, ffn_gate, ffn_up, ffn_down)", s.base_name);
    }
    if (s.layer < 0 || s.layer >= model.hparams().n_layer) {
      return invalid_argument("the adapter's {} is past the model's {} layers", s.base_name, model.hparams().n_layer);
    }
  }
  // The frozen matrices' types for matmul_t (streamed layers carry their type and layout already).
  const ModelWeights& mw = model.weights();
  auto check_t = [&](const WeightView& w, const char* what) -> Status {
    if (w.n_out == 0 || ops->supports_matmul_t(w.type, w.layout)) return Status();
    return unimplemented("the {} backend cannot take gradients through {} matrices of type {}{}", be.name(), what,
                         dtype_name(w.type), w.layout == WeightLayout::kRows ? "" : " (repacked)");
  };
  RETURN_IF_ERROR(check_t(mw.output, "output"));
  for (const LayerWeights& w : mw.layers) {
    for (R r : kAdaptable) RETURN_IF_ERROR(check_t(w.mat(r), tensor_role_name(r)));
    for (R r : {R::kFfnRouter, R::kFfnGateShexp, R::kFfnUpShexp, R::kFfnDownShexp})
      RETURN_IF_ERROR(check_t(w.mat(r), tensor_role_name(r)));
    // Resident experts (streamed ones are read in GGUF rows, as the stacked tensor's type).
    for (const ExpertWeights& x : w.experts) {
      for (const WeightView* v : {&x.gate, &x.up, &x.down}) RETURN_IF_ERROR(check_t(*v, "expert"));
    }
  }
  std::unique_ptr<TrainStep> st(new TrainStep(model, params, options));
  st->plan_buffers();
  return st;
}

void TrainStep::plan_buffers() {
  const ModelHparams& h = model_.hparams();
  const int64_t T = opt_.max_tokens;
  auto floats = [&](int64_t n) { return be_.alloc(static_cast<size_t>(T * n) * sizeof(float)); };
  xs_ = floats((h.n_layer + 1) * h.n_embd);
  // The intermediates (a set a layer when kept), then the scratch and the
  // gradients, by row width.
  n_sets_ = opt_.keep_activations ? h.n_layer : 1;
  acts_ = be_.alloc(static_cast<size_t>(n_sets_) * act_set_floats(h, T, params_.max_rank()) * sizeof(float));
  for (auto* b : {&proj_, &dx_, &dn_}) *b = floats(h.n_embd);
  for (auto* b : {&dq_, &datt_}) *b = floats(h.n_embd_q());
  for (auto* b : {&dk_, &dv_}) *b = floats(h.n_embd_kv());
  for (auto* b : {&dh_, &dg_, &du_}) *b = floats(h.n_ff);
  cos_sin_ = floats(h.n_rot);
  // Logits a chunk of rows at a time, and the output head read again for
  // each chunk (forward and back): about 32 MiB of them in host memory; on a
  // device 256 MiB, so that at a 128K vocabulary a chunk is ~500 rows, where
  // the GPU's head GEMMs are no longer bound by reading the head (at 65 rows
  // they read an 8B model's 1 GB BF16 head 32 times a 2048-token step).
  const int64_t logit_floats = be_.host_visible() ? int64_t{8} << 20 : int64_t{64} << 20;
  logits_chunk_ = std::clamp<int64_t>(logit_floats / std::max<int64_t>(1, h.n_vocab), 1, T);
  logits_ = be_.alloc(static_cast<size_t>(logits_chunk_ * h.n_vocab) * sizeof(float));
  positions_.resize(static_cast<size_t>(T));
  if (!be_.host_visible()) zeros_ = floats(h.n_embd);  // alloc() zero-fills: a device-side copy, not a host upload
  if (h.is_moe()) {
    routed_ = std::make_unique<RoutedFfnTrain>(be_, ops_, h, T,
                                               [this](const float* host, int64_t n) { return vec(host, n); });
  }
  loss_.resize(static_cast<size_t>(T));
  const int64_t n_in_max = std::max({h.n_embd, h.n_ff, h.n_embd_q(), h.n_ff_expert, h.n_ff_shared});
  be_.reserve({.n_tok = T, .n_in_max = n_in_max, .n_ctx = opt_.max_seq, .n_head = h.n_head,
               .n_head_kv = h.n_head_kv, .head_dim = h.head_dim, .max_seqs = T, .n_expert = h.n_expert,
               .n_used = h.n_expert_used, .n_ff_expert = h.n_ff_expert, .n_ff_shared = h.n_ff_shared,
               .n_embd = h.n_embd});
  ops_.reserve({.n_tok = T, .n_ctx = opt_.max_seq, .n_head = h.n_head, .head_dim = h.head_dim,
                .n_in_max = std::max(n_in_max, h.n_vocab)});
}

Status TrainStep::check_batch(const TrainBatch& b) const {
  const auto n = static_cast<int64_t>(b.tokens.size());
  if (n == 0) return invalid_argument("an empty micro-batch");
  if (n > opt_.max_tokens) return invalid_argument("a micro-batch of {} tokens, more than {}", n, opt_.max_tokens);
  if (b.targets.size() != b.tokens.size()) return invalid_argument("targets and tokens differ in length");
  int64_t next = 0;
  for (const TrainSeq& s : b.seqs) {
    if (s.tok0 != next || s.n_tok <= 0 || s.n_tok > opt_.max_seq) {
      return invalid_argument("sequence rows {}..{} do not follow on from {} or exceed {} tokens", s.tok0,
                              s.tok0 + s.n_tok, next, opt_.max_seq);
    }
    next += s.n_tok;
  }
  if (next != n) return invalid_argument("the sequences cover {} of {} tokens", next, n);
  const int64_t n_vocab = model_.hparams().n_vocab;
  for (int64_t i = 0; i < n; ++i) {
    if (b.tokens[i] < 0 || b.tokens[i] >= n_vocab || b.targets[i] >= n_vocab) {
      return invalid_argument("token {} at {} is outside the vocabulary of {}", b.tokens[i], i, n_vocab);
    }
  }
  return Status();
}

const float* TrainStep::vec(const float* host, int64_t n) {
  if (host == nullptr || be_.host_visible()) return host;
  std::unique_ptr<Buffer>& b = vecs_[host];
  if (!b) {  // first use: the vector's copy in a buffer of the backend
    b = be_.alloc(static_cast<size_t>(n) * sizeof(float));
    be_.write_floats(host, b->floats(), n);
  }
  return b->floats();
}

void TrainStep::zero(float* dst, int64_t n) {
  if (be_.host_visible()) {
    std::memset(dst, 0, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  CHECK(n <= opt_.max_tokens * model_.hparams().n_embd);  // zeros_'s size
  be_.copy_floats(zeros_->floats(), dst, n);
}

namespace {

// One layer's intermediates, in TrainStep::Acts' order: the floats a token of
// each takes.
std::array<int64_t, 12> act_widths(const ModelHparams& h, int64_t max_rank) {
  const int64_t E = h.n_embd, Eq = h.n_embd_q(), Ekv = h.n_embd_kv(), F = h.n_ff;
  return {E, E, E, Eq, Eq, Ekv, Ekv, h.n_head, F, F, F, 7 * std::max<int64_t>(1, max_rank)};
}

// Floats of one of them at max_tokens tokens, rounded up so that each starts
// 256 bytes after the one before (the kernels' vector loads stay aligned).
int64_t act_floats(int64_t width, int64_t max_tokens) { return (width * max_tokens + 63) / 64 * 64; }

}  // namespace

int64_t TrainStep::act_set_floats(const ModelHparams& h, int64_t max_tokens, int64_t max_rank) {
  int64_t n = 0;
  for (const int64_t w : act_widths(h, max_rank)) n += act_floats(w, max_tokens);
  return n;
}

uint64_t TrainStep::kept_activation_bytes(const ModelHparams& h, int64_t max_tokens, int64_t max_rank) {
  return static_cast<uint64_t>(std::max<int64_t>(0, h.n_layer - 1) * act_set_floats(h, max_tokens, max_rank)) *
         sizeof(float);
}

TrainStep::Acts TrainStep::acts(int64_t l) const {
  const int64_t T = opt_.max_tokens, rank = params_.max_rank();
  float* p = acts_->floats() + (n_sets_ > 1 ? l : 0) * act_set_floats(model_.hparams(), T, rank);
  float* at[12];
  const std::array<int64_t, 12> widths = act_widths(model_.hparams(), rank);
  for (size_t i = 0; i < widths.size(); ++i) {
    at[i] = p;
    p += act_floats(widths[i], T);
  }
  return Acts{.n1 = at[0], .m = at[1], .n2 = at[2], .q = at[3], .att = at[4], .k = at[5], .v = at[6],
              .lse = at[7], .g = at[8], .u = at[9], .h = at[10], .lora_u = at[11]};
}

float* TrainStep::u_of(int64_t l, R role) {
  return acts(l).lora_u + adaptable_index(role) * opt_.max_tokens * std::max<int64_t>(1, params_.max_rank());
}

void TrainStep::lora_forward(int64_t l, R role, const float* x, float* y, int64_t n_in, int64_t n_out, int64_t n) {
  const LoraSlot* s = params_.find(l, role);
  if (s == nullptr) return;
  const LoraSegment seg{.tok0 = 0, .n_tok = n, .a = params_.a(*s), .b = params_.b(*s), .rank = s->rank,
                        .scale = s->scale};
  be_.lora({.x = x, .y = y, .n_in = n_in, .n_out = n_out, .segs = {&seg, 1}, .u = u_of(l, role),
            .u_stride = s->rank});
}

void TrainStep::lora_backward(int64_t l, R role, const float* x, const float* dy, float* dx, int64_t n) {
  const LoraSlot* s = params_.find(l, role);
  if (s == nullptr) return;
  ops_.lora_backward({.x = x, .u = u_of(l, role), .dy = dy, .a = params_.a(*s), .b = params_.b(*s),
                      .da = params_.grad_a(*s), .db = params_.grad_b(*s), .dx = dx, .n_tok = n, .n_in = s->n_in,
                      .n_out = s->n_out, .rank = s->rank, .scale = s->scale});
}

Status TrainStep::layer_forward(int64_t l, const LayerWeights& w, const float* x_in, float* x_out, int64_t n) {
  const ModelHparams& h = model_.hparams();
  const int64_t E = h.n_embd, Eq = h.n_embd_q(), Ekv = h.n_embd_kv(), F = h.n_ff;
  const Acts a = acts(l);
  float *n1 = a.n1, *q = a.q, *k = a.k, *v = a.v;
  const MatmulOut qkv[3] = {{w.mat(R::kAttnQ), q}, {w.mat(R::kAttnK), k}, {w.mat(R::kAttnV), v}};
  base_norm_matmul(be_, ops_, {.x = x_in, .norm = w.vec(R::kAttnNorm), .eps = h.rms_eps, .xn = n1, .n_embd = E,
                               .n_tok = n, .outs = qkv});
  lora_forward(l, R::kAttnQ, n1, q, E, Eq, n);
  lora_forward(l, R::kAttnK, n1, k, E, Ekv, n);
  lora_forward(l, R::kAttnV, n1, v, E, Ekv, n);
  // Biases (qwen2): frozen, no gradient of their own; one call a bias over every row.
  const std::pair<const float*, std::pair<float*, int64_t>> biases[3] = {
      {w.vec(R::kAttnQBias), {q, Eq}}, {w.vec(R::kAttnKBias), {k, Ekv}}, {w.vec(R::kAttnVBias), {v, Ekv}}};
  for (const auto& [bias, dst] : biases) {
    if (bias != nullptr) ops_.add_rows({.x = dst.first, .v = vec(bias, dst.second), .n_tok = n, .n = dst.second});
  }
  RopeArgs rope{.x = q, .cos_sin = cos_sin_->floats(), .n_tok = n, .n_head = h.n_head, .head_dim = h.head_dim,
                .n_rot = h.n_rot, .layout = h.rope_layout};
  ops_.rope(rope);
  rope.x = k;
  rope.n_head = h.n_head_kv;
  ops_.rope(rope);
  ops_.attention({.q = q, .k = k, .v = v, .out = a.att, .lse = a.lse, .seqs = seqs_,
                  .n_head = h.n_head, .n_head_kv = h.n_head_kv, .head_dim = h.head_dim, .scale = h.attn_scale,
                  .window = h.layer_is_swa(l) ? h.n_swa : 0, .softcap = h.attn_softcap});
  float* proj = proj_->floats();
  const MatmulOut wo[1] = {{w.mat(R::kAttnOutput), proj}};
  base_matmul(be_, ops_, wo, a.att, Eq, n);
  lora_forward(l, R::kAttnOutput, a.att, proj, Eq, E, n);
  float* m = a.m;
  be_.copy_floats(x_in, m, n * E);
  be_.add(m, proj, n * E);

  if (h.layer_is_moe(l)) {  // x' = m + the routed FFN of n2 (proj)
    // Recomputing for the backward: the next routed layer it visits is read
    // meanwhile; going forward, the layer above's experts are guessed.
    const bool recompute = x_out == nullptr;
    RETURN_IF_ERROR(routed_->forward(model_, l, w, m, a.n2, proj, n, recompute ? routed_below(l) : -1,
                                     !recompute && l + 1 < h.n_layer ? l + 1 : -1));
    if (x_out != nullptr) {
      be_.copy_floats(m, x_out, n * E);
      be_.add(x_out, proj, n * E);
    }
    return Status();
  }
  const MatmulOut gate_up[2] = {{w.mat(R::kFfnGate), a.g}, {w.mat(R::kFfnUp), a.u}};
  base_norm_matmul(be_, ops_, {.x = m, .norm = w.vec(R::kFfnNorm), .eps = h.rms_eps, .xn = a.n2, .n_embd = E,
                               .n_tok = n, .outs = gate_up});
  lora_forward(l, R::kFfnGate, a.n2, a.g, E, F, n);
  lora_forward(l, R::kFfnUp, a.n2, a.u, E, F, n);
  ops_.glu({.g = a.g, .u = a.u, .h = a.h, .n_tok = n, .n_ff = F, .act = h.spec->act});
  if (x_out == nullptr) {
    // Recomputing for the backward: the output is not needed, only the down
    // projection's A h (proj is scratch by now).
    lora_forward(l, R::kFfnDown, a.h, proj, F, E, n);
    return Status();
  }
  const MatmulOut down[1] = {{w.mat(R::kFfnDown), proj}};
  base_matmul(be_, ops_, down, a.h, F, n);
  lora_forward(l, R::kFfnDown, a.h, proj, F, E, n);
  be_.copy_floats(m, x_out, n * E);
  be_.add(x_out, proj, n * E);
  return Status();
}

void TrainStep::layer_backward(int64_t l, const LayerWeights& w, const float* x_in, float* dx, int64_t n) {
  const ModelHparams& h = model_.hparams();
  const int64_t E = h.n_embd, F = h.n_ff;
  const Acts a = acts(l);
  float *dh = dh_->floats(), *dg = dg_->floats(), *du = du_->floats(), *dn = dn_->floats();
  if (h.layer_is_moe(l)) {
    routed_->backward(w, dx, dn, n);  // x' = m + routed(n2)
  } else {
    // FFN: x' = m + Wdown h;  h = act(g) * u;  g, u = W n2;  n2 = norm(m).
    ops_.matmul_t({.w = w.mat(R::kFfnDown), .dy = dx, .dx = dh, .n_tok = n});
    lora_backward(l, R::kFfnDown, a.h, dx, dh, n);
    ops_.glu_backward({.g = a.g, .u = a.u, .dh = dh, .dg = dg, .du = du, .n_tok = n, .n_ff = F,
                       .act = h.spec->act});
    ops_.matmul_t({.w = w.mat(R::kFfnGate), .dy = dg, .dx = dn, .n_tok = n});
    ops_.matmul_t({.w = w.mat(R::kFfnUp), .dy = du, .dx = dn, .n_tok = n, .accumulate = true});
    lora_backward(l, R::kFfnGate, a.n2, dg, dn, n);
    lora_backward(l, R::kFfnUp, a.n2, du, dn, n);
  }
  ops_.rmsnorm_backward({.x = a.m, .w = vec(w.vec(R::kFfnNorm), E), .dy = dn, .dx = dx, .n_tok = n, .n = E,
                         .eps = h.rms_eps});
  // Attention: m = x + Wo att;  att = attention(rope(q), rope(k), v);  q, k, v = W n1;  n1 = norm(x).
  float *datt = datt_->floats(), *dq = dq_->floats(), *dk = dk_->floats(), *dv = dv_->floats();
  ops_.matmul_t({.w = w.mat(R::kAttnOutput), .dy = dx, .dx = datt, .n_tok = n});
  lora_backward(l, R::kAttnOutput, a.att, dx, datt, n);
  const TrainAttentionArgs fwd{.q = a.q, .k = a.k, .v = a.v, .out = a.att, .lse = a.lse, .seqs = seqs_,
                               .n_head = h.n_head, .n_head_kv = h.n_head_kv, .head_dim = h.head_dim,
                               .scale = h.attn_scale, .window = h.layer_is_swa(l) ? h.n_swa : 0,
                               .softcap = h.attn_softcap};
  ops_.attention_backward({.fwd = fwd, .dout = datt, .dq = dq, .dk = dk, .dv = dv});
  RopeArgs rope{.x = dq, .cos_sin = cos_sin_->floats(), .n_tok = n, .n_head = h.n_head, .head_dim = h.head_dim,
                .n_rot = h.n_rot, .layout = h.rope_layout, .inverse = true};
  ops_.rope(rope);
  rope.x = dk;
  rope.n_head = h.n_head_kv;
  ops_.rope(rope);
  ops_.matmul_t({.w = w.mat(R::kAttnQ), .dy = dq, .dx = dn, .n_tok = n});
  ops_.matmul_t({.w = w.mat(R::kAttnK), .dy = dk, .dx = dn, .n_tok = n, .accumulate = true});
  ops_.matmul_t({.w = w.mat(R::kAttnV), .dy = dv, .dx = dn, .n_tok = n, .accumulate = true});
  lora_backward(l, R::kAttnQ, a.n1, dq, dn, n);
  lora_backward(l, R::kAttnK, a.n1, dk, dn, n);
  lora_backward(l, R::kAttnV, a.n1, dv, dn, n);
  ops_.rmsnorm_backward({.x = x_in, .w = vec(w.vec(R::kAttnNorm), E), .dy = dn, .dx = dx, .n_tok = n, .n = E,
                         .eps = h.rms_eps});
}

void TrainStep::loss_and_top_grad(const TrainBatch& b, float grad_scale, bool backward, int64_t n) {
  const ModelHparams& h = model_.hparams();
  const ModelWeights& mw = model_.weights();
  const int64_t E = h.n_embd;
  const float* x_top = xs_->floats() + h.n_layer * opt_.max_tokens * E;
  float* dx = dx_->floats();
  if (backward) zero(dx, n * E);
  for (int64_t r0 = 0; r0 < n; r0 += logits_chunk_) {
    const int64_t c = std::min(logits_chunk_, n - r0);
    const MatmulOut out[1] = {{mw.output, logits_->floats()}};
    base_norm_matmul(be_, ops_, {.x = x_top + r0 * E, .norm = mw.output_norm.data(), .eps = h.rms_eps,
                                 .xn = proj_->floats() + r0 * E, .n_embd = E, .n_tok = c, .outs = out});
    ops_.cross_entropy({.logits = logits_->floats(), .targets = b.targets.data() + r0, .loss = loss_.data() + r0,
                        .n_tok = c, .n_vocab = h.n_vocab, .grad_scale = grad_scale, .deferred = true});
    if (!backward) continue;
    ops_.matmul_t({.w = mw.output, .dy = logits_->floats(), .dx = dn_->floats() + r0 * E, .n_tok = c});
  }
  if (backward) {
    ops_.rmsnorm_backward({.x = x_top, .w = vec(mw.output_norm.data(), E), .dy = dn_->floats(), .dx = dx, .n_tok = n,
                           .n = E, .eps = h.rms_eps});
  }
}

double TrainStep::loss_sum(int64_t n) {
  ops_.finish_losses();
  double sum = 0;
  for (int64_t t = 0; t < n; ++t) sum += loss_[static_cast<size_t>(t)];
  return sum;
}

StatusOr<double> TrainStep::run(const TrainBatch& b, float grad_scale, bool backward) {
  RETURN_IF_ERROR(check_batch(b));
  RETURN_IF_ERROR(model_.set_layer_schedule(backward ? train_order_ : forward_order_));
  const ModelHparams& h = model_.hparams();
  const auto n = static_cast<int64_t>(b.tokens.size());
  const int64_t E = h.n_embd;
  seqs_ = b.seqs;
  for (const TrainSeq& s : seqs_) {
    for (int64_t i = 0; i < s.n_tok; ++i) positions_[static_cast<size_t>(s.tok0 + i)] = i;
  }
  const RopeFreqs& rope = model_.layer_rope(0);
  be_.rope_tables(std::span(positions_.data(), static_cast<size_t>(n)), rope.inv_freq, rope.magnitude,
                  cos_sin_->floats());
  auto x_at = [&](int64_t l) { return xs_->floats() + l * opt_.max_tokens * E; };
  if (routed_) routed_->new_pass();
  be_.embed(model_.weights().token_embd, b.tokens, h.embd_scale, x_at(0));
  for (int64_t l = 0; l < h.n_layer; ++l) {
    ASSIGN_OR_RETURN(const LayerWeights* w, model_.acquire_layer(l));
    const Status st = layer_forward(l, *w, x_at(l), x_at(l + 1), n);
    model_.release_layer(l);
    RETURN_IF_ERROR(st);
  }
  // The backward's first routed layer keeps the experts its forward just used.
  if (backward && routed_) routed_->prefetch(model_, routed_below(h.n_layer));
  loss_and_top_grad(b, grad_scale, backward, n);
  if (!backward) return loss_sum(n);
  for (int64_t l = h.n_layer - 1; l >= 0; --l) {
    ASSIGN_OR_RETURN(const LayerWeights* w, model_.acquire_layer(l));
    if (routed_ && !h.layer_is_moe(l)) routed_->prefetch(model_, routed_below(l));
    // A dense layer's kept intermediates are what the rerun would compute.
    const bool kept = n_sets_ > 1 && !h.layer_is_moe(l);
    const Status st = kept ? Status() : layer_forward(l, *w, x_at(l), nullptr, n);
    if (st.ok()) layer_backward(l, *w, x_at(l), dx_->floats(), n);
    model_.release_layer(l);
    RETURN_IF_ERROR(st);
  }
  return loss_sum(n);  // read once the backward is queued: the device need not drain at the loss
}

int64_t TrainStep::routed_below(int64_t l) const {
  const ModelHparams& h = model_.hparams();
  for (int64_t b = l - 1; b >= 0; --b)
    if (h.layer_is_moe(b)) return b;
  return -1;
}

StatusOr<double> TrainStep::accumulate(const TrainBatch& batch, float grad_scale) {
  return run(batch, grad_scale, true);
}

StatusOr<double> TrainStep::evaluate(const TrainBatch& batch) { return run(batch, 0.0f, false); }

}  // namespace sluice
