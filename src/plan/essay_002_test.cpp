// Essay 002 ("CPU->GPU weight streaming for QLoRA training"): per-layer transfer
// times, ring sizing, the configuration grids of Llama-70B and GLM-4.7, and the
// GLM quantization table. Training counts 3 x 2 FLOPs per active parameter per
// token (forward + backward). Inputs are the essay's: RTX 4090 at 330 TFLOP/s
// theoretical (160 measured), 24 GB of VRAM, PCIe Gen3/4/5 x16 at 11/24/50 GB/s,
// NVMe 3.5 (Gen3), 7 (Gen4), 14 (Gen5) GB/s per drive.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include <fmt/format.h>

#include "plan/stream_plan.h"

namespace sluice::plan {
namespace {

constexpr double kTrainingFlopsPerParam = 6;

std::vector<Link> pcie() {
  return {link_profile("pcie3").value(), link_profile("pcie4").value(), link_profile("pcie5").value()};
}

std::vector<Disk> disks(std::initializer_list<const char*> names) {
  std::vector<Disk> out;
  for (const char* n : names) out.push_back(disk_profile(n).value());
  return out;
}

// "1K (11s)", "n/a", as the essay's grid cells read.
std::map<std::string, std::string> cells(const std::vector<StreamGridCell>& grid) {
  std::map<std::string, std::string> out;
  for (const StreamGridCell& c : grid) {
    const std::string key = c.disk.name + " / " + c.link.name;
    if (!c.applicable) out[key] = "n/a";
    else if (!c.min_tokens) out[key] = "none";
    else out[key] = fmt::format("{}K ({:.0f}s)", *c.min_tokens / 1024, c.plan.step_s);
  }
  return out;
}

TEST(Essay002, TransferPerLayer) {
  // 470 MB per Llama-70B layer: 36 ms at 13 GB/s theoretical, 43 ms at 11 measured.
  EXPECT_EQ(fmt::format("{:.0f}", 470e6 / 13e9 * 1e3), "36");
  const StreamPlan p = plan_stream({.n_layer = 80, .layer_bytes = 470e6, .layer_flops = 50e-3 * 1e12,
                                    .compute_tflops = 1, .link_gbps = link_profile("pcie3")->gbps}).value();
  EXPECT_EQ(fmt::format("{:.0f}", p.transfer_s * 1e3), "43");
  // Compute 50 ms >= transfer 43 ms: a double buffer suffices and streaming is free.
  EXPECT_EQ(p.n_ring_slots, 2);
  EXPECT_EQ(p.bound, StreamBound::kCompute);
  EXPECT_DOUBLE_EQ(p.overhead, 0.0);
  // 512 tokens: 6.4 ms of compute per 42 ms transfer needs K = ceil(42/6.4) + 1 = 8
  // slots and the step is link-bound.
  const StreamPlan slow = plan_stream({.n_layer = 80, .layer_bytes = 42e-3 * 11e9, .layer_flops = 6.4e-3 * 1e12,
                                       .compute_tflops = 1, .link_gbps = 11}).value();
  EXPECT_EQ(slow.n_ring_slots, 8);
  EXPECT_EQ(slow.bound, StreamBound::kLink);
}

TEST(Essay002, RingMemory) {
  // Two 470 MB slots: 0.94 GB of VRAM instead of 80 layers: 97.5% saved; 90% of 20.
  const StreamPlan p = plan_stream({.n_layer = 80, .layer_bytes = 470e6, .layer_flops = 1e12, .compute_tflops = 1,
                                    .link_gbps = 11}).value();
  EXPECT_EQ(fmt::format("{:.2f}", p.ring_bytes / 1e9), "0.94");
  EXPECT_EQ(fmt::format("{:.1f}", 100.0 * (1.0 - static_cast<double>(p.n_ring_slots) / 80)), "97.5");
  EXPECT_EQ(fmt::format("{:.0f}", 100.0 * (1.0 - static_cast<double>(p.n_ring_slots) / 20)), "90");
}

TEST(Essay002, Llama70bGrid) {
  // 80 layers of 856M params, 470 MB each in NF4. The essay does not state the
  // host RAM of this grid; every cell is reproduced for a host buffer budget of
  // 26-27 GB (at 32 GB four cells would read lower).
  const auto grid = plan_stream_grid({.n_layer = 80, .layer_bytes = 470e6, .layer_active_params = 856e6,
                                      .flops_per_param = kTrainingFlopsPerParam, .compute_tflops = 330,
                                      .disks = disks({"nvme-gen3", "2x nvme-gen3", "nvme-gen4", "2x nvme-gen5"}),
                                      .links = pcie(), .host_budget_bytes = 26e9, .device_budget_bytes = 24e9});
  ASSERT_TRUE(grid.ok()) << grid.status().to_string();
  const std::map<std::string, std::string> want = {
      {"nvme-gen3 / pcie3", "1K (11s)"},    {"nvme-gen3 / pcie4", "4K (11s)"},    {"nvme-gen3 / pcie5", "4K (11s)"},
      {"2x nvme-gen3 / pcie3", "1K (5s)"},  {"2x nvme-gen3 / pcie4", "1K (5s)"},  {"2x nvme-gen3 / pcie5", "2K (5s)"},
      {"nvme-gen4 / pcie3", "1K (5s)"},     {"nvme-gen4 / pcie4", "1K (5s)"},     {"nvme-gen4 / pcie5", "2K (5s)"},
      {"2x nvme-gen5 / pcie3", "n/a"},      {"2x nvme-gen5 / pcie4", "n/a"},      {"2x nvme-gen5 / pcie5", "1K (1s)"},
  };
  EXPECT_EQ(cells(*grid), want);
}

StreamGridInputs glm_inputs(double host_ram_bytes, std::vector<Disk> d) {
  // 92 layers of 4.1B params, 2.25 GB each in NF4 (all 160 experts move); 12.5%
  // of the parameters (8 experts + attention + shared) do FLOPs.
  return {.n_layer = 92, .layer_bytes = 2.25e9, .layer_active_params = 0.125 * 4.1e9,
          .flops_per_param = kTrainingFlopsPerParam, .compute_tflops = 330, .disks = std::move(d),
          .links = {link_profile("pcie4").value(), link_profile("pcie5").value()},
          .host_budget_bytes = host_ram_bytes, .device_budget_bytes = 24e9};
}

TEST(Essay002, Glm47GridWith32GbRam) {
  const auto grid = plan_stream_grid(glm_inputs(32e9, disks({"nvme-gen4", "2x nvme-gen4", "2x nvme-gen5", "4x nvme-gen4"})));
  ASSERT_TRUE(grid.ok());
  const std::map<std::string, std::string> want = {
      {"nvme-gen4 / pcie4", "32K (30s)"},    {"nvme-gen4 / pcie5", "32K (30s)"},
      {"2x nvme-gen4 / pcie4", "16K (15s)"}, {"2x nvme-gen4 / pcie5", "16K (15s)"},
      {"2x nvme-gen5 / pcie4", "n/a"},       {"2x nvme-gen5 / pcie5", "8K (7s)"},
      {"4x nvme-gen4 / pcie4", "n/a"},       {"4x nvme-gen4 / pcie5", "8K (7s)"},
  };
  EXPECT_EQ(cells(*grid), want);
}

TEST(Essay002, Glm47GridWith128GbRam) {
  const auto grid = plan_stream_grid(glm_inputs(128e9, disks({"2x nvme-gen4", "2x nvme-gen5", "4x nvme-gen4"})));
  ASSERT_TRUE(grid.ok());
  const std::map<std::string, std::string> want = {
      {"2x nvme-gen4 / pcie4", "2K (15s)"}, {"2x nvme-gen4 / pcie5", "8K (15s)"},
      {"2x nvme-gen5 / pcie4", "n/a"},      {"2x nvme-gen5 / pcie5", "1K (7s)"},
      {"4x nvme-gen4 / pcie4", "n/a"},      {"4x nvme-gen4 / pcie5", "1K (7s)"},
  };
  EXPECT_EQ(cells(*grid), want);
}

TEST(Essay002, Glm47QuantizationTable) {
  // Transfer at the measured 11 GB/s; compute at the measured 160 TFLOP/s.
  struct Row {
    double model_gb;
    const char* layer_gb;
    const char* transfer_ms;
    const char* min_ktokens;
  };
  // The layer column is the input (model size / 92 layers). Transfer times are
  // 204.5, 149.1 and 104.5 ms; the essay prints 205, 149 and 104, rounding the
  // two half milliseconds in opposite directions, so they are checked to 0.1 ms.
  for (const Row& r : {Row{207, "2.25", "204.5", "11"}, Row{151, "1.64", "149.1", "8"}, Row{106, "1.15", "104.5", "5"}}) {
    EXPECT_EQ(fmt::format("{:.2f}", r.model_gb / 92), r.layer_gb);
    const double layer_bytes = std::stod(r.layer_gb) * 1e9;
    const StreamPlan p = plan_stream({.n_layer = 92, .layer_bytes = layer_bytes, .layer_flops = 1e12,
                                      .compute_tflops = 160, .link_gbps = 11}).value();
    EXPECT_EQ(fmt::format("{:.1f}", p.transfer_s * 1e3), r.transfer_ms);
    // "~11K": thousands of tokens at which compute covers the transfer.
    const double t = tokens_to_hide(p.transfer_s, 0.125 * 4.1e9, kTrainingFlopsPerParam, 160);
    EXPECT_EQ(fmt::format("{:.0f}", t / 1000), r.min_ktokens);
  }
}

TEST(Essay002, HostBufferAbsorbsDiskMismatch) {
  // One pass of 80 layers, disk 3x slower than the link: the disk delivers a
  // third of the layers during a pass and the host must stage the rest.
  const StreamPlan p = plan_stream({.n_layer = 80, .layer_bytes = 1e9, .layer_flops = 1e12, .compute_tflops = 10,
                                    .link_gbps = 30, .disk_gbps = 10}).value();
  EXPECT_DOUBLE_EQ(p.compute_s, 0.1);
  EXPECT_DOUBLE_EQ(p.disk_delivered_layers, 80.0);  // compute 0.1 s = disk 0.1 s per layer
  const StreamPlan slow = plan_stream({.n_layer = 80, .layer_bytes = 1e9, .layer_flops = 1e12, .compute_tflops = 10,
                                       .link_gbps = 30, .disk_gbps = 2.5}).value();
  EXPECT_DOUBLE_EQ(slow.disk_delivered_layers, 20.0);
  EXPECT_DOUBLE_EQ(slow.host_buffer_layers, 80.0 - 2.0 - 20.0);
  EXPECT_EQ(slow.bound, StreamBound::kDisk);
  EXPECT_DOUBLE_EQ(slow.step_s, 80 * 0.4);
}

}  // namespace
}  // namespace sluice::plan
