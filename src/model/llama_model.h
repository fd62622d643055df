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
#include <cstdlib>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/paged_attention.h"
#include "base/huge_buffer.h"
#include "base/thread_pool.h"
#include "format/model_file.h"
#include "kv/kv_cache.h"
#include "model/hparams.h"
#include "model/weight_source.h"

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
  int64_t n_batch = 256;  // most tokens in one forward pass (all sequences together)
  int64_t n_ctx_max = 0;  // longest context a sequence may reach (sizes attention scratch); 0: trained context
  int64_t max_seqs = 64;  // most sequences in one forward pass
  // Where layer matrices come from; null: resident in the ModelFile's mapping.
  // With a source, weight bytes are read only through it (never the mapping).
  std::shared_ptr<LayerWeightSource> weights;
  // Threads to run on, shared with another model (a draft model runs between the
  // target's passes); null: a pool of n_threads of its own.
  std::shared_ptr<ThreadPool> pool;
  // Resident layer and output matrices are copied at load into one arena on
  // huge pages, when the instruction-set level is above scalar and no `weights`
  // source is set: those whose type has a faster interleaved layout
  // (backend/cpu/repack.h: Q4_0 -> Q4_0x4; Q8_0 -> Q8_0x16 at AVX-512, Q8_0x4
  // below) in that layout, the others as GGUF rows. Results are bit-identical
  // either way; the copy costs memory (the mapping's pages of those matrices are
  // not read again and may be dropped by the OS).
  bool repack = true;
};

// One sequence's part of a batched forward pass.
struct ForwardSeq {
  std::span<const int32_t> tokens;       // tokens to compute, at positions pos0 ..
  int64_t pos0 = 0;
  std::span<const int32_t> block_table;  // the sequence's KV blocks, covering pos0 + tokens.size()
  int64_t n_logits = 1;                  // logits for this many trailing tokens (0 = none)
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
  int n_threads() const { return pool_->n_threads(); }
  // The pool forward() runs on (shareable with a draft model).
  const std::shared_ptr<ThreadPool>& thread_pool() const { return pool_; }
  // Bytes of weights one forward pass reads (all matrices + embeddings row).
  uint64_t weight_bytes() const { return weight_bytes_; }
  // Bytes of matrices copied into a repacked layout at load (0 if none), and a
  // one-line description for load summaries ("" if none).
  uint64_t repacked_bytes() const { return repacked_bytes_; }
  std::string repack_summary() const;

  // The KV dtype used when none is asked for: f32 for F32 models (full
  // precision end to end), f16 otherwise.
  KvDtype default_kv_dtype() const;
  KvLayout kv_layout(KvDtype dtype, int64_t block_size = 16) const;
  // A single-sequence KV cache for up to n_ctx positions (default dtype).
  KvCache make_kv_cache(int64_t n_ctx) const;
  StatusOr<KvCache> make_kv_cache(int64_t n_ctx, KvDtype dtype) const;

  // One step over many sequences: all their tokens go through the weight
  // matmuls together (each weight byte read once per step); attention is per
  // sequence over its own blocks. K/V of the new tokens are written to `kv`.
  //   logits: [sum of n_logits, n_vocab], sequences in order
  // Errors: more than n_batch tokens or max_seqs sequences, token ids out of
  // range, a block table too short, a KV store of another model.
  Status forward(std::span<const ForwardSeq> seqs, KvStore& kv, float* logits);

  // Single-sequence convenience: runs `tokens` at positions kv.n_past() .. in
  // chunks of n_batch, and advances kv.n_past().
  //   logits: [n, n_vocab] if all_logits, else [1, n_vocab] (last token only)
  Status forward(std::span<const int32_t> tokens, KvCache& kv, float* logits, bool all_logits);

  void set_activation_hook(ActivationHook hook) { hook_ = std::move(hook); }

 private:
  LlamaModel(std::shared_ptr<const ModelFile> file, const ModelHparams& hp, const ModelOptions& options);
  Status bind_weights();
  void repack_weights();
  Status validate(std::span<const ForwardSeq> seqs, const KvStore& kv) const;
  Status run_layers(std::span<const ForwardSeq> seqs, int64_t n, KvStore& kv);
  void rope_tables(std::span<const ForwardSeq> seqs);
  void emit(std::string_view name, int64_t layer, const float* data, int64_t n_tokens, int64_t n) const {
    if (hook_) hook_(name, layer, data, n_tokens, n);
  }

  std::shared_ptr<const ModelFile> file_;
  ModelHparams hp_;
  int64_t n_batch_;
  std::shared_ptr<ThreadPool> pool_;
  uint64_t weight_bytes_ = 0;
  uint64_t repacked_bytes_ = 0;
  int64_t n_repacked_ = 0;  // matrices
  unsigned repacked_layouts_ = 0;  // bit (1 << WeightLayout) per layout used
  uint64_t copied_bytes_ = 0;      // matrices copied into the arena as GGUF rows
  HugeBuffer repacked_;  // owns the repacked matrices' bytes (one arena)

  cpu::WeightView token_embd_;     // [n_vocab, n_embd]
  std::vector<float> output_norm_; // [n_embd]
  cpu::WeightView output_;         // [n_vocab, n_embd] (token_embd_ when tied)
  std::vector<LayerWeights> layers_;
  std::shared_ptr<LayerWeightSource> source_;
  std::vector<double> inv_freq_;   // [n_rot / 2] after scaling

  // Activations, [n_batch, ...] each, planned at load.
  std::vector<float> x_;        // [n_batch, n_embd]   residual stream
  std::vector<float> xn_;       // [n_batch, n_embd]   normed
  std::vector<float> q_;        // [n_batch, n_embd_q]
  std::vector<float> k_;        // [n_batch, n_embd_kv]  new keys, before storage in the KV store
  std::vector<float> v_;        // [n_batch, n_embd_kv]
  std::vector<float> att_;      // [n_batch, n_embd_q]
  std::vector<float> proj_;     // [n_batch, n_embd]   attention/ffn output before residual add
  std::vector<float> gate_;     // [n_batch, n_ff]
  std::vector<float> up_;       // [n_batch, n_ff]
  std::vector<float> cos_sin_;  // [n_batch, n_rot / 2, 2]
  std::vector<float> attn_partials_;  // paged attention scratch
  std::vector<cpu::PagedSeq> attn_seqs_;  // [max_seqs]
  std::vector<int64_t> kv_rows_;  // [n_batch] each token's row in the KV store
  std::vector<uint8_t> act_;    // converted matmul activations, matmul_scratch_bytes(n_batch, widest)
  cpu::Isa isa_ = cpu::Isa::kScalar;
  int64_t max_seqs_ = 0;
  int64_t n_ctx_max_ = 0;

  ActivationHook hook_;
};

}  // namespace sluice
