#include "model/model_weights.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "quant/quant.h"

namespace sluice {
namespace {

std::string shape_of(const TensorSpec& t, const ModelHparams& hp) {
  std::string out = "[";
  for (int i = 0; i < 3 && t.ne[i] != Dim::kNone; ++i) out += fmt::format("{}{}", i ? ", " : "", hp.dim(t.ne[i]));
  return out + "]";
}

bool shape_matches(const TensorSpec& t, const TensorInfo& info, const ModelHparams& hp) {
  size_t n_dims = 0;
  while (n_dims < 3 && t.ne[n_dims] != Dim::kNone) ++n_dims;
  if (info.ne.size() < n_dims) return false;
  for (size_t i = 0; i < info.ne.size(); ++i)  // trailing dimensions of 1 are allowed
    if (info.ne[i] != (i < n_dims ? hp.dim(t.ne[i]) : 1)) return false;
  return true;
}

class Binder {
 public:
  Binder(const ModelFile& f, ModelHparams& hp, const LayerWeightSource* source) : f_(f), hp_(hp), source_(source) {}

  // The tensor of `t` at layer l, checked; nullptr when an optional one is missing.
  StatusOr<const TensorInfo*> find(const TensorSpec& t, int64_t layer) {
    const std::string name = gguf_tensor_name(t, layer);
    const TensorInfo* info = f_.find(name);
    if (!info) {
      if (t.optional) return static_cast<const TensorInfo*>(nullptr);
      return data_loss("tensor '{}' is missing", name);
    }
    if (!shape_matches(t, *info, hp_)) {
      return data_loss("tensor '{}' has shape {}, expected {}", name, info->shape_string(), shape_of(t, hp_));
    }
    return info;
  }

  // Bytes of a tensor that stays resident: the file's, or the source's copy.
  StatusOr<const uint8_t*> resident(const TensorInfo& info) {
    if (!source_) return info.data;
    const uint8_t* p = source_->resident(info.name);
    if (!p) return internal_error("weight source has no resident copy of '{}'", info.name);
    return p;
  }

  Status bind(const TensorSpec& t, int64_t layer, WeightView* mat, std::vector<float>* vec, uint64_t* bytes) {
    ASSIGN_OR_RETURN(const TensorInfo* info, find(t, layer));
    if (!info) return Status();
    if (t.kind == TensorKind::kVector) {
      vec->resize(static_cast<size_t>(info->ne[0]));
      ASSIGN_OR_RETURN(const uint8_t* data, resident(*info));
      dequantize_row(info->type, data, vec->data(), info->ne[0]);
      return Status();
    }
    const uint8_t* data = nullptr;
    if (!source_ || !t.per_layer) {
      ASSIGN_OR_RETURN(data, resident(*info));
    } else {
      data = source_->resident(info->name);  // null: bound per layer at acquire()
    }
    // Stacked experts are one view of n_expert x n_out rows; expert e's rows
    // start at row e * ne[1].
    const int64_t n_out = info->ne.size() == 3 ? info->ne[1] * info->ne[2] : info->ne[1];
    *mat = WeightView{.type = info->type, .data = data, .n_in = info->ne[0], .n_out = n_out};
    *bytes += info->n_bytes;
    return Status();
  }

 private:
  const ModelFile& f_;
  ModelHparams& hp_;
  const LayerWeightSource* source_;
};

// Row slices of a fused matrix (q/k/v; gate/up) into its parts' views.
void split_fused(LayerWeights& lw, const ModelHparams& hp) {
  for (TensorRole fused : {TensorRole::kAttnQkv, TensorRole::kFfnGateUp}) {
    const WeightView& f = lw.mat(fused);
    if (f.n_out == 0) continue;
    const int64_t qkv[3] = {hp.n_embd_q(), hp.n_embd_kv(), hp.n_embd_kv()};
    const int64_t gu[2] = {hp.n_ff, hp.n_ff};
    const int64_t* rows = fused == TensorRole::kAttnQkv ? qkv : gu;
    int64_t row = 0, i = 0;
    for (TensorRole part : fused_parts(fused)) {
      lw.mat(part) = WeightView{.type = f.type,
                                .data = f.data ? f.data + static_cast<size_t>(row) * row_bytes(f.type, f.n_in) : nullptr,
                                .n_in = f.n_in, .n_out = rows[i]};
      row += rows[i++];
    }
  }
}

}  // namespace

bool applies_to_layer(const TensorSpec& t, const ModelHparams& hp, int64_t layer) {
  switch (t.part) {
    case FfnPart::kAny: return true;
    case FfnPart::kDense: return !hp.layer_is_moe(layer);
    case FfnPart::kRouted: return hp.layer_is_moe(layer);
    case FfnPart::kShared: return hp.layer_is_moe(layer) && hp.n_ff_shared > 0;
  }
  return false;
}

StatusOr<ModelWeights> bind_weights(const ModelFile& f, ModelHparams& hp, const LayerWeightSource* source) {
  const ArchSpec& spec = *hp.spec;
  ModelWeights w;
  Binder b(f, hp, source);

  // The embedding table first: its rows say how many tokens there are.
  const TensorSpec* embd_spec = spec.find(TensorRole::kTokenEmbd);
  const TensorInfo* embd = f.find(embd_spec->gguf);
  if (!embd) return data_loss("tensor '{}' is missing", embd_spec->gguf);
  if (embd->ne.size() != 2 || embd->ne[0] != hp.n_embd) {
    return data_loss("tensor '{}' has shape {}, expected [{}, n_vocab]", embd->name, embd->shape_string(), hp.n_embd);
  }
  if (hp.n_vocab > embd->ne[1]) {
    return data_loss("tokenizer has {} tokens but {} only {} rows", hp.n_vocab, embd->name, embd->ne[1]);
  }
  hp.n_vocab = embd->ne[1];
  ASSIGN_OR_RETURN(const uint8_t* embd_data, b.resident(*embd));
  w.token_embd = WeightView{.type = embd->type, .data = embd_data, .n_in = hp.n_embd, .n_out = hp.n_vocab};
  w.bytes_per_token += row_bytes(embd->type, hp.n_embd);  // one row per token

  for (const TensorSpec& t : spec.tensors) {
    if (t.per_layer) continue;
    switch (t.role) {
      case TensorRole::kTokenEmbd: break;
      case TensorRole::kOutputNorm: RETURN_IF_ERROR(b.bind(t, -1, nullptr, &w.output_norm, nullptr)); break;
      case TensorRole::kRopeFreqs: RETURN_IF_ERROR(b.bind(t, -1, nullptr, &w.rope_freqs, nullptr)); break;
      case TensorRole::kRopeFactorsLong: RETURN_IF_ERROR(b.bind(t, -1, nullptr, &w.rope_factors_long, nullptr)); break;
      case TensorRole::kRopeFactorsShort: RETURN_IF_ERROR(b.bind(t, -1, nullptr, &w.rope_factors_short, nullptr)); break;
      case TensorRole::kOutput:
        RETURN_IF_ERROR(b.bind(t, -1, &w.output, nullptr, &w.bytes_per_token));
        if (w.output.n_out == 0) {
          w.output = w.token_embd;  // tied embeddings: the head reads the whole table
          w.bytes_per_token += embd->n_bytes;
        }
        break;
      default: return internal_error("{}: no binding for global tensor role {}", spec.name, tensor_role_name(t.role));
    }
  }

  if (!spec.find(TensorRole::kOutput)) {  // the architecture always ties the head (gemma)
    w.output = w.token_embd;
    w.bytes_per_token += embd->n_bytes;
  }

  w.layers.resize(static_cast<size_t>(hp.n_layer));
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    LayerWeights& lw = w.layers[static_cast<size_t>(l)];
    for (const TensorSpec& t : spec.tensors) {
      if (!t.per_layer || !applies_to_layer(t, hp, l)) continue;
      const auto r = static_cast<size_t>(t.role);
      uint64_t bytes = 0;
      RETURN_IF_ERROR(b.bind(t, l, &lw.mats[r], &lw.vecs[r], &bytes));
      // One token reads n_used of the n_expert experts.
      w.bytes_per_token += t.kind == TensorKind::kExperts ? bytes / static_cast<uint64_t>(hp.n_expert) *
                                                                static_cast<uint64_t>(hp.n_expert_used)
                                                          : bytes;
    }
    if (hp.layer_is_moe(l)) bind_experts(lw, hp.n_expert);
    split_fused(lw, hp);
  }
  return w;
}

void bind_experts(LayerWeights& layer, int64_t n_expert) {
  layer.experts.resize(static_cast<size_t>(n_expert));
  auto slice = [&](TensorRole role, int64_t e) {
    WeightView v = layer.mat(role);
    v.n_out /= n_expert;
    if (v.data) v.data += static_cast<size_t>(e * v.n_out) * row_bytes(v.type, v.n_in);
    return v;
  };
  for (int64_t e = 0; e < n_expert; ++e)
    layer.experts[static_cast<size_t>(e)] = {slice(TensorRole::kFfnGateExps, e), slice(TensorRole::kFfnUpExps, e),
                                             slice(TensorRole::kFfnDownExps, e)};
}

void bind_layer(LayerWeights& layer, const LayerWeightPointers& p) {
  for (size_t r = 0; r < layer.mats.size(); ++r)
    if (layer.mats[r].n_out > 0) layer.mats[r].data = p.by_role[r];
  if (!layer.experts.empty()) bind_experts(layer, static_cast<int64_t>(layer.experts.size()));
  // The parts of a fused matrix follow its bytes.
  for (TensorRole fused : {TensorRole::kAttnQkv, TensorRole::kFfnGateUp}) {
    const WeightView& f = layer.mat(fused);
    if (f.n_out == 0) continue;
    int64_t row = 0;
    for (TensorRole part : fused_parts(fused)) {
      WeightView& v = layer.mat(part);
      v.data = f.data ? f.data + static_cast<size_t>(row) * row_bytes(f.type, f.n_in) : nullptr;
      row += v.n_out;
    }
  }
}

std::vector<std::vector<WeightView*>> dispatch_groups(ModelWeights& w, const ArchSpec& spec) {
  std::vector<std::vector<WeightView*>> groups;
  int max_group = -1;
  for (const TensorSpec& t : spec.tensors) max_group = std::max<int>(max_group, t.group);
  for (LayerWeights& lw : w.layers) {
    for (int g = 0; g <= max_group; ++g) {
      std::vector<WeightView*> group;
      for (const TensorSpec& t : spec.tensors) {
        if (!t.per_layer || t.group != g || !lw.has_mat(t.role)) continue;
        if (fused_parts(t.role).empty()) {
          group.push_back(&lw.mat(t.role));
        } else {
          for (TensorRole part : fused_parts(t.role)) group.push_back(&lw.mat(part));  // repacked as its parts
        }
      }
      if (!group.empty()) groups.push_back(std::move(group));
    }
    for (ExpertWeights& e : lw.experts) {
      groups.push_back({&e.gate, &e.up});
      groups.push_back({&e.down});
    }
  }
  groups.push_back({&w.output});  // token_embd stays where it is (row lookups)
  return groups;
}

std::vector<int> dispatch_schedule(std::span<const int64_t> group_layer, std::span<const int64_t> layer_order) {
  int64_t n_layer = 0;
  for (int64_t l : layer_order) n_layer = std::max(n_layer, l + 1);
  std::vector<std::vector<int>> of_layer(static_cast<size_t>(n_layer));
  std::vector<int> unlayered;
  for (size_t g = 0; g < group_layer.size(); ++g) {
    const int64_t l = group_layer[g];
    if (l >= 0 && l < n_layer) of_layer[static_cast<size_t>(l)].push_back(static_cast<int>(g));
    else if (l == -1) unlayered.push_back(static_cast<int>(g));
  }
  std::vector<int> order;
  std::vector<int> visits(static_cast<size_t>(n_layer), 0);
  bool turned = false;
  for (int64_t l : layer_order) {
    const std::vector<int>& gs = of_layer[static_cast<size_t>(l)];
    const int visit = visits[static_cast<size_t>(l)]++;
    if (visit == 1 && !turned) {
      order.insert(order.end(), unlayered.begin(), unlayered.end());
      turned = true;
    }
    order.insert(order.end(), gs.begin(), gs.end());
    if (visit == 1) order.insert(order.end(), gs.rbegin(), gs.rend());
  }
  if (!turned) order.insert(order.end(), unlayered.begin(), unlayered.end());
  return order;
}

std::vector<uint64_t> layer_bytes_of_groups(const ModelWeights& w, std::span<const WeightGroup> groups,
                                            std::span<const uint8_t> which) {
  std::vector<uint64_t> out(w.layers.size(), 0);
  if (which.empty()) return out;
  std::unordered_map<const WeightView*, size_t> layer_of;  // every view a layer holds -> its layer
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& lw = w.layers[l];
    for (const WeightView& v : lw.mats) layer_of[&v] = l;
    for (const ExpertWeights& e : lw.experts)
      for (const WeightView* v : {&e.gate, &e.up, &e.down}) layer_of[v] = l;
  }
  std::unordered_set<const uint8_t*> seen;
  for (size_t g = 0; g < groups.size() && g < which.size(); ++g) {
    if (!which[g]) continue;
    for (const WeightView* v : groups[g]) {
      const auto it = layer_of.find(v);
      if (it == layer_of.end() || !v->data || !seen.insert(v->data).second) continue;
      out[it->second] += row_bytes(v->type, v->n_in) * static_cast<uint64_t>(v->n_out);
    }
  }
  return out;
}

int64_t layer_of_view(const ModelWeights& w, const WeightView* v, bool* expert) {
  if (expert) *expert = false;
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& lw = w.layers[l];
    if (v >= lw.mats.data() && v < lw.mats.data() + lw.mats.size()) return static_cast<int64_t>(l);
    for (const ExpertWeights& e : lw.experts) {
      if (v != &e.gate && v != &e.up && v != &e.down) continue;
      if (expert) *expert = true;
      return static_cast<int64_t>(l);
    }
  }
  return -1;
}

uint64_t expert_bytes(const ExpertWeights& e) {
  uint64_t n = 0;
  for (const WeightView* v : {&e.gate, &e.up, &e.down}) n += row_bytes(v->type, v->n_in) * static_cast<uint64_t>(v->n_out);
  return n;
}

uint64_t layer_matrix_bytes(const LayerWeights& layer) {
  uint64_t n = 0;
  for (size_t r = 0; r < layer.mats.size(); ++r) {
    const WeightView& v = layer.mats[r];
    if (v.n_out == 0) continue;
    bool part_of_fused = false;
    for (TensorRole fused : {TensorRole::kAttnQkv, TensorRole::kFfnGateUp})
      for (TensorRole part : fused_parts(fused))
        part_of_fused = part_of_fused || (static_cast<size_t>(part) == r && layer.mat(fused).n_out > 0);
    if (!part_of_fused) n += row_bytes(v.type, v.n_in) * static_cast<uint64_t>(v.n_out);
  }
  return n;
}

}  // namespace sluice
