// RoPE scaling: the inverse frequency each rotated pair turns at and the
// magnitude cos and sin are multiplied by, after a model's scaling rule.
//
//   plain         inv_freq[i] = freq_base^(-2i / n_rot)                  i < n_rot / 2
//   linear        inv_freq[i] / factor
//   llama3        by wavelength: long ones / factor, short ones kept, a blend between
//   divisors      inv_freq[i] / d[i]      d: rope_freqs.weight (llama 3.1), or one of
//                                         LongRoPE's rope_factors_{long,short}.weight
//   magnitude     {arch}.rope.scaling.attn_factor (1 if absent). LongRoPE's is
//                 sqrt(1 + ln(s) / ln(n_ctx_orig)), s = n_ctx_train / n_ctx_orig;
//                 q and k are both rotated, so attention scores grow by its square.
//
// LongRoPE (Phi-3 128k, Phi-3.5) carries two divisor sets: "short" for
// contexts within the original one (rope_orig_ctx, HF's
// original_max_position_embeddings) and "long" past it. sluice chooses once
// per loaded model, from the longest context a sequence may reach
// (ModelOptions::n_ctx_max, `--ctx-size`):
//
//   n_ctx_max >  rope_orig_ctx   ->  long factors, for every position
//   n_ctx_max <= rope_orig_ctx   ->  short factors
//
// (llama.cpp applies the same rule to its per-sequence context size.) HF
// transformers instead switches per forward call on the sequence's current
// length. Switching inside a sequence would leave its cached keys rotated with
// the other set and make a token's logits depend on whether it was computed in
// the prefill or in decode, and on which sequences share its batch; a choice
// fixed at load keeps decode equal to prefill and batched equal to alone, bit
// for bit. The consequence: a model loaded for long contexts rotates short
// prompts with the long factors too, where transformers would use the short
// ones, so its logits on short prompts differ from transformers' (slightly:
// the long factors are what the model was fine-tuned with past 4k). Load with
// a context of at most the original (`--ctx-size 4096` for Phi-3 128k) to get
// the short factors.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/hparams.h"
#include "model/model_weights.h"
#include "sluice/status.h"

namespace sluice {

enum class LongRopeFactors { kNone, kShort, kLong };

// "none", "short", "long".
const char* longrope_factors_name(LongRopeFactors f);

// The LongRoPE set a model rotates with when planned for n_ctx_max positions
// per sequence (the rule above); kNone when the weights carry no factors.
LongRopeFactors choose_longrope_factors(const ModelWeights& w, const ModelHparams& hp, int64_t n_ctx_max);

// The divisors of that choice: [n_rot / 2], or empty for kNone.
std::span<const float> longrope_divisors(const ModelWeights& w, LongRopeFactors f);

// LongRoPE factor tensors, as bound (their shapes are checked by
// bind_weights): both or neither, each value positive and finite. Errors
// name the tensor, the index and the value.
Status check_longrope_factors(const ModelWeights& w);

struct RopeFreqs {
  std::vector<double> inv_freq;  // [n_rot / 2] after scaling and divisors
  double magnitude = 1.0;        // cos and sin times this (hp.rope_attn_factor)
};

// The frequencies of hp's RoPE with optional per-pair divisors.
//   divisors: [n_rot / 2] or empty
RopeFreqs rope_freqs(const ModelHparams& hp, std::span<const float> divisors);

}  // namespace sluice
