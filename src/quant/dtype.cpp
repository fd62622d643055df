#include "quant/dtype.h"

#include <array>
#include <cctype>

#include "base/check.h"

namespace sluice {
namespace {

constexpr std::array<DTypeTraits, 15> kTraits = {{
    {DType::kF32, "f32", 1, 4},
    {DType::kF16, "f16", 1, 2},
    {DType::kQ4_0, "q4_0", 32, 18},
    {DType::kQ4_1, "q4_1", 32, 20},
    {DType::kQ5_0, "q5_0", 32, 22},
    {DType::kQ5_1, "q5_1", 32, 24},
    {DType::kQ8_0, "q8_0", 32, 34},
    {DType::kQ2_K, "q2_K", 256, 84},
    {DType::kQ3_K, "q3_K", 256, 110},
    {DType::kQ4_K, "q4_K", 256, 144},
    {DType::kQ5_K, "q5_K", 256, 176},
    {DType::kQ6_K, "q6_K", 256, 210},
    {DType::kIQ4_NL, "iq4_nl", 32, 18},
    {DType::kIQ4_XS, "iq4_xs", 256, 136},
    {DType::kBF16, "bf16", 1, 2},
}};

// ggml type ids 0..39 by name, for messages about types sluice refuses.
constexpr std::array<const char*, 40> kGgmlNames = {
    "f32",  "f16",  "q4_0",    "q4_1",    "q4_2",   "q4_3",    "q5_0",   "q5_1",
    "q8_0", "q8_1", "q2_K",    "q3_K",    "q4_K",   "q5_K",    "q6_K",   "q8_K",
    "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s", "iq4_nl", "iq3_s", "iq2_s", "iq4_xs",
    "i8",   "i16",  "i32",     "i64",     "f64",    "iq1_m",   "bf16",   "q4_0_4_4",
    "q4_0_4_8", "q4_0_8_8", "tq1_0", "tq2_0", "iq4_nl_4_4", "iq4_nl_4_8", "iq4_nl_8_8", "mxfp4"};

}  // namespace

const DTypeTraits& dtype_traits(DType type) {
  for (const auto& t : kTraits) {
    if (t.type == type) return t;
  }
  CHECK(false && "unknown DType");
  return kTraits[0];
}

std::optional<DType> dtype_from_ggml(uint32_t ggml_type) {
  for (const auto& t : kTraits) {
    if (static_cast<uint32_t>(t.type) == ggml_type) return t.type;
  }
  return std::nullopt;
}

std::string ggml_type_name(uint32_t ggml_type) {
  if (ggml_type < kGgmlNames.size()) return kGgmlNames[ggml_type];
  return "type#" + std::to_string(ggml_type);
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& t : kTraits) {
    std::string_view tn = t.name;
    if (tn.size() != name.size()) continue;
    bool eq = true;
    for (size_t i = 0; i < tn.size(); ++i) {
      if (std::tolower(static_cast<unsigned char>(tn[i])) !=
          std::tolower(static_cast<unsigned char>(name[i]))) {
        eq = false;
        break;
      }
    }
    if (eq) return t.type;
  }
  return std::nullopt;
}

}  // namespace sluice
