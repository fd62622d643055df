#include "model/model.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "base/check.h"
#include "model/decoder_blocks.h"
#include "model/rope_scaling.h"
#include "quant/quant.h"

namespace sluice {
Model::Model(std::shared_ptr<const ModelFile> file, const ModelHparams& hp, const ModelOptions& options)
    : file_(std::move(file)),
      hp_(hp),
      n_batch_(std::max<int64_t>(1, options.n_batch)),
      max_seqs_(options.max_seqs),
      backend_(options.backend),
      source_(options.weights),
      adapters_(hp, options.max_seqs) {}

Model::~Model() {
  for (const uint8_t* p : registered_) backend_->unregister_host(p);
}

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
  m->expert_begin_ = options.expert_begin;
  m->expert_end_ = options.expert_end < 0 ? m->hp_.n_expert : options.expert_end;
  m->experts_only_ = options.experts_only;
  if (m->expert_begin_ < 0 || m->expert_begin_ > m->expert_end_ || m->expert_end_ > m->hp_.n_expert)
    return invalid_argument("expert range [{}, {}) is not inside the model's {} experts", options.expert_begin,
                            options.expert_end, m->hp_.n_expert);
  if (m->source_ && !m->backend_->host_visible()) RETURN_IF_ERROR(m->plan_device_tiers());
  m->plan_buffers(options);
  if (options.device_reserve) {
    ASSIGN_OR_RETURN(const uint64_t reserve, options.device_reserve(m->kv_shape()));
    m->backend_->set_device_reserve(reserve);
  }
  // A backend whose memory is not the host's needs the copy whatever `repack` says.
  if ((options.repack || !m->backend_->host_visible()) && !m->source_) {
    std::vector<std::vector<WeightView*>> groups = dispatch_groups(m->weights_, m->arch());
    std::erase_if(groups, [&](const std::vector<WeightView*>& g) { return !m->holds(g[0]); });
    std::vector<WeightGroup> spans(groups.begin(), groups.end());
    m->prepared_ = m->backend_->prepare_weights(spans);
    RETURN_IF_ERROR(m->prepared_.status);
    if (!m->prepared_.host_groups.empty()) {
      // The backend streams some groups: a forward pass a token, with a
      // routed expert's copied only when the router picks it.
      for (const WeightGroup& g : spans) {
        bool expert = false;
        const int64_t l = layer_of_view(m->weights_, g[0], &expert);
        m->streamed_group_layer_.push_back(expert ? kRoutedGroup : l);
      }
      RETURN_IF_ERROR(m->set_layer_schedule(forward_schedule(m->hp_.n_layer)));
    }
    m->host_layer_bytes_ = layer_bytes_of_groups(m->weights_, spans, m->prepared_.host_groups);
  } else if (!m->device_layer_.empty()) {
    RETURN_IF_ERROR(m->prepare_device_layers());
  }
  m->host_layer_bytes_.resize(static_cast<size_t>(m->hp_.n_layer), 0);
  m->repack_ = options.repack;
  if (options.repack && m->source_ && m->device_layer_.empty()) m->reorder_resident();
  return m;
}

bool Model::holds(const WeightView* v) const {
  const bool all_experts = expert_begin_ == 0 && expert_end_ == hp_.n_expert && !experts_only_;
  if (layer_begin_ == 0 && layer_end_ == hp_.n_layer && all_experts) return true;
  if (v == &weights_.output) return layer_begin_ == 0 && !experts_only_;
  for (int64_t l = layer_begin_; l < layer_end_; ++l) {
    const LayerWeights& w = weights_.layers[static_cast<size_t>(l)];
    if (v >= w.mats.data() && v < w.mats.data() + w.mats.size()) return !experts_only_;
    for (size_t e = 0; e < w.experts.size(); ++e) {
      const ExpertWeights& x = w.experts[e];
      if (v == &x.gate || v == &x.up || v == &x.down)
        return static_cast<int64_t>(e) >= expert_begin_ && static_cast<int64_t>(e) < expert_end_;
    }
  }
  return false;
}

void Model::set_expert_dispatch(ExpertDispatch* dispatch) { experts_->set_dispatch(dispatch); }

StatusOr<const LayerWeights*> Model::acquire_layer(int64_t l) {
  LayerWeights& w = weights_.layers[static_cast<size_t>(l)];
  if (source_) {
    LayerWeightPointers p;
    RETURN_IF_ERROR(source_->acquire(l, &p));
    if (!on_device(l)) bind_layer(w, p);
  }
  return &w;
}

StatusOr<std::span<const ExpertWeights>> Model::landed_experts(int64_t l, std::span<const int32_t> ids) {
  return experts_->landed_experts(l, ids, weights_.layers[static_cast<size_t>(l)]);
}

void Model::predict_experts(int64_t l, std::span<const int32_t> ids) { experts_->predict_experts(l, ids); }

Status Model::set_layer_schedule(std::span<const int64_t> order) {
  if (source_) RETURN_IF_ERROR(source_->set_schedule(order));
  if (streamed_group_layer_.empty() || std::ranges::equal(order, scheduled_layers_)) return Status();
  scheduled_layers_.assign(order.begin(), order.end());
  return backend_->set_weight_schedule(dispatch_schedule(streamed_group_layer_, order));
}

void Model::release_layer(int64_t l) {
  if (!source_) return;
  backend_->finish_host_reads();  // the copies from the layer's host bytes are done before they are reused
  source_->release(l);
}

const RopeFreqs& Model::layer_rope(int64_t l) const { return hp_.layer_has_own_rope(l) ? rope_swa_ : rope_; }

void Model::reorder_resident() { reorder_in_place(-1); }

void Model::reorder_in_place(int64_t only_layer) {
  // Views bound per layer at acquire() keep their layout across binds, and a
  // resident layer is bound to the same bytes every time.
  for (const std::vector<WeightView*>& g : dispatch_groups(weights_, arch())) {
    if (only_layer >= 0 && layer_of_view(weights_, g[0]) != only_layer) continue;
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
      if (only_layer >= 0) continue;  // a promotion: counted at load
      prepared_.repacked_bytes += row_bytes(views[i].type, views[i].n_in) * static_cast<uint64_t>(views[i].n_out);
      ++prepared_.n_repacked;
    }
  }
  if (only_layer < 0 && prepared_.n_repacked > 0)
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

void Model::plan_buffers(const ModelOptions& options) {
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
  experts_ = std::make_unique<ExpertFeed>(
      be, h, weights_, source_.get(), hook_,
      ExpertFeedOptions{.n_batch = nb, .layer_end = layer_end_,
                        // streamed experts, or experts a device copies in from host views (three tiers)
                        .predict = options.predict_experts ||
                                   (source_ && (source_->streams_experts() || !be.host_visible())),
                        .predict_margin = options.expert_predict_margin, .repack = options.repack,
                        .expert_begin = expert_begin_, .expert_end = expert_end_});
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
          .n_ff_shared = h.n_ff_shared, .n_embd = h.n_embd, .lora_rank = adapters_.rank_max(),
          .host_weight_bytes = host_weight_bytes_, .n_layer = h.n_layer, .expert_bytes = host_expert_bytes_};
}

StatusOr<int> Model::add_lora(const LoraAdapter& adapter, float scale) {
  ASSIGN_OR_RETURN(const int index, adapters_.add(*backend_, *file_, adapter, scale));
  backend_->reserve(scratch_needs());  // lora()'s A x rows for the widest rank
  return index;
}

namespace {

KvShape kv_shape_from(const ModelHparams& hp, DType embd_type, int64_t n_ctx_max) {
  return KvShape{.n_layer = hp.n_layer, .n_embd_kv = hp.n_embd_kv(), .n_head_kv = hp.n_head_kv,
                 .window = hp.kv_window(), .n_ctx_max = n_ctx_max > 0 ? n_ctx_max : hp.n_ctx_train,
                 .default_dtype = embd_type == DType::kF32 ? KvDtype::kF32 : KvDtype::kF16};
}

}  // namespace

StatusOr<KvShape> kv_shape_of(const ModelFile& file, int64_t n_ctx_max) {
  ASSIGN_OR_RETURN(const ModelHparams hp, hparams_from_metadata(file.metadata));
  const TensorInfo* embd = file.find(hp.spec->find(TensorRole::kTokenEmbd)->gguf);
  if (!embd) return data_loss("tensor '{}' is missing", hp.spec->find(TensorRole::kTokenEmbd)->gguf);
  return kv_shape_from(hp, embd->type, n_ctx_max);
}

KvShape Model::kv_shape() const { return kv_shape_from(hp_, weights_.token_embd.type, n_ctx_max_); }

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
  if (stages_) seqs = stages_->pieces(*this, seqs);  // the same tokens and logits, maybe in more pieces
  RETURN_IF_ERROR(begin_step(seqs, kv, /*embed=*/true));
  Status st = stages_ ? stages_->run_step(*this, seqs, kv)
                      : run_stage(0, seqs.size(), 0, step_n_, kv, /*count_routing=*/false);
  if (!st.ok()) {
    backend_->end_step();  // what was enqueued runs; the step stops here
    return st;
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
  if (profile_) profile_->begin();
  if (embed) {
    be.begin_step(n, this);  // finish_step (or a failing stage) ends it
    int64_t t = 0;
    for (const ForwardSeq& s : seqs) {
      be.embed(weights_.token_embd, s.tokens, h.embd_scale, x_->floats() + t * h.n_embd);
      t += static_cast<int64_t>(s.tokens.size());
    }
    if (profile_) profile_->mark("embed");
    emit("embd", -1, x_->floats(), n, h.n_embd);
  }
  const std::span<const int64_t> positions(positions_.data(), static_cast<size_t>(n));
  be.rope_tables(positions, rope_.inv_freq, rope_.magnitude, cos_sin_->floats());
  if (cos_sin_swa_) be.rope_tables(positions, rope_swa_.inv_freq, rope_swa_.magnitude, cos_sin_swa_->floats());
  if (profile_) profile_->mark("rope tables");
  return Status();
}

Status Model::finish_step(float* logits) {
  if (source_) source_->end_step(step_n_);
  const ModelHparams& h = hp_;
  const int64_t n_out = step_n_out_;
  if (n_out == 0) {
    backend_->end_step();
    experts_->end_step();
    return Status();
  }
  backend_->logits({.x = x_->floats(), .rows = logit_rows_.data(), .n_out = n_out,
                    .norm = weights_.output_norm.data(), .eps = h.rms_eps, .n_embd = h.n_embd, .xn = xn_->floats(),
                    .output = weights_.output, .logits = logits});
  if (profile_) {
    const MatmulOut head[1] = {{weights_.output, nullptr}};
    profile_->mark("output norm + logits", matmul_work(head, n_out));
  }
  backend_->end_step();
  experts_->end_step();  // what a device kept of the routing: read with the logits, counted now
  if (h.final_softcap > 0.0f) {  // gemma2: cap * tanh(logit / cap)
    const float cap = h.final_softcap, inv = 1.0f / h.final_softcap;
    for (int64_t i = 0; i < n_out * h.n_vocab; ++i) logits[i] = cap * std::tanh(logits[i] * inv);
  }
  emit("logits", -1, logits, n_out, h.n_vocab);
  return Status();
}

void Model::set_routing_counters(std::vector<Counter*> counters) {
  experts_->set_routing_counters(std::move(counters));
}

Status Model::run_stage(size_t seq_begin, size_t seq_end, int64_t t0, int64_t n, KvStore& kv, bool count_routing) {
  // The micro-batch's adapters: its sequences' tokens are rows [0, n) of the views below.
  const size_t n_seqs = seq_end - seq_begin;
  const bool adapted = adapters_.plan(std::span(lora_masks_.data() + seq_begin, n_seqs),
                                      std::span(lora_lens_.data() + seq_begin, n_seqs));
  auto emit_fn = [this](std::string_view name, int64_t layer, const float* data, int64_t n_tok, int64_t width) {
    emit(name, layer, data, n_tok, width);
  };
  // The micro-batch's rows of every activation (a whole step: t0 = 0).
  const int64_t n_rot = hp_.n_rot;
  float* x = x_->floats() + t0 * hp_.n_embd;
  float* cos_sin = cos_sin_->floats() + t0 * n_rot;
  float* cos_sin_swa = cos_sin_swa_ ? cos_sin_swa_->floats() + t0 * n_rot : nullptr;
  experts_->predict(layer_begin_, x, n);
  for (int64_t l = layer_begin_; l < layer_end_; ++l) {
    LayerWeights& w = weights_.layers[static_cast<size_t>(l)];
    if (source_) {
      LayerWeightPointers p;
      if (Status st = source_->acquire(l, &p); !st.ok()) return st;
      if (!on_device(l)) bind_layer(w, p);
      if (profile_) profile_->mark("weights wait");  // the layer's streamed bytes
    }
    const LayerStep step{.be = *backend_, .hp = hp_, .w = w, .layer = l, .n_tok = n,
                         .x = x, .xn = xn_->floats() + t0 * hp_.n_embd, .q = q_->floats() + t0 * hp_.n_embd_q(),
                         .k = k_->floats() + t0 * hp_.n_embd_kv(), .v = v_->floats() + t0 * hp_.n_embd_kv(),
                         .att = att_->floats() + t0 * hp_.n_embd_q(), .proj = proj_->floats() + t0 * hp_.n_embd,
                         .gate = gate_->floats() + t0 * hp_.n_ff, .up = up_->floats() + t0 * hp_.n_ff,
                         .cos_sin = hp_.layer_has_own_rope(l) ? cos_sin_swa : cos_sin,
                         .seqs = std::span(attn_seqs_.data() + seq_begin, seq_end - seq_begin), .kv = kv,
                         .kv_rows = kv_rows_.data() + t0, .emit = emit_fn,
                         .lora = adapted ? &adapters_ : nullptr, .profile = profile_};
    attention_block(step);
    if (!hp_.layer_is_moe(l)) {
      dense_ffn_block(step);
    } else if (Status st = experts_->ffn_block(step); !st.ok()) {
      release_layer(l);  // the layer and whatever experts it pinned
      return st;
    }
    experts_->predict(l + 1, x, n);  // the next routed layer's, from the state entering it
    if (profile_ && hp_.is_moe()) profile_->mark("expert prediction");
    emit("l_out", l, x, n, hp_.n_embd);
    release_layer(l);
  }
  if (count_routing) experts_->end_step();  // routing the device kept (one wait a stage, not one a routed layer)
  return Status();
}

}  // namespace sluice
