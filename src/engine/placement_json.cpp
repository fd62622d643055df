#include "engine/placement_json.h"

#include <algorithm>
#include <utility>

namespace sluice {

nlohmann::ordered_json placement_json(const PlacementFacts& f) {
  const auto n_layer = static_cast<int64_t>(f.layer_bytes.size());
  const bool experts_streamed = f.n_expert_slots > 0;
  const bool pipeline = f.layer_begin > 0 || f.layer_end < n_layer;
  const char* compute = f.gpu ? "gpu" : "ram";
  auto at = [](const auto& v, int64_t l) { return static_cast<size_t>(l) < v.size() ? v[static_cast<size_t>(l)] : 0; };
  nlohmann::ordered_json p;
  p["mode"] = pipeline ? "pipeline" : experts_streamed ? "experts" : f.weights_streamed ? "layers" : "resident";
  p["compute"] = compute;
  nlohmann::ordered_json layers = nlohmann::ordered_json::array();
  bool moe = false;
  for (int64_t l = 0; l < n_layer; ++l) {
    const uint64_t bytes = at(f.layer_bytes, l);
    // Bytes by tier, in a fixed order: gpu, ram, disk, rank.
    std::vector<std::pair<const char*, uint64_t>> tiers;
    if (l < f.layer_begin || l >= f.layer_end) {
      tiers.emplace_back("rank", bytes);
    } else if (at(f.layer_streamed, l)) {
      tiers.emplace_back("disk", bytes);
    } else {
      const uint64_t disk = experts_streamed ? std::min(bytes, at(f.layer_expert_bytes, l)) : 0;
      const uint64_t host = std::min(bytes - disk, at(f.layer_host_bytes, l));
      const uint64_t rest = bytes - disk - host;
      if (f.gpu) {
        tiers.emplace_back("gpu", rest);
        tiers.emplace_back("ram", host);
      } else {
        tiers.emplace_back("ram", rest + host);
      }
      tiers.emplace_back("disk", disk);
    }
    nlohmann::ordered_json by_tier = nlohmann::ordered_json::object();
    const char* tier = tiers.front().first;
    uint64_t most = 0;
    for (const auto& [name, b] : tiers) {
      if (b == 0) continue;
      by_tier[name] = b;
      if (b > most) most = b, tier = name;
    }
    moe = moe || at(f.layer_moe, l);
    layers.push_back({{"layer", l}, {"tier", tier}, {"bytes", bytes}, {"moe", at(f.layer_moe, l) != 0},
                      {"tiers", std::move(by_tier)}});
  }
  p["layers"] = std::move(layers);
  if (moe) {
    p["experts"] = {{"tier", experts_streamed ? "disk" : compute},
                    {"n_slots", f.n_expert_slots},
                    {"expert_bytes", experts_streamed ? f.expert_bytes : 0}};
  }
  return p;
}

}  // namespace sluice
