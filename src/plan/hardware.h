// Hardware profiles: the numbers the performance model needs from a machine.
//
// A compute device is (memory read bandwidth, peak dense FLOP/s, memory
// capacity); a link is host -> device bandwidth (PCIe generations, NVLink); a
// disk is sustained sequential read bandwidth, optionally striped over several
// drives ("2x nvme-gen4"). Profiles carry datasheet figures, except the PCIe
// links, which carry the achieved pinned-memory rates of the QLoRA streaming
// essay (Gen3 x16: 11 GB/s measured of 13 theoretical; Gen4 ~24; Gen5 ~50).
// Where an essay quotes different figures for the same part (essay 000 gives
// the H200 3.35 TB/s, the H100's figure; the datasheet says 4.8), the caller
// overrides the field and says so. A calibrated profile of this machine comes
// from plan/calibrate.h. Plain values.
#pragma once

#include <string>
#include <vector>

#include "sluice/status.h"

namespace sluice::plan {

struct Hardware {
  std::string name;
  double mem_gbps = 0;          // memory read bandwidth, GB/s
  double peak_tflops = 0;       // dense matmul peak (bf16 tensor cores on GPUs), TFLOP/s
  double mem_capacity_gb = 0;   // memory capacity, GB
  std::string source;           // where the figures come from

  // Ridge point: the arithmetic intensity where compute time equals memory time.
  double ridge_flop_per_byte() const { return peak_tflops * 1e12 / (mem_gbps * 1e9); }
  // The same point counted in multiply-accumulates (2 FLOPs each) per byte.
  double ridge_mac_per_byte() const { return ridge_flop_per_byte() / 2.0; }
};

struct Link {
  std::string name;
  double gbps = 0;
};

struct Disk {
  std::string name;
  double gbps = 0;
};

// a100-80gb, h100, h200, rtx4090.
StatusOr<Hardware> hardware_profile(const std::string& name);
std::vector<std::string> hardware_names();

// pcie3, pcie4, pcie5 (x16), nvlink.
StatusOr<Link> link_profile(const std::string& name);
std::vector<std::string> link_names();

// nvme-gen3 (3.5 GB/s), nvme-gen4 (7), nvme-gen5 (14), optionally "Nx" striped:
// "2x nvme-gen4" or "2xnvme-gen4" (14 GB/s).
StatusOr<Disk> disk_profile(const std::string& name);
std::vector<std::string> disk_names();

}  // namespace sluice::plan
