// The fluid split at run time (engine/fluid_control.h) on stories260K under a
// --mem-budget that keeps two of its five layers resident: the pool grows by
// demoting them instead of preempting, shrinks back when load drops, and
// every request's tokens are those of a run without any budget.
#include "engine/fluid_control.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>

#include "backend/backend_registry.h"
#include "base/metrics.h"
#include "base/test_data.h"
#include "engine/engine_test_util.h"
#include "plan/calibrate.h"
#include "runtime/device_like_test_util.h"
#include "weights/placement.h"
#include "weights/weights_test_util.h"

namespace sluice {
namespace {

using testing::Collector;
using testing::prompt_of;
using testing::shipped_model_path;

// Rates that make the placement compute-bound (a ring of 2 slots), so the
// budget below keeps layers 0 and 2 resident whatever this machine measures.
const plan::Calibration kSlowMachine{
    .n_threads = 2, .mem_read_gbps = 10, .matmul_tflops = 0.0005, .disk_read_gbps = 1};

EngineConfig config(bool fluid, uint64_t mem_budget) {
  return EngineConfig{.model_path = shipped_model_path("stories260K.gguf"),
                      .n_threads = 2,
                      .max_batch_tokens = 256,
                      .max_seqs = 8,
                      .kv_budget_bytes = 10 * 20480,  // 10 blocks of 16 f32 positions
                      .mem_budget_bytes = mem_budget,
                      .fluid_split = fluid,
                      .fluid_hold_steps = 2,
                      .check_invariants = true,
                      .calibration = &kSlowMachine};
}

struct Burst {
  std::vector<std::vector<int32_t>> tokens;  // per request, in submission order
  EngineStats stats;
  std::string placement;
};

// A burst of requests at once; then, once idle (the fluid split's units come
// back), one more alone.
struct Workload {
  int n_burst = 8;
  // Request i: i < n_burst the burst's, i == n_burst the lone one.
  std::function<Request(const Tokenizer&, int)> request;
};

// stories260K's: eight prompts of the engine tests, 40-61 tokens each, then 30.
Workload stories_burst() {
  return {.request = [](const Tokenizer& tok, int i) {
    return Request{.prompt = prompt_of(tok, i < 8 ? i : 1), .max_tokens = i < 8 ? 40 + 3 * i : 30,
                   .sampling = {.temperature = 0}, .ignore_eos = true};
  }};
}

Burst run_burst(const EngineConfig& cfg, const Workload& w = stories_burst()) {
  auto e = Engine::create(cfg);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  Burst b;
  if (!e.ok()) return b;
  Collector c;
  std::vector<RequestId> ids;
  auto submit = [&](int i) {
    auto id = (*e)->submit(w.request((*e)->tokenizer(), i), c.callback());
    EXPECT_TRUE(id.ok()) << id.status().to_string();
    if (id.ok()) ids.push_back(*id);
  };
  for (int i = 0; i < w.n_burst; ++i) submit(i);
  c.wait(w.n_burst);
  // Idle, the load has dropped: the demoted units come back without a step.
  if (cfg.fluid_split) {
    EXPECT_GT((*e)->stats().fluid_demoted_units, 0);
    for (int i = 0; i < 200 && (*e)->stats().fluid_demoted_units > 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    EXPECT_EQ((*e)->stats().fluid_demoted_units, 0) << "still demoted after 5 s idle";
  }
  submit(w.n_burst);
  c.wait(w.n_burst + 1);
  for (RequestId id : ids) b.tokens.push_back(c.results_[id].tokens[0]);
  b.stats = (*e)->stats();
  b.placement = (*e)->placement_report();
  return b;
}

constexpr uint64_t kTwoLayersResident = 1290000;  // essentials, a ring of 2 and 2 of 5 layers
// What the CUDA backend keeps of --gpu-budget beyond the device-like one's:
// the ring host layers are copied through (two of them), scratch.
constexpr uint64_t kCudaStaging = 1 << 20;

TEST(FluidControl, DemotesLayersInsteadOfPreemptingAndPromotesThemBack) {
  const Burst plain = run_burst(config(false, 0));
  const Burst fixed = run_burst(config(false, kTwoLayersResident));
  const Burst fluid = run_burst(config(true, kTwoLayersResident));
  ASSERT_EQ(plain.tokens.size(), 9u);
  ASSERT_EQ(fluid.tokens.size(), 9u);
  ASSERT_EQ(fixed.tokens.size(), 9u);
  for (size_t i = 0; i < plain.tokens.size(); ++i) {
    EXPECT_EQ(fluid.tokens[i], plain.tokens[i]) << "request " << i;
    EXPECT_EQ(fixed.tokens[i], plain.tokens[i]) << "request " << i;
  }
  EXPECT_NE(fluid.placement.find("fluid split: "), std::string::npos) << fluid.placement;
  // The fixed pool of 10 blocks preempts; the fluid one grows by up to two
  // layers' bytes (9 blocks each) and preempts less.
  EXPECT_GT(fixed.stats.preemptions, 0);
  EXPECT_LT(fluid.stats.preemptions, fixed.stats.preemptions);
  EXPECT_GE(fluid.stats.fluid_demotions, 1);
  // Idle after the burst: every demoted layer comes back.
  EXPECT_EQ(fluid.stats.fluid_promotions, fluid.stats.fluid_demotions);
  EXPECT_EQ(fluid.stats.fluid_demoted_units, 0);
  EXPECT_EQ(fluid.stats.kv_blocks_total, fixed.stats.kv_blocks_total);
}

// With swapping for preemption and prompt-lookup drafts too: the split moves
// under both, and every token is still the unbudgeted run's.
TEST(FluidControl, MovesUnderSwappingAndSpeculation) {
  const Burst plain = run_burst(config(false, 0));
  EngineConfig cfg = config(true, kTwoLayersResident);
  cfg.preempt_swap = true;
  cfg.speculative = "lookup";
  const Burst fluid = run_burst(cfg);
  ASSERT_EQ(fluid.tokens.size(), plain.tokens.size());
  for (size_t i = 0; i < plain.tokens.size(); ++i) EXPECT_EQ(fluid.tokens[i], plain.tokens[i]) << "request " << i;
  EXPECT_GE(fluid.stats.fluid_demotions, 1);
  EXPECT_EQ(fluid.stats.fluid_demoted_units, 0);
}

TEST(FluidControl, NeedsAMemoryBudgetWithLayersThatCanMove) {
  auto none = Engine::create(config(true, 0));
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("it needs --mem-budget"), std::string::npos) << none.status().to_string();
  // Everything resident: no ring to stream a demoted layer through.
  auto all = Engine::create(config(true, 4u << 20));
  ASSERT_FALSE(all.ok());
  EXPECT_NE(all.status().message().find("no ring"), std::string::npos) << all.status().to_string();
}

// Over three tiers on a device (the reference kernels behind a backend that
// is not host-visible): the units are the device tier's layers, demoted to
// the store's ring with their arenas freed, and the tokens are the reference
// backend's.
// Prompts of 5 tokens (and a lone one of 3): the KV pool fills in decode.
Workload short_prompts() {
  return {.request = [](const Tokenizer&, int i) {
    return i < 8 ? Request{.prompt = {1, 20 + i, 40 + i, 60, 80 + 2 * i}, .max_tokens = 28,
                           .sampling = {.temperature = 0}, .ignore_eos = true}
                 : Request{.prompt = {1, 7, 9}, .max_tokens = 24, .sampling = {.temperature = 0},
                           .ignore_eos = true};
  }};
}

// The most tokens a step of a CUDA burst computes: the size up to which the
// backend's kernels give a token the same bits whatever shares the call
// (Backend::batch_invariant_tokens). A burst's intake is not a fixed batch:
// the engine steps as soon as the first request is queued, so how the
// prompts are grouped into calls depends on thread timing; past this size a
// different grouping can change a token (it did under load: 8 prompts of 5
// tokens in one call against the first one alone, a token apart at the
// 13th). Within it every grouping gives the same bits.
int64_t invariant_step_tokens(const std::string& backend) {
  auto be = create_backend({.name = backend, .n_threads = 2});
  EXPECT_TRUE(be.ok()) << be.status().to_string();
  return be.ok() ? std::min<int64_t>(128, (*be)->batch_invariant_tokens()) : 128;
}

// An 8-layer synth model over three tiers on a device backend: `backend` (the
// reference backend made not host-visible, DeviceLike, when "device-like"),
// fluid or split once, tiers or all in host memory, mem_budget 0: a tight one,
// kGpuBudgetAlone: none (--gpu-budget alone; host memory holds the rest).
constexpr uint64_t kGpuBudgetAlone = ~uint64_t{0};
Burst device_burst(const std::string& backend, bool fluid, bool tiers, uint64_t mem_budget = 0) {
  auto file = weights::testing::small_synth_model("fluid_device.gguf", 8, 5);
  EXPECT_NE(file, nullptr);
  if (!file) return {};
  auto all = weights::plan_placement(*file, {});
  EXPECT_TRUE(all.ok());
  if (!all.ok()) return {};
  uint64_t slot = 0;
  for (const weights::LayerPlacement& l : all->layers) slot = std::max(slot, l.extent_bytes);
  const uint64_t essentials = all->essentials_bytes;
  const uint64_t kv_bytes = 6 * 65536;  // 6 blocks of 16 f16 positions, 8 layers of 4 x 32 values
  const bool device_like = backend == "device-like";
  EngineConfig cfg{.model_path = file->source_path,
                   .backend = device_like ? "reference" : backend,
                   .n_threads = 2,
                   .max_batch_tokens = 128,
                   .max_seqs = 8,
                   .ctx_size = 256,
                   .kv_budget_bytes = kv_bytes,
                   .kv_dtype = "f16",
                   .mem_budget_bytes = !tiers || mem_budget == kGpuBudgetAlone ? 0
                                       : mem_budget > 0                ? mem_budget
                                                                       : essentials + 3 * slot + 4096,
                   .gpu_budget_bytes = tiers ? kv_bytes + essentials + 5 * slot + (device_like ? 0 : kCudaStaging) : 0,
                   .fluid_split = fluid,
                   .fluid_hold_steps = 2,
                   .check_invariants = true,
                   .calibration = &kSlowMachine};
  // On CUDA a preempted sequence is swapped, not recomputed: recomputing
  // prefills it again past the batch-invariant size, in other roundings.
  cfg.preempt_swap = !device_like;
  if (!device_like) cfg.max_batch_tokens = invariant_step_tokens(backend);
  std::shared_ptr<testing::DeviceLike> be;
  if (tiers && device_like) cfg.shared_backend = be = std::make_shared<testing::DeviceLike>();
  Burst b = run_burst(cfg, short_prompts());
  if (fluid) {
    EXPECT_NE(b.placement.find("of device memory shared by"), std::string::npos) << b.placement;
  }
  if (mem_budget == kGpuBudgetAlone) {
    EXPECT_NE(b.placement.find("host memory holds every layer the device does not"), std::string::npos) << b.placement;
  }
  if (be) {
    EXPECT_EQ(be->stray, "");
  }
  return b;
}

// A fluid device run against the fixed one: the same tokens (and those of
// `plain`), fewer preemptions, every demoted layer back at the end. The host
// budget holding every other layer (no ring), and no host budget at all
// (--gpu-budget alone): demoted layers go to host memory of their own; a
// tight one: through the ring.
void expect_fluid_beats_fixed(const std::string& backend, const Burst& plain) {
  const Burst fixed = device_burst(backend, false, true);
  for (uint64_t mem : {uint64_t{256} << 20, uint64_t{0}, kGpuBudgetAlone}) {
    const Burst fluid = device_burst(backend, true, true, mem);
    ASSERT_EQ(plain.tokens.size(), 9u);
    ASSERT_EQ(fluid.tokens.size(), 9u) << mem;
    for (size_t i = 0; i < plain.tokens.size(); ++i) {
      EXPECT_EQ(fixed.tokens[i], plain.tokens[i]) << "request " << i;
      EXPECT_EQ(fluid.tokens[i], plain.tokens[i]) << "request " << i << ", host budget " << mem;
    }
    EXPECT_GT(fixed.stats.preemptions, 0);
    EXPECT_LT(fluid.stats.preemptions, fixed.stats.preemptions) << mem;
    EXPECT_GE(fluid.stats.fluid_demotions, 1) << mem;
    EXPECT_EQ(fluid.stats.fluid_promotions, fluid.stats.fluid_demotions) << mem;
    EXPECT_EQ(fluid.stats.fluid_demoted_units, 0) << mem;
  }
}

TEST(FluidControl, OnADeviceDemotesDeviceTierLayersAndKeepsTheTokens) {
  expect_fluid_beats_fixed("device-like", device_burst("device-like", false, false));
}

// The same on the CUDA backend (a GPU, or the CUDA emulator: tests/cuda_emu):
// the KV pool on reserved device addresses that are backed as it grows
// (cuda_kv_reserve.h), the device tier's layers in arenas of their own, host
// layers copied in through the staging ring. The tokens are the CUDA backend's
// own with everything on the device: its kernels give a token the same bits
// whatever the batch at these sizes (Backend::batch_invariant_tokens), and
// preemption swaps.
TEST(FluidControl, OnCudaDemotesDeviceTierLayersAndKeepsTheTokens) {
  if (auto be = create_backend({.name = "cuda"}); !be.ok()) GTEST_SKIP() << be.status().to_string();
  expect_fluid_beats_fixed("cuda", device_burst("cuda", false, false));
}

// A request longer than the pool as it is, but within what demoting can make
// room for: the fixed split refuses it, the fluid one demotes (nothing else
// runs, so it would wait forever) and gives the unbudgeted run's tokens.
TEST(FluidControl, ARequestLongerThanThePoolAsItIsRunsOnDemotedLayers) {
  auto run = [](bool fluid, uint64_t mem_budget, std::vector<int32_t>* tokens, FinishReason* reason) {
    EngineConfig cfg = config(fluid, mem_budget);
    if (mem_budget == 0) cfg.kv_budget_bytes = 0;  // the unbudgeted run: the default pool
    auto e = Engine::create(cfg);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    Collector c;
    // ~5 prompt tokens + 250: 16 blocks, against 10 at load and 28 with both layers demoted.
    auto id = (*e)->submit({.prompt = prompt_of((*e)->tokenizer(), 0), .max_tokens = 250,
                            .sampling = {.temperature = 0}, .ignore_eos = true},
                           c.callback());
    ASSERT_TRUE(id.ok()) << id.status().to_string();
    c.wait(1);
    *tokens = c.results_[*id].tokens[0];
    *reason = c.results_[*id].reason[0];
  };
  std::vector<int32_t> plain, fixed, fluid;
  FinishReason plain_reason{}, fixed_reason{}, fluid_reason{};
  ASSERT_NO_FATAL_FAILURE(run(false, 0, &plain, &plain_reason));
  ASSERT_NO_FATAL_FAILURE(run(false, kTwoLayersResident, &fixed, &fixed_reason));
  ASSERT_NO_FATAL_FAILURE(run(true, kTwoLayersResident, &fluid, &fluid_reason));
  EXPECT_EQ(plain_reason, FinishReason::kLength);
  ASSERT_EQ(plain.size(), 250u);
  EXPECT_EQ(fixed_reason, FinishReason::kError);
  EXPECT_TRUE(fixed.empty());
  EXPECT_EQ(fluid_reason, FinishReason::kLength);
  EXPECT_EQ(fluid, plain);
}

// A routed model streaming its experts (stories-moe under a budget that gives
// its pool 46 slots of 16-expert layers): the units are groups of slots, the
// pool of experts shrinks to give the KV pool blocks, and the tokens are those
// of the same budget split once.
TEST(FluidControl, ARoutedModelGivesUpExpertSlots) {
  const std::string path = testing::model_path("stories-moe/stories-moe.gguf");
  SKIP_UNLESS_EXISTS(path);
  auto run = [&](bool fluid) {
    EngineConfig cfg = config(fluid, 4500 * 1000);
    cfg.model_path = path;
    cfg.kv_budget_bytes = 12 * 16384;  // 12 blocks of 16 f32 positions
    const Workload w{.n_burst = 12, .request = [](const Tokenizer& tok, int i) {
      return Request{.prompt = prompt_of(tok, i), .max_tokens = 40, .sampling = {.temperature = 0},
                     .ignore_eos = true};
    }};
    Burst b = run_burst(cfg, w);
    if (fluid) {
      EXPECT_NE(b.placement.find("expert slots of"), std::string::npos) << b.placement;
    }
    return b;
  };
  const Burst fixed = run(false);
  const Burst fluid = run(true);
  ASSERT_EQ(fixed.tokens.size(), 13u);
  ASSERT_EQ(fluid.tokens.size(), 13u);
  for (size_t i = 0; i < fixed.tokens.size(); ++i) EXPECT_EQ(fluid.tokens[i], fixed.tokens[i]) << "request " << i;
  EXPECT_GT(fixed.stats.preemptions, 0);
  EXPECT_LT(fluid.stats.preemptions, fixed.stats.preemptions);
  EXPECT_GE(fluid.stats.fluid_demotions, 1);
}

// A routed model over three tiers on the CUDA backend (a GPU, or the CUDA
// emulator; stories-moe, 4 layers of 16 experts): the units are groups of
// the device's expert slots, a routed layer's worth each. Giving one up frees
// its device memory and the KV pool grows into it; taking it back (idle after
// the burst) allocates it again. Fewer preemptions than the same budget split
// once, and the same tokens.
TEST(FluidControl, OnCudaARoutedModelGivesUpDeviceExpertSlots) {
  if (auto be = create_backend({.name = "cuda"}); !be.ok()) GTEST_SKIP() << be.status().to_string();
  auto run = [](bool fluid) {
    EngineConfig cfg{.model_path = shipped_model_path("stories-moe-f16.gguf"),
                     .backend = "cuda",
                     .n_threads = 2,
                     .max_batch_tokens = 128,
                     .max_seqs = 8,
                     .ctx_size = 256,
                     .kv_budget_bytes = 6 * 8192,  // 6 blocks of 16 f16 positions, 4 layers of 2 x 64 values
                     .kv_dtype = "f16",
                     // Split once: three tiers with host memory holding the rest, as
                     // --fluid-split without --mem-budget has them.
                     .mem_budget_bytes = fluid ? 0 : uint64_t{8} << 20,
                     .gpu_budget_bytes = 2600 * 1024,  // 58 device slots: 2 groups of 16 can move
                     .fluid_split = fluid,
                     .fluid_hold_steps = 2,
                     .check_invariants = true,
                     .calibration = &kSlowMachine};
    cfg.preempt_swap = true;
    cfg.max_batch_tokens = invariant_step_tokens("cuda");
    Burst b = run_burst(cfg, short_prompts());
    if (fluid) {
      EXPECT_NE(b.placement.find("groups of 16 expert slots"), std::string::npos) << b.placement;
    }
    return b;
  };
  const Burst fixed = run(false);
  const Burst fluid = run(true);
  ASSERT_EQ(fixed.tokens.size(), 9u);
  ASSERT_EQ(fluid.tokens.size(), 9u);
  for (size_t i = 0; i < fixed.tokens.size(); ++i) EXPECT_EQ(fluid.tokens[i], fixed.tokens[i]) << "request " << i;
  EXPECT_GT(fixed.stats.preemptions, 0);
  EXPECT_LT(fluid.stats.preemptions, fixed.stats.preemptions);
  EXPECT_GE(fluid.stats.fluid_demotions, 1);
  EXPECT_EQ(fluid.stats.fluid_promotions, fluid.stats.fluid_demotions);
  // The device's slots in the metrics: every chosen expert counted by where it was found.
  const MetricRegistry& m = global_metrics();
  double chosen = 0;
  for (const char* found : {"kept", "ahead", "missed"})
    chosen += m.value("sluice_device_experts_chosen", fmt::format("found=\"{}\"", found));
  EXPECT_GT(chosen, 0.0);
  EXPECT_GT(m.value("sluice_device_experts_chosen", "found=\"kept\""), 0.0);
  EXPECT_NE(m.render_prometheus().find("sluice_device_expert_copies_ahead{outcome=\"declined\"}"), std::string::npos);
}

}  // namespace
}  // namespace sluice
