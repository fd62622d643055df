// Calibration smoke test (positivity only; probes are short) and the measure
// loop on a tiny synthetic model with a fixed calibration (deterministic
// predictions; the measured side is only checked for being positive).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <fmt/format.h>

#include "format/model_file.h"
#include "model/synth.h"
#include "plan/calibrate.h"
#include "runtime/measure.h"

namespace sluice::plan {
namespace {

TEST(Calibrate, ProbesArePositive) {
  const auto c = calibrate({.n_threads = 2, .n_repeats = 1, .mem_bytes = 16u << 20, .matmul_n_in = 256,
                            .matmul_n_out = 256, .matmul_n_tokens = 8, .disk_bytes = 8u << 20,
                            .weight_read_bytes = 8u << 20, .min_probe_seconds = 0});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_GT(c->mem_read_gbps, 0);
  EXPECT_GT(c->weight_read_gbps, 0);
  EXPECT_EQ(c->decode_read_gbps(), c->weight_read_gbps);  // the decode roof is the weight read
  EXPECT_EQ(c->as_hardware().mem_gbps, c->weight_read_gbps);
  EXPECT_GT(c->matmul_tflops, 0);
  EXPECT_GT(c->disk_read_gbps, 0);
  EXPECT_FALSE(c->disk_note.empty());
  EXPECT_GT(c->mem_capacity_gb, 0);
}

// The weight-read probe on small layers of each kernel family: a finite,
// positive rate, and a second run within a loose factor of the first (each the
// median over a 50 ms window, so one preempted pass does not decide it; no
// timing bound: the machine may be busy).
TEST(Calibrate, WeightReadProbeIsPositiveAndRepeatable) {
  ThreadPool pool(2);
  for (DType type : {DType::kQ8_0, DType::kQ4_0, DType::kF16}) {
    auto m = [type](int64_t n_in, int64_t n_out) { return MatmulShape{.type = type, .n_in = n_in, .n_out = n_out}; };
    const std::vector<MatmulGroup> layer = {{m(256, 256), m(256, 64), m(256, 64)}, {m(256, 256)}, {m(256, 40), m(256, 40)},
                                            {m(40 * 32, 256)}};
    // Three probes; two of them must agree within 100x. (A single pair can be
    // 300x apart when other processes take both CPUs from the probe's threads.)
    double g[3];
    for (double& v : g) {
      v = probe_weight_read_gbps(pool, layer, 4u << 20, 3, 0.05);
      EXPECT_TRUE(std::isfinite(v) && v > 0) << dtype_name(type) << ": " << v;
    }
    std::sort(g, g + 3);
    EXPECT_LT(std::min(g[1] / g[0], g[2] / g[1]), 100.0) << dtype_name(type) << ": " << g[0] << ", " << g[1] << ", " << g[2];
  }
}

TEST(Calibrate, LayerMatmulProbeIsPositiveOverRepackedAndGgufRows) {
  ThreadPool pool(2);
  for (DType type : {DType::kQ8_0, DType::kQ4_0, DType::kF16}) {
    auto m = [type](int64_t n_in, int64_t n_out) { return MatmulShape{.type = type, .n_in = n_in, .n_out = n_out}; };
    // Row counts of 16 (repacked at AVX-512) and of 40 (GGUF rows) in one layer.
    const std::vector<MatmulGroup> layer = {{m(256, 256), m(256, 64), m(256, 64)}, {m(256, 256)},
                                            {m(256, 40), m(256, 40)}, {m(40 * 32, 256)}};
    const double t = probe_layer_matmul_tflops(pool, layer, 16, 4u << 20, 3, 0.02);
    EXPECT_TRUE(std::isfinite(t) && t > 0) << dtype_name(type) << ": " << t;
  }
}

TEST(Calibrate, DecodeRoofFallsBackToTheMemoryRead) {
  const Calibration c{.n_threads = 1, .mem_read_gbps = 10, .matmul_tflops = 0.01};
  EXPECT_EQ(c.decode_read_gbps(), 10);
  EXPECT_EQ(c.as_hardware().mem_gbps, 10);
}

TEST(Calibrate, ModelWeightsSetTheProbesToTheModelsLayer) {
  const std::string path = fmt::format("/tmp/sluice-plan-calibrate-{}.gguf", ::getpid());
  const SynthShape shape = synth_preset("tiny").value();
  ASSERT_TRUE(write_synth_model({.shape = shape, .type = "q4_0", .seed = 3, .n_threads = 1}, path).ok());
  auto mf = open_model_file(path);
  std::remove(path.c_str());
  ASSERT_TRUE(mf.ok()) << mf.status().to_string();
  const CalibrateOptions o = with_model_weights({.n_threads = 1}, *mf);
  const TensorInfo* up = mf->find("blk.0.ffn_up.weight");
  ASSERT_NE(up, nullptr);
  EXPECT_EQ(o.matmul_type, up->type);
  // q/k/v, o, gate/up, down: the forward pass's four dispatches, shapes from the file.
  ASSERT_EQ(o.weight_read_layer.size(), 4u);
  EXPECT_EQ(o.weight_read_layer[0].size(), 3u);
  EXPECT_EQ(o.weight_read_layer[1].size(), 1u);
  EXPECT_EQ(o.weight_read_layer[2].size(), 2u);
  EXPECT_EQ(o.weight_read_layer[3].size(), 1u);
  EXPECT_EQ(o.weight_read_layer[2][1].n_in, up->ne[0]);
  EXPECT_EQ(o.weight_read_layer[2][1].n_out, up->ne[1]);
  EXPECT_EQ(o.weight_read_layer[2][1].type, up->type);
  ThreadPool pool(1);
  EXPECT_GT(probe_weight_read_gbps(pool, o.weight_read_layer, 1u << 20, 1), 0);
  // The probes sweep the model's own working set (its block matrices), never
  // more than the span that defeats the cache, and a skipped weight read stays skipped.
  uint64_t blocks = 0;
  for (const TensorInfo& t : mf->tensors)
    if (t.name.rfind("blk.", 0) == 0 && t.ne.size() == 2) blocks += t.n_bytes;
  ASSERT_LT(blocks, memory_span_bytes());
  EXPECT_EQ(o.weight_read_bytes, blocks);
  EXPECT_EQ(with_model_weights({.weight_read_bytes = blocks / 2}, *mf).weight_read_bytes, blocks / 2);
  EXPECT_EQ(with_model_weights({.weight_read_bytes = 0}, *mf).weight_read_bytes, 0u);
}

TEST(Calibrate, MemorySpanIsAtLeast256MiBAndTwiceTheLastLevelCache) {
  const uint64_t span = memory_span_bytes();
  EXPECT_GE(span, 256ull << 20);
  const long llc = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (llc > 0) {
    EXPECT_GE(span, 2 * static_cast<uint64_t>(llc));
  }
  EXPECT_EQ(CalibrateOptions{}.mem_bytes, span);
  EXPECT_EQ(CalibrateOptions{}.weight_read_bytes, span);
}

TEST(Calibrate, MissingDiskFileIsAnError) {
  EXPECT_FALSE(probe_disk_read("/nonexistent/sluice-model.gguf", "/tmp", 1 << 20).ok());
}

TEST(Measure, TinySynthPredictedBesideMeasured) {
  const std::string path = fmt::format("/tmp/sluice-plan-measure-{}.gguf", ::getpid());
  ASSERT_TRUE(write_synth_model({.shape = synth_preset("tiny").value(), .type = "q8_0", .seed = 5, .n_threads = 1}, path).ok());
  const Calibration cal{.n_threads = 1, .mem_read_gbps = 10, .matmul_tflops = 0.01, .disk_read_gbps = 1};
  const auto r = measure_model({.model_path = path, .n_threads = 1, .n_prompt = 16, .n_decode = 4}, cal);
  std::remove(path.c_str());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->plan_weight_bytes, static_cast<double>(r->engine_weight_bytes));
  // Prediction: bytes per token / 10 GB/s vs FLOPs / 10 GFLOP/s, whichever is slower.
  const double bytes = r->decode_predicted.weight_bytes + r->decode_predicted.kv_bytes;
  EXPECT_DOUBLE_EQ(r->decode_predicted.memory_s, bytes / 10e9);
  EXPECT_DOUBLE_EQ(r->decode_bandwidth_tps, 10e9 / bytes);
  EXPECT_GT(r->decode_measured_tps, 0);
  EXPECT_GT(r->prefill_measured_tps, 0);
}

// Loaded once, measured twice (as `plan --measure --rounds` does): the same
// calibration gives the same predictions each time, and each measurement runs.
TEST(Measure, LoadedModelMeasuresRepeatedly) {
  const std::string path = fmt::format("/tmp/sluice-plan-measure-rounds-{}.gguf", ::getpid());
  ASSERT_TRUE(write_synth_model({.shape = synth_preset("tiny").value(), .type = "q8_0", .seed = 5, .n_threads = 1}, path).ok());
  auto m = load_for_measure({.model_path = path, .n_threads = 1, .n_prompt = 8, .n_decode = 2});
  std::remove(path.c_str());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const Calibration cal{.n_threads = 1, .mem_read_gbps = 10, .matmul_tflops = 0.01, .disk_read_gbps = 1};
  const auto a = measure_loaded(*m, cal);
  const auto b = measure_loaded(*m, cal);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(a->decode_predicted.tokens_per_s, b->decode_predicted.tokens_per_s);
  EXPECT_EQ(a->prefill_predicted.tokens_per_s, b->prefill_predicted.tokens_per_s);
  EXPECT_EQ(a->decode_ctx, b->decode_ctx);
  EXPECT_GT(b->decode_measured_tps, 0);
  EXPECT_GT(b->prefill_measured_tps, 0);
  EXPECT_FALSE(measure_loaded(*m, Calibration{.n_threads = 1}).ok());  // no rates: nothing to predict with
}

TEST(Measure, NoDecodeTokensIsAnError) {
  const auto m = load_for_measure({.model_path = "/nonexistent.gguf", .n_prompt = 8, .n_decode = 0});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("decode token"), std::string::npos) << m.status().to_string();  // before the file
}

TEST(Measure, MissingModelIsAnError) {
  const Calibration cal{.n_threads = 1, .mem_read_gbps = 10, .matmul_tflops = 0.01};
  EXPECT_FALSE(measure_model({.model_path = "/nonexistent.gguf"}, cal).ok());
}

}  // namespace
}  // namespace sluice::plan
