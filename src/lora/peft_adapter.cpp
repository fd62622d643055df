#include "lora/peft_adapter.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "format/safetensors_header.h"
#include "quant/quant.h"

namespace sluice {
namespace {

using json = nlohmann::json;

constexpr std::string_view kModelPrefix = "base_model.model.";
constexpr std::string_view kLayersPrefix = "model.layers.";
constexpr std::string_view kPeftSuffixA = ".lora_A.weight";
constexpr std::string_view kPeftSuffixB = ".lora_B.weight";


// What adapter_config.json says.
struct PeftConfig {
  int64_t r = 0;
  float alpha = 0.0f;
  bool rslora = false;
  bool rank_pattern = false;         // ranks differ per module
  std::vector<std::string> targets;  // target_modules as a list (empty: a regex or absent)
};

bool is_set(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return false;
  if (it->is_boolean()) return it->get<bool>();
  if (it->is_array() || it->is_object() || it->is_string()) return !it->empty();
  return true;
}

StatusOr<PeftConfig> parse_config(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, read_text_file(path));
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return data_loss("{}: not a JSON object", path);
  PeftConfig c;
  if (const auto t = j.find("peft_type"); t != j.end() && !(t->is_string() && t->get<std::string>() == "LORA")) {
    return unimplemented("{}: peft_type {} is not supported (only LORA)", path, t->dump());
  }
  const auto r = j.find("r");
  if (r == j.end() || !r->is_number_integer()) return data_loss("{}: no integer 'r' (the rank)", path);
  c.r = r->get<int64_t>();
  if (c.r <= 0) return invalid_argument("{}: r = {}; a LoRA adapter needs a rank of at least 1", path, c.r);
  const auto alpha = j.find("lora_alpha");
  if (alpha == j.end() || !alpha->is_number()) return data_loss("{}: no number 'lora_alpha'", path);
  c.alpha = alpha->get<float>();
  for (const char* flag : {"use_rslora", "fan_in_fan_out", "use_dora", "lora_bias"}) {
    const auto it = j.find(flag);
    if (it != j.end() && !it->is_null() && !it->is_boolean()) return data_loss("{}: '{}' is not a boolean", path, flag);
  }
  c.rslora = is_set(j, "use_rslora");
  // fan_in_fan_out: read above, no effect (peft_adapter.h).
  if (const auto b = j.find("bias"); b != j.end() && !b->is_null() && !(b->is_string() && *b == "none")) {
    return unimplemented("{}: bias {} is not supported: only adapters without trained biases (bias \"none\")", path,
                         b->dump());
  }
  if (is_set(j, "modules_to_save")) {
    return unimplemented("{}: modules_to_save {} is not supported: the adapter carries whole trained modules", path,
                         j["modules_to_save"].dump());
  }
  if (is_set(j, "use_dora")) return unimplemented("{}: use_dora (DoRA) is not supported, only plain LoRA", path);
  if (is_set(j, "alpha_pattern")) {
    return unimplemented("{}: alpha_pattern {} (a lora_alpha per module) is not supported", path,
                         j["alpha_pattern"].dump());
  }
  if (is_set(j, "lora_bias")) return unimplemented("{}: lora_bias (a bias on lora_B) is not supported", path);
  if (is_set(j, "layer_replication")) return unimplemented("{}: layer_replication is not supported", path);
  c.rank_pattern = is_set(j, "rank_pattern");
  if (const auto t = j.find("target_modules"); t != j.end() && t->is_array()) {
    for (const json& m : *t) {
      if (!m.is_string()) return data_loss("{}: target_modules holds {}, not a module name", path, m.dump());
      c.targets.push_back(m.get<std::string>());
    }
  }
  return c;
}

// The per-layer matrix spec whose HF name is "<module>.weight", or nullptr.
const TensorSpec* spec_for_module(const ArchSpec& spec, std::string_view module) {
  for (const TensorSpec& t : spec.tensors) {
    if (!t.per_layer || t.kind != TensorKind::kMatrix) continue;
    const std::string_view hf = t.hf;
    if (hf.size() == module.size() + 7 && hf.substr(0, module.size()) == module && hf.ends_with(".weight")) return &t;
  }
  return nullptr;
}

// Whether some per-layer matrix of the architecture is the module `leaf`
// ("q_proj", "w1"): the last component of its HF name.
bool arch_has_leaf(const ArchSpec& spec, std::string_view leaf) {
  for (const TensorSpec& t : spec.tensors) {
    if (!t.per_layer || t.kind == TensorKind::kVector) continue;
    std::string_view hf = t.hf;
    if (!hf.ends_with(".weight")) continue;
    hf.remove_suffix(7);
    const size_t dot = hf.rfind('.');
    if ((dot == std::string_view::npos ? hf : hf.substr(dot + 1)) == leaf) return true;
  }
  return false;
}

// A 2-D safetensors tensor as f32, row-major [shape[0], shape[1]].
StatusOr<std::vector<float>> to_f32(const SafetensorsEntry& e, const uint8_t* file, const std::string& path) {
  std::optional<DType> type;
  if (e.dtype == "F32") type = DType::kF32;
  if (e.dtype == "F16") type = DType::kF16;
  if (e.dtype == "BF16") type = DType::kBF16;
  if (!type) return unimplemented("{}: '{}' has dtype {} (F32, F16 and BF16 are read)", path, e.name, e.dtype);
  if (e.shape.size() != 2) return data_loss("{}: '{}' has {} dimensions; a LoRA factor is 2-D", path, e.name, e.shape.size());
  std::vector<float> out(static_cast<size_t>(e.shape[0] * e.shape[1]));
  dequantize_row(*type, file + e.offset, out.data(), static_cast<int64_t>(out.size()));
  return out;
}

struct Pair {
  const SafetensorsEntry* a = nullptr;
  const SafetensorsEntry* b = nullptr;
  std::string module;
  const TensorSpec* spec = nullptr;
};

}  // namespace

Status unpermute_lora_rows(std::vector<float>& b, int64_t n_rows, int64_t rank, int64_t n_heads) {
  if (n_heads <= 0 || n_rows % (2 * n_heads) != 0) {
    return data_loss("{} rows of lora_B are not a multiple of 2 x {} heads", n_rows, n_heads);
  }
  //   HF   row h*hd + p*(hd/2) + i      p in {0, 1}, i in [0, hd/2)
  //   GGUF row h*hd + 2*i + p
  const int64_t hd = n_rows / n_heads, half = hd / 2;
  std::vector<float> out(b.size());
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t p = 0; p < 2; ++p)
      for (int64_t i = 0; i < half; ++i)
        std::copy_n(b.begin() + (h * hd + p * half + i) * rank, rank, out.begin() + (h * hd + 2 * i + p) * rank);
  b = std::move(out);
  return Status();
}

StatusOr<LoraAdapter> read_peft_lora(const std::string& dir, const ModelFile& base) {
  const std::string arch = base.metadata.get_string("general.architecture").value_or("");
  const ArchSpec* spec = find_arch(arch);
  if (spec == nullptr) return invalid_argument("{}: the base's architecture '{}' is not one sluice runs", dir, arch);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(dir + "/adapter_config.json", ec)) {
    return not_found("{}: no adapter_config.json (a PEFT adapter folder has one)", dir);
  }
  ASSIGN_OR_RETURN(const PeftConfig cfg, parse_config(dir + "/adapter_config.json"));
  for (const std::string& t : cfg.targets) {
    if (!arch_has_leaf(*spec, t)) {
      return invalid_argument("{}: target module '{}' is not a module of a {} model (an adapter for another base?)",
                              dir, t, arch);
    }
  }
  const std::string st_path = dir + "/adapter_model.safetensors";
  if (!std::filesystem::is_regular_file(st_path, ec)) {
    if (std::filesystem::is_regular_file(dir + "/adapter_model.bin", ec)) {
      return unimplemented("{}: adapter_model.bin is a pickle, which sluice does not read; save the adapter as "
                           "adapter_model.safetensors (peft's default)",
                           dir);
    }
    return not_found("{}: no adapter_model.safetensors", dir);
  }
  ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(st_path));
  ASSIGN_OR_RETURN(std::vector<SafetensorsEntry> entries,
                   parse_safetensors_header(file.data(), file.size(), st_path));

  // Pair every lora_A with its lora_B, by (layer, GGUF tensor).
  std::map<std::pair<int64_t, std::string>, Pair> pairs;
  for (const SafetensorsEntry& e : entries) {
    std::string_view name = e.name;
    const bool is_a = name.ends_with(kPeftSuffixA), is_b = name.ends_with(kPeftSuffixB);
    std::string_view rest = name;
    if (rest.substr(0, kModelPrefix.size()) == kModelPrefix) rest.remove_prefix(kModelPrefix.size());
    if (!(is_a || is_b) || rest.substr(0, kLayersPrefix.size()) != kLayersPrefix) {
      return unimplemented("{}: tensor '{}' is not a layer module's lora_A or lora_B (embedding or head adapters, "
                           "DoRA magnitudes and trained biases are not supported)",
                           st_path, e.name);
    }
    rest.remove_prefix(kLayersPrefix.size());
    rest.remove_suffix(kPeftSuffixA.size());
    int64_t layer = 0;
    size_t digits = 0;
    while (digits < rest.size() && digits < 6 && rest[digits] >= '0' && rest[digits] <= '9')
      layer = layer * 10 + (rest[digits++] - '0');
    if (digits == 0 || digits >= rest.size() || rest[digits] != '.') {
      return data_loss("{}: tensor '{}' has no layer index after 'model.layers.'", st_path, e.name);
    }
    const std::string module(rest.substr(digits + 1));
    if (module.find(".experts.") != std::string::npos) {
      return unimplemented("{}: '{}' adapts a routed expert; adapters on routed experts are not supported", st_path,
                           e.name);
    }
    const TensorSpec* ts = spec_for_module(*spec, module);
    if (ts == nullptr) {
      return invalid_argument("{}: '{}' adapts '{}', which is not a matrix of a {} model (an adapter for another "
                              "base?)",
                              st_path, e.name, module, arch);
    }
    const size_t dot = module.rfind('.');
    const std::string leaf = dot == std::string::npos ? module : module.substr(dot + 1);
    if (!cfg.targets.empty() && std::find(cfg.targets.begin(), cfg.targets.end(), leaf) == cfg.targets.end()) {
      return data_loss("{}: '{}' adapts '{}', which target_modules [{}] does not list", st_path, e.name, leaf,
                       fmt::join(cfg.targets, ", "));
    }
    Pair& p = pairs[{layer, ts->gguf}];
    const SafetensorsEntry*& slot = is_a ? p.a : p.b;
    if (slot != nullptr) return data_loss("{}: '{}' appears twice", st_path, e.name);
    slot = &e;
    p.module = module;
    p.spec = ts;
  }
  if (pairs.empty()) return data_loss("{}: the adapter has no lora_A / lora_B tensors", st_path);

  LoraAdapter ad;
  ad.name = std::filesystem::path(dir).filename().string();
  if (ad.name.empty()) ad.name = std::filesystem::path(dir).parent_path().filename().string();
  ad.arch = arch;
  ad.alpha = cfg.alpha;
  ad.rslora = cfg.rslora;
  const int64_t n_head = base.metadata.get_int(arch + ".attention.head_count").value_or(0);
  const int64_t n_head_kv = base.metadata.get_int(arch + ".attention.head_count_kv").value_or(n_head);
  for (const auto& [key, p] : pairs) {
    const std::string where = fmt::format("{}: layer {} {}", st_path, key.first, p.module);
    if (p.a == nullptr || p.b == nullptr) {
      return data_loss("{} has lora_{} but no lora_{}", where, p.a ? "A" : "B", p.a ? "B" : "A");
    }
    if (p.a->shape.size() != 2 || p.b->shape.size() != 2) return data_loss("{}: a factor is not 2-D", where);
    LoraMatrix m;
    m.base_name = gguf_tensor_name(*p.spec, key.first);
    m.layer = key.first;
    m.role = p.spec->role;
    m.rank = p.a->shape[0];
    m.n_in = p.a->shape[1];
    m.n_out = p.b->shape[0];
    if (m.rank == 0 || p.b->shape[1] == 0) return invalid_argument("{} has rank 0", where);
    if (p.b->shape[1] != m.rank) {
      return data_loss("{}: lora_A has rank {} but lora_B has {}", where, m.rank, p.b->shape[1]);
    }
    if (!cfg.rank_pattern && m.rank != cfg.r) {
      return data_loss("{}: the factors have rank {} but adapter_config.json says r = {}", where, m.rank, cfg.r);
    }
    ASSIGN_OR_RETURN(m.a, to_f32(*p.a, file.data(), st_path));
    ASSIGN_OR_RETURN(m.b, to_f32(*p.b, file.data(), st_path));
    if (spec->hf_permute_qk && (m.role == TensorRole::kAttnQ || m.role == TensorRole::kAttnK)) {
      Status st = unpermute_lora_rows(m.b, m.n_out, m.rank, m.role == TensorRole::kAttnQ ? n_head : n_head_kv);
      if (!st.ok()) return data_loss("{}: {}", where, st.message());
    }
    ad.mats.push_back(std::move(m));
  }
  return ad;
}

}  // namespace sluice
