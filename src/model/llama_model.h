// LlamaModel: the llama-family decoder (Llama 2/3, Mistral, TinyLlama, SmolLM,
// Qwen2) on the CPU reference operators.
//
// Per layer:  x += Wo · attn(rope(Wq·n(x) + bq), rope(Wk·n(x) + bk), Wv·n(x) + bv)
//             x += Wdown · (silu(Wgate·n(x)) * Wup·n(x))        n = RMSNorm
// then logits = Wout · n(x). Weights are borrowed from the ModelFile (kept alive
// by a shared_ptr); 1-D tensors (norms, biases) are converted to f32 at load.
// All activation buffers are planned once at load for `n_batch` tokens: forward()
// allocates nothing. forward() takes a batch of tokens of one sequence; it is
// shaped so later batching across sequences only changes where K/V rows live.
// Not thread-safe: one forward() at a time per model (it owns the scratch).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "backend/cpu/ops.h"
#include "base/thread_pool.h"
#include "format/model_file.h"
#include "kv/kv_cache.h"
#include "model/hparams.h"

namespace sluice {

struct LayerWeights {
  std::vector<float> attn_norm;  // [n_embd]
  cpu::WeightView wq;            // [n_embd_q, n_embd]   (n_out, n_in)
  cpu::WeightView wk;            // [n_embd_kv, n_embd]
  cpu::WeightView wv;            // [n_embd_kv, n_embd]
  cpu::WeightView wo;            // [n_embd, n_embd_q]
  std::vector<float> bq;         // [n_embd_q] or empty
  std::vector<float> bk;         // [n_embd_kv] or empty
  std::vector<float> bv;         // [n_embd_kv] or empty
  std::vector<float> ffn_norm;   // [n_embd]
  cpu::WeightView ffn_gate;      // [n_ff, n_embd]
  cpu::WeightView ffn_up;        // [n_ff, n_embd]
  cpu::WeightView ffn_down;      // [n_embd, n_ff]
};

struct ModelOptions {
  int n_threads = 0;      // <= 0: one per core
  int64_t n_batch = 256;  // most tokens per internal forward chunk
};

// Called (when set) with each named activation of a forward chunk, so a pass can
// be dumped and diffed layer by layer. layer = -1 outside the blocks.
//   data: [n_tokens, n]
using ActivationHook =
    std::function<void(std::string_view name, int64_t layer, const float* data, int64_t n_tokens, int64_t n)>;

class LlamaModel {
 public:
  // Validates hyper-parameters and every tensor's presence, type and shape.
  static StatusOr<std::unique_ptr<LlamaModel>> load(std::shared_ptr<const ModelFile> file,
                                                    const ModelOptions& options = {});

  const ModelHparams& hparams() const { return hp_; }
  const ModelFile& file() const { return *file_; }
  int n_threads() const { return pool_.n_threads(); }
  // Bytes of weights one forward pass reads (all matrices + embeddings row).
  uint64_t weight_bytes() const { return weight_bytes_; }

  // A KV cache for up to n_ctx positions of one sequence.
  KvCache make_kv_cache(int64_t n_ctx) const;

  // Runs `tokens` at positions kv.n_past() .. kv.n_past() + n - 1, stores their
  // K/V in `kv` and advances kv.n_past().
  //   logits: [n, n_vocab] if all_logits, else [1, n_vocab] (last token only)
  // Errors: token id out of range, context full.
  Status forward(std::span<const int32_t> tokens, KvCache& kv, float* logits, bool all_logits);

  void set_activation_hook(ActivationHook hook) { hook_ = std::move(hook); }

 private:
  LlamaModel(std::shared_ptr<const ModelFile> file, const ModelHparams& hp, const ModelOptions& options);
  Status bind_weights();
  void forward_chunk(const int32_t* tokens, int64_t n, KvCache& kv, float* logits, bool all_logits);
  void rope_tables(int64_t pos0, int64_t n);
  void emit(std::string_view name, int64_t layer, const float* data, int64_t n_tokens, int64_t n) const {
    if (hook_) hook_(name, layer, data, n_tokens, n);
  }

  std::shared_ptr<const ModelFile> file_;
  ModelHparams hp_;
  int64_t n_batch_;
  ThreadPool pool_;
  uint64_t weight_bytes_ = 0;

  cpu::WeightView token_embd_;     // [n_vocab, n_embd]
  std::vector<float> output_norm_; // [n_embd]
  cpu::WeightView output_;         // [n_vocab, n_embd] (token_embd_ when tied)
  std::vector<LayerWeights> layers_;
  std::vector<double> inv_freq_;   // [n_rot / 2] after scaling

  // Activations, [n_batch, ...] each, planned at load.
  std::vector<float> x_;        // [n_batch, n_embd]   residual stream
  std::vector<float> xn_;       // [n_batch, n_embd]   normed
  std::vector<float> q_;        // [n_batch, n_embd_q]
  std::vector<float> att_;      // [n_batch, n_embd_q]
  std::vector<float> proj_;     // [n_batch, n_embd]   attention/ffn output before residual add
  std::vector<float> gate_;     // [n_batch, n_ff]
  std::vector<float> up_;       // [n_batch, n_ff]
  std::vector<float> cos_sin_;  // [n_batch, n_rot / 2, 2]
  std::vector<float> scratch_;  // [n_threads, max row]

  ActivationHook hook_;
};

}  // namespace sluice
