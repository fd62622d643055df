#include "bench/op_times.h"

#include <algorithm>

#include <fmt/format.h>

#include "bench/stats.h"

namespace sluice::bench {

std::vector<OpTime> median_op_times(const std::vector<std::vector<OpTime>>& passes) {
  std::vector<OpTime> out;
  for (const std::vector<OpTime>& pass : passes)
    for (const OpTime& r : pass)
      if (std::none_of(out.begin(), out.end(), [&](const OpTime& o) { return o.op == r.op; })) out.push_back(r);
  for (OpTime& o : out) {
    std::vector<double> seconds;
    for (const std::vector<OpTime>& pass : passes) {
      auto it = std::find_if(pass.begin(), pass.end(), [&](const OpTime& r) { return r.op == o.op; });
      seconds.push_back(it == pass.end() ? 0.0 : it->seconds);
    }
    o.seconds = median(seconds);
  }
  return out;
}

std::string op_times_table(const std::vector<OpTime>& rows, const OpTimesFormat& f) {
  double total = 0, flops = 0, bytes = 0;
  for (const OpTime& r : rows) total += r.seconds, flops += r.flops, bytes += r.bytes;
  auto rate = [](double work, double seconds, double unit) {
    return work > 0 && seconds > 0 ? fmt::format("{:.1f}", work / seconds / unit) : std::string();
  };
  auto of_roof = [&](double w_flops, double w_bytes, double seconds) {
    if (seconds <= 0) return std::string();
    if (f.roof_gbps > 0 && w_bytes > 0) return fmt::format("{:.1f}%", 100 * w_bytes / seconds / 1e9 / f.roof_gbps);
    if (f.roof_gbps == 0 && f.roof_gflops > 0 && w_flops > 0)
      return fmt::format("{:.1f}%", 100 * w_flops / seconds / 1e9 / f.roof_gflops);
    return std::string();
  };
  std::string s = f.title + "\n";
  s += fmt::format("| {:<24} | {:>6} | {:>10} | {:>6} | {:>9} | {:>8} | {:>7} |\n", "op", "calls", f.per_label, "share",
                   "GFLOP/s", "GB/s", "of roof");
  s += fmt::format("| {:-<24} | {:->6} | {:->10} | {:->6} | {:->9} | {:->8} | {:->7} |\n", "", "", "", "", "", "", "");
  auto line = [&](const std::string& op, const std::string& calls, double seconds, double w_flops, double w_bytes) {
    s += fmt::format("| {:<24} | {:>6} | {:>10.4f} | {:>5.1f}% | {:>9} | {:>8} | {:>7} |\n", op, calls,
                     1e3 * seconds / f.per, total > 0 ? 100 * seconds / total : 0.0, rate(w_flops, seconds, 1e9),
                     rate(w_bytes, seconds, 1e9), of_roof(w_flops, w_bytes, seconds));
  };
  for (const OpTime& r : rows) line(r.op, fmt::format("{}", r.calls), r.seconds, r.flops, r.bytes);
  line("sum of the ops", "", total, flops, bytes);
  if (f.pass_seconds > 0) {
    s += fmt::format("pass: {:.4f} {} on the host's clock (the ops' sum is {:.1f}% of it)\n",
                     1e3 * f.pass_seconds / f.per, f.per_label, 100 * total / f.pass_seconds);
  }
  return s;
}

}  // namespace sluice::bench
