#include "model/rope_scaling.h"
#include "base/enum_names.h"

#include <cmath>

namespace sluice {

constexpr EnumName<LongRopeFactors> kLongropeFactorsNames[] = {
    {LongRopeFactors::kNone, "none"}, {LongRopeFactors::kShort, "short"}, {LongRopeFactors::kLong, "long"}};

const char* longrope_factors_name(LongRopeFactors f) { return enum_name(f, kLongropeFactorsNames); }

LongRopeFactors choose_longrope_factors(const ModelWeights& w, const ModelHparams& hp, int64_t n_ctx_max) {
  if (w.rope_factors_long.empty() && w.rope_factors_short.empty()) return LongRopeFactors::kNone;
  return n_ctx_max > hp.rope_orig_ctx ? LongRopeFactors::kLong : LongRopeFactors::kShort;
}

std::span<const float> longrope_divisors(const ModelWeights& w, LongRopeFactors f) {
  switch (f) {
    case LongRopeFactors::kNone: return {};
    case LongRopeFactors::kShort: return w.rope_factors_short;
    case LongRopeFactors::kLong: return w.rope_factors_long;
  }
  return {};
}

Status check_longrope_factors(const ModelWeights& w) {
  const bool has_long = !w.rope_factors_long.empty(), has_short = !w.rope_factors_short.empty();
  if (has_long != has_short) {
    return data_loss("LongRoPE needs both rope_factors_long.weight and rope_factors_short.weight; the file has only {}",
                     has_long ? "rope_factors_long.weight" : "rope_factors_short.weight");
  }
  for (const auto& [name, v] : {std::pair{"rope_factors_long.weight", &w.rope_factors_long},
                                std::pair{"rope_factors_short.weight", &w.rope_factors_short}}) {
    for (size_t i = 0; i < v->size(); ++i) {
      const float f = (*v)[i];
      if (!(f > 0.0f) || !std::isfinite(f)) {
        return data_loss("{}[{}] is {}; LongRoPE factors divide frequencies and must be positive and finite", name, i, f);
      }
    }
  }
  return Status();
}

RopeFreqs rope_freqs(const ModelHparams& hp, std::span<const float> divisors) {
  const int64_t half = hp.n_rot / 2;
  RopeFreqs out{.inv_freq = std::vector<double>(static_cast<size_t>(half)), .magnitude = hp.rope_attn_factor};
  const double pi = 3.14159265358979323846;
  for (int64_t i = 0; i < half; ++i) {
    double f = std::pow(static_cast<double>(hp.rope_freq_base), -2.0 * static_cast<double>(i) / hp.n_rot);
    if (hp.rope_scaling == RopeScaling::kLinear) {
      f /= hp.rope_scale_factor;
    } else if (hp.rope_scaling == RopeScaling::kLlama3) {
      const double wavelen = 2.0 * pi / f;
      const double low_wavelen = hp.rope_orig_ctx / hp.rope_low_freq_factor;
      const double high_wavelen = hp.rope_orig_ctx / hp.rope_high_freq_factor;
      if (wavelen > low_wavelen) {
        f /= hp.rope_scale_factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (hp.rope_orig_ctx / wavelen - hp.rope_low_freq_factor) /
                              (hp.rope_high_freq_factor - hp.rope_low_freq_factor);
        f = (1.0 - smooth) * f / hp.rope_scale_factor + smooth * f;
      }
    }
    if (!divisors.empty()) f /= divisors[static_cast<size_t>(i)];
    out.inv_freq[static_cast<size_t>(i)] = f;
  }
  return out;
}

}  // namespace sluice
