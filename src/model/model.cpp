#include "model/model.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "base/check.h"
#include "model/decoder_blocks.h"
#include "model/rope_scaling.h"
#include "quant/quant.h"

namespace sluice {
namespace {

// Reordering a landed expert in place (Backend::prepare_in_place) pays for
// itself within the step only from about this many tokens: one Mixtral
// expert in Q4_0 on 2 threads takes 5.5 ms to reorder, and the reordered
// kernel saves 1.8 ms per token against GGUF rows (Zen 5, AVX-512).
constexpr int64_t kReorderBreakEvenTokens = 4;

}  // namespace

Model::Model(std::shared_ptr<const ModelFile> file, const ModelHparams& hp, const ModelOptions& options)
    : file_(std::move(file)),
      hp_(hp),
      n_batch_(std::max<int64_t>(1, options.n_batch)),
      max_seqs_(options.max_seqs),
      backend_(options.backend),
      source_(options.weights),
      adapters_(hp, options.max_seqs),
      predict_experts_(options.predict_experts || (options.weights && options.weights->streams_experts())),
      predict_margin_(options.expert_predict_margin),
      repack_(options.repack) {}

Model::~Model() = default;

StatusOr<std::unique_ptr<Model>> Model::load(std::shared_ptr<const ModelFile> file, const ModelOptions& options) {
  ASSIGN_OR_RETURN(ModelHparams hp, hparams_from_metadata(file->metadata));
  if (options.max_seqs <= 0) return invalid_argument("max_seqs must be positive, got {}", options.max_seqs);
  std::unique_ptr<Model> m(new Model(std::move(file), hp, options));
  if (!m->backend_) {
    ASSIGN_OR_RETURN(m->backend_, create_backend({.name = "cpu", .n_threads = options.n_threads}));
  }
  ASSIGN_OR_RETURN(m->weights_, bind_weights(*m->file_, m->hp_, m->source_.get()));
  RETURN_IF_ERROR(m->check_supported());
  RETURN_IF_ERROR(check_longrope_factors(m->weights_));
  m->n_ctx_max_ = options.n_ctx_max > 0 ? options.n_ctx_max : m->hp_.n_ctx_train;
  // LongRoPE: one factor set for the model's life, from n_ctx_max (model/rope_scaling.h).
  m->longrope_ = choose_longrope_factors(m->weights_, m->hp_, m->n_ctx_max_);
  const std::span<const float> divisors =
      m->longrope_ != LongRopeFactors::kNone ? longrope_divisors(m->weights_, m->longrope_)
                                             : std::span<const float>(m->weights_.rope_freqs);
  m->rope_ = rope_freqs(m->hp_, divisors);
  if (m->hp_.rope_freq_base_swa > 0.0f && m->hp_.n_swa > 0) {
    ModelHparams local = m->hp_;  // windowed layers: their own base, unscaled
    local.rope_freq_base = m->hp_.rope_freq_base_swa;
    local.rope_scaling = RopeScaling::kNone;
    local.rope_attn_factor = 1.0f;
    m->rope_swa_ = rope_freqs(local, {});
  }
  m->layer_begin_ = options.layer_begin;
  m->layer_end_ = options.layer_end < 0 ? m->hp_.n_layer : options.layer_end;
  if (m->layer_begin_ < 0 || m->layer_begin_ >= m->layer_end_ || m->layer_end_ > m->hp_.n_layer)
    return invalid_argument("layer range [{}, {}) is not inside the model's {} layers", options.layer_begin,
                            options.layer_end, m->hp_.n_layer);
  m->plan_buffers();
  if (options.device_reserve) {
    ASSIGN_OR_RETURN(const uint64_t reserve, options.device_reserve(*m));
    m->backend_->set_device_reserve(reserve);
  }
  if (options.repack && !m->source_) {
    std::vector<std::vector<WeightView*>> groups = dispatch_groups(m->weights_, m->arch());
    std::erase_if(groups, [&](const std::vector<WeightView*>& g) { return !m->holds(g[0]); });
    std::vector<WeightGroup> spans(groups.begin(), groups.end());
    m->prepared_ = m->backend_->prepare_weights(spans);
    RETURN_IF_ERROR(m->prepared_.status);
  }
  if (options.repack && m->source_) m->reorder_resident();
  return m;
}

bool Model::holds(const WeightView* v) const {
  if (layer_begin_ == 0 && layer_end_ == hp_.n_layer) return true;
  if (v == &weights_.output) return layer_begin_ == 0;
  for (int64_t l = layer_begin_; l < layer_end_; ++l) {
    const LayerWeights& w = weights_.layers[static_cast<size_t>(l)];
    if (v >= w.mats.data() && v < w.mats.data() + w.mats.size()) return true;
    for (const ExpertWeights& e : w.experts)
      if (v == &e.gate || v == &e.up || v == &e.down) return true;
  }
  return false;
}

StatusOr<const LayerWeights*> Model::acquire_layer(int64_t l) {
  LayerWeights& w = weights_.layers[static_cast<size_t>(l)];
  if (source_) {
    LayerWeightPointers p;
    RETURN_IF_ERROR(source_->acquire(l, &p));
    bind_layer(w, p);
  }
  return &w;
}

void Model::release_layer(int64_t l) {
  if (source_) source_->release(l);
}

const RopeFreqs& Model::layer_rope(int64_t l) const { return hp_.layer_has_own_rope(l) ? rope_swa_ : rope_; }

void Model::reorder_resident() {
  // Views bound per layer at acquire() keep their layout across binds, and a
  // resident layer is bound to the same bytes every time.
  for (const std::vector<WeightView*>& g : dispatch_groups(weights_, arch())) {
    WeightView views[4];
    bool movable = g.size() <= 4;
    for (size_t i = 0; movable && i < g.size(); ++i) {
      views[i] = *g[i];
      movable = g[i]->data && source_->reorderable(g[i]->data);
    }
    if (!movable) continue;
    backend_->prepare_in_place(std::span(views, g.size()));
    for (size_t i = 0; i < g.size(); ++i) {
      if (views[i].layout == g[i]->layout) continue;
      g[i]->layout = views[i].layout;
      prepared_.repacked_bytes += row_bytes(views[i].type, views[i].n_in) * static_cast<uint64_t>(views[i].n_out);
      ++prepared_.n_repacked;
    }
  }
  if (prepared_.n_repacked > 0)
    prepared_.summary = fmt::format("{} resident matrices reordered in place at load ({:.1f} MiB)",
                                    prepared_.n_repacked, static_cast<double>(prepared_.repacked_bytes) / (1 << 20));
}

Status Model::check_supported() const {
  const ArchSpec& spec = arch();
  // Features the table may describe that these builders do not run yet.
  if (hp_.is_moe() && !spec.moe) return unimplemented("{}: expert_count is set but the architecture is not routed", spec.name);
  Backend& be = *backend_;
  auto need = [&](Op op, OpTypes types, const std::string& what) -> Status {
    if (be.supports(op, types)) return Status();
    return unimplemented("backend '{}' has no {} for {} ({})", be.name(), op_name(op), dtype_name(types.weight), what);
  };
  RETURN_IF_ERROR(need(Op::kEmbed, {.weight = weights_.token_embd.type}, "token_embd.weight"));
  RETURN_IF_ERROR(need(Op::kLogits, {.weight = weights_.output.type}, "the output head"));
  if (hp_.is_moe()) RETURN_IF_ERROR(need(Op::kRoute, {}, "expert routing"));
  for (size_t l = 0; l < weights_.layers.size(); ++l) {
    for (const TensorSpec& t : spec.tensors) {
      if (!t.per_layer || t.kind == TensorKind::kVector || !weights_.layers[l].has_mat(t.role)) continue;
      const Op op = t.kind == TensorKind::kExperts ? Op::kExpertFfn : Op::kMatmul;
      RETURN_IF_ERROR(need(op, {.weight = weights_.layers[l].mat(t.role).type, .act = spec.act},
                           gguf_tensor_name(t, static_cast<int64_t>(l))));
    }
    if (weights_.layers[l].has_mat(TensorRole::kFfnDown)) {
      RETURN_IF_ERROR(need(Op::kGluMatmul, {.weight = weights_.layers[l].mat(TensorRole::kFfnDown).type, .act = spec.act},
                           fmt::format("the FFN activation of layer {}", l)));
    }
  }
  return Status();
}

void Model::plan_buffers() {
  const ModelHparams& h = hp_;
  Backend& be = *backend_;
  const int64_t nb = n_batch_;
  auto floats = [&](int64_t n) { return be.alloc(static_cast<size_t>(nb * n) * sizeof(float)); };
  x_ = floats(h.n_embd);
  xn_ = floats(h.n_embd);
  q_ = floats(h.n_embd_q());
  k_ = floats(h.n_embd_kv());
  v_ = floats(h.n_embd_kv());
  att_ = floats(h.n_embd_q());
  proj_ = floats(h.n_embd);
  gate_ = floats(std::max<int64_t>(1, h.n_ff));
  up_ = floats(std::max<int64_t>(1, h.n_ff));
  cos_sin_ = floats(h.n_rot);
  if (!rope_swa_.inv_freq.empty()) cos_sin_swa_ = floats(h.n_rot);
  if (h.is_moe()) {
    router_ = floats(h.n_expert);
    moe_ids_.resize(static_cast<size_t>(nb * h.n_expert_used));
    moe_weights_.resize(static_cast<size_t>(nb * h.n_expert_used));
    unique_ids_.reserve(static_cast<size_t>(h.n_expert));
    pred_unique_ids_.reserve(static_cast<size_t>(h.n_expert));
    seen_.resize(static_cast<size_t>(h.n_expert));
    expert_ptrs_.resize(static_cast<size_t>(h.n_expert));
    streamed_experts_.resize(static_cast<size_t>(h.n_expert));
    if (predict_experts_) {
      pred_router_ = floats(h.n_expert);
      pred_xn_ = floats(h.n_embd);
      pred_ids_.resize(static_cast<size_t>(nb * n_pred_candidates()));
      pred_weights_.resize(pred_ids_.size());
    }
  }
  positions_.resize(static_cast<size_t>(nb));
  kv_rows_.resize(static_cast<size_t>(nb));
  logit_rows_.resize(static_cast<size_t>(nb));
  attn_seqs_.resize(static_cast<size_t>(max_seqs_));
  lora_masks_.resize(static_cast<size_t>(max_seqs_));
  lora_lens_.resize(static_cast<size_t>(max_seqs_));
  be.reserve(scratch_needs());
}

ScratchNeeds Model::scratch_needs() const {
  const ModelHparams& h = hp_;
  return {.n_tok = n_batch_, .n_in_max = std::max({h.n_embd, h.n_ff, h.n_embd_q(), h.n_ff_expert, h.n_ff_shared}),
          .n_ctx = n_ctx_max_, .n_head = h.n_head, .n_head_kv = h.n_head_kv, .head_dim = h.head_dim,
          .max_seqs = max_seqs_, .n_expert = h.n_expert, .n_used = h.n_expert_used, .n_ff_expert = h.n_ff_expert,
          .n_ff_shared = h.n_ff_shared, .n_embd = h.n_embd, .lora_rank = adapters_.rank_max()};
}

StatusOr<int> Model::add_lora(const LoraAdapter& adapter, float scale) {
  ASSIGN_OR_RETURN(const int index, adapters_.add(*backend_, *file_, adapter, scale));
  backend_->reserve(scratch_needs());  // lora()'s A x rows for the widest rank
  return index;
}

KvDtype Model::default_kv_dtype() const {
  return weights_.token_embd.type == DType::kF32 ? KvDtype::kF32 : KvDtype::kF16;
}

KvLayout Model::kv_layout(KvDtype dtype, int64_t block_size) const {
  return KvLayout{.n_layer = hp_.n_layer, .n_embd_kv = hp_.n_embd_kv(), .block_size = block_size, .dtype = dtype,
                  .n_head_kv = hp_.n_head_kv};
}

KvCache Model::make_kv_cache(int64_t n_ctx) {
  auto c = make_kv_cache(n_ctx, default_kv_dtype());
  CHECK(c.ok());  // f32/f16 layouts of a loaded model are always valid
  return std::move(c).value();
}

StatusOr<KvCache> Model::make_kv_cache(int64_t n_ctx, KvDtype dtype) {
  if (n_ctx > n_ctx_max_) {
    return invalid_argument("context {} exceeds the model's planned maximum {} (raise n_ctx_max)", n_ctx, n_ctx_max_);
  }
  if (n_ctx < 1) return invalid_argument("a KV cache needs a context of at least 1, got {}", n_ctx);
  const KvLayout layout = kv_layout(dtype);
  ASSIGN_OR_RETURN(KvStore store, backend_->create_kv(layout, (n_ctx + layout.block_size - 1) / layout.block_size));
  return KvCache::wrap(std::move(store), n_ctx);
}

Status Model::forward(std::span<const int32_t> tokens, KvCache& kv, float* logits, bool all_logits, LoraMask loras) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) return invalid_argument("forward() needs at least one token");
  if (kv.n_past() + n > kv.n_ctx()) {
    return resource_exhausted("context full: {} cached + {} new tokens > context size {}", kv.n_past(), n, kv.n_ctx());
  }
  for (int64_t start = 0; start < n; start += n_batch_) {
    const int64_t len = std::min(n_batch_, n - start);
    const bool last_chunk = start + len == n;
    ForwardSeq seq{.tokens = tokens.subspan(static_cast<size_t>(start), static_cast<size_t>(len)),
                   .pos0 = kv.n_past(), .block_table = kv.block_table(),
                   .n_logits = all_logits ? len : (last_chunk ? 1 : 0), .loras = loras};
    float* out = all_logits ? logits + start * hp_.n_vocab : logits;
    RETURN_IF_ERROR(forward(std::span(&seq, 1), kv.store(), out));
    kv.set_n_past(kv.n_past() + len);
  }
  return Status();
}

Status Model::validate(std::span<const ForwardSeq> seqs, const KvStore& kv) const {
  if (seqs.empty()) return invalid_argument("forward() needs at least one sequence");
  if (static_cast<int64_t>(seqs.size()) > max_seqs_) {
    return invalid_argument("{} sequences in one step exceed max_seqs {}", seqs.size(), max_seqs_);
  }
  const KvLayout& l = kv.layout();
  if (l.n_layer != hp_.n_layer || l.n_embd_kv != hp_.n_embd_kv()) {
    return invalid_argument("KV store ({} layers x {}) does not belong to this model ({} x {})", l.n_layer,
                            l.n_embd_kv, hp_.n_layer, hp_.n_embd_kv());
  }
  int64_t n = 0;
  for (const ForwardSeq& s : seqs) {
    const int64_t len = static_cast<int64_t>(s.tokens.size());
    if (len == 0) return invalid_argument("a sequence in the step has no tokens");
    if (s.n_logits < 0 || s.n_logits > len) return invalid_argument("n_logits {} outside [0, {}]", s.n_logits, len);
    if (s.pos0 < 0 || s.pos0 + len > n_ctx_max_) {
      return resource_exhausted("positions {}..{} exceed the maximum context {}", s.pos0, s.pos0 + len - 1, n_ctx_max_);
    }
    const int64_t blocks_needed = (s.pos0 + len + l.block_size - 1) / l.block_size;
    if (static_cast<int64_t>(s.block_table.size()) < blocks_needed) {
      return invalid_argument("block table of {} blocks does not cover position {}", s.block_table.size(), s.pos0 + len - 1);
    }
    // With a window on every layer, entries wholly before the first query's
    // window are never read (the KV manager may have released them).
    const int64_t w = hp_.kv_window();
    const int64_t first_block = w > 0 ? std::max<int64_t>(0, s.pos0 - w + 1) / l.block_size : 0;
    for (int64_t b = first_block; b < blocks_needed; ++b) {
      const int32_t id = s.block_table[static_cast<size_t>(b)];
      if (id < 0 || id >= kv.n_blocks()) return invalid_argument("block id {} out of range [0, {})", id, kv.n_blocks());
    }
    for (int32_t t : s.tokens) {
      if (t < 0 || t >= hp_.n_vocab) return invalid_argument("token id {} out of range [0, {})", t, hp_.n_vocab);
    }
    if ((s.loras & ~adapters_.all()) != 0) {
      return invalid_argument("adapter set {:#x} names adapters this model does not have ({} loaded)", s.loras,
                              adapters_.size());
    }
    n += len;
  }
  if (n > n_batch_) return invalid_argument("{} tokens in one step exceed n_batch {}", n, n_batch_);
  return Status();
}

void Model::emit(std::string_view name, int64_t layer, const float* data, int64_t n_tokens, int64_t n) const {
  if (!hook_) return;
  if (backend_->host_visible()) {
    hook_(name, layer, data, n_tokens, n);
    return;
  }
  // A GPU's buffers: copied to the host first (a debugging path; it waits).
  hook_copy_.resize(static_cast<size_t>(n_tokens * n));
  backend_->read_floats(data, hook_copy_.data(), n_tokens * n);
  hook_(name, layer, hook_copy_.data(), n_tokens, n);
}

Status Model::forward(std::span<const ForwardSeq> seqs, KvStore& kv, float* logits) {
  RETURN_IF_ERROR(begin_step(seqs, kv, /*embed=*/true));
  if (stages_) {
    RETURN_IF_ERROR(stages_->run_step(*this, seqs, kv));
  } else {
    RETURN_IF_ERROR(run_stage(0, seqs.size(), 0, step_n_, kv));
  }
  return finish_step(logits);
}

Status Model::begin_step(std::span<const ForwardSeq> seqs, KvStore& kv, bool embed) {
  RETURN_IF_ERROR(validate(seqs, kv));
  const ModelHparams& h = hp_;
  const int64_t bs = kv.layout().block_size;
  // The step as plain host data: each token's position and KV row, each
  // sequence's queries and outputs, the tokens whose logits are asked for.
  int64_t n = 0, n_out = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const ForwardSeq& s = seqs[i];
    const auto len = static_cast<int64_t>(s.tokens.size());
    attn_seqs_[i] = AttentionSeq{.q = q_->floats() + n * h.n_embd_q(), .out = att_->floats() + n * h.n_embd_q(),
                                 .n_tok = len, .pos0 = s.pos0, .block_table = s.block_table.data()};
    for (int64_t j = 0; j < len; ++j) {
      const int64_t pos = s.pos0 + j;
      positions_[static_cast<size_t>(n + j)] = pos;
      kv_rows_[static_cast<size_t>(n + j)] = int64_t{s.block_table[static_cast<size_t>(pos / bs)]} * bs + pos % bs;
    }
    for (int64_t j = len - s.n_logits; j < len; ++j) logit_rows_[static_cast<size_t>(n_out++)] = n + j;
    lora_masks_[i] = s.loras;
    lora_lens_[i] = len;
    n += len;
  }
  step_n_ = n;
  step_n_out_ = n_out;
  step_n_seqs_ = static_cast<int64_t>(seqs.size());
  Backend& be = *backend_;
  if (embed) {
    int64_t t = 0;
    for (const ForwardSeq& s : seqs) {
      be.embed(weights_.token_embd, s.tokens, h.embd_scale, x_->floats() + t * h.n_embd);
      t += static_cast<int64_t>(s.tokens.size());
    }
    emit("embd", -1, x_->floats(), n, h.n_embd);
  }
  const std::span<const int64_t> positions(positions_.data(), static_cast<size_t>(n));
  be.rope_tables(positions, rope_.inv_freq, rope_.magnitude, cos_sin_->floats());
  if (cos_sin_swa_) be.rope_tables(positions, rope_swa_.inv_freq, rope_swa_.magnitude, cos_sin_swa_->floats());
  return Status();
}

Status Model::finish_step(float* logits) {
  if (source_) source_->end_step(step_n_);
  const ModelHparams& h = hp_;
  const int64_t n_out = step_n_out_;
  if (n_out == 0) return Status();
  backend_->logits({.x = x_->floats(), .rows = logit_rows_.data(), .n_out = n_out,
                    .norm = weights_.output_norm.data(), .eps = h.rms_eps, .n_embd = h.n_embd, .xn = xn_->floats(),
                    .output = weights_.output, .logits = logits});
  if (h.final_softcap > 0.0f) {  // gemma2: cap * tanh(logit / cap)
    const float cap = h.final_softcap, inv = 1.0f / h.final_softcap;
    for (int64_t i = 0; i < n_out * h.n_vocab; ++i) logits[i] = cap * std::tanh(logits[i] * inv);
  }
  emit("logits", -1, logits, n_out, h.n_vocab);
  return Status();
}

void Model::emit_routing(const char* name, const int32_t* ids, int64_t layer, int64_t n, int64_t width) const {
  // The expert ids as floats (-1: none), [n, width].
  std::vector<float> f(ids, ids + n * width);
  hook_(name, layer, f.data(), n, width);
}

void Model::set_routing_counters(std::vector<Counter*> counters) {
  routed_ = std::move(counters);
  routed_step_.assign(static_cast<size_t>(hp_.n_expert), 0);
}

int64_t Model::n_pred_candidates() const { return std::min(hp_.n_expert, 2 * hp_.n_expert_used); }

void Model::distinct_experts(const int32_t* ids, int64_t n_ids, std::vector<int32_t>& out) {
  out.clear();
  std::fill(seen_.begin(), seen_.end(), 0);
  for (int64_t i = 0; i < n_ids; ++i) {
    if (ids[i] < 0 || seen_[static_cast<size_t>(ids[i])]) continue;
    seen_[static_cast<size_t>(ids[i])] = 1;
    out.push_back(ids[i]);
  }
}

void Model::predict_routing(int64_t layer, const float* x, int64_t n, bool early) {
  const ModelHparams& h = hp_;
  const LayerWeights& w = weights_.layers[static_cast<size_t>(layer)];
  const MatmulOut router[1] = {{w.mat(TensorRole::kFfnRouter), pred_router_->floats()}};
  Backend& be = *backend_;
  be.norm_matmul({.x = x, .norm = w.vec(TensorRole::kFfnNorm), .eps = h.rms_eps, .xn = pred_xn_->floats(),
                  .n_embd = h.n_embd, .n_tok = n, .outs = router});
  // The top n_expert_used, and beyond them any candidate whose predicted
  // probability is at least predict_margin_ of the last of those: a close call
  // is worth a prefetch. stories-moe, replayed (`sluice bench-experts
  // --predict-margin M`), recall at layers 1-3 and what the predictor alone
  // fetches at layer 3 per chosen expert: top-k alone 82/88/74%; 0.8
  // 92/97/82%, 1.54x; 0.83 91/96/81%, 1.49x; 0.85 90/95/80.5%, 1.47x; 0.9
  // 88/94/79%, 1.39x. 0.83 keeps layer 3 within both 80% recall and 1.5x on
  // the 837 steps of bench-experts and on tests/expert_prediction_test.cpp's
  // 480 (80.5%, 1.498x): a narrow window.
  const int64_t k = h.n_expert_used, c = early ? k : n_pred_candidates();
  be.route({.logits = pred_router_->floats(), .n_tok = n, .n_expert = h.n_expert, .n_used = c,
            .renormalize = false, .ids = pred_ids_.data(), .weights = pred_weights_.data()});
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = k; j < c; ++j)
      if (pred_weights_[static_cast<size_t>(t * c + j)] < predict_margin_ * pred_weights_[static_cast<size_t>(t * c + k - 1)])
        pred_ids_[static_cast<size_t>(t * c + j)] = -1;
  if (hook_ && !early) emit_routing("ffn_moe_pred", pred_ids_.data(), layer, n, c);
  if (source_ && source_->streams_experts()) {
    distinct_experts(pred_ids_.data(), n * c, pred_unique_ids_);
    source_->predict_experts(layer, pred_unique_ids_);
  }
}

Status Model::begin_experts(int64_t layer, int64_t n, const LayerWeights& w) {
  distinct_experts(moe_ids_.data(), n * hp_.n_expert_used, unique_ids_);
  RETURN_IF_ERROR(source_->begin_experts(layer, unique_ids_, expert_ptrs_.data()));
  // Experts reordered for the backend when they first landed (prepare_expert)
  // are in the layouts it gives; the others are still GGUF rows.
  const ExpertWeights& any = w.experts[0];
  const WeightView gate_up[2] = {any.gate, any.up};
  WeightLayout gate_up_layouts[2], down_layout;
  backend_->in_place_layouts(gate_up, gate_up_layouts);
  backend_->in_place_layouts(std::span(&any.down, 1), &down_layout);
  for (size_t i = 0; i < unique_ids_.size(); ++i) {
    const auto e = static_cast<size_t>(unique_ids_[i]);
    ExpertWeights& x = streamed_experts_[e];
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

void Model::reorder_expert(ExpertWeights& x) {
  WeightView gate_up[2] = {x.gate, x.up};
  backend_->prepare_in_place(gate_up);
  x.gate = gate_up[0];
  x.up = gate_up[1];
  backend_->prepare_in_place(std::span(&x.down, 1));
}

void Model::prepare_expert(int64_t layer, int64_t i) {
  if (!repack_ || expert_ptrs_[static_cast<size_t>(i)].prepared) return;
  reorder_expert(streamed_experts_[static_cast<size_t>(unique_ids_[static_cast<size_t>(i)])]);
  source_->expert_prepared(layer, i);
}

void Model::prepare_while_waiting(int64_t layer) {
  if (!repack_) return;
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

Status Model::run_stage(size_t seq_begin, size_t seq_end, int64_t t0, int64_t n, KvStore& kv) {
  // The micro-batch's adapters: its sequences' tokens are rows [0, n) of the views below.
  const size_t n_seqs = seq_end - seq_begin;
  const bool adapted = adapters_.plan(std::span(lora_masks_.data() + seq_begin, n_seqs),
                                      std::span(lora_lens_.data() + seq_begin, n_seqs));
  auto emit_fn = [this](std::string_view name, int64_t layer, const float* data, int64_t n_tok, int64_t width) {
    emit(name, layer, data, n_tok, width);
  };
  const bool stream_experts = source_ && source_->streams_experts();
  // The micro-batch's rows of every activation (a whole step: t0 = 0).
  const int64_t n_rot = hp_.n_rot;
  float* x = x_->floats() + t0 * hp_.n_embd;
  float* cos_sin = cos_sin_->floats() + t0 * n_rot;
  float* cos_sin_swa = cos_sin_swa_ ? cos_sin_swa_->floats() + t0 * n_rot : nullptr;
  if (predict_experts_ && hp_.layer_is_moe(layer_begin_)) predict_routing(layer_begin_, x, n);
  for (int64_t l = layer_begin_; l < layer_end_; ++l) {
    LayerWeights& w = weights_.layers[static_cast<size_t>(l)];
    if (source_) {
      LayerWeightPointers p;
      if (Status st = source_->acquire(l, &p); !st.ok()) return st;
      bind_layer(w, p);
    }
    const LayerStep step{.be = *backend_, .hp = hp_, .w = w, .layer = l, .n_tok = n,
                         .x = x, .xn = xn_->floats() + t0 * hp_.n_embd, .q = q_->floats() + t0 * hp_.n_embd_q(),
                         .k = k_->floats() + t0 * hp_.n_embd_kv(), .v = v_->floats() + t0 * hp_.n_embd_kv(),
                         .att = att_->floats() + t0 * hp_.n_embd_q(), .proj = proj_->floats() + t0 * hp_.n_embd,
                         .gate = gate_->floats() + t0 * hp_.n_ff, .up = up_->floats() + t0 * hp_.n_ff,
                         .cos_sin = hp_.layer_has_own_rope(l) ? cos_sin_swa : cos_sin,
                         .seqs = std::span(attn_seqs_.data() + seq_begin, seq_end - seq_begin), .kv = kv,
                         .kv_rows = kv_rows_.data() + t0, .emit = emit_fn,
                         .lora = adapted ? &adapters_ : nullptr};
    attention_block(step);
    if (hp_.layer_is_moe(l)) {
      MoeStep moe{.router = router_->floats(), .ids = moe_ids_.data(), .weights = moe_weights_.data(),
                  .experts = w.experts};
      moe_route(step, moe);
      if (hook_) emit_routing("ffn_moe_ids", moe_ids_.data(), l, n, hp_.n_expert_used);
      if (!routed_.empty()) {
        for (int64_t i = 0; i < n * hp_.n_expert_used; ++i)
          if (moe_ids_[static_cast<size_t>(i)] >= 0) ++routed_step_[static_cast<size_t>(moe_ids_[static_cast<size_t>(i)])];
        for (int64_t e = 0; e < hp_.n_expert; ++e) {
          uint32_t& c = routed_step_[static_cast<size_t>(e)];
          Counter* counter = routed_[static_cast<size_t>(l * hp_.n_expert + e)];
          if (c > 0 && counter) counter->add(c);
          c = 0;
        }
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
        // Landed from disk in GGUF rows: reordered once, where it lies, for
        // the backend's fastest kernels (the same bits as rows); a later hit
        // on the same slot finds it so. Except the step's last expert in a
        // small step: no read follows it until the next step routes, so the
        // disk would idle through the reorder, which costs more than the
        // faster kernel saves at a few tokens; it is left to a later wait.
        const bool last_of_step = l == hp_.n_layer - 1 && ++n_handed == unique_ids_.size();
        if (!(last_of_step && n < kReorderBreakEvenTokens)) prepare_expert(l, i);
        return unique_ids_[static_cast<size_t>(i)];
      };
      const FunctionRef<int64_t()> next_ref(next);
      if (stream_experts) {
        if (Status st = begin_experts(l, n, w); !st.ok()) {
          source_->release(l);  // the layer and whatever experts it pinned
          return st;
        }
        moe.experts = streamed_experts_;
        moe.next = &next_ref;
        // A first guess at the next routed layer's experts, from the state
        // before this layer's experts are added: its reads queue behind this
        // layer's (prefetch after critical), so the disk does not idle while
        // the last of them computes. Refined below once the layer is done.
        if (l + 1 < layer_end_ && hp_.layer_is_moe(l + 1)) predict_routing(l + 1, x, n, /*early=*/true);
      }
      moe_experts(step, moe);
      if (!read_status.ok()) {
        source_->release(l);
        return read_status;
      }
    } else {
      dense_ffn_block(step);
    }
    // The next routed layer's experts, predicted from the state entering it.
    if (predict_experts_ && l + 1 < layer_end_ && hp_.layer_is_moe(l + 1)) predict_routing(l + 1, x, n);
    emit("l_out", l, x, n, hp_.n_embd);
    if (source_) source_->release(l);
  }
  return Status();
}

}  // namespace sluice
