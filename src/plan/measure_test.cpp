// Calibration smoke test (positivity only; probes are short) and the measure
// loop on a tiny synthetic model with a fixed calibration (deterministic
// predictions; the measured side is only checked for being positive).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

#include "model/synth.h"
#include "plan/calibrate.h"
#include "plan/measure.h"

namespace sluice::plan {
namespace {

TEST(Calibrate, ProbesArePositive) {
  const auto c = calibrate({.n_threads = 2, .n_repeats = 1, .mem_bytes = 16u << 20, .matmul_n_in = 256,
                            .matmul_n_out = 256, .matmul_n_tokens = 8, .disk_bytes = 8u << 20});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_GT(c->mem_read_gbps, 0);
  EXPECT_GT(c->matmul_tflops, 0);
  EXPECT_GT(c->disk_read_gbps, 0);
  EXPECT_FALSE(c->disk_note.empty());
  EXPECT_GT(c->mem_capacity_gb, 0);
}

TEST(Calibrate, MissingDiskFileIsAnError) {
  EXPECT_FALSE(probe_disk_read("/nonexistent/sluice-model.gguf", "/tmp", 1 << 20).ok());
}

TEST(Measure, TinySynthPredictedBesideMeasured) {
  const std::string path = fmt::format("/tmp/sluice-plan-measure-{}.gguf", ::getpid());
  ASSERT_TRUE(write_synth_model({.shape = synth_preset("tiny").value(), .type = "q8_0", .seed = 5, .n_threads = 1}, path).ok());
  const Calibration cal{.n_threads = 1, .mem_read_gbps = 10, .matmul_tflops = 0.01, .disk_read_gbps = 1};
  const auto r = measure_model({.model_path = path, .n_threads = 1, .n_prompt = 16, .n_decode = 4,
                                .stream_budget_bytes = 1e6}, cal);
  std::remove(path.c_str());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->plan_weight_bytes, static_cast<double>(r->engine_weight_bytes));
  // Prediction: bytes per token / 10 GB/s vs FLOPs / 10 GFLOP/s, whichever is slower.
  const double bytes = r->decode_predicted.weight_bytes + r->decode_predicted.kv_bytes;
  EXPECT_DOUBLE_EQ(r->decode_predicted.memory_s, bytes / 10e9);
  EXPECT_DOUBLE_EQ(r->decode_bandwidth_tps, 10e9 / bytes);
  EXPECT_GT(r->decode_measured_tps, 0);
  EXPECT_GT(r->prefill_measured_tps, 0);
  ASSERT_TRUE(r->stream.has_value());
  EXPECT_EQ(r->stream->n_ring_slots >= 2, true);
  EXPECT_FALSE(r->stream_note.empty());
}

TEST(Measure, MissingModelIsAnError) {
  const Calibration cal{.n_threads = 1, .mem_read_gbps = 10, .matmul_tflops = 0.01};
  EXPECT_FALSE(measure_model({.model_path = "/nonexistent.gguf"}, cal).ok());
}

}  // namespace
}  // namespace sluice::plan
