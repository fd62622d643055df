#include "quant/quant_mix.h"

#include <array>
#include <cctype>

#include "arch/tensor_class.h"

namespace sluice {
namespace {

enum class Mix { kNone, kQ2_K, kQ3_K_S, kQ3_K_M, kQ3_K_L, kQ4_K_S, kQ4_K_M, kQ5_K_S, kQ5_K_M, kQ6_K, kIQ4_XS };

struct NamedMix {
  const char* name;
  Mix mix;
  DType base;
  int64_t file_type;  // llama_ftype
};

// llama.cpp's mixes, by llama-quantize's names (lower case).
constexpr std::array<NamedMix, 10> kMixes = {{
    {"q2_k", Mix::kQ2_K, DType::kQ2_K, 10},
    {"q3_k_s", Mix::kQ3_K_S, DType::kQ3_K, 11},
    {"q3_k_m", Mix::kQ3_K_M, DType::kQ3_K, 12},
    {"q3_k_l", Mix::kQ3_K_L, DType::kQ3_K, 13},
    {"q4_k_s", Mix::kQ4_K_S, DType::kQ4_K, 14},
    {"q4_k_m", Mix::kQ4_K_M, DType::kQ4_K, 15},
    {"q5_k_s", Mix::kQ5_K_S, DType::kQ5_K, 16},
    {"q5_k_m", Mix::kQ5_K_M, DType::kQ5_K, 17},
    {"q6_k", Mix::kQ6_K, DType::kQ6_K, 18},
    {"iq4_xs", Mix::kIQ4_XS, DType::kIQ4_XS, 30},
}};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

Mix mix_of(const QuantMix& m) {
  if (!m.is_mix) return Mix::kNone;
  for (const NamedMix& n : kMixes)
    if (m.name == n.name) return n.mix;
  return Mix::kNone;
}

bool is_mix_name(std::string_view name) {
  for (const NamedMix& n : kMixes)
    if (name == n.name) return true;
  return false;
}

// llama.cpp's rules for the K mixes and IQ4_XS, tensor by tensor.
// spec: the tensor's table row (nullptr for a name no table has: the base type).
DType mix_rule(Mix mix, DType base, const TensorSpec* spec, int64_t layer, const MixTensor& t) {
  using R = TensorRole;
  if (spec == nullptr) return base;
  const R role = spec->role;
  const int64_t n = t.n_layer;
  // The output matrix (the token embedding when it doubles as the output).
  if (role == R::kOutput || (role == R::kTokenEmbd && !t.has_output)) return DType::kQ6_K;
  if (role == R::kAttnV) {
    switch (mix) {
      case Mix::kQ2_K: return t.n_gqa >= 4 ? DType::kQ4_K : DType::kQ3_K;
      case Mix::kQ3_K_M: return layer < 2 ? DType::kQ5_K : DType::kQ4_K;
      case Mix::kQ3_K_L: return DType::kQ5_K;
      case Mix::kIQ4_XS: return t.n_gqa >= 4 ? DType::kQ5_K : base;
      case Mix::kQ4_K_M:
      case Mix::kQ5_K_M: return mix_uses_more_bits(layer, n) ? DType::kQ6_K : base;
      case Mix::kQ4_K_S: return layer < 4 ? DType::kQ5_K : base;
      default: return base;
    }
  }
  if (role == R::kFfnDown || role == R::kFfnDownExps || role == R::kFfnDownShexp) {
    switch (mix) {
      case Mix::kQ2_K: return DType::kQ3_K;
      case Mix::kQ3_K_M: return layer < n / 16 ? DType::kQ5_K : DType::kQ4_K;
      case Mix::kQ3_K_L: return DType::kQ5_K;
      case Mix::kQ4_K_M:
      case Mix::kQ5_K_M: return mix_uses_more_bits(layer, n) ? DType::kQ6_K : base;
      case Mix::kQ4_K_S: return layer < n / 8 ? DType::kQ5_K : base;
      default: return base;
    }
  }
  if (role == R::kAttnOutput) {
    switch (mix) {
      case Mix::kQ2_K: return DType::kQ3_K;
      case Mix::kQ3_K_M: return DType::kQ4_K;
      case Mix::kQ3_K_L: return DType::kQ5_K;
      default: return base;
    }
  }
  if (role == R::kAttnQkv) {
    switch (mix) {
      case Mix::kQ3_K_M:
      case Mix::kQ3_K_L: return DType::kQ4_K;
      case Mix::kQ4_K_M: return DType::kQ5_K;
      case Mix::kQ5_K_M: return DType::kQ6_K;
      default: return base;
    }
  }
  return base;
}

}  // namespace

bool mix_uses_more_bits(int64_t layer, int64_t n_layer) {
  return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

StatusOr<QuantMix> quant_mix_from_name(std::string_view name) {
  const std::string l = lower(name);
  for (const NamedMix& m : kMixes)
    if (l == m.name) return QuantMix{.name = l, .base = m.base, .is_mix = true, .file_type = m.file_type};
  // Single types, with the llama_ftype of a file whose matrices are all that
  // type (a name that is also a mix's, q2_k, q6_k and iq4_xs, is the mix).
  for (const DTypeTraits& t : all_dtype_traits())
    if (l == lower(t.name)) return QuantMix{.name = l, .base = t.type, .is_mix = false, .file_type = t.file_type};
  return invalid_argument("unknown weight type '{}' ({})", name, quant_mix_names());
}

std::string quant_mix_names() {
  std::string s;
  for (const DTypeTraits& t : all_dtype_traits())
    if (!is_mix_name(lower(t.name))) s += (s.empty() ? "" : ", ") + lower(t.name);
  for (const NamedMix& m : kMixes) s += std::string(", ") + m.name;
  return s;
}

bool quant_mix_type(const QuantMix& mix, const MixTensor& t, DType* type) {
  DType chosen = mix.base;
  if (mix.is_mix) {
    const int64_t layer = split_layer_name(t.name).first;
    chosen = mix_rule(mix_of(mix), mix.base, find_tensor_spec(t.arch, t.name), layer, t);
    if (t.ne0 % dtype_traits(chosen).block_size != 0) chosen = dtype_traits(chosen).small_row_fallback;
  }
  if (t.ne0 % dtype_traits(chosen).block_size != 0) return false;
  *type = chosen;
  return true;
}

}  // namespace sluice
