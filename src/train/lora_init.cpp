#include "train/lora_init.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace sluice {
namespace {

using R = TensorRole;

struct TargetName {
  const char* short_name;
  R role;
};
constexpr TargetName kTargets[] = {{"q", R::kAttnQ},         {"k", R::kAttnK},       {"v", R::kAttnV},
                                   {"o", R::kAttnOutput},    {"gate", R::kFfnGate}, {"up", R::kFfnUp},
                                   {"down", R::kFfnDown}};

// A uniform float in [-1, 1) from a splitmix64 stream.
float uniform(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(static_cast<double>(z >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

}  // namespace

StatusOr<std::vector<TensorRole>> parse_lora_targets(const std::string& list) {
  std::vector<R> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item == "all") {
      for (const TargetName& t : kTargets) out.push_back(t.role);
      continue;
    }
    bool found = false;
    for (const TargetName& t : kTargets) {
      if (item == t.short_name || item == tensor_role_name(t.role)) {
        if (std::find(out.begin(), out.end(), t.role) != out.end()) {
          return invalid_argument("--targets names {} twice", item);
        }
        out.push_back(t.role);
        found = true;
      }
    }
    if (!found) {
      return invalid_argument("unknown LoRA target '{}' (known: q, k, v, o, gate, up, down, or all)", item);
    }
  }
  if (out.empty()) return invalid_argument("--targets is empty");
  return out;
}

StatusOr<LoraAdapter> init_lora(const Model& model, const LoraInitOptions& o) {
  const ModelHparams& h = model.hparams();
  if (o.rank < 1) return invalid_argument("--rank must be at least 1, got {}", o.rank);
  if (!(o.alpha > 0.0f)) return invalid_argument("--alpha must be positive, got {}", o.alpha);
  LoraAdapter ad;
  ad.name = o.name;
  ad.arch = h.arch;
  ad.alpha = o.alpha;
  uint64_t state = o.seed ^ 0x5EED10AAull;
  auto any_layer_has = [&](R role) {
    return std::ranges::any_of(model.weights().layers, [&](const LayerWeights& w) { return w.has_mat(role); });
  };
  std::vector<R> targets = o.targets;
  if (o.only_present) std::erase_if(targets, [&](R role) { return !any_layer_has(role); });
  if (targets.empty()) return invalid_argument("the base has none of the matrices to adapt");
  for (R role : targets) {
    if (!any_layer_has(role)) {
      return invalid_argument("the base has no {} matrix to adapt ({} layers{})", tensor_role_name(role), h.n_layer,
                              h.is_moe() ? "; the FFN of a mixture-of-experts model is routed" : "");
    }
  }
  for (int64_t l = 0; l < h.n_layer; ++l) {
    const LayerWeights& w = model.weights().layers[static_cast<size_t>(l)];
    for (R role : targets) {
      if (!w.has_mat(role)) continue;
      const WeightView& m = w.mat(role);
      if (o.rank > std::min(m.n_in, m.n_out)) {
        return invalid_argument("--rank {} exceeds the smaller side of {} ({} x {})", o.rank,
                                tensor_role_name(role), m.n_out, m.n_in);
      }
      const TensorSpec* ts = model.arch().find(role);
      const std::string name = ts ? gguf_tensor_name(*ts, l) : std::string();
      if (ts == nullptr || model.file().find(name) == nullptr) {
        return unimplemented("{} is part of a fused matrix in this {} model; adapting it is not supported",
                             tensor_role_name(role), h.arch);
      }
      LoraMatrix lm{.base_name = name, .layer = l,
                    .role = role, .n_in = m.n_in, .n_out = m.n_out, .rank = o.rank};
      const float bound = 1.0f / std::sqrt(static_cast<float>(m.n_in));
      lm.a.resize(static_cast<size_t>(o.rank * m.n_in));
      for (float& x : lm.a) x = bound * uniform(state);
      lm.b.assign(static_cast<size_t>(m.n_out * o.rank), 0.0f);
      ad.mats.push_back(std::move(lm));
    }
  }
  return ad;
}

}  // namespace sluice
