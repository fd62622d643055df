#include "model/llama_model.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include <fmt/format.h>

#include "backend/cpu/fast_ops.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/repack.h"
#include "base/check.h"
#include "quant/quant.h"

namespace sluice {
namespace {

// Inverse RoPE frequencies after linear / llama3 scaling and an optional
// per-frequency divisor tensor (rope_freqs.weight, as llama-3.1 GGUFs carry).
std::vector<double> rope_inv_freq(const ModelHparams& hp, const std::vector<float>& freq_factors) {
  const int64_t half = hp.n_rot / 2;
  std::vector<double> inv(static_cast<size_t>(half));
  const double pi = 3.14159265358979323846;
  for (int64_t i = 0; i < half; ++i) {
    double f = std::pow(static_cast<double>(hp.rope_freq_base), -2.0 * static_cast<double>(i) / hp.n_rot);
    if (hp.rope_scaling == RopeScaling::kLinear) {
      f /= hp.rope_scale_factor;
    } else if (hp.rope_scaling == RopeScaling::kLlama3) {
      const double wavelen = 2.0 * pi / f;
      const double low_wavelen = hp.rope_orig_ctx / hp.rope_low_freq_factor;
      const double high_wavelen = hp.rope_orig_ctx / hp.rope_high_freq_factor;
      if (wavelen > low_wavelen) {
        f /= hp.rope_scale_factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (hp.rope_orig_ctx / wavelen - hp.rope_low_freq_factor) /
                              (hp.rope_high_freq_factor - hp.rope_low_freq_factor);
        f = (1.0 - smooth) * f / hp.rope_scale_factor + smooth * f;
      }
    }
    if (!freq_factors.empty()) f /= freq_factors[static_cast<size_t>(i)];
    inv[static_cast<size_t>(i)] = f;
  }
  return inv;
}

}  // namespace

LlamaModel::LlamaModel(std::shared_ptr<const ModelFile> file, const ModelHparams& hp,
                       const ModelOptions& options)
    : file_(std::move(file)),
      hp_(hp),
      n_batch_(std::max<int64_t>(1, options.n_batch)),
      pool_(options.pool ? options.pool : std::make_shared<ThreadPool>(options.n_threads)),
      source_(options.weights) {}

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::load(std::shared_ptr<const ModelFile> file,
                                                       const ModelOptions& options) {
  ASSIGN_OR_RETURN(ModelHparams hp, hparams_from_metadata(file->metadata));
  if (options.max_seqs <= 0) return invalid_argument("max_seqs must be positive, got {}", options.max_seqs);
  std::unique_ptr<LlamaModel> m(new LlamaModel(std::move(file), hp, options));
  RETURN_IF_ERROR(m->bind_weights());
  const ModelHparams& h = m->hp_;
  const int64_t nb = m->n_batch_;
  const auto sz = [](int64_t n) { return static_cast<size_t>(n); };
  m->x_.resize(sz(nb * h.n_embd));
  m->xn_.resize(sz(nb * h.n_embd));
  m->q_.resize(sz(nb * h.n_embd_q()));
  m->k_.resize(sz(nb * h.n_embd_kv()));
  m->v_.resize(sz(nb * h.n_embd_kv()));
  m->att_.resize(sz(nb * h.n_embd_q()));
  m->proj_.resize(sz(nb * h.n_embd));
  m->gate_.resize(sz(nb * h.n_ff));
  m->up_.resize(sz(nb * h.n_ff));
  m->cos_sin_.resize(sz(nb * h.n_rot));
  m->kv_rows_.resize(sz(nb));
  const int64_t widest = std::max({h.n_embd, h.n_ff, h.n_embd_q()});
  m->act_.resize(cpu::matmul_scratch_bytes(nb, widest));
  m->isa_ = cpu::active_isa();
  m->max_seqs_ = options.max_seqs;
  m->n_ctx_max_ = options.n_ctx_max > 0 ? options.n_ctx_max : h.n_ctx_train;
  m->attn_partials_.resize(cpu::paged_attention_partials_floats(nb * h.n_head_kv, m->n_ctx_max_, h.n_head,
                                                                h.n_head_kv, h.head_dim, m->pool_->n_threads()));
  m->attn_seqs_.resize(sz(options.max_seqs));
  if (options.repack && !m->source_ && m->isa_ != cpu::Isa::kScalar) m->repack_weights();
  return m;
}

void LlamaModel::repack_weights() {
  // Matrices sharing a matmul_group dispatch are repacked together or not at
  // all (cpu::group_layouts); the others are copied as they are (GGUF rows):
  // every layer matrix and the output matrix end up in the arena below.
  struct Job {
    cpu::WeightView* w;
    cpu::WeightLayout layout;
  };
  std::vector<Job> todo;
  auto add = [&](std::initializer_list<cpu::WeightView*> group) {
    cpu::WeightView views[4];
    cpu::WeightLayout layouts[4];
    size_t n = 0;
    for (const cpu::WeightView* w : group) views[n++] = *w;
    cpu::group_layouts(std::span(views, n), isa_, layouts);
    n = 0;
    for (cpu::WeightView* w : group) todo.push_back({w, layouts[n++]});
  };
  for (LayerWeights& w : layers_) {
    add({&w.wq, &w.wk, &w.wv});
    add({&w.wo});
    add({&w.ffn_gate, &w.ffn_up});
    add({&w.ffn_down});
  }
  add({&output_});  // token_embd_ stays in the mapping (row lookups)
  if (todo.empty()) return;

  // One arena (64-byte aligned slices) on huge pages: decode streams all of it
  // every token, and with 4 KiB pages of the mapping it would take a page walk
  // every few rows.
  auto matrix_bytes = [](const cpu::WeightView& w) { return row_bytes(w.type, w.n_in) * static_cast<size_t>(w.n_out); };
  size_t total = 0;
  for (const Job& j : todo) total += (matrix_bytes(*j.w) + 63) / 64 * 64;
  repacked_ = HugeBuffer(total);
  uint8_t* next = repacked_.data();
  for (const Job& j : todo) {
    cpu::WeightView* w = j.w;
    const size_t bytes = matrix_bytes(*w);
    const int64_t group = j.layout == cpu::WeightLayout::kRows ? 64 : cpu::repack_group_rows(j.layout);
    const size_t rb = row_bytes(w->type, w->n_in);
    pool_->parallel_for((w->n_out + group - 1) / group, [&](int64_t g0, int64_t g1) {
      const int64_t r0 = g0 * group, r1 = std::min(w->n_out, g1 * group);
      if (j.layout == cpu::WeightLayout::kRows)
        std::memcpy(next + r0 * rb, w->data + r0 * rb, static_cast<size_t>(r1 - r0) * rb);
      else
        cpu::repack_rows(j.layout, w->data, next, w->n_in, r0, r1);
    });
    w->data = next;
    w->layout = j.layout;
    next += (bytes + 63) / 64 * 64;
    if (j.layout == cpu::WeightLayout::kRows) {
      copied_bytes_ += bytes;
    } else {
      repacked_bytes_ += bytes;
      ++n_repacked_;
      repacked_layouts_ |= 1u << static_cast<unsigned>(j.layout);
    }
  }
}

std::string LlamaModel::repack_summary() const {
  if (n_repacked_ == 0 && copied_bytes_ == 0) return "";
  std::string layouts;
  for (cpu::WeightLayout l : {cpu::WeightLayout::kQ4_0x4, cpu::WeightLayout::kQ8_0x4, cpu::WeightLayout::kQ8_0x16})
    if (repacked_layouts_ & (1u << static_cast<unsigned>(l)))
      layouts += fmt::format("{}{} ({}-row interleave)", layouts.empty() ? "" : ", ", cpu::layout_name(l),
                             cpu::repack_group_rows(l));
  std::string out;
  if (n_repacked_ > 0)
    out = fmt::format("{} matrices repacked at load to {} ({:.1f} MiB)", n_repacked_, layouts,
                      static_cast<double>(repacked_bytes_) / (1 << 20));
  if (copied_bytes_ > 0)
    out += fmt::format("{}{:.1f} MiB of GGUF rows copied", out.empty() ? "" : ", ",
                       static_cast<double>(copied_bytes_) / (1 << 20));
  return out + " into memory on huge pages";
}

Status LlamaModel::bind_weights() {
  const ModelFile& f = *file_;
  // With a weight source, resident tensors come from it and layer matrices are
  // bound at acquire(); the mapping's bytes are never touched.
  auto bytes_of = [&](const TensorInfo* t) -> StatusOr<const uint8_t*> {
    if (!source_) return t->data;
    const uint8_t* p = source_->resident(t->name);
    if (!p) return internal_error("weight source has no resident copy of '{}'", t->name);
    return p;
  };
  auto matrix = [&](const std::string& name, int64_t n_in, int64_t n_out) -> StatusOr<cpu::WeightView> {
    const TensorInfo* t = f.find(name);
    if (!t) return data_loss("tensor '{}' is missing", name);
    if (t->ne.size() != 2 || t->ne[0] != n_in || t->ne[1] != n_out) {
      return data_loss("tensor '{}' has shape {}, expected [{}, {}]", name, t->shape_string(), n_in, n_out);
    }
    weight_bytes_ += t->n_bytes;
    const bool layer_matrix = name.rfind("blk.", 0) == 0;
    const uint8_t* data = t->data;
    if (source_ && !layer_matrix) {
      ASSIGN_OR_RETURN(data, bytes_of(t));
    } else if (source_) {
      data = nullptr;  // bound per layer at acquire()
    }
    return cpu::WeightView{.type = t->type, .data = data, .n_in = n_in, .n_out = n_out};
  };
  auto vec = [&](const std::string& name, int64_t n, bool optional) -> StatusOr<std::vector<float>> {
    const TensorInfo* t = f.find(name);
    if (!t) {
      if (optional) return std::vector<float>{};
      return data_loss("tensor '{}' is missing", name);
    }
    if (t->n_elements() != n || t->ne[0] != n) {
      return data_loss("tensor '{}' has shape {}, expected [{}]", name, t->shape_string(), n);
    }
    std::vector<float> out(static_cast<size_t>(n));
    ASSIGN_OR_RETURN(const uint8_t* data, bytes_of(t));
    dequantize_row(t->type, data, out.data(), n);
    return out;
  };

  const TensorInfo* embd = f.find("token_embd.weight");
  if (!embd) return data_loss("tensor 'token_embd.weight' is missing");
  if (embd->ne.size() != 2 || embd->ne[0] != hp_.n_embd) {
    return data_loss("tensor 'token_embd.weight' has shape {}, expected [{}, n_vocab]", embd->shape_string(), hp_.n_embd);
  }
  if (hp_.n_vocab > embd->ne[1]) {
    return data_loss("tokenizer has {} tokens but token_embd.weight only {} rows", hp_.n_vocab, embd->ne[1]);
  }
  hp_.n_vocab = embd->ne[1];
  ASSIGN_OR_RETURN(const uint8_t* embd_data, bytes_of(embd));
  token_embd_ = cpu::WeightView{.type = embd->type, .data = embd_data, .n_in = hp_.n_embd, .n_out = hp_.n_vocab};
  weight_bytes_ += row_bytes(embd->type, hp_.n_embd);  // one row per token
  ASSIGN_OR_RETURN(output_norm_, vec("output_norm.weight", hp_.n_embd, false));
  if (f.find("output.weight")) {
    ASSIGN_OR_RETURN(output_, matrix("output.weight", hp_.n_embd, hp_.n_vocab));
  } else {
    output_ = token_embd_;  // tied embeddings
    weight_bytes_ += embd->n_bytes;
  }
  std::vector<float> freq_factors;
  ASSIGN_OR_RETURN(freq_factors, vec("rope_freqs.weight", hp_.n_rot / 2, true));
  inv_freq_ = rope_inv_freq(hp_, freq_factors);

  layers_.resize(static_cast<size_t>(hp_.n_layer));
  for (int64_t l = 0; l < hp_.n_layer; ++l) {
    LayerWeights& w = layers_[static_cast<size_t>(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    ASSIGN_OR_RETURN(w.attn_norm, vec(p + "attn_norm.weight", hp_.n_embd, false));
    ASSIGN_OR_RETURN(w.wq, matrix(p + "attn_q.weight", hp_.n_embd, hp_.n_embd_q()));
    ASSIGN_OR_RETURN(w.wk, matrix(p + "attn_k.weight", hp_.n_embd, hp_.n_embd_kv()));
    ASSIGN_OR_RETURN(w.wv, matrix(p + "attn_v.weight", hp_.n_embd, hp_.n_embd_kv()));
    ASSIGN_OR_RETURN(w.wo, matrix(p + "attn_output.weight", hp_.n_embd_q(), hp_.n_embd));
    ASSIGN_OR_RETURN(w.bq, vec(p + "attn_q.bias", hp_.n_embd_q(), true));
    ASSIGN_OR_RETURN(w.bk, vec(p + "attn_k.bias", hp_.n_embd_kv(), true));
    ASSIGN_OR_RETURN(w.bv, vec(p + "attn_v.bias", hp_.n_embd_kv(), true));
    ASSIGN_OR_RETURN(w.ffn_norm, vec(p + "ffn_norm.weight", hp_.n_embd, false));
    ASSIGN_OR_RETURN(w.ffn_gate, matrix(p + "ffn_gate.weight", hp_.n_embd, hp_.n_ff));
    ASSIGN_OR_RETURN(w.ffn_up, matrix(p + "ffn_up.weight", hp_.n_embd, hp_.n_ff));
    ASSIGN_OR_RETURN(w.ffn_down, matrix(p + "ffn_down.weight", hp_.n_ff, hp_.n_embd));
  }
  return Status();
}

KvDtype LlamaModel::default_kv_dtype() const {
  return token_embd_.type == DType::kF32 ? KvDtype::kF32 : KvDtype::kF16;
}

KvLayout LlamaModel::kv_layout(KvDtype dtype, int64_t block_size) const {
  return KvLayout{.n_layer = hp_.n_layer, .n_embd_kv = hp_.n_embd_kv(), .block_size = block_size, .dtype = dtype,
                  .n_head_kv = hp_.n_head_kv};
}

KvCache LlamaModel::make_kv_cache(int64_t n_ctx) const {
  auto c = make_kv_cache(n_ctx, default_kv_dtype());
  CHECK(c.ok());  // f32/f16 layouts of a loaded model are always valid
  return std::move(c).value();
}

StatusOr<KvCache> LlamaModel::make_kv_cache(int64_t n_ctx, KvDtype dtype) const {
  if (n_ctx > n_ctx_max_) {
    return invalid_argument("context {} exceeds the model's planned maximum {} (raise n_ctx_max)", n_ctx, n_ctx_max_);
  }
  return KvCache::create(kv_layout(dtype), n_ctx);
}

Status LlamaModel::forward(std::span<const int32_t> tokens, KvCache& kv, float* logits, bool all_logits) {
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
                   .n_logits = all_logits ? len : (last_chunk ? 1 : 0)};
    float* out = all_logits ? logits + start * hp_.n_vocab : logits;
    RETURN_IF_ERROR(forward(std::span(&seq, 1), kv.store(), out));
    kv.set_n_past(kv.n_past() + len);
  }
  return Status();
}

Status LlamaModel::validate(std::span<const ForwardSeq> seqs, const KvStore& kv) const {
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
    for (int64_t b = 0; b < blocks_needed; ++b) {
      const int32_t id = s.block_table[static_cast<size_t>(b)];
      if (id < 0 || id >= kv.n_blocks()) return invalid_argument("block id {} out of range [0, {})", id, kv.n_blocks());
    }
    for (int32_t t : s.tokens) {
      if (t < 0 || t >= hp_.n_vocab) return invalid_argument("token id {} out of range [0, {})", t, hp_.n_vocab);
    }
    n += len;
  }
  if (n > n_batch_) return invalid_argument("{} tokens in one step exceed n_batch {}", n, n_batch_);
  return Status();
}

void LlamaModel::rope_tables(std::span<const ForwardSeq> seqs) {
  const int64_t half = hp_.n_rot / 2;
  int64_t t = 0;
  for (const ForwardSeq& s : seqs) {
    for (size_t i = 0; i < s.tokens.size(); ++i, ++t) {
      const double pos = static_cast<double>(s.pos0 + static_cast<int64_t>(i));
      float* cs = cos_sin_.data() + t * hp_.n_rot;
      for (int64_t k = 0; k < half; ++k) {
        const double angle = pos * inv_freq_[static_cast<size_t>(k)];
        cs[2 * k] = static_cast<float>(std::cos(angle));
        cs[2 * k + 1] = static_cast<float>(std::sin(angle));
      }
    }
  }
}

Status LlamaModel::forward(std::span<const ForwardSeq> seqs, KvStore& kv, float* logits) {
  RETURN_IF_ERROR(validate(seqs, kv));
  int64_t n = 0;
  for (const ForwardSeq& s : seqs) n += static_cast<int64_t>(s.tokens.size());
  const ModelHparams& h = hp_;
  float* x = x_.data();

  int64_t t = 0;
  for (const ForwardSeq& s : seqs) {
    for (int32_t tok : s.tokens) {
      const uint8_t* row = token_embd_.data + static_cast<size_t>(tok) * row_bytes(token_embd_.type, h.n_embd);
      dequantize_row(token_embd_.type, row, x + t++ * h.n_embd, h.n_embd);
    }
  }
  emit("embd", -1, x, n, h.n_embd);
  rope_tables(seqs);
  RETURN_IF_ERROR(run_layers(seqs, n, kv));

  // Logits for each sequence's trailing n_logits tokens, gathered into xn.
  int64_t n_out = 0;
  t = 0;
  for (const ForwardSeq& s : seqs) {
    const int64_t len = static_cast<int64_t>(s.tokens.size());
    for (int64_t i = len - s.n_logits; i < len; ++i) {
      std::copy_n(x + (t + i) * h.n_embd, h.n_embd, xn_.data() + n_out++ * h.n_embd);
    }
    t += len;
  }
  if (n_out == 0) return Status();
  const cpu::MatmulJob out[1] = {{output_, logits}};
  cpu::matmul_group(out, xn_.data(), h.n_embd, n_out, act_.data(), *pool_, isa_, [&](int64_t t0, int64_t t1) {
    float* rows = xn_.data() + t0 * h.n_embd;
    cpu::fast::rmsnorm(rows, output_norm_.data(), rows, t1 - t0, h.n_embd, h.rms_eps, isa_);
  });
  emit("logits", -1, logits, n_out, h.n_vocab);
  return Status();
}

Status LlamaModel::run_layers(std::span<const ForwardSeq> seqs, int64_t n, KvStore& kv) {
  const ModelHparams& h = hp_;
  const int64_t n_kv = h.n_embd_kv();
  const int64_t bs = kv.layout().block_size;
  const size_t rb = kv.row_bytes();
  float* x = x_.data();
  float* xn = xn_.data();
  const auto layout = h.rope_neox ? cpu::RopeLayout::kNeox : cpu::RopeLayout::kAdjacent;
  const cpu::KvRowType row_type = kv.layout().dtype == KvDtype::kF32   ? cpu::KvRowType::kF32
                                  : kv.layout().dtype == KvDtype::kF16 ? cpu::KvRowType::kF16
                                                                       : cpu::KvRowType::kQ8_0;
  // Tokens are claimed one at a time by the threads when there is enough work
  // (a vCPU the machine slows down then takes fewer).
  auto per_token = [&](FunctionRef<void(int64_t, int64_t)> fn) {
    if (n >= 4) pool_->parallel_for_claimed(n, 1, fn);
    else fn(0, n);
  };
  // Where each token's K/V row lives: (sequence, position) -> store row.
  auto kv_row = [&](const ForwardSeq& s, int64_t pos) {
    return static_cast<size_t>(s.block_table[static_cast<size_t>(pos / bs)] * bs + pos % bs);
  };

  // Each token's K/V row in the store (the same in every layer).
  {
    int64_t t = 0;
    for (const ForwardSeq& s : seqs)
      for (size_t i = 0; i < s.tokens.size(); ++i, ++t)
        kv_rows_[static_cast<size_t>(t)] = static_cast<int64_t>(kv_row(s, s.pos0 + static_cast<int64_t>(i)));
  }

  for (int64_t l = 0; l < h.n_layer; ++l) {
    LayerWeights& w = layers_[static_cast<size_t>(l)];
    if (source_) {
      LayerWeightPointers p;
      if (Status st = source_->acquire(l, &p); !st.ok()) return st;
      w.wq.data = p.attn_q;
      w.wk.data = p.attn_k;
      w.wv.data = p.attn_v;
      w.wo.data = p.attn_output;
      w.ffn_gate.data = p.ffn_gate;
      w.ffn_up.data = p.ffn_up;
      w.ffn_down.data = p.ffn_down;
    }

    // Attention block: norm (in the q/k/v dispatch, token by token before its
    // conversion), q/k/v projections, bias, RoPE, K/V rows into the paged
    // store, paged attention, output projection.
    const cpu::MatmulJob qkv[3] = {{w.wq, q_.data()}, {w.wk, k_.data()}, {w.wv, v_.data()}};
    cpu::matmul_group(qkv, xn, h.n_embd, n, act_.data(), *pool_, isa_, [&](int64_t t0, int64_t t1) {
      cpu::fast::rmsnorm(x + t0 * h.n_embd, w.attn_norm.data(), xn + t0 * h.n_embd, t1 - t0, h.n_embd, h.rms_eps, isa_);
    });
    emit("attn_norm", l, xn, n, h.n_embd);
    // Bias, RoPE, and the token's K/V rows into the paged store (its own row).
    // The rows are asked for (for writing) before the bias and RoPE work: their
    // slices are scattered over the block, each a cache miss otherwise.
    uint8_t* k_rows = kv.k_layer(l);
    uint8_t* v_rows = kv.v_layer(l);
    per_token([&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        kv.prefetch_row(k_rows, kv_rows_[static_cast<size_t>(t)]);
        kv.prefetch_row(v_rows, kv_rows_[static_cast<size_t>(t)]);
        float* q = q_.data() + t * h.n_embd_q();
        float* k = k_.data() + t * n_kv;
        float* v = v_.data() + t * n_kv;
        if (!w.bq.empty()) cpu::fast::add(q, w.bq.data(), q, h.n_embd_q(), isa_);
        if (!w.bk.empty()) cpu::fast::add(k, w.bk.data(), k, n_kv, isa_);
        if (!w.bv.empty()) cpu::fast::add(v, w.bv.data(), v, n_kv, isa_);
        const float* cs = cos_sin_.data() + t * h.n_rot;
        cpu::fast::rope(q, h.n_head, h.head_dim, h.n_rot, cs, layout, isa_);
        cpu::fast::rope(k, h.n_head_kv, h.head_dim, h.n_rot, cs, layout, isa_);
        kv.store_row(k, k_rows, kv_rows_[static_cast<size_t>(t)]);
        kv.store_row(v, v_rows, kv_rows_[static_cast<size_t>(t)]);
      }
    });
    emit("q", l, q_.data(), n, h.n_embd_q());
    emit("k", l, k_.data(), n, n_kv);
    emit("v", l, v_.data(), n, n_kv);
    int64_t t = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      const ForwardSeq& s = seqs[i];
      attn_seqs_[i] = cpu::PagedSeq{.q = q_.data() + t * h.n_embd_q(), .out = att_.data() + t * h.n_embd_q(),
                                    .n_tokens = static_cast<int64_t>(s.tokens.size()), .pos0 = s.pos0,
                                    .block_table = s.block_table.data()};
      t += static_cast<int64_t>(s.tokens.size());
    }
    cpu::paged_attention(
        cpu::PagedAttentionArgs{.seqs = std::span(attn_seqs_.data(), seqs.size()),
                                .kv = {.k = k_rows, .v = v_rows, .row_bytes = rb, .block_size = bs, .type = row_type,
                                       .n_slices = kv.n_slices()},
                                .n_head = h.n_head, .n_head_kv = h.n_head_kv, .head_dim = h.head_dim,
                                .scale = 1.0f / std::sqrt(static_cast<float>(h.head_dim))},
        attn_partials_.data(), attn_partials_.size(), *pool_, isa_);
    emit("attn_out", l, att_.data(), n, h.n_embd_q());
    const cpu::MatmulJob wo[1] = {{w.wo, proj_.data()}};
    cpu::matmul_group(wo, att_.data(), h.n_embd_q(), n, act_.data(), *pool_, isa_);
    cpu::fast::add(x, proj_.data(), x, n * h.n_embd, isa_);

    // Feed-forward block: norm, gate and up, SwiGLU, down; the norm and the
    // SwiGLU ride on the dispatches that convert their outputs.
    const cpu::MatmulJob gate_up[2] = {{w.ffn_gate, gate_.data()}, {w.ffn_up, up_.data()}};
    cpu::matmul_group(gate_up, xn, h.n_embd, n, act_.data(), *pool_, isa_, [&](int64_t t0, int64_t t1) {
      cpu::fast::rmsnorm(x + t0 * h.n_embd, w.ffn_norm.data(), xn + t0 * h.n_embd, t1 - t0, h.n_embd, h.rms_eps, isa_);
    });
    const cpu::MatmulJob down[1] = {{w.ffn_down, proj_.data()}};
    cpu::matmul_group(down, gate_.data(), h.n_ff, n, act_.data(), *pool_, isa_, [&](int64_t t0, int64_t t1) {
      cpu::fast::swiglu(gate_.data() + t0 * h.n_ff, up_.data() + t0 * h.n_ff, gate_.data() + t0 * h.n_ff,
                        (t1 - t0) * h.n_ff, isa_);
    });
    cpu::fast::add(x, proj_.data(), x, n * h.n_embd, isa_);
    emit("l_out", l, x, n, h.n_embd);
    if (source_) source_->release(l);
  }
  if (source_) source_->end_step(n);
  return Status();
}

}  // namespace sluice
