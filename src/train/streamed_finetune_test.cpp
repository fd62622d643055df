// Fine-tuning over a base streamed under a memory budget of a third of it:
// the adapter written is the resident run's, byte for byte, and the weight
// store read the layers in training order as planned (2 (S - K) layer reads
// a micro-batch, the turns served from the ring). With the disk capped
// (--disk-rate-cap) the adapter is still the same, and the run's reads went no
// faster than the cap. On cuda under --gpu-budget, alone (the backend's ring
// of dispatch slots) or with --mem-budget (a device tier), the adapter is the
// resident run's too, and the device copied what was predicted.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include <unistd.h>
#include <fstream>
#include <iterator>

#include "backend/backend.h"
#include "format/model_file.h"
#include "model/synth.h"
#include "train/finetune.h"
#include "weights/placement.h"
#include "train/train_test_data.h"

namespace sluice {
namespace {

// An 8-layer model at the tiny preset's layer shape (n_embd 256, n_ff 768) in
// Q8_0 with a 512-token vocabulary, so the layers are most of its bytes.
const std::string& synth_base() {
  static const std::string path = [] {
    // Per process: ctest runs each backend's case in its own process, at the same time.
    const std::string p = ::testing::TempDir() + "streamed_finetune_base_" + std::to_string(getpid()) + ".gguf";
    SynthShape shape = synth_preset("tiny", 8).value();
    shape.n_vocab = 512;
    auto written = write_synth_model({.shape = shape, .type = "q8_0", .seed = 11, .n_threads = 2}, p);
    EXPECT_TRUE(written.ok()) << written.status().to_string();
    return p;
  }();
  return path;
}

bool has_train_ops(const std::string& backend) {
  auto be = create_backend({.name = backend, .n_threads = 2});
  return be.ok() && (*be)->train_ops() != nullptr && (*be)->supports(Op::kLora, {});
}

class StreamedFinetune : public ::testing::TestWithParam<std::string> {};

TEST_P(StreamedFinetune, AThirdOfTheBaseGivesTheResidentAdapterBitForBit) {
  const std::string backend = GetParam();
  if (!has_train_ops(backend)) GTEST_SKIP() << "the " << backend << " backend has no training operators";
  const std::string base = synth_base();
  auto mf = open_model_file(base);
  ASSERT_TRUE(mf.ok()) << mf.status().to_string();
  const uint64_t budget = mf->total_tensor_bytes() / 3;
  // A third holds the essentials and a ring of two layer slots; every layer streams.
  const weights::PlacementPlan fits = weights::plan_placement(*mf, {.mem_budget_bytes = budget, .disk_gbps = 1,
                                                                    .layer_compute_s = 1e-3}).value();
  ASSERT_GE(fits.n_streamed, 4);

  // The adapter is named after its file's stem: the same name in two folders.
  const std::string tag = backend + "_" + std::to_string(getpid());
  const std::string dir_a = ::testing::TempDir() + "streamed_finetune_resident_" + tag + "/";
  const std::string dir_b = ::testing::TempDir() + "streamed_finetune_streamed_" + tag + "/";
  std::filesystem::create_directories(dir_a);
  std::filesystem::create_directories(dir_b);
  FinetuneOptions o{.model_path = base, .data_path = testing::kFinetuneStories, .out_path = dir_a + "adapter.gguf",
                    .val_split = 0, .rank = 4, .alpha = 8.0f,
                    .train = {.steps = 3, .batch = 2, .grad_accum = 2, .seq = 16, .lr = 1e-2f, .seed = 5},
                    .backend = backend, .n_threads = 2};
  std::vector<std::string> lines;
  auto log = [&](const std::string& l) { lines.push_back(l); };
  auto resident = finetune(o, log);
  ASSERT_TRUE(resident.ok()) << resident.status().to_string();
  EXPECT_FALSE(resident->timing.streamed);
  EXPECT_EQ(resident->timing.n_steps, 2);  // the first step is not timed

  o.out_path = dir_b + "adapter.gguf";
  o.mem_budget_bytes = budget;
  // cuda: a GPU budget of a third too, which holds no layer beside the
  // essentials and the staging ring, so that every layer streams through the
  // host (without one the device would hold them all).
  if (backend == "cuda") o.gpu_budget_bytes = budget;
  lines.clear();
  auto streamed = finetune(o, log);
  ASSERT_TRUE(streamed.ok()) << streamed.status().to_string();

  // The same adapter, byte for byte, and the same losses.
  const std::string a = testing::file_bytes(dir_a + "adapter.gguf");
  const std::string b = testing::file_bytes(dir_b + "adapter.gguf");
  ASSERT_GT(a.size(), 0u);
  EXPECT_TRUE(a == b) << "the streamed run's adapter differs from the resident run's";
  EXPECT_EQ(resident->last_loss, streamed->last_loss);

  // The placement planned training's order, and the store read as planned:
  // 2 (S - K) layer reads a micro-batch, two micro-batches a step.
  std::string all;
  for (const std::string& l : lines) all += l + "\n";
  EXPECT_NE(all.find("order: training"), std::string::npos) << all;
  EXPECT_NE(all.find("predicted against measured"), std::string::npos) << all;
  const StepFigures& t = streamed->timing;
  ASSERT_TRUE(t.streamed);
  EXPECT_EQ(t.n_steps, 2);
  EXPECT_EQ(t.micro_batches, 2);
  // The layers' extents differ by a few alignment units: bounds of the slot.
  const double reads = 2.0 * static_cast<double>(plan::training_layer_reads(fits.n_streamed, fits.n_ring_slots));
  const auto slot = static_cast<double>(fits.slot_bytes);
  const auto align = static_cast<double>(weights::kDirectAlign);
  EXPECT_NE(all.find(fmt::format("{} layer reads", reads / 2)), std::string::npos) << all;
  EXPECT_LE(t.predicted_read_bytes, reads * slot) << all;
  EXPECT_GE(t.predicted_read_bytes, reads * (slot - 2 * align)) << all;
  EXPECT_LE(t.measured_read_bytes, t.predicted_read_bytes) << all;
  EXPECT_GE(t.measured_read_bytes, t.predicted_read_bytes - reads * align) << all;
  // A device copies every layer in from host memory once a visit: the
  // backward's recomputed forward and its transposed matmuls read one copy.
  if (backend == "cuda") {
    EXPECT_NE(all.find("the device tier's 0 layers"), std::string::npos) << all;
    EXPECT_GT(t.predicted_copy_bytes, 0) << all;
    EXPECT_EQ(t.measured_copy_bytes, t.predicted_copy_bytes) << all;
    EXPECT_NE(all.find("copies "), std::string::npos) << all;
  } else {
    EXPECT_EQ(t.predicted_copy_bytes, 0);
  }

  // The disk capped at 50 MB/s (about 2 s of reads here): the same adapter; the
  // placement map and the calibration say the cap, and the steps' reads
  // (bytes over the time they were in flight) were no faster than it.
  const double cap = 50e6;
  const std::string dir_c = ::testing::TempDir() + "streamed_finetune_capped_" + tag + "/";
  std::filesystem::create_directories(dir_c);
  o.out_path = dir_c + "adapter.gguf";
  o.disk_rate_cap_bytes_per_s = cap;
  lines.clear();
  auto capped = finetune(o, log);
  ASSERT_TRUE(capped.ok()) << capped.status().to_string();
  EXPECT_TRUE(testing::file_bytes(dir_c + "adapter.gguf") == a) << "the capped run's adapter differs from the resident run's";
  all.clear();
  for (const std::string& l : lines) all += l + "\n";
  EXPECT_NE(all.find("reads capped at 50 MB/s"), std::string::npos) << all;
  EXPECT_NE(all.find("capped at 50 MB/s (--disk-rate-cap"), std::string::npos) << all;
  const StepFigures& c = capped->timing;
  ASSERT_TRUE(c.streamed);
  EXPECT_EQ(c.measured_read_bytes, t.measured_read_bytes);
  EXPECT_GT(c.run_disk_gbps, 0);
  EXPECT_LE(c.run_disk_gbps, cap / 1e9 * 1.02) << all;
  EXPECT_LT(c.run_disk_gbps, t.run_disk_gbps) << all;
  // A cap without a memory budget has nothing to cap: refused.
  o.mem_budget_bytes = 0;
  EXPECT_EQ(finetune(o, log).status().code(), StatusCode::kInvalidArgument);
  std::filesystem::remove_all(dir_a);
  std::filesystem::remove_all(dir_b);
  std::filesystem::remove_all(dir_c);
}

// cuda: three tiers with no layer on the device (the store in host RAM, every layer copied in at each visit).
INSTANTIATE_TEST_SUITE_P(Backends, StreamedFinetune, ::testing::Values("reference", "cpu", "cuda"));

// On cuda under budgets, the adapter is the resident run's, and the device
// copied from host memory what was predicted:
//  - --gpu-budget alone: the base stays in host memory and what the budget
//    does not hold streams through the backend's ring of dispatch slots, on
//    training's schedule (the forward, then each layer forward and in
//    reverse); a step that acquired in another order than the one declared,
//    or a ring that prefetched in forward order only, copies more.
//  - --gpu-budget and --mem-budget (three tiers): the device tier's layers
//    stay in HBM for both visits, every other layer is copied in once a visit.
TEST(CudaFinetuneUnderBudgets, TheDeviceCopiesWhatWasPredictedAndTheAdapterIsTheResidentOne) {
  if (!has_train_ops("cuda")) GTEST_SKIP() << "the cuda backend has no training operators here";
  const std::string base = synth_base();
  auto mf = open_model_file(base);
  ASSERT_TRUE(mf.ok()) << mf.status().to_string();
  uint64_t layer_bytes = 0;
  for (const auto& t : mf->tensors)
    if (t.name.rfind("blk.", 0) == 0) layer_bytes += t.n_bytes;
  const uint64_t total = mf->total_tensor_bytes();
  const std::string dir = ::testing::TempDir() + "cuda_finetune_budgets_" + std::to_string(getpid()) + "/";
  for (const char* d : {"resident", "ring", "tiers"}) std::filesystem::create_directories(dir + d);
  FinetuneOptions o{.model_path = base, .data_path = testing::kFinetuneStories, .out_path = dir + "resident/adapter.gguf",
                    .val_split = 0, .rank = 4, .alpha = 8.0f,
                    .train = {.steps = 3, .batch = 2, .grad_accum = 2, .seq = 16, .lr = 1e-2f, .seed = 5},
                    .backend = "cuda", .n_threads = 2};
  std::vector<std::string> lines;
  auto log = [&](const std::string& l) { lines.push_back(l); };
  auto joined = [&] {
    std::string all;
    for (const std::string& l : lines) all += l + "\n";
    return all;
  };
  auto resident = finetune(o, log);
  ASSERT_TRUE(resident.ok()) << resident.status().to_string();
  EXPECT_EQ(resident->timing.predicted_copy_bytes, 0);
  EXPECT_EQ(resident->timing.measured_copy_bytes, 0);
  const std::string want = testing::file_bytes(dir + "resident/adapter.gguf");
  ASSERT_GT(want.size(), 0u);

  // The ring.
  o.out_path = dir + "ring/adapter.gguf";
  o.gpu_budget_bytes = total / 2;
  lines.clear();
  auto ring = finetune(o, log);
  ASSERT_TRUE(ring.ok()) << ring.status().to_string();
  EXPECT_TRUE(testing::file_bytes(o.out_path) == want) << "the ring's adapter differs from the resident run's\n" << joined();
  EXPECT_EQ(resident->last_loss, ring->last_loss);
  const StepFigures& r = ring->timing;
  EXPECT_FALSE(r.streamed);
  EXPECT_EQ(r.n_steps, 2);
  ASSERT_GT(r.predicted_copy_bytes, 0) << joined();
  EXPECT_EQ(r.measured_copy_bytes, r.predicted_copy_bytes) << joined();
  // Two micro-batches a step, each copying a streamed group about twice
  // (once forward, once for the backward visit, its first groups again):
  // prefetching in forward order only, the backward's reverse reads cost
  // about three.
  EXPECT_LE(r.measured_copy_bytes, 2 * 2.3 * static_cast<double>(layer_bytes)) << joined();
  EXPECT_NE(joined().find("base streamed host to device"), std::string::npos) << joined();

  // Three tiers with a device tier.
  o.out_path = dir + "tiers/adapter.gguf";
  o.gpu_budget_bytes = total * 3 / 4;
  o.mem_budget_bytes = total * 3 / 5;
  lines.clear();
  auto tiers = finetune(o, log);
  ASSERT_TRUE(tiers.ok()) << tiers.status().to_string();
  EXPECT_TRUE(testing::file_bytes(o.out_path) == want) << "the three tiers' adapter differs from the resident run's\n"
                                              << joined();
  const std::string all = joined();
  const size_t at = all.find("the device tier's ");
  ASSERT_NE(at, std::string::npos) << all;
  const int n_device = std::atoi(all.c_str() + at + std::string("the device tier's ").size());
  EXPECT_GE(n_device, 1) << all;
  const StepFigures& t = tiers->timing;
  ASSERT_TRUE(t.streamed);
  EXPECT_EQ(t.measured_copy_bytes, t.predicted_copy_bytes) << all;
  // Every layer but the device's, twice a micro-batch: less than all of them.
  EXPECT_LT(t.predicted_copy_bytes, 2 * 2 * static_cast<double>(layer_bytes)) << all;
  EXPECT_GT(t.predicted_copy_bytes, 0) << all;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sluice
