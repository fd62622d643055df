// Essay 001 (CS336 inference lecture): the Llama 2 13B memory / latency /
// throughput tables, the GQA rows, the H100 accelerator intensity and the
// attention intensities. Inputs are the lecture's: S = 1024, D = 5120,
// F = 13824, N = 40, K = 40 (or 8), H = 128, L = 40, V = 32000, bf16 (2 bytes),
// H100 memory bandwidth 3.35e12 bytes/s. Parameters are the weight matrices
// (the lecture's formula has no norm vectors).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "plan/kv_plan.h"
#include "plan/roofline.h"

namespace sluice::plan {
namespace {

constexpr int64_t kSeqLen = 1024;

ModelShape lecture_13b(int64_t n_kv_heads) {
  ModelShape s = preset_shape("llama-2-13b").value();
  s.n_head_kv = n_kv_heads;
  return s;
}

Hardware lecture_h100() {
  Hardware h = hardware_profile("h100").value();
  EXPECT_EQ(h.mem_gbps, 3350);  // the lecture's 3.35e12 bytes/s
  return h;
}

struct Row {
  int64_t batch;
  double memory_bytes;
  const char* latency;     // seconds/token, as printed
  const char* throughput;  // tokens/second, as printed
};

void expect_rows(int64_t n_kv_heads, int64_t params, std::initializer_list<Row> rows) {
  const ModelShape s = lecture_13b(n_kv_heads);
  const WeightFormat bf16 = parse_weight_format("bf16").value();
  ASSERT_EQ(count_params(s).matrices(), params);
  const double param_bytes = static_cast<double>(count_params(s).matrices()) * bf16.bytes_per_weight();
  const double kv_seq = kv_bytes_per_seq(s, bf16, kSeqLen);
  for (const Row& r : rows) {
    const MemoryBoundDecode d = memory_bound_decode(param_bytes, kv_seq, r.batch, lecture_h100());
    EXPECT_EQ(d.memory_bytes, r.memory_bytes) << "B=" << r.batch;
    EXPECT_EQ(fmt::format("{:.4f}", d.latency_s), r.latency) << "B=" << r.batch;
    EXPECT_EQ(fmt::format("{:.4f}", d.tokens_per_s), r.throughput) << "B=" << r.batch;
  }
}

TEST(Essay001, Llama2_13bParameterCount) {
  EXPECT_EQ(count_params(lecture_13b(40)).matrices(), 13'015'449'600);
}

TEST(Essay001, Llama2_13bBatchTable) {
  // The batch-256 memory is printed as 248,779,264,000 in the essay; the figure
  // consistent with its own 0.0719 s and 3561.7685 tokens/s is 240,779,264,000
  // (see Batch256MemoryTypo).
  expect_rows(40, 13'015'449'600,
              {{1, 26'869'760'000, "0.0080", "124.6755"},
               {64, 79'717'990'400, "0.0238", "2689.4807"},
               {256, 240'779'264'000, "0.0719", "3561.7685"}});
}

TEST(Essay001, Batch256MemoryTypo) {
  // Throughput from the printed memory would be 3447, not the printed 3561.7685.
  const MemoryBoundDecode printed = memory_bound_decode(248'779'264'000.0, 0, 256, lecture_h100());
  EXPECT_EQ(fmt::format("{:.0f}", printed.tokens_per_s), "3447");
}

TEST(Essay001, GqaRows) {
  // The batch-256 throughput is printed as 13060.1648; 256 / (65,625,128,960 /
  // 3.35e12) is 13068.1648 (the printed memory and 0.0196 s agree with it).
  expect_rows(8, 11'337'728'000,
              {{64, 33'412'874'240, "0.0100", "6416.6883"}, {256, 65'625'128'960, "0.0196", "13068.1648"}});
}

TEST(Essay001, Batch256DoesNotFitH100) {
  const ModelShape s = lecture_13b(40);
  const WeightFormat bf16 = parse_weight_format("bf16").value();
  const double param_bytes = static_cast<double>(count_params(s).matrices()) * 2;
  const double kv_seq = kv_bytes_per_seq(s, bf16, kSeqLen);
  EXPECT_TRUE(memory_bound_decode(param_bytes, kv_seq, 64, lecture_h100()).fits);
  EXPECT_FALSE(memory_bound_decode(param_bytes, kv_seq, 256, lecture_h100()).fits);
}

TEST(Essay001, H100AcceleratorIntensity) {
  // 989e12 / 3.35e12 = "about 295" FLOP/byte; compute-bound only for B > 295.
  const Hardware h = lecture_h100();
  EXPECT_EQ(fmt::format("{:.0f}", h.ridge_flop_per_byte()), "295");
  // Matrix-vector product: intensity 1.
  EXPECT_EQ(fmt::format("{:.2f}", matmul_intensity(1, 8192, 8192, 2)), "1.00");
  // The whole 13B model in bf16 decoding without KV: the first compute-bound batch.
  const ModelCost c = model_cost(lecture_13b(40), uniform_mix(parse_weight_format("bf16").value()),
                                 parse_weight_format("bf16").value());
  // Weights alone: intensity ~ B, so the first batch past 295.2 is 296.
  ModelCost weights_only = c;
  weights_only.kv_bytes_per_token = 0;
  EXPECT_EQ(batch_at_ridge(weights_only, h, 0).value(), 296);
  // Writing each new token's K/V (0.8 MB with 40 KV heads) moves it to 299.
  EXPECT_EQ(batch_at_ridge(c, h, 0).value(), 299);
}

TEST(Essay001, AttentionIntensity) {
  // Prefill (T = S): S / 2.  Generation (T = 1): S / (S + 1) < 1.
  EXPECT_DOUBLE_EQ(attention_intensity(4096, 4096), 2048.0);
  EXPECT_LT(attention_intensity(4096, 1), 1.0);
  EXPECT_DOUBLE_EQ(attention_intensity(4096, 1), 4096.0 / 4097.0);
}

TEST(Essay001, GqaShrinksKvByNOverK) {
  const WeightFormat bf16 = parse_weight_format("bf16").value();
  EXPECT_DOUBLE_EQ(kv_bytes_per_token(lecture_13b(40), bf16) / kv_bytes_per_token(lecture_13b(8), bf16), 5.0);
}

}  // namespace
}  // namespace sluice::plan
