#include "bench/pipeline_rows.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "bench/units.h"

namespace sluice::bench {

void set_overhead(PipelineRow& r) {
  r.overhead = r.stream_step_s / r.resident_step_s - 1.0;
  r.verdict = r.overhead <= kHiddenOverhead ? "fully hidden" : "transfer-limited";
}

nlohmann::ordered_json pipeline_rows_json(std::span<const PipelineRow> rows) {
  nlohmann::ordered_json jr = nlohmann::ordered_json::array();
  for (const PipelineRow& r : rows) {
    nlohmann::ordered_json o;
    o["tokens"] = r.tokens;
    o["compute_layer_s"] = r.compute_layer_s;
    o["matmul_gflops"] = r.gflops;
    o["transfer_layer_s"] = r.transfer_layer_s;
    o["resident_step_s"] = r.resident_step_s;
    if (!r.refused.empty()) {
      o["refused"] = r.refused;
    } else {
      o["stream_step_s"] = r.stream_step_s;
      o["overhead"] = r.overhead;
      o["verdict"] = r.verdict;
      o["n_streamed"] = r.n_streamed;
      o["k_planned"] = r.k_planned;
      o["k_used"] = r.k_used;
      o["host_buffer_bytes"] = r.host_buffer_bytes;
      o["predicted_stall_s"] = r.predicted_stall_s;
      o["stall_s"] = r.measured_stall_s;
      o["overlap_efficiency"] = r.overlap_efficiency;
      o["disk_mb_per_token"] = r.disk_mb_per_token;
      o["page_cache_growth_bytes"] = r.page_cache_growth;
    }
    jr.push_back(o);
  }
  return jr;
}

std::string pipeline_rows_table(std::span<const PipelineRow> rows) {
  const auto ms = format_ms;
  std::string out = fmt::format(
      "| {:>6} | {:>13} | {:>14} | {:>8} | {:>12} | {:>12} | {:>8} | {:>10} | {:>16} | {:>7} | {:>11} | {:>15} |\n",
      "tokens", "compute/layer", "transfer/layer", "GFLOP/s", "resident", "streamed", "overhead", "stall/step",
      "verdict", "K plan", "host buffer", "predicted stall");
  out += fmt::format("|{:-<8}|{:-<15}|{:-<16}|{:-<10}|{:-<14}|{:-<14}|{:-<10}|{:-<12}|{:-<18}|{:-<9}|{:-<13}|{:-<17}|\n",
                     "", "", "", "", "", "", "", "", "", "", "", "");
  for (const PipelineRow& r : rows) {
    if (!r.refused.empty()) {
      out += fmt::format("| {:>6} | {:>13} | {:>14} | {:>8.1f} | {:>12} | refused: {}\n", r.tokens,
                         ms(r.compute_layer_s), ms(r.transfer_layer_s), r.gflops, ms(r.resident_step_s), r.refused);
      continue;
    }
    out += fmt::format(
        "| {:>6} | {:>13} | {:>14} | {:>8.1f} | {:>12} | {:>12} | {:>7.1f}% | {:>10} | {:>16} | {:>7} | {:>11} | {:>15} |\n",
        r.tokens, ms(r.compute_layer_s), ms(r.transfer_layer_s), r.gflops, ms(r.resident_step_s), ms(r.stream_step_s),
        100 * r.overhead, ms(r.measured_stall_s), r.verdict, fmt::format("{}/{}", r.k_planned, r.k_used),
        human_bytes(static_cast<uint64_t>(r.host_buffer_bytes)), ms(r.predicted_stall_s));
  }
  out += "\nK plan: ring slots plan_stream asks for / slots in use (the budget may trim a disk-bound ring);\n"
         "host buffer: plan_stream's staging beyond the ring (0 when host RAM is the compute tier).\n";
  for (const PipelineRow& r : rows)
    if (r.refused.empty())
      out += fmt::format("  {} tokens: overlap efficiency {:.1f}%, {:.1f} MB/token from disk, page cache {:+.1f} MB\n",
                         r.tokens, 100 * r.overlap_efficiency, r.disk_mb_per_token, r.page_cache_growth / 1e6);
  return out;
}

}  // namespace sluice::bench
