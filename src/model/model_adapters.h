// ModelAdapters: the LoRA adapters a Model applies (lora/lora_adapter.h), kept
// in backend memory, and each step's plan of which tokens get which.
//
// Adapters are always resident: each one's factors are copied once into one
// buffer of the backend (rank x (n_in + n_out) floats per matrix), whatever
// the weights' placement, so they stay put while base matrices stream under
// --mem-budget. An adapter on a fused matrix (phi3's attn_qkv, ffn_up as
// gate/up) becomes one per part: B's row slices, sharing A.
//
// Selection: every sequence of a forward pass names its adapters as a bit set
// (ForwardSeq::loras: bit i is the i-th adapter added; 0 runs the base alone).
// Several bits apply several adapters together, the sum of their deltas
// (llama.cpp's --lora A --lora B); one bit per sequence lets one step mix
// sequences on different adapters.
//
// Batching: plan() turns the step's sequences into runs of consecutive tokens
// with the same set. After each adapted matmul, apply() makes passes: pass p
// gives every run whose set has a p-th adapter (in index order) one segment
// with that adapter's factors for the matrix (neighbouring runs on the same
// factors merge), one Backend::lora call per pass. The base matmul before it
// is shared by the whole step; only the low-rank terms differ. A token gets
// its adapters' terms in index order whatever the batch, so it gives the same
// bits alone or batched.
//
//   tokens  | seq 0: {A}   | seq 1: {}  | seq 2: {A, B} | seq 3: {B} |
//   pass 0  |  A .......   |            |  A ........   |  B ....... |
//   pass 1  |              |            |  B ........   |            |
//
// Not thread-safe: add() at load, plan() and apply() from the step's thread.
// plan() and apply() allocate nothing (buffers sized for max_seqs).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "format/model_file.h"
#include "lora/lora_adapter.h"
#include "model/hparams.h"

namespace sluice {

// A set of adapters: bit i for the i-th adapter added to the model.
using LoraMask = uint64_t;
inline constexpr int kMaxLoras = 64;

// What add() reports about an adapter.
struct LoraInfo {
  std::string name;        // LoraAdapter::name
  float user_scale = 1.0f;
  int64_t n_matrices = 0;  // adapted matmuls (fused matrices count once per part)
  int64_t rank_max = 0;
  int64_t n_params = 0;
  uint64_t bytes = 0;      // backend memory of its factors
};

class ModelAdapters {
 public:
  ModelAdapters(const ModelHparams& hp, int64_t max_seqs);

  // Checks the adapter against the base (architecture, every target present
  // with its shape, a matrix the forward pass adapts), copies its factors
  // into backend memory and returns its index. scale: the user's, times
  // alpha / rank (alpha / sqrt(rank) for rsLoRA).
  // Errors: a backend without the LoRA operator, an adapter for another base,
  // a target the base lacks or that takes no adapter (routed experts, the
  // router, shared experts), more than kMaxLoras adapters.
  StatusOr<int> add(Backend& be, const ModelFile& base, const LoraAdapter& adapter, float scale);

  int size() const { return static_cast<int>(loaded_.size()); }
  const LoraInfo& info(int i) const { return loaded_[static_cast<size_t>(i)].info; }
  // Every adapter's bit.
  LoraMask all() const { return size() == 64 ? ~LoraMask{0} : (LoraMask{1} << size()) - 1; }
  // "LoRA adapters: name (rank 4, scale 1, 35 matrices, 95 KiB), ..." for load summaries.
  std::string summary() const;
  // Bytes of every adapter's factors (all read by a token that uses them all).
  uint64_t bytes() const;
  // The largest rank of any adapter (ScratchNeeds::lora_rank).
  int64_t rank_max() const { return rank_max_; }

  // The step's runs: one per sequence (merging neighbours with the same set),
  // tokens in sequence order.  masks: [n_seqs];  lens: [n_seqs] tokens each.
  // Returns whether any token has an adapter. Masks must be within all().
  bool plan(std::span<const LoraMask> masks, std::span<const int64_t> lens);
  // y += the planned adapters' terms for matrix `role` of `layer`, x its input.
  //   x: [n_tok, n_in];  y: [n_tok, n_out]  (backend buffers)
  void apply(Backend& be, int64_t layer, TensorRole role, const float* x, float* y, int64_t n_in,
             int64_t n_out);

 private:
  // One adapted matmul of one adapter, in backend memory.
  struct Factors {
    const float* a = nullptr;  // [rank, n_in]
    const float* b = nullptr;  // [n_out, rank] (a row slice of a fused matrix's B)
    int64_t rank = 0;          // 0: the adapter leaves this matrix alone
    float scale = 0.0f;
  };
  struct Loaded {
    LoraInfo info;
    std::unique_ptr<Buffer> mem;
    std::vector<Factors> by_role;  // [n_layer * kNumTensorRoles]
  };
  struct Run {
    int64_t tok0 = 0;
    int64_t n_tok = 0;
    LoraMask mask = 0;
  };

  ModelHparams hp_;
  std::vector<Loaded> loaded_;
  int64_t rank_max_ = 0;
  std::vector<Run> runs_;          // [max_seqs] the step's
  int64_t n_runs_ = 0;
  int n_passes_ = 0;               // most adapters of any run
  std::vector<LoraSegment> segs_;  // [max_seqs] one pass's
};

}  // namespace sluice
