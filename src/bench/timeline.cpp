#include "bench/timeline.h"

#include <algorithm>
#include <fstream>

#include <fmt/format.h>

namespace sluice::bench {
namespace {

bool same_counts(const TimelineSample& a, const TimelineSample& b) {
  return a.running == b.running && a.waiting == b.waiting && a.kv_used == b.kv_used && a.kv_total == b.kv_total &&
         a.demoted == b.demoted && a.preemptions == b.preemptions && a.finished == b.finished;
}

std::string escape(std::string_view text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

struct Series {
  const char* name;
  const char* color;
  int64_t TimelineSample::*field;
};

struct Panel {
  const char* title;
  std::vector<Series> series;
};

// Chart geometry (SVG user units).
constexpr double kLeft = 60, kPlotW = 560, kLegendW = 170, kTop = 36, kPanelH = 110, kPanelGap = 34;

}  // namespace

void Timeline::add(const TimelineSample& s) {
  if (!samples_.empty()) {
    const TimelineSample& last = samples_.back();
    if (same_counts(last, s) && s.t_s - last.t_s < min_gap_s_) return;
  }
  samples_.push_back(s);
}

std::string Timeline::csv() const {
  std::string out = "t_s,running,waiting,kv_blocks_used,kv_blocks_total,fluid_demoted_units,preemptions,finished\n";
  for (const TimelineSample& s : samples_) {
    out += fmt::format("{:.4f},{},{},{},{},{},{},{}\n", s.t_s, s.running, s.waiting, s.kv_used, s.kv_total, s.demoted,
                       s.preemptions, s.finished);
  }
  return out;
}

std::string Timeline::svg(std::string_view title) const {
  const std::vector<Panel> panels = {
      {"requests", {{"running", "#1f77b4", &TimelineSample::running}, {"waiting", "#ff7f0e", &TimelineSample::waiting}}},
      {"KV blocks", {{"in the pool", "#333333", &TimelineSample::kv_total}, {"in use", "#2ca02c", &TimelineSample::kv_used}}},
      {"fluid split",
       {{"units given up", "#d62728", &TimelineSample::demoted}, {"preemptions", "#9467bd", &TimelineSample::preemptions}}},
  };
  const double t_end = samples_.empty() ? 1.0 : std::max(samples_.back().t_s, 1e-9);
  const double height = kTop + static_cast<double>(panels.size()) * (kPanelH + kPanelGap) + 10;
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"20\" font-size=\"13\">{3}</text>\n",
      kLeft + kPlotW + kLegendW, height, kLeft, escape(title));
  for (size_t p = 0; p < panels.size(); ++p) {
    const Panel& panel = panels[p];
    const double y0 = kTop + static_cast<double>(p) * (kPanelH + kPanelGap);  // the panel's top
    int64_t top = 1;
    for (const TimelineSample& s : samples_)
      for (const Series& se : panel.series) top = std::max(top, s.*se.field);
    out += fmt::format(
        "<rect x=\"{0}\" y=\"{1}\" width=\"{2}\" height=\"{3}\" fill=\"none\" stroke=\"#999\"/>\n"
        "<text x=\"{4}\" y=\"{5}\" text-anchor=\"end\">{6}</text>\n<text x=\"{4}\" y=\"{7}\" "
        "text-anchor=\"end\">0</text>\n<text x=\"{0}\" y=\"{8}\" font-weight=\"bold\">{9}</text>\n",
        kLeft, y0, kPlotW, kPanelH, kLeft - 4, y0 + 10, top, y0 + kPanelH, y0 - 4, escape(panel.title));
    auto x_of = [&](double t) { return kLeft + kPlotW * std::clamp(t / t_end, 0.0, 1.0); };
    auto y_of = [&](int64_t v) {
      return y0 + kPanelH - kPanelH * static_cast<double>(v) / static_cast<double>(top);
    };
    for (size_t si = 0; si < panel.series.size(); ++si) {
      const Series& se = panel.series[si];
      std::string points;
      for (size_t i = 0; i < samples_.size(); ++i) {
        const TimelineSample& s = samples_[i];
        if (i > 0) points += fmt::format("{:.1f},{:.1f} ", x_of(s.t_s), y_of(samples_[i - 1].*se.field));  // a step
        points += fmt::format("{:.1f},{:.1f} ", x_of(s.t_s), y_of(s.*se.field));
      }
      out += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"/>\n", se.color,
                         points);
      const double ly = y0 + 14 + 16 * static_cast<double>(si);
      out += fmt::format(
          "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"{3}\" stroke-width=\"2\"/>\n"
          "<text x=\"{4}\" y=\"{5}\">{6}</text>\n",
          kLeft + kPlotW + 10, ly - 4, kLeft + kPlotW + 28, se.color, kLeft + kPlotW + 32, ly, escape(se.name));
    }
  }
  const double axis_y = kTop + static_cast<double>(panels.size()) * (kPanelH + kPanelGap) - kPanelGap + 14;
  out += fmt::format("<text x=\"{}\" y=\"{}\">0 s</text>\n<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{:.2f} s</text>\n",
                     kLeft, axis_y, kLeft + kPlotW, axis_y, samples_.empty() ? 0.0 : samples_.back().t_s);
  out += "</svg>\n";
  return out;
}

Status Timeline::write(const std::string& path, std::string_view title) const {
  const bool svg_file = path.size() >= 4 && path.compare(path.size() - 4, 4, ".svg") == 0;
  std::ofstream f(path);
  if (!f) return io_error("--timeline: cannot write {}", path);
  f << (svg_file ? svg(title) : csv());
  if (!f) return io_error("--timeline: write to {} failed", path);
  return Status();
}

}  // namespace sluice::bench
