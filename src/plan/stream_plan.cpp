#include "plan/stream_plan.h"
#include "base/enum_names.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace sluice::plan {

constexpr EnumName<StreamBound> kStreamBoundNames[] = {
    {StreamBound::kCompute, "compute"}, {StreamBound::kLink, "link"}, {StreamBound::kDisk, "disk"}};

const char* stream_bound_name(StreamBound b) { return enum_name(b, kStreamBoundNames); }

StatusOr<StreamPlan> plan_stream(const StreamInputs& in) {
  if (in.n_layer <= 0) return invalid_argument("streaming needs at least one layer");
  if (!(in.layer_bytes > 0) || !(in.layer_flops > 0)) return invalid_argument("layer bytes and FLOPs must be positive");
  if (!(in.compute_tflops > 0)) return invalid_argument("the compute rate must be positive");
  if (in.link_gbps < 0 || in.disk_gbps < 0) return invalid_argument("bandwidths must not be negative");
  if (in.link_gbps == 0 && in.disk_gbps == 0) return invalid_argument("streaming needs a link or a disk bandwidth");

  StreamPlan p;
  const double n = static_cast<double>(in.n_layer);
  p.compute_s = in.layer_flops / (in.compute_tflops * 1e12);
  const bool from_disk_only = in.link_gbps == 0;
  p.transfer_s = in.layer_bytes / ((from_disk_only ? in.disk_gbps : in.link_gbps) * 1e9);
  p.disk_s = in.disk_gbps > 0 && !from_disk_only ? in.layer_bytes / (in.disk_gbps * 1e9) : 0.0;
  p.layer_cycle_s = std::max(p.compute_s, p.transfer_s);
  p.n_ring_slots = std::max<int64_t>(2, static_cast<int64_t>(std::ceil(p.transfer_s / p.compute_s)) + 1);
  p.ring_bytes = static_cast<double>(p.n_ring_slots) * in.layer_bytes;
  if (from_disk_only) {
    p.host_buffer_layers = 0;  // the ring is the only staging
  } else if (p.disk_s > 0) {
    p.disk_delivered_layers = n * p.layer_cycle_s / p.disk_s;
    p.host_buffer_layers = std::max(0.0, n - static_cast<double>(p.n_ring_slots) - p.disk_delivered_layers);
  } else {
    p.host_buffer_layers = std::max(0.0, n - static_cast<double>(p.n_ring_slots));  // all resident in host
  }
  p.host_buffer_bytes = p.host_buffer_layers * in.layer_bytes;
  const double slowest = std::max({p.compute_s, p.transfer_s, p.disk_s});
  p.step_s = n * slowest;
  p.compute_only_s = n * p.compute_s;
  p.overhead = p.step_s / p.compute_only_s - 1.0;
  if (slowest == p.compute_s) p.bound = StreamBound::kCompute;
  else if (slowest == p.transfer_s) p.bound = from_disk_only ? StreamBound::kDisk : StreamBound::kLink;
  else p.bound = StreamBound::kDisk;

  std::vector<std::string> refusals;
  if (in.device_budget_bytes > 0 && p.ring_bytes > in.device_budget_bytes)
    refusals.push_back(fmt::format("ring of {} slots needs {:.2f} GB > device budget {:.2f} GB", p.n_ring_slots,
                                   p.ring_bytes / 1e9, in.device_budget_bytes / 1e9));
  if (in.host_budget_bytes > 0 && p.host_buffer_bytes > in.host_budget_bytes)
    refusals.push_back(fmt::format("host buffer of {:.1f} layers needs {:.2f} GB > host budget {:.2f} GB",
                                   p.host_buffer_layers, p.host_buffer_bytes / 1e9, in.host_budget_bytes / 1e9));
  p.fits = refusals.empty();
  if (!p.fits) {
    p.verdict = "does not fit: " + refusals.front();
    for (size_t i = 1; i < refusals.size(); ++i) p.verdict += "; " + refusals[i];
  } else if (p.bound == StreamBound::kCompute) {
    p.verdict = fmt::format("compute-bound: transfers hidden behind compute (K={})", p.n_ring_slots);
  } else {
    p.verdict = fmt::format("{}-bound: step {:.2f}x the compute time (K={})", stream_bound_name(p.bound),
                            p.step_s / p.compute_only_s, p.n_ring_slots);
  }
  return p;
}

bool streamed_in_spread(int64_t l, int64_t n_layer, int64_t n_streamed) {
  return (l + 1) * n_streamed / n_layer > l * n_streamed / n_layer;
}

double tokens_to_hide(double leg_s, double layer_active_params, double flops_per_param, double compute_tflops) {
  return leg_s * compute_tflops * 1e12 / (flops_per_param * layer_active_params);
}

StatusOr<std::vector<StreamGridCell>> plan_stream_grid(const StreamGridInputs& in) {
  if (!(in.layer_active_params > 0) || !(in.flops_per_param > 0))
    return invalid_argument("active params per layer and FLOPs per param must be positive");
  std::vector<int64_t> tokens = in.candidate_tokens;
  if (tokens.empty())
    for (int64_t t = 1024; t <= 32768; t *= 2) tokens.push_back(t);
  std::vector<StreamGridCell> cells;
  for (const Disk& disk : in.disks) {
    for (const Link& link : in.links) {
      StreamGridCell cell{.disk = disk, .link = link};
      cell.applicable = disk.gbps <= link.gbps;
      const double slowest_leg_s = in.layer_bytes / (std::min(disk.gbps, link.gbps) * 1e9);
      cell.tokens_no_overhead = tokens_to_hide(slowest_leg_s, in.layer_active_params, in.flops_per_param, in.compute_tflops);
      if (cell.applicable) {
        for (int64_t t : tokens) {
          ASSIGN_OR_RETURN(StreamPlan p, plan_stream({.n_layer = in.n_layer,
                                                      .layer_bytes = in.layer_bytes,
                                                      .layer_flops = static_cast<double>(t) * in.flops_per_param *
                                                                     in.layer_active_params,
                                                      .compute_tflops = in.compute_tflops,
                                                      .link_gbps = link.gbps,
                                                      .disk_gbps = disk.gbps,
                                                      .host_budget_bytes = in.host_budget_bytes,
                                                      .device_budget_bytes = in.device_budget_bytes}));
          if (p.fits) {
            cell.min_tokens = t;
            cell.plan = p;
            break;
          }
        }
      }
      cells.push_back(cell);
    }
  }
  return cells;
}

}  // namespace sluice::plan
