#include "backend/rope_tables.h"

#include <cmath>

namespace sluice {

void rope_cos_sin(std::span<const int64_t> positions, std::span<const double> inv_freq, double magnitude,
                  float* cos_sin) {
  const auto half = static_cast<int64_t>(inv_freq.size());
  for (size_t t = 0; t < positions.size(); ++t) {
    const auto pos = static_cast<double>(positions[t]);
    float* cs = cos_sin + static_cast<int64_t>(t) * 2 * half;
    for (int64_t k = 0; k < half; ++k) {
      const double angle = pos * inv_freq[static_cast<size_t>(k)];
      cs[2 * k] = static_cast<float>(magnitude * std::cos(angle));
      cs[2 * k + 1] = static_cast<float>(magnitude * std::sin(angle));
    }
  }
}

}  // namespace sluice
