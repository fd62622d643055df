#include "plan/weight_bytes.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>

namespace sluice::plan {
namespace {

struct NamedFormat {
  const char* name;
  int64_t block_size;
  int64_t block_bytes;
};

// Formats that are not (yet) sluice DTypes; DType names are resolved by dtype_traits.
constexpr NamedFormat kNamedFormats[] = {
    {"fp8", 1, 1}, {"int8", 1, 1}, {"int4", 2, 1}, {"int2", 4, 1}, {"nf4", 64, 33}, {"q2_k", 256, 84},
};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

WeightFormat format_of(DType type) {
  const DTypeTraits& t = dtype_traits(type);
  return WeightFormat{.name = t.name, .block_size = t.block_size, .block_bytes = t.block_bytes};
}

StatusOr<WeightFormat> parse_weight_format(std::string_view name) {
  const std::string n = lower(name);
  if (n.rfind("bits:", 0) == 0) {
    const std::string num = n.substr(5);
    char* end = nullptr;
    const double bits = std::strtod(num.c_str(), &end);
    if (num.empty() || end != num.c_str() + num.size() || !(bits > 0) || bits > 64)
      return invalid_argument("bad weight format '{}': bits:X needs 0 < X <= 64", name);
    // X bits per weight as 1000 weights per block of round(X * 125) bytes.
    const auto block_bytes = static_cast<int64_t>(std::llround(bits * 125.0));
    return WeightFormat{.name = std::string(name), .block_size = 1000, .block_bytes = block_bytes};
  }
  for (const NamedFormat& f : kNamedFormats)
    if (n == f.name) return WeightFormat{.name = f.name, .block_size = f.block_size, .block_bytes = f.block_bytes};
  if (std::optional<DType> t = dtype_from_name(n)) return format_of(*t);
  return invalid_argument(
      "unknown weight format '{}' (f32, f16, bf16, fp8, int8, int4, int2, nf4, q8_0, q6_k, q4_0, q4_k, q2_k, bits:X)", name);
}

FormatMix uniform_mix(const WeightFormat& w) {
  const WeightFormat f32 = format_of(DType::kF32);
  return FormatMix{.embedding = w, .output = w, .attention = w, .ffn = w, .experts = w, .router = f32, .norm = f32};
}

uint64_t WeightBytes::total() const {
  uint64_t t = 0;
  for (uint64_t b : stored) t += b;
  return t;
}

uint64_t WeightBytes::block_bytes() const {
  // Block norms are all norms but the final one; the split is immaterial for
  // sizing, so all norm bytes count as block bytes.
  return of(TensorClass::kAttention) + of(TensorClass::kFfn) + of(TensorClass::kExperts) + of(TensorClass::kRouter) +
         of(TensorClass::kNorm);
}

double WeightBytes::experts_touched(int64_t n_tokens) const {
  if (n_expert <= 0 || n_tokens <= 0) return 0.0;
  const double e = static_cast<double>(n_expert);
  const double p_miss = 1.0 - static_cast<double>(n_expert_used) / e;
  return e * (1.0 - std::pow(p_miss, static_cast<double>(n_tokens)));
}

double WeightBytes::matrix_read_bytes(int64_t n_tokens) const {
  const uint64_t table = of(TensorClass::kEmbedding);
  double b = std::min(static_cast<double>(table), static_cast<double>(embedding_row_bytes) * static_cast<double>(n_tokens));
  b += static_cast<double>(tied_embeddings ? table : of(TensorClass::kOutput));
  b += static_cast<double>(of(TensorClass::kAttention) + of(TensorClass::kFfn) + of(TensorClass::kRouter));
  if (n_expert > 0) b += static_cast<double>(of(TensorClass::kExperts)) * experts_touched(n_tokens) / n_expert;
  return b;
}

WeightBytes weight_bytes(const ModelShape& s, const FormatMix& mix) {
  const ParamCount p = count_params(s);
  WeightBytes w;
  auto set = [&](TensorClass c, uint64_t bytes) { w.stored[static_cast<int>(c)] = bytes; };
  // Per-matrix rounding to whole blocks: count rows x row bytes.
  const int64_t d = s.n_embd;
  const int64_t n_moe = s.n_layer_moe();
  const int64_t n_dense = s.is_moe() ? s.n_layer_dense : s.n_layer;
  set(TensorClass::kEmbedding, mix.embedding.bytes(d) * s.n_vocab);
  set(TensorClass::kOutput, s.tied_embeddings ? 0 : mix.output.bytes(d) * s.n_vocab);
  const uint64_t attn_layer = mix.attention.bytes(d) * (s.n_embd_q() + 2 * s.n_embd_kv()) + mix.attention.bytes(s.n_embd_q()) * d;
  set(TensorClass::kAttention, attn_layer * s.n_layer);
  // gate/up: [n_ff, d] rows of d; down: [d, n_ff] rows of n_ff.
  auto ffn_bytes = [&](const WeightFormat& f, int64_t n_ff) { return 2 * f.bytes(d) * n_ff + f.bytes(n_ff) * d; };
  set(TensorClass::kFfn, ffn_bytes(mix.ffn, s.n_ff) * n_dense + (s.n_ff_shared > 0 ? ffn_bytes(mix.ffn, s.n_ff_shared) * n_moe : 0));
  set(TensorClass::kExperts, s.is_moe() ? ffn_bytes(mix.experts, s.n_ff_expert) * s.n_expert * n_moe : 0);
  set(TensorClass::kRouter, s.is_moe() ? mix.router.bytes(d) * s.n_expert * n_moe : 0);
  set(TensorClass::kNorm, mix.norm.bytes(p.norm));
  w.embedding_row_bytes = mix.embedding.bytes(d);
  w.tied_embeddings = s.tied_embeddings;
  w.n_layer = s.n_layer;
  w.n_layer_moe = n_moe;
  w.n_expert = s.n_expert;
  w.n_expert_used = s.n_expert_used;
  return w;
}

WeightBytes weight_bytes_of_file(const ModelFile& file, const ModelShape& s) {
  WeightBytes w;
  const ArchSpec* arch = find_arch(file.metadata.get_string("general.architecture").value_or(""));
  w.tied_embeddings = true;
  for (const TensorInfo& t : file.tensors) {
    const TensorClass c = tensor_class_of(arch, t.name);
    w.stored[static_cast<int>(c)] += t.n_bytes;
    if (c == TensorClass::kEmbedding && !t.ne.empty()) w.embedding_row_bytes = row_bytes(t.type, t.ne[0]);
    if (c == TensorClass::kOutput) w.tied_embeddings = false;
  }
  w.n_layer = s.n_layer;
  w.n_layer_moe = s.n_layer_moe();
  w.n_expert = s.n_expert;
  w.n_expert_used = s.n_expert_used;
  return w;
}

}  // namespace sluice::plan
