// Calibration probes: measure this machine so the performance model predicts
// the engine here, not a datasheet.
//
//   memory read  a large buffer summed by every thread, median of repeats (GB/s)
//   matmul       the engine's own cpu::matmul on f32 at a prefill-like shape
//                ([n_out, n_in] x n_tokens), median of repeats (TFLOP/s)
//   disk read    sequential O_DIRECT reads of the model file, or of a temporary
//                file written for the purpose; when the filesystem refuses
//                O_DIRECT, a buffered read after dropping the file's cached
//                pages, and the result says so (`disk_direct` = false)
// Each probe takes well under a second at the default sizes. Probes use the
// ThreadPool they are given, so pass the thread count the engine will use.
// Not for the per-token path; call once at start.
#pragma once

#include <cstdint>
#include <string>

#include "base/thread_pool.h"
#include "plan/hardware.h"
#include "quant/dtype.h"
#include "sluice/status.h"

namespace sluice::plan {

struct CalibrateOptions {
  int n_threads = 0;                          // <= 0: one per core
  int n_repeats = 5;
  uint64_t mem_bytes = 256ull << 20;          // memory probe buffer
  int64_t matmul_n_in = 2048;
  int64_t matmul_n_out = 2048;
  int64_t matmul_n_tokens = 64;
  bool probe_disk = true;
  std::string disk_path;                      // file to read; empty: a temp file in temp_dir
  std::string temp_dir = "/tmp";
  uint64_t disk_bytes = 256ull << 20;         // bytes to read (at most the file's size)
  DType matmul_type = DType::kQ8_0;           // weight type the matmul probe runs (the engine's kernels)
};

struct Calibration {
  int n_threads = 0;
  double mem_read_gbps = 0;
  double matmul_tflops = 0;                   // of the engine's kernels on matmul_type weights
  DType matmul_type = DType::kQ8_0;
  double disk_read_gbps = 0;                  // 0 when not probed
  bool disk_direct = false;                   // O_DIRECT was honoured
  std::string disk_note;                      // what was read, and how
  double mem_capacity_gb = 0;                 // physical memory

  // This machine as a compute device for the roofline.
  Hardware as_hardware() const;
};

double probe_memory_read_gbps(ThreadPool& pool, uint64_t bytes, int n_repeats);
// The engine's own matmul (cpu::matmul_group at the active instruction set) on
// weights of `type`, so the figure predicts what a prefill of such a model gets.
double probe_matmul_tflops(ThreadPool& pool, int64_t n_in, int64_t n_out, int64_t n_tokens, int n_repeats,
                           DType type = DType::kQ8_0);
struct DiskProbe {
  double gbps = 0;
  bool direct = false;
  std::string note;
};
// Errors: the file cannot be created, opened or read.
StatusOr<DiskProbe> probe_disk_read(const std::string& path, const std::string& temp_dir, uint64_t bytes);

// Runs every probe.
StatusOr<Calibration> calibrate(const CalibrateOptions& options);

}  // namespace sluice::plan
