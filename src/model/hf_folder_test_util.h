// Test helper: a GGUF model written back as a Hugging Face folder, so a test
// can load both and compare (the HF importer against the GGUF loader).
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "arch/arch_spec.h"
#include "format/model_file.h"

namespace sluice::testing_util {

// Writes `config` as dir/config.json and g's f32 tensors under their HF names
// as dir/model.safetensors, in HF's conventions: norms of a (1 + w) scale as w
// (Gemma), shapes outermost first. Tensors without an HF name (LongRoPE's
// factors) are left out: HF keeps them in config.json.
inline void write_hf_folder(const ModelFile& g, const std::string& dir, const std::string& config) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << config;
  const ArchSpec& spec = *find_arch(*g.metadata.get_string("general.architecture"));
  nlohmann::json header = nlohmann::json::object();
  std::string body;
  for (const TensorInfo& t : g.tensors) {
    const TensorSpec* ts = spec.find_tensor(t.name);
    ASSERT_NE(ts, nullptr) << t.name;
    if (!*ts->hf) continue;
    const auto [layer, suffix] = split_layer_name(t.name);
    const std::string hf = ts->per_layer ? "model.layers." + std::to_string(layer) + "." + ts->hf : ts->hf;
    std::vector<float> v(static_cast<size_t>(t.n_bytes / 4));
    std::memcpy(v.data(), t.data, t.n_bytes);
    if (spec.hf_norm_plus_one && t.ne.size() == 1)
      for (float& x : v) x -= 1.0f;
    std::vector<int64_t> shape(t.ne.rbegin(), t.ne.rend());
    header[hf] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {body.size(), body.size() + t.n_bytes}}};
    body.append(reinterpret_cast<const char*>(v.data()), t.n_bytes);
  }
  const std::string text = header.dump();
  const uint64_t n = text.size();
  std::ofstream f(dir + "/model.safetensors", std::ios::binary);
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << text << body;
}

}  // namespace sluice::testing_util
