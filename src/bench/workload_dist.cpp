#include "bench/workload_dist.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <vector>

namespace sluice::bench {
namespace {

std::optional<double> parse_number(std::string_view s, bool integer) {
  if (s.empty()) return std::nullopt;
  if (integer) {
    int64_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
    return static_cast<double>(v);
  }
  const std::string str(s);
  char* end = nullptr;
  const double v = std::strtod(str.c_str(), &end);
  if (end != str.c_str() + str.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  for (size_t pos = 0;;) {
    const size_t next = s.find(sep, pos);
    parts.push_back(s.substr(pos, next == std::string_view::npos ? std::string_view::npos : next - pos));
    if (next == std::string_view::npos) return parts;
    pos = next + 1;
  }
}

}  // namespace

StatusOr<Dist> parse_dist(std::string_view flag, const std::string& text) {
  const Status bad = invalid_argument("{}: bad distribution '{}' (expected N, uniform:A:B with 1 <= A <= B, or "
                                      "normal:MEAN:SD with SD >= 0)",
                                      flag, text);
  const std::vector<std::string_view> parts = split(text, ':');
  Dist d;
  if (parts.size() == 1) {
    const auto n = parse_number(parts[0], true);
    if (!n || *n < 1) return bad;
    d.a = *n;
    return d;
  }
  if (parts.size() != 3) return bad;
  if (parts[0] == "uniform") {
    const auto a = parse_number(parts[1], true), b = parse_number(parts[2], true);
    if (!a || !b || *a < 1 || *a > *b) return bad;
    return Dist{.kind = Dist::Kind::kUniform, .a = *a, .b = *b};
  }
  if (parts[0] == "normal") {
    const auto mean = parse_number(parts[1], false), sd = parse_number(parts[2], false);
    if (!mean || !sd || *sd < 0) return bad;
    return Dist{.kind = Dist::Kind::kNormal, .a = *mean, .b = *sd};
  }
  return bad;
}

StatusOr<Arrival> parse_arrival(const std::string& text) {
  if (text == "all") return Arrival{};
  const std::vector<std::string_view> parts = split(text, ':');
  if (parts.size() == 2 && parts[0] == "poisson") {
    const auto rate = parse_number(parts[1], false);
    if (rate && *rate > 0) return Arrival{.rate = *rate};
  }
  if (parts.size() == 2 && parts[0] == "ramp") {
    const auto seconds = parse_number(parts[1], false);
    if (seconds && *seconds > 0) return Arrival{.ramp_s = *seconds};
  }
  return invalid_argument("--arrival: bad value '{}' (expected all, poisson:RATE with RATE > 0 requests/s, or "
                          "ramp:SECONDS with SECONDS > 0)",
                          text);
}

double Arrival::next(double t_prev, size_t i, size_t n, double u) const {
  if (ramp_s > 0) return n > 0 ? ramp_s * static_cast<double>(i) / static_cast<double>(n) : 0.0;
  if (rate > 0 && i > 0) return t_prev - std::log(1.0 - u) / rate;
  return t_prev;
}

int64_t draw(const Dist& d, Rng& rng) {
  switch (d.kind) {
    case Dist::Kind::kFixed: return static_cast<int64_t>(d.a);
    case Dist::Kind::kUniform:
      return static_cast<int64_t>(d.a) + static_cast<int64_t>(rng.below(static_cast<uint64_t>(d.b - d.a) + 1));
    case Dist::Kind::kNormal: {
      // Box-Muller; u1 in (0, 1] keeps the log finite.
      const double u1 = 1.0 - rng.uniform01(), u2 = rng.uniform01();
      const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
      return std::max<int64_t>(1, std::llround(d.a + d.b * z));
    }
  }
  return 1;
}

}  // namespace sluice::bench
