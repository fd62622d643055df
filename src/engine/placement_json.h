// The "placement" object of Engine::describe_json: which tier holds each
// layer's bytes, each tier counted separately.
//
//   {"mode": "resident" | "layers" | "experts" | "pipeline",
//    "compute": "ram" | "gpu",
//    "layers": [{"layer", "tier", "bytes", "moe",
//                "tiers": {"gpu" | "ram" | "disk" | "rank": bytes}}],
//    "experts": {"tier", "n_slots", "expert_bytes"}}        routed models only
//
// Tiers: "gpu" (device memory of the cuda backend), "ram" (host memory: the
// CPU's compute tier, or under --gpu-budget the pinned host memory matrices
// are copied to the GPU from at each use), "disk" (streamed from the file
// through the weight store: whole layers, or routed experts into slots),
// "rank" (layers another process of a pipeline holds). A layer's "tier" is
// the one holding most of its bytes; "tiers" lists every tier holding any.
// Plain function of plain values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace sluice {

struct PlacementFacts {
  bool gpu = false;                         // the backend computes from device memory
  std::vector<uint64_t> layer_bytes;        // [n_layer] every tensor of the layer
  std::vector<uint64_t> layer_expert_bytes; // [n_layer] of which routed experts' (stacked tensors)
  std::vector<uint64_t> layer_host_bytes;   // [n_layer] of which the GPU reads from host memory (Model::host_layer_bytes)
  std::vector<uint8_t> layer_moe;           // [n_layer] 1: a routed layer
  std::vector<uint8_t> layer_streamed;      // [n_layer] 1: the whole layer streams from disk; empty: none
  int64_t layer_begin = 0;                  // this process's layers: [layer_begin, layer_end)
  int64_t layer_end = 0;
  bool weights_streamed = false;            // a weight store (--mem-budget) feeds the model
  int64_t n_expert_slots = 0;               // > 0: experts stream from disk into this many slots
  uint64_t expert_bytes = 0;                // one expert's bytes (experts streamed)
};

nlohmann::ordered_json placement_json(const PlacementFacts& f);

}  // namespace sluice
