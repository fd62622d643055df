// Essay 003 ("Why generating tokens is memory-bound"): the memory wall, the A100
// ridge point, KV sizes, the quantization memory table, the speculative
// decoding example, parallelism memory and all-reduce cost, and the cost table.
// Inputs are the essay's: A100 at 2 TB/s and 312 TFLOP/s FP16, FP16 = 2 bytes.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "plan/deployment.h"
#include "plan/kv_plan.h"
#include "plan/roofline.h"
#include "plan/speculative.h"

namespace sluice::plan {
namespace {

Hardware essay_a100() {
  Hardware h = hardware_profile("a100-80gb").value();
  h.mem_gbps = 2000;  // "An NVIDIA A100 has 2 TB/s" (datasheet: 2039 GB/s)
  h.peak_tflops = 312;
  return h;
}

WeightFormat fmt_of(const char* name) { return parse_weight_format(name).value(); }

TEST(Essay003, MemoryWall) {
  // 70B FP16: 140 GB / 2 TB/s = 70 ms, ~14 tokens/s; 7B ~143; 405B ~2.5.
  const StepEstimate e70 = decode_step(model_cost_from_params(70e9, fmt_of("f16")), essay_a100(), 1, 0);
  EXPECT_EQ(fmt::format("{:.0f}", e70.step_s * 1e3), "70");
  EXPECT_EQ(fmt::format("{:.1f}", e70.tokens_per_s), "14.3");
  EXPECT_EQ(fmt::format("{:.0f}", decode_step(model_cost_from_params(7e9, fmt_of("f16")), essay_a100(), 1, 0).tokens_per_s), "143");
  EXPECT_EQ(fmt::format("{:.1f}", decode_step(model_cost_from_params(405e9, fmt_of("f16")), essay_a100(), 1, 0).tokens_per_s), "2.5");
  // Compute ~0.4 ms of the 70 ms: the GPU waits 99.4% of the time.
  EXPECT_EQ(fmt::format("{:.1f}", e70.compute_s * 1e3), "0.4");
  EXPECT_EQ(fmt::format("{:.1f}", 100.0 * (1.0 - e70.compute_utilization)), "99.4");
}

TEST(Essay003, A100RidgePoint) {
  // 312 / 2 = 156 ops/byte needed; a matrix-vector product has 1: 0.6% used.
  EXPECT_EQ(fmt::format("{:.0f}", essay_a100().ridge_flop_per_byte()), "156");
  EXPECT_EQ(fmt::format("{:.1f}", 100.0 * 1.0 / essay_a100().ridge_flop_per_byte()), "0.6");
}

TEST(Essay003, KvCacheSizes) {
  const WeightFormat f16 = fmt_of("f16");
  ModelShape l2_70b = preset_shape("llama-2-70b").value();
  EXPECT_EQ(fmt::format("{:.2f}", kv_bytes_per_seq(l2_70b, f16, 4096) / 1e9), "1.34");   // GQA, 8 KV heads
  ModelShape mha = l2_70b;
  mha.n_head_kv = 64;
  EXPECT_EQ(fmt::format("{:.2f}", kv_bytes_per_seq(mha, f16, 4096) / 1e9), "10.74");     // MHA
  // 128K context (Llama-3.1-70B): 42.95 GB, printed "42.9 GB" in the text and "43 GB" in the table.
  const double kv128k = kv_bytes_per_seq(preset_shape("llama-3-70b").value(), f16, 131072);
  EXPECT_EQ(fmt::format("{:.1f}", kv128k / 1e9), "42.9");
  EXPECT_EQ(fmt::format("{:.0f}", kv128k / 1e9), "43");
  // GQA 8 groups: 8x smaller than 64-head MHA; MQA: 64x.
  ModelShape mqa = l2_70b;
  mqa.n_head_kv = 1;
  EXPECT_DOUBLE_EQ(kv_bytes_per_token(mha, f16) / kv_bytes_per_token(l2_70b, f16), 8.0);
  EXPECT_DOUBLE_EQ(kv_bytes_per_token(mha, f16) / kv_bytes_per_token(mqa, f16), 64.0);
}

TEST(Essay003, KvTableUnits) {
  // The table mixes units: the Llama-3-8B and GPT-3 cells are GiB (0.5, 16, 18)
  // though labelled GB; the Llama-3-70B cells are decimal GB (1.3, 43).
  const WeightFormat f16 = fmt_of("f16");
  const ModelShape l3_8b = preset_shape("llama-3-8b").value();
  EXPECT_EQ(fmt::format("{:.1f}", kv_bytes_per_seq(l3_8b, f16, 4096) / (1 << 30)), "0.5");
  EXPECT_EQ(fmt::format("{:.0f}", kv_bytes_per_seq(l3_8b, f16, 131072) / (1 << 30)), "16");
  EXPECT_EQ(fmt::format("{:.1f}", kv_bytes_per_seq(preset_shape("llama-3-70b").value(), f16, 4096) / 1e9), "1.3");
  const ModelShape gpt3{.name = "gpt-3-175b", .n_layer = 96, .n_head = 96, .n_head_kv = 96, .head_dim = 128};
  EXPECT_EQ(fmt::format("{:.0f}", kv_bytes_per_seq(gpt3, f16, 4096) / (1 << 30)), "18");
  // The GPT-3 128K cell ("590 GB") is not reproduced: 576 GiB = 618.5 GB.
  EXPECT_EQ(fmt::format("{:.0f}", kv_bytes_per_seq(gpt3, f16, 131072) / (1 << 30)), "576");
}

TEST(Essay003, QuantizedMemoryOf70b) {
  struct Row {
    const char* format;
    const char* gb;
  };
  // FP16 16 bits, INT8 8, INT4 4, Q4_K_M ~4.8 (an average), Q2_K ~2.6 (2.625).
  for (const Row& r : {Row{"f16", "140"}, Row{"int8", "70"}, Row{"int4", "35"}, Row{"bits:4.8", "42"}, Row{"q2_k", "23"}}) {
    EXPECT_EQ(fmt::format("{:.0f}", static_cast<double>(fmt_of(r.format).bytes(70'000'000'000)) / 1e9), r.gb) << r.format;
  }
}

TEST(Essay003, SpeculativeExample) {
  // k=5, acceptance 0.7 ("3.5 accepted on avg"), cost ratio 0.07:
  // 4.5 tokens for 1.35 target passes = 3.3x.
  const SpecEstimate lin =
      spec_estimate({.acceptance = 0.7, .draft_len = 5, .cost_ratio = 0.07, .model = AcceptanceModel::kLinear}).value();
  EXPECT_DOUBLE_EQ(lin.tokens_per_round, 4.5);
  EXPECT_DOUBLE_EQ(lin.cost_target_passes, 1.35);
  EXPECT_EQ(fmt::format("{:.1f}", lin.speedup), "3.3");
  // With per-token acceptance (the first rejection ends the round), the same
  // inputs give 2.94 tokens per round and 2.2x.
  const SpecEstimate geo = spec_estimate({.acceptance = 0.7, .draft_len = 5, .cost_ratio = 0.07}).value();
  EXPECT_EQ(fmt::format("{:.2f}", geo.tokens_per_round), "2.94");
  EXPECT_EQ(fmt::format("{:.1f}", geo.speedup), "2.2");
}

TEST(Essay003, BestDraftLength) {
  // a=0.8, r=0.05: the essay says "optimal k ~ 5-7". The geometric model peaks at
  // k=8 (3.09x) on a flat top: k = 5, 6, 7 are within 5% of it.
  const BestDraft b = best_draft_length(0.8, 0.05, 16).value();
  EXPECT_EQ(b.best.draft_len, 8);
  EXPECT_EQ(fmt::format("{:.2f}", b.best.speedup), "3.09");
  for (int64_t k = 5; k <= 7; ++k) EXPECT_GT(b.curve[k - 1].speedup, 0.95 * b.best.speedup) << k;
  EXPECT_LT(b.curve[3].speedup, 0.95 * b.best.speedup);  // k = 4 is not
}

TEST(Essay003, ParallelismMemoryAndAllReduce) {
  const double bytes = static_cast<double>(fmt_of("f16").bytes(70'000'000'000));
  EXPECT_EQ(fmt::format("{:.0f}", weight_bytes_per_device(bytes, 1, 1) / 1e9), "140");
  EXPECT_EQ(fmt::format("{:.0f}", weight_bytes_per_device(bytes, 2, 1) / 1e9), "70");
  EXPECT_EQ(fmt::format("{:.0f}", weight_bytes_per_device(bytes, 4, 1) / 1e9), "35");
  EXPECT_EQ(fmt::format("{:.1f}", weight_bytes_per_device(bytes, 8, 1) / 1e9), "17.5");
  // Ring all-reduce of one 8192-wide FP16 row over TP=4 at 450 GB/s: ~0.05 us.
  const AllReduceCost c = tp_all_reduce({.n_embd = 8192, .n_tokens = 1, .bytes_per_elem = 2, .tp = 4, .link_gbps = 450}).value();
  EXPECT_EQ(fmt::format("{:.2f}", c.per_all_reduce_s * 1e6), "0.05");
  EXPECT_EQ(fmt::format("{:.4f}", c.per_all_reduce_s * 1e6), "0.0546");
}

TEST(Essay003, CostTable) {
  EXPECT_EQ(fmt::format("{:.2f}", cost_per_million_tokens(2.50, 800).value()), "0.87");
  EXPECT_EQ(fmt::format("{:.2f}", cost_per_million_tokens(20.0, 3000).value()), "1.85");
  EXPECT_EQ(fmt::format("{:.2f}", cost_per_million_tokens(32.0, 8000).value()), "1.11");
}

}  // namespace
}  // namespace sluice::plan
