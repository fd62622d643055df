#include "lora/lora_synth.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace sluice {
namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

StatusOr<LoraAdapter> synth_lora(const ModelFile& base, const SynthLoraOptions& o) {
  LoraAdapter ad;
  ad.name = o.name;
  ad.arch = base.metadata.get_string("general.architecture").value_or("");
  ad.alpha = o.alpha;
  const ArchSpec* spec = find_arch(ad.arch);
  if (spec == nullptr) return invalid_argument("synth_lora: the base's architecture '{}' is not one sluice runs", ad.arch);
  if (o.rank < 1) return invalid_argument("synth_lora: rank {} (at least 1)", o.rank);
  for (const TensorInfo& t : base.tensors) {
    const TensorSpec* ts = spec->find_tensor(t.name);
    if (ts == nullptr || !ts->per_layer || ts->kind != TensorKind::kMatrix || t.ne.size() != 2) continue;
    if (std::find(o.roles.begin(), o.roles.end(), ts->role) == o.roles.end()) continue;
    LoraMatrix m{.base_name = t.name, .layer = split_layer_name(t.name).first, .role = ts->role,
                 .n_in = t.ne[0], .n_out = t.ne[1], .rank = o.rank};
    // One stream per matrix, so the values do not depend on which others are adapted.
    std::mt19937_64 rng(o.seed * 1000003u + fnv1a(t.name));
    std::normal_distribution<float> da(0.0f, 1.0f / std::sqrt(static_cast<float>(m.n_in)));
    std::normal_distribution<float> db(0.0f, o.b_std);
    m.a.resize(static_cast<size_t>(m.rank * m.n_in));
    m.b.resize(static_cast<size_t>(m.n_out * m.rank));
    for (float& v : m.a) v = da(rng);
    for (float& v : m.b) v = db(rng);
    ad.mats.push_back(std::move(m));
  }
  if (ad.mats.empty()) return invalid_argument("synth_lora: the base has none of the tensors to adapt");
  return ad;
}

}  // namespace sluice
