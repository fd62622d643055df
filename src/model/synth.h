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
  int64_t n_ff = 0;
  int64_t n_ctx = 2048;
  float rope_freq_base = 10000.0f;
};

// Named presets: tiny, 110m, 1b, 8b, 70b-slice (layer count from n_layer_override).
StatusOr<SynthShape> synth_preset(const std::string& name, int64_t n_layer_override = 0);
std::vector<std::string> synth_preset_names();

// Weight "type" names accepted by synth: f32, f16, bf16, q8_0, q4_0, q4_k, q6_k,
// and q4_k_m (Q4_K with Q6_K for output, and attn_v/ffn_down in some layers).
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
