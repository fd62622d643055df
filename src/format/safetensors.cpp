#include "format/safetensors.h"

#include <sys/stat.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "format/hf_config.h"
#include "format/safetensors_header.h"
#include "quant/quant.h"

namespace sluice {
namespace {

// Where an HF tensor goes in GGUF terms: the tensor name, and for one expert's
// matrix the index of the expert it is within the stacked tensor.
struct GgufTarget {
  std::string name;     // "" for tensors that carry no weights (inv_freq buffers)
  int64_t expert = -1;  // >= 0: this expert's slice of a stacked [n_in, n_out, n_expert] tensor
  const TensorSpec* spec = nullptr;  // the table row (nullptr with no name)
};

// Matches `suffix` against a table name that may hold "{e}" (an expert index).
std::optional<int64_t> match_hf(std::string_view pattern, std::string_view suffix) {
  const size_t at = pattern.find("{e}");
  if (at == std::string_view::npos) return suffix == pattern ? std::optional<int64_t>(-1) : std::nullopt;
  const std::string_view pre = pattern.substr(0, at), post = pattern.substr(at + 3);
  if (suffix.size() <= pre.size() + post.size() || suffix.substr(0, pre.size()) != pre ||
      suffix.substr(suffix.size() - post.size()) != post) {
    return std::nullopt;
  }
  const std::string_view digits = suffix.substr(pre.size(), suffix.size() - pre.size() - post.size());
  if (digits.empty() || digits.size() > 6 || (digits.size() > 1 && digits[0] == '0')) return std::nullopt;
  int64_t e = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    e = e * 10 + (c - '0');
  }
  return e;
}

// The GGUF target of an HF tensor by the architecture's table (global names as
// they are, "model.layers.N.<hf>" -> "blk.N.<gguf>"); nullopt for names with
// no mapping.
std::optional<GgufTarget> gguf_target(const ArchSpec& spec, const std::string& hf) {
  for (const TensorSpec& t : spec.tensors)
    if (!t.per_layer && *t.hf && hf == t.hf) return GgufTarget{.name = t.gguf, .spec = &t};
  const std::string prefix = "model.layers.";
  if (hf.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  size_t pos = prefix.size();
  size_t digits = 0;
  while (pos + digits < hf.size() && hf[pos + digits] >= '0' && hf[pos + digits] <= '9') ++digits;
  if (digits == 0 || digits > 6 || pos + digits >= hf.size() || hf[pos + digits] != '.') {
    return std::nullopt;
  }
  const std::string layer = hf.substr(pos, digits);
  if (layer.size() > 1 && layer[0] == '0') return std::nullopt;
  const std::string suffix = hf.substr(pos + digits + 1);
  if (suffix == "self_attn.rotary_emb.inv_freq") return GgufTarget{};
  for (const TensorSpec& t : spec.tensors) {
    if (!t.per_layer || !*t.hf) continue;
    if (const std::optional<int64_t> e = match_hf(t.hf, suffix))
      return GgufTarget{.name = "blk." + layer + "." + t.gguf, .expert = *e, .spec = &t};
  }
  return std::nullopt;
}

bool is_norm_role(TensorRole r) {
  switch (r) {
    case TensorRole::kAttnNorm:
    case TensorRole::kFfnNorm:
    case TensorRole::kOutputNorm:
    case TensorRole::kAttnQNorm:
    case TensorRole::kAttnKNorm:
    case TensorRole::kAttnPostNorm:
    case TensorRole::kFfnPostNorm:
      return true;
    default:
      return false;
  }
}

// One expert's matrix, waiting to be stacked.
struct ExpertPiece {
  const uint8_t* data = nullptr;
  DType type = DType::kF32;
  std::vector<int64_t> ne;
  uint64_t n_bytes = 0;
};

// Stacks each expert tensor's pieces (experts 0 .. E-1, equal shapes and
// types) into one tensor [n_in, n_out, E] owned by the ModelFile.
Status stack_experts(std::map<std::string, std::map<int64_t, ExpertPiece>>& pieces, const std::string& dir,
                     ModelFile* mf) {
  for (auto& [name, experts] : pieces) {
    const auto n_expert = static_cast<int64_t>(experts.size());
    const ExpertPiece& first = experts.begin()->second;
    if (experts.rbegin()->first != n_expert - 1) {
      return data_loss("{}: {} has experts up to {} but only {} of them", dir, name, experts.rbegin()->first, n_expert);
    }
    std::vector<uint8_t> bytes;
    bytes.reserve(first.n_bytes * static_cast<uint64_t>(n_expert));
    for (const auto& [e, p] : experts) {
      if (p.ne != first.ne || p.type != first.type || p.ne.size() != 2) {
        return data_loss("{}: expert {} of {} differs in shape or type from expert 0", dir, e, name);
      }
      bytes.insert(bytes.end(), p.data, p.data + p.n_bytes);
    }
    TensorInfo t{.name = name, .type = first.type, .ne = {first.ne[0], first.ne[1], n_expert},
                 .n_bytes = bytes.size()};
    t.data = mf->own(std::move(bytes));
    t.file_offset = -1;
    mf->tensors.push_back(std::move(t));
  }
  return Status::ok_status();
}

// Sort key putting tensors in the order GGUF converters write them: the
// global tensors, then layer by layer, each in table order.
std::pair<int64_t, int> gguf_order(const ArchSpec& spec, const std::string& name) {
  const auto [layer, suffix] = split_layer_name(name);
  for (size_t i = 0; i < spec.tensors.size(); ++i)
    if (spec.tensors[i].per_layer == (layer >= 0) && suffix == spec.tensors[i].gguf) return {layer, static_cast<int>(i)};
  return {layer, 999};
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::optional<DType> dtype_from_safetensors(const std::string& dtype) {
  if (dtype == "F32") return DType::kF32;
  if (dtype == "F16") return DType::kF16;
  if (dtype == "BF16") return DType::kBF16;
  return std::nullopt;
}

// Undoes HF's rotate_half row permutation of a q or k projection (weight
// [n_rows, row_bytes] or bias [n_rows]). Per head of head_dim rows, HF stores the
// even (real) rows first, then the odd (imaginary) ones; GGUF llama interleaves:
//
//   HF   row h*hd + p*(hd/2) + i      p in {0, 1}, i in [0, hd/2)
//   GGUF row h*hd + 2*i + p
std::vector<uint8_t> unpermute_rows(const uint8_t* src, uint64_t n_rows, uint64_t row_bytes,
                                    uint64_t n_heads) {
  std::vector<uint8_t> dst(n_rows * row_bytes);
  const uint64_t head_dim = n_rows / n_heads;
  const uint64_t half = head_dim / 2;
  for (uint64_t h = 0; h < n_heads; ++h) {
    for (uint64_t p = 0; p < 2; ++p) {
      for (uint64_t i = 0; i < half; ++i) {
        const uint64_t from = h * head_dim + p * half + i;
        const uint64_t to = h * head_dim + 2 * i + p;
        std::memcpy(dst.data() + to * row_bytes, src + from * row_bytes, row_bytes);
      }
    }
  }
  return dst;
}

std::string base_name(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const size_t slash = dir.rfind('/');
  return slash == std::string::npos ? dir : dir.substr(slash + 1);
}

// Lists the shard files (relative names) and, for sharded checkpoints, which
// shard each tensor must be in.
Status list_shards(const std::string& dir, std::vector<std::string>* shards,
                   std::map<std::string, std::string>* weight_map) {
  const std::string index_path = dir + "/model.safetensors.index.json";
  if (!file_exists(index_path)) {
    if (!file_exists(dir + "/model.safetensors")) {
      return not_found("{}: no model.safetensors or model.safetensors.index.json", dir);
    }
    shards->push_back("model.safetensors");
    return Status::ok_status();
  }
  ASSIGN_OR_RETURN(const std::string text, read_text_file(index_path));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return data_loss("{}: not a JSON object", index_path);
  const auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object()) return data_loss("{}: no 'weight_map' object", index_path);
  std::set<std::string> seen;
  for (const auto& [tensor, file] : wm->items()) {
    if (!file.is_string()) {
      return data_loss("{}: weight_map entry '{}' is not a file name", index_path, tensor);
    }
    const std::string f = file.get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..") {
      return data_loss("{}: weight_map entry '{}' names an invalid file '{}'", index_path, tensor,
                       f);
    }
    (*weight_map)[tensor] = f;
    if (seen.insert(f).second) shards->push_back(f);
  }
  if (shards->empty()) return data_loss("{}: weight_map is empty", index_path);
  std::sort(shards->begin(), shards->end());
  return Status::ok_status();
}

}  // namespace

StatusOr<ModelFile> read_hf_model(const std::string& dir) {
  const std::string config_path = dir + "/config.json";
  if (!file_exists(config_path)) return not_found("{}: no config.json", dir);
  ASSIGN_OR_RETURN(const std::string config_text, read_text_file(config_path));
  ASSIGN_OR_RETURN(HfConfig cfg, parse_hf_config(config_text, config_path, base_name(dir)));

  std::vector<std::string> shards;
  std::map<std::string, std::string> weight_map;
  RETURN_IF_ERROR(list_shards(dir, &shards, &weight_map));

  ModelFile mf;
  mf.source_path = dir;
  mf.format = "safetensors";
  mf.metadata = std::move(cfg.metadata);
  std::set<std::string> hf_seen;
  std::map<std::string, std::map<int64_t, ExpertPiece>> experts;  // stacked tensor -> expert -> piece
  for (const std::string& shard : shards) {
    const std::string path = dir + "/" + shard;
    ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::open(path));
    auto mapping = std::make_shared<MappedFile>(std::move(mapped));
    ASSIGN_OR_RETURN(std::vector<SafetensorsEntry> entries,
                     parse_safetensors_header(mapping->data(), mapping->size(), path));
    for (const SafetensorsEntry& e : entries) {
      if (!weight_map.empty()) {
        const auto it = weight_map.find(e.name);
        if (it == weight_map.end() || it->second != shard) continue;  // index is authoritative
      }
      if (!hf_seen.insert(e.name).second) {
        return data_loss("{}: tensor '{}' appears in more than one shard", path, e.name);
      }
      const std::optional<GgufTarget> target = gguf_target(*cfg.spec, e.name);
      if (!target) return unimplemented("{}: tensor '{}' has no GGUF equivalent", path, e.name);
      const std::string* name = &target->name;
      if (name->empty()) continue;
      const TensorRole role = target->spec->role;
      if (cfg.tie_word_embeddings && role == TensorRole::kOutput) continue;
      const std::optional<DType> type = dtype_from_safetensors(e.dtype);
      if (!type) {
        return unimplemented("{}: tensor '{}' has dtype {}, which is not supported (F32, F16, "
                             "BF16 are)",
                             path, e.name, e.dtype);
      }
      if (e.shape.empty() || e.shape.size() > 4) {
        return unimplemented("{}: tensor '{}' has {} dimensions (1..4 supported)", path, e.name,
                             e.shape.size());
      }
      TensorInfo t;
      t.name = *name;
      t.type = *type;
      t.ne.assign(e.shape.rbegin(), e.shape.rend());
      t.n_bytes = e.n_bytes;
      t.data = mapping->data() + e.offset;
      t.file_offset = shards.size() == 1 ? static_cast<int64_t>(e.offset) : -1;

      if (cfg.spec->hf_norm_plus_one) {
        // Gemma checkpoints hold w of a (1 + w) RMSNorm scale; GGUF holds 1 + w.
        if (is_norm_role(role)) {
          if (t.ne.size() != 1) return data_loss("{}: norm '{}' is not a vector", path, e.name);
          std::vector<uint8_t> bytes(static_cast<size_t>(t.ne[0]) * sizeof(float));
          auto* f = reinterpret_cast<float*>(bytes.data());
          dequantize_row(t.type, t.data, f, t.ne[0]);
          for (int64_t i = 0; i < t.ne[0]; ++i) f[i] += 1.0f;
          t.data = mf.own(std::move(bytes));
          t.type = DType::kF32;
          t.n_bytes = static_cast<uint64_t>(t.ne[0]) * sizeof(float);
          t.file_offset = -1;
        }
      }
      const bool is_q = role == TensorRole::kAttnQ || role == TensorRole::kAttnQBias;
      const bool is_k = role == TensorRole::kAttnK || role == TensorRole::kAttnKBias;
      if (cfg.permute_qk && (is_q || is_k)) {
        const uint64_t n_heads = static_cast<uint64_t>(is_q ? cfg.n_head : cfg.n_head_kv);
        const uint64_t n_rows = static_cast<uint64_t>(e.shape[0]);
        if (n_rows % (2 * n_heads) != 0 || n_rows == 0) {
          return data_loss("{}: tensor '{}' has {} rows, not a multiple of 2 x {} heads", path,
                           e.name, n_rows, n_heads);
        }
        t.data = mf.own(unpermute_rows(t.data, n_rows, e.n_bytes / n_rows, n_heads));
        t.file_offset = -1;
      }
      if (target->expert >= 0) {
        ExpertPiece& piece = experts[t.name][target->expert];
        if (piece.data) return data_loss("{}: expert {} of {} appears twice", path, target->expert, t.name);
        piece = ExpertPiece{.data = t.data, .type = t.type, .ne = t.ne, .n_bytes = t.n_bytes};
        continue;
      }
      mf.tensors.push_back(std::move(t));
    }
    mf.hold(std::move(mapping));
  }
  // Per-expert matrices become the stacked tensors GGUF files hold (copied).
  RETURN_IF_ERROR(stack_experts(experts, dir, &mf));
  for (const auto& [tensor, file] : weight_map) {
    if (!hf_seen.count(tensor)) {
      return data_loss("{}: tensor '{}' listed in the index is missing from {}", dir, tensor, file);
    }
  }
  if (!mf.find(TensorRole::kTokenEmbd)) return data_loss("{}: no model.embed_tokens.weight", dir);
  if (!cfg.tie_word_embeddings && !mf.find(TensorRole::kOutput)) {
    return data_loss("{}: tie_word_embeddings is false but there is no lm_head.weight", dir);
  }
  // LongRoPE factors live in config.json; GGUF files carry them as tensors.
  for (const auto& [name, factors] : {std::pair{"rope_factors_long.weight", &cfg.rope_factors_long},
                                      std::pair{"rope_factors_short.weight", &cfg.rope_factors_short}}) {
    if (factors->empty()) continue;
    std::vector<uint8_t> bytes(factors->size() * sizeof(float));
    std::memcpy(bytes.data(), factors->data(), bytes.size());
    mf.tensors.push_back(TensorInfo{.name = name, .type = DType::kF32, .ne = {static_cast<int64_t>(factors->size())},
                                    .n_bytes = bytes.size(), .data = mf.own(std::move(bytes))});
  }
  std::stable_sort(mf.tensors.begin(), mf.tensors.end(),
                   [&](const TensorInfo& a, const TensorInfo& b) {
                     return gguf_order(*cfg.spec, a.name) < gguf_order(*cfg.spec, b.name);
                   });
  return mf;
}

}  // namespace sluice
