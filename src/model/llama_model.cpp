#include "model/llama_model.h"

#include <algorithm>
#include <cmath>

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

void add_rows(float* x, const float* b, int64_t n_tokens, int64_t n) {
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t i = 0; i < n; ++i) x[t * n + i] += b[i];
}

}  // namespace

LlamaModel::LlamaModel(std::shared_ptr<const ModelFile> file, const ModelHparams& hp,
                       const ModelOptions& options)
    : file_(std::move(file)), hp_(hp), n_batch_(std::max<int64_t>(1, options.n_batch)), pool_(options.n_threads) {}

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::load(std::shared_ptr<const ModelFile> file,
                                                       const ModelOptions& options) {
  ASSIGN_OR_RETURN(ModelHparams hp, hparams_from_metadata(file->metadata));
  std::unique_ptr<LlamaModel> m(new LlamaModel(std::move(file), hp, options));
  RETURN_IF_ERROR(m->bind_weights());
  const ModelHparams& h = m->hp_;
  const int64_t nb = m->n_batch_;
  m->x_.resize(static_cast<size_t>(nb * h.n_embd));
  m->xn_.resize(static_cast<size_t>(nb * h.n_embd));
  m->q_.resize(static_cast<size_t>(nb * h.n_embd_q()));
  m->att_.resize(static_cast<size_t>(nb * h.n_embd_q()));
  m->proj_.resize(static_cast<size_t>(nb * h.n_embd));
  m->gate_.resize(static_cast<size_t>(nb * h.n_ff));
  m->up_.resize(static_cast<size_t>(nb * h.n_ff));
  m->cos_sin_.resize(static_cast<size_t>(nb * h.n_rot));
  const int64_t widest = std::max({h.n_embd, h.n_ff, h.n_embd_q(), h.head_dim});
  m->scratch_.resize(static_cast<size_t>(m->pool_.n_threads() * widest));
  return m;
}

Status LlamaModel::bind_weights() {
  const ModelFile& f = *file_;
  auto matrix = [&](const std::string& name, int64_t n_in, int64_t n_out) -> StatusOr<cpu::WeightView> {
    const TensorInfo* t = f.find(name);
    if (!t) return data_loss("tensor '{}' is missing", name);
    if (t->ne.size() != 2 || t->ne[0] != n_in || t->ne[1] != n_out) {
      return data_loss("tensor '{}' has shape {}, expected [{}, {}]", name, t->shape_string(), n_in, n_out);
    }
    weight_bytes_ += t->n_bytes;
    return cpu::WeightView{.type = t->type, .data = t->data, .n_in = n_in, .n_out = n_out};
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
    dequantize_row(t->type, t->data, out.data(), n);
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
  token_embd_ = cpu::WeightView{.type = embd->type, .data = embd->data, .n_in = hp_.n_embd, .n_out = hp_.n_vocab};
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

KvCache LlamaModel::make_kv_cache(int64_t n_ctx) const { return KvCache(hp_.n_layer, n_ctx, hp_.n_embd_kv()); }

Status LlamaModel::forward(std::span<const int32_t> tokens, KvCache& kv, float* logits, bool all_logits) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) return invalid_argument("forward() needs at least one token");
  if (kv.n_embd_kv() != hp_.n_embd_kv()) return invalid_argument("KV cache does not belong to this model");
  if (kv.n_past() + n > kv.n_ctx()) {
    return resource_exhausted("context full: {} cached + {} new tokens > context size {}", kv.n_past(), n, kv.n_ctx());
  }
  for (int32_t t : tokens) {
    if (t < 0 || t >= hp_.n_vocab) return invalid_argument("token id {} out of range [0, {})", t, hp_.n_vocab);
  }
  for (int64_t start = 0; start < n; start += n_batch_) {
    const int64_t len = std::min(n_batch_, n - start);
    const bool last_chunk = start + len == n;
    float* out = nullptr;
    if (all_logits) out = logits + start * hp_.n_vocab;
    else if (last_chunk) out = logits;
    forward_chunk(tokens.data() + start, len, kv, out, all_logits);
  }
  return Status();
}

void LlamaModel::rope_tables(int64_t pos0, int64_t n) {
  const int64_t half = hp_.n_rot / 2;
  for (int64_t t = 0; t < n; ++t) {
    const double pos = static_cast<double>(pos0 + t);
    float* cs = cos_sin_.data() + t * hp_.n_rot;
    for (int64_t i = 0; i < half; ++i) {
      const double angle = pos * inv_freq_[static_cast<size_t>(i)];
      cs[2 * i] = static_cast<float>(std::cos(angle));
      cs[2 * i + 1] = static_cast<float>(std::sin(angle));
    }
  }
}

void LlamaModel::forward_chunk(const int32_t* tokens, int64_t n, KvCache& kv, float* logits, bool all_logits) {
  const ModelHparams& h = hp_;
  const int64_t pos0 = kv.n_past();
  const int64_t n_kv = h.n_embd_kv();
  float* x = x_.data();
  float* xn = xn_.data();
  float* scratch = scratch_.data();
  const auto layout = h.rope_neox ? cpu::RopeLayout::kNeox : cpu::RopeLayout::kAdjacent;

  for (int64_t t = 0; t < n; ++t) {
    const uint8_t* row = token_embd_.data + static_cast<size_t>(tokens[t]) * row_bytes(token_embd_.type, h.n_embd);
    dequantize_row(token_embd_.type, row, x + t * h.n_embd, h.n_embd);
  }
  emit("embd", -1, x, n, h.n_embd);
  rope_tables(pos0, n);

  for (int64_t l = 0; l < h.n_layer; ++l) {
    const LayerWeights& w = layers_[static_cast<size_t>(l)];
    float* k_cache = kv.k(l);  // [n_ctx, n_kv]
    float* v_cache = kv.v(l);
    float* k_new = k_cache + pos0 * n_kv;  // [n, n_kv]
    float* v_new = v_cache + pos0 * n_kv;

    // Attention block.
    cpu::rmsnorm(x, w.attn_norm.data(), xn, n, h.n_embd, h.rms_eps);
    emit("attn_norm", l, xn, n, h.n_embd);
    cpu::matmul(w.wq, xn, q_.data(), n, scratch, pool_);
    cpu::matmul(w.wk, xn, k_new, n, scratch, pool_);
    cpu::matmul(w.wv, xn, v_new, n, scratch, pool_);
    if (!w.bq.empty()) add_rows(q_.data(), w.bq.data(), n, h.n_embd_q());
    if (!w.bk.empty()) add_rows(k_new, w.bk.data(), n, n_kv);
    if (!w.bv.empty()) add_rows(v_new, w.bv.data(), n, n_kv);
    for (int64_t t = 0; t < n; ++t) {
      const float* cs = cos_sin_.data() + t * h.n_rot;
      cpu::rope(q_.data() + t * h.n_embd_q(), h.n_head, h.head_dim, h.n_rot, cs, layout);
      cpu::rope(k_new + t * n_kv, h.n_head_kv, h.head_dim, h.n_rot, cs, layout);
    }
    emit("q", l, q_.data(), n, h.n_embd_q());
    emit("k", l, k_new, n, n_kv);
    emit("v", l, v_new, n, n_kv);
    cpu::attention(cpu::AttentionArgs{.q = q_.data(), .k = k_cache, .v = v_cache, .out = att_.data(),
                                      .n_tokens = n, .pos0 = pos0, .n_head = h.n_head,
                                      .n_head_kv = h.n_head_kv, .head_dim = h.head_dim,
                                      .scale = 1.0f / std::sqrt(static_cast<float>(h.head_dim))},
                   scratch, pool_);
    emit("attn_out", l, att_.data(), n, h.n_embd_q());
    cpu::matmul(w.wo, att_.data(), proj_.data(), n, scratch, pool_);
    for (int64_t i = 0; i < n * h.n_embd; ++i) x[i] += proj_[static_cast<size_t>(i)];

    // Feed-forward block.
    cpu::rmsnorm(x, w.ffn_norm.data(), xn, n, h.n_embd, h.rms_eps);
    cpu::matmul(w.ffn_gate, xn, gate_.data(), n, scratch, pool_);
    cpu::matmul(w.ffn_up, xn, up_.data(), n, scratch, pool_);
    cpu::swiglu(gate_.data(), up_.data(), gate_.data(), n * h.n_ff);
    cpu::matmul(w.ffn_down, gate_.data(), proj_.data(), n, scratch, pool_);
    for (int64_t i = 0; i < n * h.n_embd; ++i) x[i] += proj_[static_cast<size_t>(i)];
    emit("l_out", l, x, n, h.n_embd);
  }
  kv.set_n_past(pos0 + n);
  if (!logits) return;

  // Logits for every token or only the last one.
  const int64_t first = all_logits ? 0 : n - 1;
  const int64_t n_out = n - first;
  cpu::rmsnorm(x + first * h.n_embd, output_norm_.data(), xn, n_out, h.n_embd, h.rms_eps);
  cpu::matmul(output_, xn, logits, n_out, scratch, pool_);
  emit("logits", -1, logits, n_out, h.n_vocab);
}

}  // namespace sluice
