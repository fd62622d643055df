// The calibration's model-weight options: the matmul probe's weight type and
// the weight-read layer come from tensors every supported architecture has.
#include "plan/calibrate.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

#include "format/model_file.h"
#include "model/synth.h"

namespace sluice::plan {
namespace {

// A synthetic model of the preset with every matrix in `type`, opened.
ModelFile synth_file(const std::string& preset, const std::string& type) {
  const std::string path = fmt::format("/tmp/sluice-calibrate-test-{}-{}.gguf", ::getpid(), preset);
  auto shape = synth_preset(preset, preset == "tiny-gemma2" ? 0 : 2);
  EXPECT_TRUE(shape.ok());
  EXPECT_TRUE(write_synth_model({.shape = *shape, .type = type, .seed = 2, .n_threads = 1}, path).ok());
  auto mf = open_model_file(path);
  std::remove(path.c_str());  // the mapping stays valid
  EXPECT_TRUE(mf.ok()) << mf.status().to_string();
  return std::move(*mf);
}

// Phi-3 fuses gate and up into one matrix (still named ffn_up.weight): the
// probe takes its type, as it takes the separate up projection's elsewhere.
// The default probe type is Q8_0, so an F16 answer comes from the file.
TEST(CalibrateModelWeights, MatmulTypeComesFromTheFileForEveryArchitecture) {
  ASSERT_EQ(CalibrateOptions{}.matmul_type, DType::kQ8_0);
  for (const std::string preset : {"tiny-phi3", "tiny", "tiny-gemma2", "tiny-gemma3", "tiny-qwen3", "tiny-qwen3moe",
                                   "tiny-qwen2moe"}) {
    const ModelFile file = synth_file(preset, "f16");
    const CalibrateOptions o = with_model_weights({.probe_disk = false}, file);
    EXPECT_EQ(o.matmul_type, DType::kF16) << preset;
    EXPECT_FALSE(o.weight_read_layer.empty()) << preset;
  }
  // Phi-3's layer: q/k/v fused, the output, gate/up fused (2 x n_ff rows), down.
  const ModelFile phi3 = synth_file("tiny-phi3", "q8_0");
  const CalibrateOptions o = with_model_weights({.probe_disk = false, .matmul_type = DType::kF32}, phi3);
  EXPECT_EQ(o.matmul_type, DType::kQ8_0);
  ASSERT_EQ(o.weight_read_layer.size(), 4u);
  ASSERT_EQ(o.weight_read_layer[2].size(), 1u);
  EXPECT_EQ(o.weight_read_layer[2][0].n_in, 64);
  EXPECT_EQ(o.weight_read_layer[2][0].n_out, 2 * 128);
}

}  // namespace
}  // namespace sluice::plan
