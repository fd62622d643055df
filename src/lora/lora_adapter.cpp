#include "lora/lora_adapter.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <string_view>

#include "format/gguf_reader.h"
#include "format/gguf_writer.h"
#include "lora/peft_adapter.h"
#include "quant/quant.h"

namespace sluice {
namespace {

constexpr std::string_view kGgufSuffixA = ".lora_a";
constexpr std::string_view kGgufSuffixB = ".lora_b";


// A 2-D tensor's elements as f32, row-major [ne[1], ne[0]].
StatusOr<std::vector<float>> to_f32(const TensorInfo& t) {
  if (t.ne.size() != 2 || t.ne[0] <= 0 || t.ne[1] <= 0) {
    return data_loss("adapter tensor {} has shape {}: a LoRA factor is 2-D", t.name, t.shape_string());
  }
  if (t.type != DType::kF32 && t.type != DType::kF16 && t.type != DType::kBF16) {
    // Quantized factors exist in the wild only as Q8_0; dequantize_row reads every type.
    if (t.ne[0] % dtype_traits(t.type).block_size != 0) {
      return data_loss("adapter tensor {} of type {} has rows of {} elements", t.name, dtype_name(t.type),
                       t.ne[0]);
    }
  }
  std::vector<float> out(static_cast<size_t>(t.ne[0] * t.ne[1]));
  const size_t rb = row_bytes(t.type, t.ne[0]);
  for (int64_t r = 0; r < t.ne[1]; ++r) {
    dequantize_row(t.type, t.data + r * rb, out.data() + r * t.ne[0], t.ne[0]);
  }
  return out;
}

}  // namespace

float LoraAdapter::scale(const LoraMatrix& m) const {
  if (alpha == 0.0f) return 1.0f;
  return rslora ? alpha / std::sqrt(static_cast<float>(m.rank)) : alpha / static_cast<float>(m.rank);
}

const LoraMatrix* LoraAdapter::find(int64_t layer, TensorRole role) const {
  for (const LoraMatrix& m : mats) {
    if (m.layer == layer && m.role == role) return &m;
  }
  return nullptr;
}

LoraMatrix* LoraAdapter::find(int64_t layer, TensorRole role) {
  return const_cast<LoraMatrix*>(static_cast<const LoraAdapter*>(this)->find(layer, role));
}

int64_t LoraAdapter::n_params() const {
  int64_t n = 0;
  for (const LoraMatrix& m : mats) n += static_cast<int64_t>(m.a.size() + m.b.size());
  return n;
}

StatusOr<LoraAdapter> lora_from_gguf(const ModelFile& file) {
  const std::string where = file.source_path.empty() ? std::string("adapter") : file.source_path;
  const auto type = file.metadata.get_string("general.type");
  const auto adapter_type = file.metadata.get_string("adapter.type");
  if (type.value_or("") != "adapter" || adapter_type.value_or("") != "lora") {
    return invalid_argument(
        "{} is not a LoRA adapter (general.type '{}', adapter.type '{}'; expected 'adapter' and 'lora')", where,
        type.value_or(""), adapter_type.value_or(""));
  }
  LoraAdapter ad;
  ad.arch = file.metadata.get_string("general.architecture").value_or("");
  const ArchSpec* spec = find_arch(ad.arch);
  if (spec == nullptr) {
    return unimplemented("{}: adapter for architecture '{}', which sluice does not run (supported: {})", where,
                         ad.arch, supported_arch_names());
  }
  ad.alpha = static_cast<float>(file.metadata.get_float("adapter.lora.alpha").value_or(0.0));
  ad.name = file.metadata.get_string("general.name")
                .value_or(std::filesystem::path(file.source_path).stem().string());

  // Pair every lora_a with its lora_b, in the order the A tensors appear.
  std::map<std::string, const TensorInfo*> b_of;
  for (const TensorInfo& t : file.tensors) {
    if (t.name.ends_with(kGgufSuffixB)) b_of[t.name.substr(0, t.name.size() - kGgufSuffixB.size())] = &t;
  }
  for (const TensorInfo& t : file.tensors) {
    if (t.name.ends_with(kGgufSuffixB)) continue;
    // A training checkpoint keeps the optimizer's moments beside the factors.
    if (t.name.ends_with(".adam_m") || t.name.ends_with(".adam_v")) continue;
    if (!t.name.ends_with(kGgufSuffixA)) {
      return data_loss("{}: tensor '{}' is neither a .lora_a nor a .lora_b", where, t.name);
    }
    const std::string base = t.name.substr(0, t.name.size() - kGgufSuffixA.size());
    auto it = b_of.find(base);
    if (it == b_of.end()) return data_loss("{}: '{}' has no matching '{}.lora_b'", where, t.name, base);
    const TensorInfo& tb = *it->second;
    b_of.erase(it);

    LoraMatrix m;
    m.base_name = base;
    const TensorSpec* ts = spec->find_tensor(base);
    if (ts == nullptr || !ts->per_layer) {
      return invalid_argument("{}: '{}' is not a per-layer matrix of a {} model", where, base, ad.arch);
    }
    if (ts->kind != TensorKind::kMatrix) {
      return unimplemented("{}: '{}' is a {}; adapters on it are not supported (only 2-D layer matrices)", where,
                           base, ts->kind == TensorKind::kExperts ? "stack of experts" : "vector");
    }
    m.layer = split_layer_name(base).first;
    m.role = ts->role;
    ASSIGN_OR_RETURN(m.a, to_f32(t));
    ASSIGN_OR_RETURN(m.b, to_f32(tb));
    m.n_in = t.ne[0];
    m.rank = t.ne[1];
    m.n_out = tb.ne[1];
    if (tb.ne[0] != m.rank) {
      return data_loss("{}: '{}' has rank {} but '{}' has rank {}", where, t.name, m.rank, tb.name, tb.ne[0]);
    }
    if (ad.find(m.layer, m.role) != nullptr) return data_loss("{}: '{}' appears twice", where, base);
    ad.mats.push_back(std::move(m));
  }
  if (!b_of.empty()) {
    return data_loss("{}: '{}.lora_b' has no matching lora_a", where, b_of.begin()->first);
  }
  if (ad.mats.empty()) return data_loss("{}: the adapter has no tensors", where);
  return ad;
}

StatusOr<LoraAdapter> read_lora(const std::string& path, const ModelFile* base) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    if (base == nullptr) {
      return invalid_argument("{}: a PEFT adapter folder names HF modules; reading it needs the base model", path);
    }
    return read_peft_lora(path, *base);
  }
  ASSIGN_OR_RETURN(ModelFile file, read_gguf(path));
  ASSIGN_OR_RETURN(LoraAdapter ad, lora_from_gguf(file));
  return ad;
}

Status check_lora(const LoraAdapter& adapter, const ModelFile& base) {
  const std::string base_arch = base.metadata.get_string("general.architecture").value_or("");
  if (adapter.arch != base_arch) {
    return invalid_argument("adapter '{}' is for a {} model, the base is {}", adapter.name, adapter.arch,
                            base_arch);
  }
  for (const LoraMatrix& m : adapter.mats) {
    const TensorInfo* t = base.find(m.base_name);
    if (t == nullptr) {
      return invalid_argument("adapter '{}' adapts '{}', which the base does not have", adapter.name,
                              m.base_name);
    }
    if (t->ne.size() != 2 || t->ne[0] != m.n_in || t->ne[1] != m.n_out) {
      return invalid_argument(
          "adapter '{}' adapts '{}' as [{}, {}] (n_out, n_in) but the base's is {} in GGUF order "
          "(an adapter made for another base?)",
          adapter.name, m.base_name, m.n_out, m.n_in, t->shape_string());
    }
    if (m.rank <= 0) {
      return invalid_argument("adapter '{}' adapts '{}' with rank {}: a LoRA factor needs a rank of at least 1",
                              adapter.name, m.base_name, m.rank);
    }
    if (m.a.size() != static_cast<size_t>(m.rank * m.n_in) ||
        m.b.size() != static_cast<size_t>(m.n_out * m.rank)) {
      return internal_error("adapter '{}': '{}' holds factors of the wrong size", adapter.name, m.base_name);
    }
  }
  return Status();
}

Status write_lora_gguf(const LoraAdapter& adapter, const std::string& path) {
  GgufWriter w;
  Metadata& md = w.metadata();
  md.set("general.architecture", MetaValue::str(adapter.arch));
  md.set("general.type", MetaValue::str("adapter"));
  md.set("general.name", MetaValue::str(adapter.name));
  md.set("adapter.type", MetaValue::str("lora"));
  float alpha = adapter.alpha;
  if (adapter.rslora && alpha != 0.0f && !adapter.mats.empty()) {
    for (const LoraMatrix& m : adapter.mats) {
      if (m.rank != adapter.mats[0].rank) {
        return unimplemented("adapter '{}' is rank-stabilized with ranks {} and {}: a GGUF adapter has one alpha, "
                             "so its scales cannot be written",
                             adapter.name, adapter.mats[0].rank, m.rank);
      }
    }
    alpha *= std::sqrt(static_cast<float>(adapter.mats[0].rank));  // alpha' / r = alpha / sqrt(r)
  }
  md.set("adapter.lora.alpha", MetaValue::f32(alpha));
  for (const LoraMatrix& m : adapter.mats) {
    RETURN_IF_ERROR(w.add_tensor(m.base_name + std::string(kGgufSuffixA), DType::kF32, {m.n_in, m.rank},
                                 reinterpret_cast<const uint8_t*>(m.a.data())));
    RETURN_IF_ERROR(w.add_tensor(m.base_name + std::string(kGgufSuffixB), DType::kF32, {m.rank, m.n_out},
                                 reinterpret_cast<const uint8_t*>(m.b.data())));
  }
  return w.write(path);
}

}  // namespace sluice
