// ModelWeights: a model's tensors bound by role, as its ArchSpec lists them.
//
// bind_weights() walks the spec's table once: every tensor the architecture
// needs for this model's hyper-parameters (dense or routed FFN per layer) must
// be present with the spec's shape; optional ones may be missing. Matrices are
// views of the file's bytes (or of a weight source's resident copies); 1-D
// tensors are converted to f32. A fused matrix (phi3's attn_qkv, its gate/up
// ffn_up) is bound under its own role and as row slices under its parts'
// roles (q, k, v; gate, up), which the decoder and the backend's weight
// preparation use. With a weight source, layer matrices are bound
// per layer at acquire() (bind_layer) and their views carry no data until then.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "arch/arch_spec.h"
#include "backend/backend.h"
#include "format/model_file.h"
#include "model/hparams.h"
#include "model/weight_source.h"

namespace sluice {

struct LayerWeights {
  std::array<WeightView, kNumTensorRoles> mats{};          // by role; n_out == 0 when absent
                                                           // (stacked experts: n_expert x n_out rows)
  std::array<std::vector<float>, kNumTensorRoles> vecs{};  // by role; empty when absent
  // A routed layer's experts, one view per matrix of each: slices of the
  // stacked tensors, or the backend's prepared copies.  [n_expert]
  std::vector<ExpertWeights> experts;

  const WeightView& mat(TensorRole r) const { return mats[static_cast<size_t>(r)]; }
  WeightView& mat(TensorRole r) { return mats[static_cast<size_t>(r)]; }
  bool has_mat(TensorRole r) const { return mat(r).n_out > 0; }
  // The f32 vector of a role, or nullptr when the layer has none.
  const float* vec(TensorRole r) const {
    const std::vector<float>& v = vecs[static_cast<size_t>(r)];
    return v.empty() ? nullptr : v.data();
  }
};

struct ModelWeights {
  WeightView token_embd;            // [n_vocab, n_embd] (n_out, n_in)
  WeightView output;                // [n_vocab, n_embd] (token_embd when tied)
  std::vector<float> output_norm;   // [n_embd]
  std::vector<float> rope_freqs;    // [n_rot / 2] or empty
  std::vector<float> rope_factors_long;   // [n_rot / 2] or empty (LongRoPE, model/rope_scaling.h)
  std::vector<float> rope_factors_short;  // [n_rot / 2] or empty
  std::vector<LayerWeights> layers; // [n_layer]
  uint64_t bytes_per_token = 0;     // every matrix once (routed experts at the share one
                                    // token uses, n_used / n_expert), plus one embedding row
};

// Binds every tensor of hp.spec. Sets hp.n_vocab from the embedding table.
// Errors: a required tensor missing, or any tensor of the wrong shape (both
// name the tensor and, for shapes, what was expected); a resident tensor the
// source does not hold.
StatusOr<ModelWeights> bind_weights(const ModelFile& file, ModelHparams& hp, const LayerWeightSource* source);

// Points a streamed layer's matrices at the bytes a weight source acquired.
void bind_layer(LayerWeights& layer, const LayerWeightPointers& p);

// The views of expert e of a routed layer: row slices of the stacked tensors.
void bind_experts(LayerWeights& layer, int64_t n_expert);

// The model's matrices grouped by the dispatch that multiplies them (the
// spec's groups, per layer, each expert's gate/up and down, then the output
// head), for Backend::prepare_weights.
std::vector<std::vector<WeightView*>> dispatch_groups(ModelWeights& w, const ArchSpec& spec);

// The order a layer schedule (weight_source.h, one period) uses dispatch
// groups in, for Backend::set_weight_schedule: group_layer[i] is group i's
// layer (-1: none, the output head; kRoutedGroup: a routed expert's, whose
// turn only the router knows, left out). Each visit of a layer uses its groups in
// order; a layer's second visit in the period (training_schedule's backward)
// uses them in order and then in reverse: the recomputed forward, then the
// transposed products. Groups of no layer come where the visits turn from
// first to second (the loss, between forward and backward), else last.
inline constexpr int64_t kRoutedGroup = -2;
std::vector<int> dispatch_schedule(std::span<const int64_t> group_layer, std::span<const int64_t> layer_order);

// Bytes per layer of the groups marked in `which` ([groups.size()], nonzero:
// counted), a matrix counted once however many groups hold it: how much of
// each layer a placement put somewhere. Views outside every layer (the output
// head) are not counted.  returns [w.layers.size()]
std::vector<uint64_t> layer_bytes_of_groups(const ModelWeights& w, std::span<const WeightGroup> groups,
                                            std::span<const uint8_t> which);

// The layer whose matrix `v` is (a view inside w.layers[l]), or -1 (the
// output head, the embedding table); *expert (when given) says whether it
// is one expert's (LayerWeights::experts).
int64_t layer_of_view(const ModelWeights& w, const WeightView* v, bool* expert = nullptr);

// Bytes of one expert's matrices (gate, up, down).
uint64_t expert_bytes(const ExpertWeights& e);

// Bytes of a layer's matrices as the file holds them (a fused matrix once,
// not again as its parts; stacked experts all).
uint64_t layer_matrix_bytes(const LayerWeights& layer);

// Whether a per-layer tensor of the spec belongs to layer l of this model
// (dense or routed FFN).
bool applies_to_layer(const TensorSpec& t, const ModelHparams& hp, int64_t layer);

}  // namespace sluice
