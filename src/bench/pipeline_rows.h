// stream-bench's pipeline rows: at one token count per row, a step with every
// layer resident against a step streaming through the weight store; the
// overhead and verdict between them, and the rows as JSON and as the report's
// table. Pure: the measuring stays in tools/cmd_stream_bench.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace sluice::bench {

struct PipelineRow {
  int64_t tokens = 0;             // tokens per step
  double compute_layer_s = 0;     // resident step / layers
  double gflops = 0;              // the layer's matmuls at that rate
  double transfer_layer_s = 0;    // one layer's bytes at the store's disk rate
  double resident_step_s = 0;     // median over the steps
  double stream_step_s = 0;       // median over the steps
  double overhead = 0;            // set_overhead()
  std::string verdict;            // set_overhead(), or "refused"
  int64_t k_planned = 0, k_used = 0;  // ring slots plan_stream asks for / in use
  double host_buffer_bytes = 0;   // plan_stream's staging beyond the ring
  double predicted_stall_s = 0;
  double measured_stall_s = 0;    // per step
  double overlap_efficiency = 0;
  double disk_mb_per_token = 0;
  double page_cache_growth = 0;   // bytes
  int64_t n_streamed = 0;         // layers streamed
  std::string refused;            // why the placement refused the row ("": it ran)
};

// A streamed step within this share of the resident one is "fully hidden".
inline constexpr double kHiddenOverhead = 0.05;

// overhead = streamed / resident - 1; verdict "fully hidden" within
// kHiddenOverhead, else "transfer-limited".
void set_overhead(PipelineRow& r);

// One object per row; a refused row carries its reason instead of the
// streamed figures.
nlohmann::ordered_json pipeline_rows_json(std::span<const PipelineRow> rows);

// The markdown table, its key, and one line per row that ran (overlap
// efficiency, disk per token, page cache growth).
std::string pipeline_rows_table(std::span<const PipelineRow> rows);

}  // namespace sluice::bench
