#include "bench/units.h"

#include <fmt/format.h>

namespace sluice::bench {

std::string format_ms(double s) { return fmt::format("{:.2f} ms", s * 1e3); }

std::string human_bytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", n) : fmt::format("{:.2f} {}", v, units[u]);
}

}  // namespace sluice::bench
