// Placement: the ring size comes from plan_stream, budgets that cannot work are
// refused with the smallest that would, resident layers spread evenly (in
// training order, off the turns).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "base/test_data.h"
#include "weights/io_engine.h"
#include "weights/placement.h"

namespace sluice::weights {
namespace {

constexpr uint64_t kMatrix = 50'000'000;  // bytes of each of a layer's two matrices

// A GGUF-like layout without bytes: token_embd, n_layer x (attn_norm, two
// matrices), output_norm, output; offsets packed with 32-byte alignment.
ModelFile fake_model(int64_t n_layer, const std::string& format = "gguf") {
  ModelFile f;
  f.format = format;
  uint64_t off = 4096;
  auto add = [&](const std::string& name, std::vector<int64_t> ne, uint64_t n_bytes) {
    TensorInfo t;
    t.name = name;
    t.type = DType::kF16;
    t.ne = std::move(ne);
    t.n_bytes = n_bytes;
    t.file_offset = static_cast<int64_t>(off);
    off = align_up(off + n_bytes, 32);
    f.tensors.push_back(t);
  };
  add("token_embd.weight", {1000, 5000}, 10'000'000);
  for (int64_t l = 0; l < n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", {1000}, 4000);
    add(p + "attn_q.weight", {5000, 5000}, kMatrix);
    add(p + "ffn_up.weight", {5000, 5000}, kMatrix);
  }
  add("output_norm.weight", {1000}, 4000);
  add("output.weight", {1000, 5000}, 10'000'000);
  return f;
}

PlacementInputs streaming(uint64_t budget, double compute_s) {
  return {.mem_budget_bytes = budget, .disk_gbps = 1.0, .layer_compute_s = compute_s};
}

TEST(Placement, EverythingResidentWhenTheBudgetAllows) {
  const ModelFile f = fake_model(4);
  for (uint64_t budget : {uint64_t{0}, uint64_t{1'000'000'000}}) {
    const PlacementPlan p = plan_placement(f, {.mem_budget_bytes = budget}).value();
    EXPECT_EQ(p.n_streamed, 0);
    EXPECT_EQ(p.n_ring_slots, 0);
    EXPECT_EQ(p.resident_bytes, p.host_bytes);
    for (const TensorPlacement& t : p.tensors) EXPECT_EQ(t.tier, Tier::kHost) << t.suffix;
    EXPECT_NE(placement_map(p).find("everything resident"), std::string::npos);
  }
}

TEST(Placement, RingSizeComesFromPlanStream) {
  const ModelFile f = fake_model(10);
  // Slot ~100 MB at 1 GB/s: transfer 0.1 s; compute 0.04 s -> K = ceil(2.5) + 1 = 4.
  const PlacementPlan big = plan_placement(f, streaming(900'000'000, 0.04)).value();
  const plan::StreamPlan direct = plan::plan_stream({.n_layer = 10,
                                                     .layer_bytes = static_cast<double>(big.slot_bytes),
                                                     .layer_flops = 0.04e12,
                                                     .compute_tflops = 1,
                                                     .disk_gbps = 1.0})
                                      .value();
  EXPECT_EQ(direct.n_ring_slots, 4);
  EXPECT_EQ(big.n_ring_slots_planned, 4);
  EXPECT_EQ(big.n_ring_slots, 4);
  EXPECT_TRUE(big.note.empty()) << big.note;
  EXPECT_GE(big.slot_bytes, 2 * kMatrix);
  EXPECT_EQ(big.slot_bytes % kDirectAlign, 0u);
  // 900 MB - essentials (~20 MB) - 4 slots (~400 MB): 4 whole layers stay resident.
  EXPECT_EQ(big.n_streamed, 6);
  EXPECT_LE(big.host_bytes, 900'000'000u);
  EXPECT_EQ(big.ring_bytes, 4 * big.slot_bytes);
  EXPECT_EQ(big.resident_bytes, big.essentials_bytes + big.resident_layer_bytes);
  // Predicted: disk 6 x 0.1 s against compute 10 x 0.04 s.
  EXPECT_NEAR(big.predicted_disk_s, 6 * big.transfer_s, 1e-12);
  EXPECT_NEAR(big.predicted_compute_s, 0.4, 1e-12);
  EXPECT_NEAR(big.predicted_stall_s, 6 * big.transfer_s - 0.4, 1e-9);
  // Norms stay resident in streamed layers; matrices of streamed layers go to disk.
  for (const TensorPlacement& t : big.tensors) {
    if (t.layer < 0 || t.suffix == "attn_norm.weight") EXPECT_EQ(t.tier, Tier::kHost) << t.suffix;
    else EXPECT_EQ(t.tier, big.layers[static_cast<size_t>(t.layer)].streamed ? Tier::kDisk : Tier::kHost);
  }
}

// The plan at another disk rate: transfers scale with 1 / rate, compute stays,
// and at the planned rate it is the planned step.
TEST(Placement, StepAtAnotherDiskRate) {
  const ModelFile f = fake_model(10);
  const PlacementPlan p = plan_placement(f, streaming(900'000'000, 0.04)).value();  // disk-bound at 1 GB/s
  EXPECT_NEAR(p.predicted_step_s_at(1.0), p.predicted_step_s(), 1e-12);
  // Disk 6 x 0.1 s against compute 10 x 0.04 s: still disk-bound at 1.2 GB/s,
  // hidden behind compute at 2 GB/s.
  EXPECT_NEAR(p.predicted_step_s_at(1.2), p.predicted_disk_s / 1.2, 1e-12);
  EXPECT_GT(p.predicted_disk_s / 1.2, p.predicted_compute_s);
  EXPECT_NEAR(p.predicted_step_s_at(2.0), p.predicted_compute_s, 1e-12);
  EXPECT_NEAR(p.predicted_step_s_at(0.5), 2 * p.predicted_disk_s, 1e-12);
  const PlacementPlan resident = plan_placement(f, {.layer_compute_s = 0.04}).value();
  EXPECT_NEAR(resident.predicted_step_s_at(3.0), resident.predicted_compute_s, 1e-12);
}

TEST(Placement, ComputeBoundNeedsTwoSlotsAndPredictsNoStall) {
  const ModelFile f = fake_model(10);
  const PlacementPlan p = plan_placement(f, streaming(500'000'000, 0.5)).value();
  EXPECT_EQ(p.n_ring_slots, 2);
  EXPECT_EQ(p.predicted_stall_s, 0.0);
  EXPECT_NE(placement_map(p).find("transfers hidden"), std::string::npos) << placement_map(p);
}

TEST(Placement, RefusesABudgetBelowTwoSlotsNamingTheMinimum) {
  const ModelFile f = fake_model(10);
  const PlacementPlan ok = plan_placement(f, streaming(900'000'000, 0.04)).value();
  const uint64_t min = ok.min_budget_bytes;
  EXPECT_EQ(min, ok.essentials_bytes + 2 * ok.slot_bytes);
  const auto refused = plan_placement(f, streaming(min - 1, 0.04));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find(std::to_string(min)), std::string::npos) << refused.status().message();
  EXPECT_NE(refused.status().message().find(std::to_string(ok.full_ring_budget_bytes)), std::string::npos);
  // The named minimum works: a trimmed ring of 2, disk-bound, and the map says why.
  const PlacementPlan at_min = plan_placement(f, streaming(min, 0.04)).value();
  EXPECT_EQ(at_min.n_ring_slots, 2);
  EXPECT_EQ(at_min.n_ring_slots_planned, 4);
  EXPECT_EQ(at_min.n_streamed, 10);
  EXPECT_FALSE(at_min.note.empty());
  EXPECT_NE(placement_map(at_min).find("trimmed"), std::string::npos);
}

TEST(Placement, ResidentLayersAreSpreadEvenly) {
  const ModelFile f = fake_model(8);
  const PlacementPlan probe = plan_placement(f, streaming(2'000'000'000, 0.5)).value();
  ASSERT_EQ(probe.n_streamed, 0);
  // Room for essentials + 2 slots + 4 layers.
  const uint64_t slot = probe.layers[0].extent_bytes;
  const PlacementPlan p = plan_placement(f, streaming(probe.essentials_bytes + 6 * slot + 1000, 0.5)).value();
  ASSERT_EQ(p.n_ring_slots, 2);
  ASSERT_EQ(p.n_streamed, 4);
  std::string row;
  for (const LayerPlacement& l : p.layers) row += l.streamed ? 'S' : 'R';
  EXPECT_EQ(row, "RSRSRSRS");
  EXPECT_NE(placement_map(p).find("RSRSRSRS"), std::string::npos);
}

// Training order: the first and last layer stream and the resident ones are
// spread between them; the prediction is plan_train_stream's per micro-batch
// (two visits a layer, 2 (S - K) reads), and inference's placement of the
// same budget is unchanged.
TEST(Placement, TrainingKeepsResidentLayersOffTheTurns) {
  const ModelFile f = fake_model(8);
  const PlacementPlan probe = plan_placement(f, streaming(2'000'000'000, 0.5)).value();
  const uint64_t slot = probe.layers[0].extent_bytes;
  const uint64_t budget = probe.essentials_bytes + 6 * slot + 1000;  // 2 slots + 4 layers
  PlacementInputs in = streaming(budget, 0.15);  // transfer ~0.1 s: K = 2
  in.training = true;
  in.train_backward_s = 0.25;
  in.head_compute_s = 0.02;
  in.tokens_per_step = 256;
  for (int64_t n_resident : {0, 1, 2, 3, 4, 5}) {
    in.mem_budget_bytes = probe.essentials_bytes + (2 + n_resident) * slot + 1000;
    const PlacementPlan p = plan_placement(f, in).value();
    SCOPED_TRACE(fmt::format("{} resident", n_resident));
    ASSERT_EQ(p.n_ring_slots, 2);
    ASSERT_EQ(p.n_streamed, 8 - n_resident);
    EXPECT_TRUE(p.layers.front().streamed);
    EXPECT_TRUE(p.layers.back().streamed);
  }
  in.mem_budget_bytes = budget;
  const PlacementPlan p = plan_placement(f, in).value();
  std::string row;
  for (const LayerPlacement& l : p.layers) row += l.streamed ? 'S' : 'R';
  EXPECT_EQ(row, "SRSRRSRS");  // resident 1 + floor((2j + 1) 6 / 8): 1, 3, 4, 6
  EXPECT_NE(placement_map(p).find(row), std::string::npos);
  EXPECT_EQ(plan_placement(f, streaming(budget, 0.15)).value().layers[0].streamed, false);  // inference: RSRSRSRS
  // The prediction: compute 8 x (0.15 + 0.25) + 0.02, 2 x (4 - 2) reads, the turns 2 x 0.4 + 0.02.
  const plan::TrainStreamPlan want = plan::plan_train_stream({.n_layer = 8, .n_streamed = 4, .n_ring_slots = 2,
                                                              .slot_bytes = static_cast<double>(p.slot_bytes),
                                                              .forward_s = 0.15, .backward_s = 0.25, .head_s = 0.02,
                                                              .disk_gbps = 1.0}).value();
  EXPECT_TRUE(p.training);
  EXPECT_EQ(p.train.layer_reads, 4);
  EXPECT_NEAR(p.predicted_compute_s, 8 * 0.4 + 0.02, 1e-12);
  EXPECT_NEAR(p.predicted_compute_s, want.compute_s, 1e-12);
  // Four layer reads (each of the middle two streamed layers twice), their own extents.
  EXPECT_LE(p.train.read_bytes, 4.0 * static_cast<double>(p.slot_bytes));
  EXPECT_GE(p.train.read_bytes, 4.0 * static_cast<double>(p.slot_bytes - 2 * kDirectAlign));
  EXPECT_NEAR(p.predicted_disk_s, p.train.read_bytes / 1e9, 1e-12);
  EXPECT_NEAR(p.predicted_boundary_s, 2 * 0.4 + 0.02, 1e-12);
  EXPECT_NEAR(p.predicted_step_s(), want.step_s, 1e-12);
  EXPECT_NEAR(p.predicted_step_s_at(0.5), std::max(want.compute_s, p.train.read_bytes / 0.5e9 + want.boundary_s),
              1e-12);
  EXPECT_NEAR(p.predicted_step_s_at(0.1), p.train.read_bytes / 0.1e9 + want.boundary_s, 1e-9);  // disk-bound
  const std::string map = placement_map(p);
  for (const char* words : {"order: training", "4 layer reads", "per micro-batch (256 tokens)", "at the turns"})
    EXPECT_NE(map.find(words), std::string::npos) << words << "\n" << map;
  // No backward visit: refused by name.
  in.train_backward_s = 0;
  EXPECT_EQ(plan_placement(f, in).status().code(), StatusCode::kInvalidArgument);
  // Everything resident: the training compute, nothing read.
  in.train_backward_s = 0.25;
  in.mem_budget_bytes = 0;
  const PlacementPlan resident = plan_placement(f, in).value();
  EXPECT_EQ(resident.n_streamed, 0);
  EXPECT_NEAR(resident.predicted_step_s(), 8 * 0.4 + 0.02, 1e-12);
}

// Training with a device tier (rules 5 and 8): the device's layers are
// neither read nor held by the host, the training spread runs over the host's
// layers alone (their first and last stream), and every layer's compute
// counts.

// Training a routed model with its experts read one by one (stories-moe, 4
// routed layers of 16): a micro-batch visits every layer twice and each visit
// reads the chosen experts it misses. Read a layer ahead (the forward's
// guessed, the backward's known), they hide behind each pass's compute when
// the pool has room for a second layer's experts; otherwise all stall.
TEST(Placement, TrainingARoutedModelReadsBothVisitsExperts) {
  auto mf = open_model_file(sluice::testing::shipped_model_path("stories-moe-f16.gguf"));
  ASSERT_TRUE(mf.ok()) << mf.status().to_string();
  PlacementInputs in{.disk_gbps = 0.1, .layer_compute_s = 1e-3, .tokens_per_step = 192, .head_compute_s = 1e-3,
                     .training = true, .train_backward_s = 2e-3};
  in.mem_budget_bytes = 1;
  const std::string why = plan_placement(*mf, in).status().message();
  const size_t at = why.find("the smallest budget that works is ");
  ASSERT_NE(at, std::string::npos) << why;
  const uint64_t least = std::stoull(why.substr(at + std::string("the smallest budget that works is ").size()));
  in.mem_budget_bytes = least;
  const PlacementPlan tight = plan_placement(*mf, in).value();
  ASSERT_EQ(tight.n_expert_slots, 16);
  EXPECT_TRUE(tight.training);
  EXPECT_NEAR(tight.predicted_compute_s, 4 * 3e-3 + 1e-3, 1e-12);
  EXPECT_GT(tight.expert_disk_bytes_per_step, 0);
  EXPECT_DOUBLE_EQ(tight.train.read_bytes, 2 * tight.expert_disk_bytes_per_step);
  EXPECT_NEAR(tight.predicted_disk_s, tight.train.read_bytes / 0.1e9, 1e-12);
  EXPECT_NEAR(tight.predicted_stall_s, tight.predicted_disk_s, 1e-12);  // no room to read ahead
  const std::string map = placement_map(tight);
  EXPECT_NE(map.find("order: training; a micro-batch of 192 tokens routes each layer twice"), std::string::npos) << map;
  EXPECT_NE(map.find("when the pool has room"), std::string::npos) << map;
  // Room for two layers' experts: the forward's reads hide behind its 4 x 1 ms,
  // the backward's behind its 4 x 2 ms.
  in.mem_budget_bytes = least + 16 * tight.expert_slot_bytes;
  const PlacementPlan roomy = plan_placement(*mf, in).value();
  ASSERT_EQ(roomy.n_expert_slots, 32);
  const double pass = roomy.predicted_disk_s / 2;
  ASSERT_GT(pass, 4 * 1e-3);  // the forward's pass does not hide entirely
  EXPECT_NEAR(roomy.predicted_stall_s, pass - 4 * 1e-3 + std::max(0.0, pass - 4 * 2e-3), 1e-12);
  EXPECT_LT(roomy.predicted_stall_s, roomy.predicted_disk_s);
  EXPECT_NEAR(roomy.predicted_step_s(), roomy.predicted_compute_s + roomy.predicted_stall_s, 1e-12);
  EXPECT_NEAR(roomy.predicted_step_s_at(0.1), roomy.predicted_step_s(), 1e-12);
  EXPECT_EQ(placement_map(roomy).find("when the pool has room"), std::string::npos);
  // At a hit rate of 1 nothing is read: the step is the compute.
  EXPECT_NEAR(roomy.predicted_step_s_given(1.0, 0.1), roomy.predicted_compute_s, 1e-12);
}
TEST(Placement, TrainingSpreadsTheHostLayersAroundTheDeviceTier) {
  const ModelFile f = fake_model(8);
  const PlacementPlan probe = plan_placement(f, streaming(2'000'000'000, 0.5)).value();
  const uint64_t slot = probe.layers[0].extent_bytes;
  PlacementInputs in = streaming(probe.essentials_bytes + 4 * slot + 1000, 0.15);  // 2 slots + 2 layers
  in.training = true;
  in.train_backward_s = 0.25;
  in.head_compute_s = 0.02;
  in.device_layers = {0, 5};
  const PlacementPlan p = plan_placement(f, in).value();
  std::string row;
  for (const LayerPlacement& l : p.layers) row += l.device ? 'G' : l.streamed ? 'S' : 'R';
  EXPECT_EQ(row, "GSSRSGRS");  // host layers 1 2 3 4 6 7; resident 1 + floor((2j + 1) 4 / 4): the 2nd and 4th
  EXPECT_EQ(p.n_ring_slots, 2);
  EXPECT_EQ(p.n_streamed, 4);
  EXPECT_EQ(p.train.layer_reads, 2 * (4 - 2));
  EXPECT_NEAR(p.predicted_compute_s, 8 * 0.4 + 0.02, 1e-12);
  EXPECT_EQ(p.resident_layer_bytes, 2 * slot);
}

TEST(Placement, APipelineStagePlacesOnlyItsOwnLayers) {
  // Layers 4-7 of 10 (a rank > 0: the head is rank 0's), 100 MB each, under
  // 260 MB: the stage's norms and a ring of 2, every layer streamed; the
  // other ranks' tensors are elsewhere, never counted.
  const ModelFile f = fake_model(10);
  PlacementInputs in = streaming(260'000'000, 0.2);
  in.layer_begin = 4;
  in.layer_end = 8;
  const PlacementPlan p = plan_placement(f, in).value();
  EXPECT_EQ(p.n_stage_layers(), 4);
  EXPECT_EQ(p.n_ring_slots, 2);
  EXPECT_EQ(p.n_streamed, 4);
  EXPECT_LT(p.essentials_bytes, 100'000u);  // 4 norms (aligned), no embeddings or output
  EXPECT_LE(p.host_bytes, 260'000'000u);
  EXPECT_EQ(p.total_tensor_bytes, 4 * (2 * kMatrix + 4000));
  for (const TensorPlacement& t : p.tensors) {
    const bool mine = t.layer >= 4 && t.layer < 8;
    EXPECT_EQ(t.elsewhere, !mine) << t.suffix << " " << t.layer;
    if (!mine) {
      EXPECT_EQ(t.tier, Tier::kHost) << t.suffix;
    }
  }
  for (int64_t l = 0; l < 10; ++l) EXPECT_EQ(p.layers[static_cast<size_t>(l)].streamed, l >= 4 && l < 8) << l;
  EXPECT_NEAR(p.predicted_compute_s, 4 * 0.2, 1e-12);
  const std::string map = placement_map(p);
  EXPECT_NE(map.find("layers 4-7 of 10 (a pipeline stage)"), std::string::npos) << map;
  EXPECT_NE(map.find("----SSSS--"), std::string::npos) << map;
  // Rank 0's stage keeps the head; a budget for the whole stage keeps it resident.
  in.layer_begin = 0;
  in.layer_end = 3;
  in.mem_budget_bytes = 400'000'000;
  const PlacementPlan head = plan_placement(f, in).value();
  EXPECT_EQ(head.n_streamed, 0);
  EXPECT_GE(head.essentials_bytes, 20'000'000u);
  EXPECT_FALSE(head.tensors.front().elsewhere);  // token_embd
  // A range outside the model, and training over a stage, are refused.
  in.layer_end = 11;
  EXPECT_FALSE(plan_placement(f, in).ok());
  in.layer_end = 3;
  in.training = true;
  in.train_backward_s = 0.4;
  EXPECT_EQ(plan_placement(f, in).status().code(), StatusCode::kUnimplemented);
}

TEST(Placement, StreamAllUsesTheFullPlannedRing) {
  const ModelFile f = fake_model(10);
  PlacementInputs in = streaming(0, 0.04);
  in.stream_all = true;
  const PlacementPlan p = plan_placement(f, in).value();
  EXPECT_EQ(p.n_streamed, 10);
  EXPECT_EQ(p.n_ring_slots, 4);
  EXPECT_EQ(p.budget_bytes, p.full_ring_budget_bytes);
  EXPECT_EQ(p.host_bytes, p.essentials_bytes + 4 * p.slot_bytes);
  EXPECT_TRUE(p.note.empty());
}

TEST(Placement, MapNamesEveryTier) {
  const ModelFile f = fake_model(10);
  PlacementPlan p = plan_placement(f, streaming(600'000'000, 0.04)).value();
  p.io_note = "io_uring, queue depth 16, O_DIRECT";
  const std::string map = placement_map(p);
  for (const char* word : {"device", "host", "disk", "ring", "stall", "io_uring", "resident fraction"})
    EXPECT_NE(map.find(word), std::string::npos) << word << "\n" << map;
}

TEST(Placement, BadRequests) {
  const ModelFile f = fake_model(4);
  // The device tier's layers must be the model's (rule 8; device_tier_test.cpp has the rest).
  EXPECT_EQ(plan_placement(f, {.device_layers = {4}}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(plan_placement(f, {.mem_budget_bytes = 300'000'000}).status().code(), StatusCode::kInvalidArgument);
  // Formats that cannot be read by offset stream nothing; a small budget is refused.
  const ModelFile hf = fake_model(4, "safetensors");
  EXPECT_EQ(plan_placement(hf, streaming(300'000'000, 0.1)).status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(plan_placement(hf, {}).ok());
  ModelFile none;
  none.format = "gguf";
  EXPECT_FALSE(plan_placement(none, {}).ok());
}

TEST(Placement, ParsesByteSizes) {
  EXPECT_EQ(*parse_byte_size("600M"), 600'000'000u);
  EXPECT_EQ(*parse_byte_size("600MB"), 600'000'000u);
  EXPECT_EQ(*parse_byte_size("1.5G"), 1'500'000'000u);
  EXPECT_EQ(*parse_byte_size("512MiB"), 512ull << 20);
  EXPECT_EQ(*parse_byte_size("2Gi"), 2ull << 30);
  EXPECT_EQ(*parse_byte_size("4096"), 4096u);
  EXPECT_EQ(*parse_byte_size("10k"), 10'000u);
  EXPECT_FALSE(parse_byte_size("").ok());
  EXPECT_FALSE(parse_byte_size("M").ok());
  EXPECT_FALSE(parse_byte_size("12X").ok());
  EXPECT_FALSE(parse_byte_size("1.2.3M").ok());
}

TEST(Placement, SplitsLayerNames) {
  EXPECT_EQ(split_layer_name("blk.12.attn_q.weight"), (std::pair<int64_t, std::string>{12, "attn_q.weight"}));
  EXPECT_EQ(split_layer_name("token_embd.weight").first, -1);
  EXPECT_EQ(split_layer_name("blk.x.attn").first, -1);
  EXPECT_EQ(split_layer_name("blk.3").first, -1);
}

}  // namespace
}  // namespace sluice::weights
