// Essay 004 ("Scaling LLM inference"): the 7B weight read bound, KV per 8K
// request and per batch, cost per million tokens, chunked prefill, the KV
// handoff floor, paged allocation, 1M-token context sharding and the batch
// ceiling exercise.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "plan/deployment.h"
#include "plan/kv_plan.h"
#include "plan/roofline.h"

namespace sluice::plan {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

WeightFormat fp16() { return parse_weight_format("f16").value(); }

// "80 layers, 8 KV heads (GQA), head_dim 128": Llama-2/3-70B's attention.
ModelShape seventy_b() { return preset_shape("llama-3-70b").value(); }

TEST(Essay004, WeightReadBoundOf7b) {
  Hardware h = hardware_profile("a100-80gb").value();
  h.mem_gbps = 2000;  // "ideal_hbm_bandwidth_gb_s = 2_000"
  const StepEstimate e = decode_step(model_cost_from_params(7e9, fp16()), h, 1, 0);
  EXPECT_EQ(fmt::format("{:.2f}", e.weight_bytes / 1e9), "14.00");
  EXPECT_EQ(fmt::format("{:.1f}", e.tokens_per_s), "142.9");
  for (auto [name, gb] : {std::pair<const char*, const char*>{"f16", "14.0"}, {"int8", "7.0"}, {"int4", "3.5"}})
    EXPECT_EQ(fmt::format("{:.1f}", static_cast<double>(parse_weight_format(name)->bytes(7'000'000'000)) / 1e9), gb);
}

TEST(Essay004, KvPer8kRequestAndBatch) {
  const double one = kv_bytes_per_seq(seventy_b(), fp16(), 8192);
  EXPECT_EQ(one / kGiB, 2.5);
  EXPECT_EQ(64 * one / kGiB, 160.0);
}

TEST(Essay004, CostPerMillion) {
  const double well = cost_per_million_tokens(3.00, 2500).value();
  const double starved = cost_per_million_tokens(3.00, 250).value();
  EXPECT_EQ(fmt::format("{:.2f}", well), "0.33");
  EXPECT_EQ(fmt::format("{:.2f}", starved), "3.33");
  EXPECT_EQ(fmt::format("{:.0f}", starved / well), "10");
}

TEST(Essay004, ChunkedPrefill) {
  // 10,000 prompt tokens in chunks of 512: 20 turns, the last one 272 tokens.
  const ModelCost c = model_cost(preset_shape("llama-3-8b").value(), uniform_mix(fp16()), fp16());
  const ChunkedPrefill p = chunked_prefill(c, hardware_profile("h100").value(), 10'000, 512);
  EXPECT_EQ(p.n_chunks, 20);
  EXPECT_EQ(p.last_chunk_tokens, 272);
  // 512-token chunks of an 8B model stay compute-bound on an H100 (512 > the
  // 295 FLOP/byte ridge), so chunking costs no TTFT; 128-token chunks are
  // memory-bound and every chunk rereads the weights.
  EXPECT_NEAR(p.ttft_s, p.unchunked_ttft_s, 1e-9 * p.ttft_s + 1e-12);
  const ChunkedPrefill small = chunked_prefill(c, hardware_profile("h100").value(), 10'000, 128);
  EXPECT_GT(small.ttft_s, 1.5 * small.unchunked_ttft_s);
}

TEST(Essay004, KvHandoffFloor) {
  // 2.5 GiB over a 200 GB/s interconnect: 13.4 ms.
  EXPECT_EQ(fmt::format("{:.1f}", transfer_s(2.5 * kGiB, 200) * 1e3), "13.4");
}

TEST(Essay004, PagedAllocation) {
  const std::vector<int64_t> requests = {100, 3000};
  const PagedAllocation a = paged_allocation(requests, 4096, 16).value();
  EXPECT_EQ(a.reserved_slots, 8192);
  EXPECT_EQ(a.paged_slots, 3120);
  EXPECT_EQ(a.slack_slots, 20);
  // Waste of max-context reservation: 97.56% (printed 97.5%) and 26.8%.
  EXPECT_EQ(fmt::format("{:.2f}", 100 * a.reserved_waste[0]), "97.56");
  EXPECT_EQ(fmt::format("{:.1f}", 100 * a.reserved_waste[1]), "26.8");
}

TEST(Essay004, ContextParallelShard) {
  const double kv = kv_bytes_per_seq(seventy_b(), fp16(), 1'000'000);
  EXPECT_EQ(fmt::format("{:.1f}", kv / kGiB), "305.2");
  EXPECT_EQ(fmt::format("{:.1f}", kv / 4 / kGiB), "76.3");
}

TEST(Essay004, BatchCeiling) {
  // 28 layers, 4 KV heads, head dim 128, 4,096 tokens, FP16; 80 GiB less 20 reserved.
  const ModelShape s{.name = "7b-class", .n_layer = 28, .n_head = 28, .n_head_kv = 4, .head_dim = 128};
  const double per_seq = kv_bytes_per_seq(s, fp16(), 4096);
  EXPECT_EQ(per_seq, 234'881'024.0);
  EXPECT_EQ(fmt::format("{:.5f}", per_seq / kGiB), "0.21875");
  const KvBudget b = max_batch_for_budget({.memory_bytes = 80 * kGiB, .reserve_bytes = 20 * kGiB, .kv_bytes_per_seq = per_seq}).value();
  EXPECT_EQ(b.kv_budget_bytes / kGiB, 60.0);
  EXPECT_EQ(b.max_batch, 274);
  // With the per-request figure rounded to 0.22 GiB, "about 273".
  EXPECT_EQ(fmt::format("{:.0f}", 60 / 0.22), "273");
}

}  // namespace
}  // namespace sluice::plan
