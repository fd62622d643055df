// Synthetic models: random-weight GGUF files at real model shapes.
//
// Speed depends on shapes and weight types, not on values, so benchmarks and
// scale tests use these in place of real multi-gigabyte models. Output is
// deterministic for a seed (every tensor row has its own RNG stream, so rows can
// be generated in parallel and the file is identical for any thread count).
// The file carries a working SentencePiece-style tokenizer (byte fallback, so any
// text round-trips) and loads in sluice and in other GGUF readers.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "format/metadata.h"
#include "quant/dtype.h"
#include "sluice/status.h"

namespace sluice {

struct SynthShape {
  std::string name;
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t n_ff = 0;          // dense FFN width (0 for a model routed in every layer)
  int64_t n_ctx = 2048;
  float rope_freq_base = 10000.0f;
  std::string arch = "llama";  // an ArchSpec name: its table decides the tensors written
  int64_t head_dim = 0;        // 0: n_embd / n_head
  // Mixture of experts (0: dense).
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_expert = 0;
  int64_t n_ff_shared = 0;     // the shared expert's width (architectures that have one)
  bool qkv_bias = false;       // write the optional q/k/v biases (Qwen2-family files carry them)
  int64_t n_swa = 0;           // {arch}.attention.sliding_window (architectures with windowed layers)
  float rope_scale_linear = 0.0f;  // linear RoPE scaling factor (0: none; gemma3 4B: 8)
  float norm_noise = 0.0f;     // RMSNorm weights 1 + norm_noise * N(0, 1) (0: ones; the tiny
                               // gemma/phi3 presets use 0.1 so a misapplied norm shows)
  // LongRoPE (phi3): the original context (0: none). Writes
  // rope.scaling.original_context_length, rope.scaling.attn_factor
  // (sqrt(1 + ln(n_ctx / orig) / ln(orig))) and rope_factors_{long,short}.weight,
  // random but shaped like Phi-3's: short rising from ~1 to ~2.7 across the
  // pairs, long from ~1 to ~2 x (n_ctx / orig).
  int64_t longrope_orig_ctx = 0;
};

// Named presets (layer count from n_layer_override):
//   tiny, 110m, 1b, 8b, 70b-slice                  llama shapes
//   mixtral-8x7b                                   32 layers, dim 4096, 8 experts (top 2) of ffn 14336
//   qwen2moe-a2.7b                                 Qwen1.5-MoE-A2.7B: 24 layers, dim 2048, 60 experts
//                                                  (top 4) of ffn 1408, shared expert ffn 5632
//   qwen3-30b-a3b                                  48 layers, dim 2048, 32 heads of 128, 128 experts
//                                                  (top 8) of ffn 768, q/k norm
//   gemma2-2b, gemma2-9b                           Gemma 2: 26 / 42 layers, dim 2304 / 3584, heads of 256,
//                                                  GeGLU ffn 9216 / 14336, window 4096 on even layers,
//                                                  soft-caps 50 / 30, vocab 256000
//   gemma3-1b, gemma3-4b                           Gemma 3 text: 26 / 34 layers, dim 1152 / 2560, heads of
//                                                  256, window 512 / 1024 on 5 of 6 layers, q/k norm,
//                                                  global RoPE 1e6 (4b: linear x8), vocab 262144
//   phi3-mini                                      Phi-3-mini-4k: 32 layers, dim 3072, 32 heads, fused
//                                                  qkv and gate/up (ffn 8192), window 2047, vocab 32064
//   phi3-mini-128k                                 Phi-3-mini-128k: the same with LongRoPE, context 131072
//                                                  (original 4096), window 262144
//   tiny-mixtral, tiny-qwen2moe, tiny-qwen3, tiny-qwen3moe   the same families at the tiny shape
//   mistral-7b                                     Mistral-7B-v0.1: 32 layers, dim 4096, 32 heads (8 kv),
//                                                  ffn 14336, sliding window 4096 on every layer
//   tiny-mistral                                   the tiny shape with a sliding window of 64
//   tiny-gemma2, tiny-gemma3, tiny-phi3            dim 64, 4 heads of 16 (2 kv), ffn 128, window 8;
//                                                  gemma2 26 layers (llama.cpp knows Gemma 2 only at
//                                                  26/42/46 layers), gemma3 6, phi3 4
//   tiny-phi3-128k                                 tiny-phi3 with LongRoPE: context 2048, original 64
StatusOr<SynthShape> synth_preset(const std::string& name, int64_t n_layer_override = 0);
std::vector<std::string> synth_preset_names();

// The hyper-parameter metadata a synth file of `shape` carries
// (general.architecture and the {arch}.* keys; no tokenizer, name or file
// type): what the planner reads a preset's shape from (plan/model_shape.h),
// so a preset is defined here once. Refuses an unknown architecture and heads
// that do not divide the embedding.
StatusOr<Metadata> synth_metadata(const SynthShape& shape);

// Weight "type" names accepted by synth: a type for every matrix (f32, f16,
// bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q3_k, q4_k, q5_k, iq4_nl) or one of
// llama.cpp's mixes (q2_k, q3_k_s, q3_k_m, q3_k_l, q4_k_s, q4_k_m, q5_k_s,
// q5_k_m, q6_k, iq4_xs), per-tensor rules in quant/quant_mix.h.
// Routers (ffn_gate_inp) and 1-D tensors are f32 whatever the type, as GGUF
// quantizers leave them.
struct SynthOptions {
  SynthShape shape;
  std::string type = "f16";
  uint64_t seed = 1;
  int n_threads = 0;
  std::function<void(uint64_t done, uint64_t total)> progress;
};

// Writes the model to `path`. Returns the tensor bytes written.
StatusOr<uint64_t> write_synth_model(const SynthOptions& options, const std::string& path);

// The synthetic tokenizer's vocabulary (pieces, scores, types), n_vocab long.
struct SynthVocab {
  std::vector<std::string> tokens;
  std::vector<double> scores;
  std::vector<int64_t> types;
};
SynthVocab synth_vocab(int64_t n_vocab);

}  // namespace sluice
