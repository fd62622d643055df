#include "train/step_meter.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "backend/backend.h"
#include "lora/lora_adapter.h"
#include "train/lora_init.h"

namespace sluice {

StepMeter::StepMeter(const weights::StoreWeightSource* stream, int64_t micro_batches, const Backend* device,
                     uint64_t layer_bytes)
    : stream_(stream), micro_batches_(std::max<int64_t>(1, micro_batches)), device_(device),
      layer_bytes_(layer_bytes) {}

void StepMeter::begin() {
  if (device_) copied_begin_ = device_->bytes_streamed();
  if (!stream_) return;
  counters_begin_ = stream_->store().counters();
  io_begin_ = stream_->store().arbiter_stats();
}

void StepMeter::end(double step_seconds) {
  if (n_seen_++ == 0) return;  // the first step fills the ring from cold
  step_s_.push_back(step_seconds);
  if (device_) {
    copied_ += static_cast<double>(device_->bytes_streamed() - copied_begin_);
    scheduled_ += static_cast<double>(device_->scheduled_copy_bytes());  // the step's own schedule
  }
  if (!stream_) return;
  const weights::WeightCountersSnapshot c = stream_->store().counters() - counters_begin_;
  const weights::ArbiterStats io = stream_->store().arbiter_stats();
  stall_s_ += c.stall_s;
  read_bytes_ += static_cast<double>(io.total_bytes() - io_begin_.total_bytes());
  busy_s_ += io.busy_s - io_begin_.busy_s;
}

StepFigures StepMeter::figures() const {
  StepFigures f;
  f.n_steps = static_cast<int64_t>(step_s_.size());
  if (f.n_steps > 0) {
    std::vector<double> sorted = step_s_;
    std::sort(sorted.begin(), sorted.end());
    f.median_step_s = sorted[sorted.size() / 2];
    f.mean_step_s = std::accumulate(sorted.begin(), sorted.end(), 0.0) / static_cast<double>(sorted.size());
  }
  const auto m = static_cast<double>(micro_batches_);
  if (device_) {
    // Through host views, every layer outside the device tier once a visit;
    // through the backend's own ring (--gpu-budget alone), what its schedule
    // costs a period.
    if (stream_) f.predicted_copy_bytes = m * 2 * static_cast<double>(layer_bytes_);
    if (f.n_steps > 0) {
      if (!stream_) f.predicted_copy_bytes = m * scheduled_ / static_cast<double>(f.n_steps);
      f.measured_copy_bytes = copied_ / static_cast<double>(f.n_steps);
    }
  }
  if (!stream_) return f;
  const weights::PlacementPlan& p = stream_->store().plan();
  f.streamed = true;
  f.micro_batches = micro_batches_;
  f.predicted_step_s = m * p.predicted_step_s();
  f.predicted_compute_s = m * p.predicted_compute_s;
  f.predicted_layer_forward_s = p.layer_compute_s;
  f.predicted_layer_backward_s = p.train_backward_s;
  f.predicted_stall_s = m * p.predicted_stall_s;
  f.predicted_read_bytes = m * p.train.read_bytes;
  if (f.n_steps > 0) {
    const auto n = static_cast<double>(f.n_steps);
    f.measured_stall_s = stall_s_ / n;
    f.measured_read_bytes = read_bytes_ / n;
    f.run_disk_gbps = busy_s_ > 0 ? read_bytes_ / busy_s_ / 1e9 : 0.0;
  }
  f.predicted_step_at_run_disk_s = f.run_disk_gbps > 0 ? m * p.predicted_step_s_at(f.run_disk_gbps) : f.predicted_step_s;
  return f;
}

std::string step_report(const StepFigures& f) {
  auto mb = [](double b) { return weights::format_bytes(b); };
  if (!f.streamed) {
    if (f.predicted_copy_bytes <= 0) return "";
    if (f.n_steps == 0) return "base streamed to the device: no step after the first to measure (run 2 or more steps)";
    return fmt::format("base streamed host to device, per step (median of {} after the first {}): copies {} "
                       "predicted, {} measured (the ring's schedule: the forward, then each layer forward and in "
                       "reverse)",
                       f.n_steps, weights::format_seconds(f.median_step_s), mb(f.predicted_copy_bytes),
                       mb(f.measured_copy_bytes));
  }
  if (f.n_steps == 0) return "streamed base: no step after the first to measure (run 2 or more steps)";
  auto ms = [](double s) { return weights::format_seconds(s); };
  const double compute = f.median_step_s - f.measured_stall_s;
  std::string s = fmt::format(
      "streamed base, per step of {} micro-batch(es), predicted against measured (median of {} steps after the "
      "first):\n",
      f.micro_batches, f.n_steps);
  s += fmt::format("  step   {:>10} {:>10}   (at the disk rate the steps got, {:.2f} GB/s: {})\n", ms(f.predicted_step_s),
                   ms(f.median_step_s), f.run_disk_gbps, ms(f.predicted_step_at_run_disk_s));
  s += fmt::format("  stall  {:>10} {:>10}   (acquires waiting for reads, mean)\n", ms(f.predicted_stall_s),
                   ms(f.measured_stall_s));
  s += fmt::format("  read   {:>10} {:>10}   (bytes from disk, mean)\n", mb(f.predicted_read_bytes),
                   mb(f.measured_read_bytes));
  s += fmt::format("  compute {:>9} {:>10}   (step - stall: the kernels ran at {:.2f}x the calibrated matmul rate)",
                   ms(f.predicted_compute_s), ms(compute), compute > 0 ? f.predicted_compute_s / compute : 0.0);
  if (f.predicted_copy_bytes > 0) {
    s += fmt::format("\n  copies {:>10} {:>10}   (host to device, mean: every layer the device does not hold, once a visit)",
                     mb(f.predicted_copy_bytes), mb(f.measured_copy_bytes));
  }
  return s;
}

StatusOr<plan::TrainWorkload> train_workload(int64_t seq, int64_t rank, const std::string& targets,
                                             const std::string& init_adapter) {
  plan::TrainWorkload w{.seq_len = seq, .lora_rank = rank};
  if (init_adapter.empty()) {
    ASSIGN_OR_RETURN(w.lora_targets, parse_lora_targets(targets));
    return w;
  }
  ASSIGN_OR_RETURN(const LoraAdapter ad, read_lora(init_adapter));
  w.lora_rank = 0;
  for (const LoraMatrix& m : ad.mats) {
    w.lora_rank = std::max(w.lora_rank, m.rank);
    if (std::find(w.lora_targets.begin(), w.lora_targets.end(), m.role) == w.lora_targets.end())
      w.lora_targets.push_back(m.role);
  }
  return w;
}

}  // namespace sluice
