// tokenizer.json (HF tokenizers) -> tokenizer.ggml.* metadata.
//
// Two shapes of BPE model are understood:
//   SentencePiece-style (Llama 2, Mistral): byte_fallback, a normalizer that
//     prepends U+2581 and replaces ' ' with it (or a Metaspace pre-tokenizer).
//     -> model "llama"; scores are derived from merge ranks: the token a merge of
//     rank r produces gets score -r, so "highest score first" replays the merges
//     in rank order.
//   Byte-level (GPT-2, Llama 3, Qwen2): ByteLevel pre-tokenizer, optionally after a
//     Split regex. -> model "gpt2" with the merges and a `pre` named after the regex.
// Every JSON access is type-checked; problems become a Status naming the file.
#include "format/hf_tokenizer.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/mapped_file.h"

namespace sluice {

namespace {

using nlohmann::json;

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581
constexpr uint32_t kNoToken = 0xFFFFFFFFu;               // GGUF writers' "none"

// Split regexes of the known byte-level pre-tokenizers, as written in tokenizer.json.
constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// tokenizer.ggml.token_type values.
constexpr int32_t kTypeNormal = 1, kTypeUnknown = 2, kTypeControl = 3, kTypeUserDefined = 4,
                  kTypeByte = 6;

const json* member(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  const auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

std::string member_string(const json& obj, const char* key) {
  const json* v = member(obj, key);
  return v && v->is_string() ? v->get<std::string>() : std::string();
}

bool member_bool(const json& obj, const char* key, bool fallback) {
  const json* v = member(obj, key);
  return v && v->is_boolean() ? v->get<bool>() : fallback;
}

// A component and, for "Sequence", its children (`list_key` names the child list).
std::vector<const json*> flatten(const json* node, const char* list_key) {
  std::vector<const json*> out;
  if (!node || !node->is_object()) return out;
  const json* list = member(*node, list_key);
  if (member_string(*node, "type") == "Sequence" && list && list->is_array()) {
    for (const json& child : *list) {
      for (const json* c : flatten(&child, list_key)) out.push_back(c);
    }
  } else {
    out.push_back(node);
  }
  return out;
}

bool is_byte_token(std::string_view t) {
  const auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
  return t.size() == 6 && t.substr(0, 3) == "<0x" && hex(t[3]) && hex(t[4]) && t[5] == '>';
}

// True if `t` is exactly one UTF-8 character (judged by its lead byte).
bool is_single_char(std::string_view t) {
  if (t.empty()) return false;
  const auto b = static_cast<uint8_t>(t[0]);
  const size_t len = b < 0xC0 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  return t.size() == len;
}

MetaValue string_array(std::vector<std::string> v) {
  MetaArray a;
  a.elem_type = GgufType::kString;
  a.strings = std::move(v);
  return MetaValue::array(std::move(a));
}

struct HfVocab {
  std::vector<std::string> tokens;  // [n_vocab]
  std::vector<int32_t> types;       // [n_vocab]
  std::unordered_map<std::string, int32_t> ids;
};

class Importer {
 public:
  Importer(std::string dir, Metadata* md)
      : dir_(std::move(dir)), json_path_(dir_ + "/tokenizer.json"), md_(md) {}

  Status run() {
    ASSIGN_OR_RETURN(std::string text, read_text_file(json_path_));
    return run_text(text);
  }

  Status run_text(std::string_view text) {
    root_ = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (root_.is_discarded() || !root_.is_object()) return fail("not a valid JSON object");
    const json* model = member(root_, "model");
    if (!model || !model->is_object()) return fail("\"model\" is missing or not an object");
    model_ = model;
    std::string type = member_string(*model, "type");
    if (type.empty() && member(*model, "merges")) type = "BPE";
    if (type != "BPE") {
      return Status(StatusCode::kUnimplemented,
                    fmt::format("{}: tokenizer model type '{}' is not supported (only BPE)",
                                json_path_, type.empty() ? "(none)" : type));
    }
    RETURN_IF_ERROR(read_vocab());
    ASSIGN_OR_RETURN(merges_, read_merges());

    const std::vector<const json*> pre = flatten(member(root_, "pre_tokenizer"), "pretokenizers");
    const std::vector<const json*> norms = flatten(member(root_, "normalizer"), "normalizers");
    const std::vector<const json*> decoders = flatten(member(root_, "decoder"), "decoders");
    const auto has_type = [](const std::vector<const json*>& v, const char* t) {
      return std::any_of(v.begin(), v.end(), [&](const json* n) { return member_string(*n, "type") == t; });
    };
    for (const char* key : {"tokenizer.ggml.scores", "tokenizer.ggml.merges",
                            "tokenizer.ggml.add_space_prefix"}) {
      md_->erase(key);
    }
    if (has_type(pre, "ByteLevel") || has_type(decoders, "ByteLevel")) {
      RETURN_IF_ERROR(import_byte_level(pre));
    } else if (member_bool(*model, "byte_fallback", false) || has_type(pre, "Metaspace") ||
               has_type(decoders, "Metaspace") || has_spm_normalizer(norms)) {
      import_sentencepiece(pre, norms);
    } else {
      return Status(StatusCode::kUnimplemented,
                    fmt::format("{}: BPE model is neither byte-level nor SentencePiece-style", json_path_));
    }
    md_->set("tokenizer.ggml.tokens", string_array(vocab_.tokens));
    MetaArray types;
    types.elem_type = GgufType::kInt32;
    types.ints.assign(vocab_.types.begin(), vocab_.types.end());
    md_->set("tokenizer.ggml.token_type", MetaValue::array(std::move(types)));
    return import_config();
  }

 private:
  Status fail(const std::string& what) const {
    return data_loss("{}: {}", json_path_, what);
  }

  Status read_vocab() {
    const json* vocab = member(*model_, "vocab");
    if (!vocab || !vocab->is_object()) return fail("model.vocab is missing or not an object");
    const json* added = member(root_, "added_tokens");
    if (added && !added->is_array()) return fail("added_tokens is not an array");
    const size_t max_tokens = vocab->size() + (added ? added->size() : 0);
    std::vector<std::optional<std::string>> slots(max_tokens);
    vocab_.types.assign(max_tokens, kTypeNormal);
    const auto place = [&](const json& id_json, const std::string& text, bool replace) -> Status {
      if (!id_json.is_number_integer() || id_json.get<int64_t>() < 0 ||
          id_json.get<int64_t>() >= static_cast<int64_t>(max_tokens)) {
        return fail(fmt::format("token '{}' has id {} (must be an integer in [0, {}))", text,
                                id_json.dump(), max_tokens));
      }
      auto& slot = slots[id_json.get<size_t>()];
      if (slot && !replace) return fail(fmt::format("two tokens share id {}", id_json.dump()));
      slot = text;
      return Status::ok_status();
    };
    for (const auto& [text, id] : vocab->items()) RETURN_IF_ERROR(place(id, text, false));
    if (added) {
      for (const json& t : *added) {
        const json* id = member(t, "id");
        const json* content = member(t, "content");
        if (!id || !content || !content->is_string()) {
          return fail("an added_tokens entry lacks an integer \"id\" or string \"content\"");
        }
        RETURN_IF_ERROR(place(*id, content->get<std::string>(), true));
        vocab_.types[id->get<size_t>()] =
            member_bool(t, "special", false) ? kTypeControl : kTypeUserDefined;
      }
    }
    size_t n = slots.size();
    while (n > 0 && !slots[n - 1]) --n;
    if (n == 0) return fail("the vocabulary is empty");
    vocab_.tokens.resize(n);
    vocab_.types.resize(n);
    for (size_t i = 0; i < n; ++i) {
      if (!slots[i]) return fail(fmt::format("no token has id {} (ids must be contiguous)", i));
      vocab_.tokens[i] = std::move(*slots[i]);
      vocab_.ids.emplace(vocab_.tokens[i], static_cast<int32_t>(i));
    }
    return Status::ok_status();
  }

  // Merges as (left, right) pairs, from "a b" strings or ["a", "b"] arrays.
  StatusOr<std::vector<std::pair<std::string, std::string>>> read_merges() const {
    std::vector<std::pair<std::string, std::string>> out;
    const json* merges = member(*model_, "merges");
    if (!merges) return out;
    if (!merges->is_array()) return fail("model.merges is not an array");
    out.reserve(merges->size());
    for (size_t i = 0; i < merges->size(); ++i) {
      const json& m = (*merges)[i];
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const size_t space = s.size() > 1 ? s.find(' ', 1) : std::string::npos;
        if (space == std::string::npos || space + 1 >= s.size()) {
          return fail(fmt::format("model.merges[{}] = '{}' is not two pieces separated by a space", i, s));
        }
        out.emplace_back(s.substr(0, space), s.substr(space + 1));
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        out.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      } else {
        return fail(fmt::format("model.merges[{}] is neither \"a b\" nor [\"a\", \"b\"]", i));
      }
    }
    return out;
  }

  static bool has_spm_normalizer(const std::vector<const json*>& norms) {
    for (const json* n : norms) {
      const std::string type = member_string(*n, "type");
      if (type == "Prepend" && member_string(*n, "prepend") == kSpmSpace) return true;
      if (type == "Replace" && member_string(*n, "content") == kSpmSpace) return true;
    }
    return false;
  }

  void import_sentencepiece(const std::vector<const json*>& pre, const std::vector<const json*>& norms) {
    const size_t n = vocab_.tokens.size();
    // Score of a merged token: -(rank of the first merge producing it). Tokens no
    // merge produces are never the result of one in HF; they get the lowest score.
    constexpr float kUnset = std::numeric_limits<float>::infinity();
    std::vector<float> scores(n, kUnset);
    for (size_t r = 0; r < merges_.size(); ++r) {
      const auto it = vocab_.ids.find(merges_[r].first + merges_[r].second);
      if (it != vocab_.ids.end() && scores[it->second] == kUnset) {
        scores[it->second] = -static_cast<float>(r);
      }
    }
    const std::string unk = member_string(*model_, "unk_token");
    for (size_t i = 0; i < n; ++i) {
      const std::string& t = vocab_.tokens[i];
      if (!unk.empty() && t == unk) {
        vocab_.types[i] = kTypeUnknown;  // even when listed as a special added token
      } else if (vocab_.types[i] == kTypeNormal && is_byte_token(t)) {
        vocab_.types[i] = kTypeByte;
      }
      if (scores[i] == kUnset) {
        const bool plain = vocab_.types[i] == kTypeNormal && !is_single_char(t);
        scores[i] = plain ? -1e9f : 0.0f;
      }
    }
    MetaArray sa;
    sa.elem_type = GgufType::kFloat32;
    sa.floats.assign(scores.begin(), scores.end());
    md_->set("tokenizer.ggml.model", MetaValue::str("llama"));
    md_->set("tokenizer.ggml.pre", MetaValue::str("default"));
    md_->set("tokenizer.ggml.scores", MetaValue::array(std::move(sa)));
    bool space_prefix = false;
    for (const json* n : norms) {
      if (member_string(*n, "type") == "Prepend" && member_string(*n, "prepend") == kSpmSpace) {
        space_prefix = true;
      }
    }
    for (const json* p : pre) {
      if (member_string(*p, "type") != "Metaspace") continue;
      const std::string scheme = member_string(*p, "prepend_scheme");
      space_prefix = scheme.empty() ? member_bool(*p, "add_prefix_space", true) : scheme != "never";
    }
    md_->set("tokenizer.ggml.add_space_prefix", MetaValue::boolean(space_prefix));
    spm_ = true;
  }

  // One pre_tokenizer component as split steps ("isolated:<regex>" /
  // "removed:<regex>", see kPreSplitKey), appended to `steps`.
  Status byte_level_steps(const json& p, std::vector<std::string>* steps) const {
    const std::string type = member_string(p, "type");
    const auto behavior_step = [&](const std::string& regex) -> Status {
      const std::string behavior = member_string(p, "behavior");
      if (member_bool(p, "invert", false)) {
        return Status(StatusCode::kUnimplemented,
                      fmt::format("{}: {} pre-tokenizer with invert=true is not supported", json_path_, type));
      }
      if (behavior.empty() || behavior == "Isolated") {
        steps->push_back("isolated:" + regex);
      } else if (behavior == "Removed") {
        steps->push_back("removed:" + regex);
      } else {
        return Status(StatusCode::kUnimplemented,
                      fmt::format("{}: {} pre-tokenizer behavior '{}' is not supported (supported: "
                                  "Isolated, Removed)", json_path_, type, behavior));
      }
      return Status::ok_status();
    };
    if (type == "ByteLevel") {
      if (member_bool(p, "add_prefix_space", false)) {
        return Status(StatusCode::kUnimplemented,
                      fmt::format("{}: ByteLevel add_prefix_space=true is not supported", json_path_));
      }
      if (member_bool(p, "use_regex", true)) steps->push_back("isolated:" + std::string(kGpt2Regex));
      return Status::ok_status();
    }
    if (type == "Split") {
      const json* pattern = member(p, "pattern");
      const json* regex = pattern ? member(*pattern, "Regex") : nullptr;
      const json* literal = pattern ? member(*pattern, "String") : nullptr;
      if (regex && regex->is_string() && !regex->get<std::string>().empty()) {
        return behavior_step(regex->get<std::string>());
      }
      if (literal && literal->is_string() && !literal->get<std::string>().empty()) {
        std::string escaped;
        for (const char c : literal->get<std::string>()) {
          if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) escaped += '\\';
          escaped += c;
        }
        return behavior_step(escaped);
      }
      return Status(StatusCode::kUnimplemented,
                    fmt::format("{}: a Split pre-tokenizer needs a non-empty pattern "
                                "{{\"Regex\": ...}} or {{\"String\": ...}}", json_path_));
    }
    if (type == "Digits") {
      steps->push_back(member_bool(p, "individual_digits", false) ? "isolated:\\p{N}" : "isolated:\\p{N}+");
      return Status::ok_status();
    }
    if (type == "Punctuation") {
      // HF's punctuation: Unicode P categories and every ASCII punctuation character.
      return behavior_step(R"([\p{P}!-/:-@\[-`{-~])");
    }
    return Status(StatusCode::kUnimplemented,
                  fmt::format("{}: pre-tokenizer '{}' is not supported with byte-level BPE (supported: "
                              "Sequence, Split, ByteLevel, Digits, Punctuation)",
                              json_path_, type.empty() ? "(no type)" : type));
  }

  Status import_byte_level(const std::vector<const json*>& pre) {
    std::vector<std::string> steps;
    for (const json* p : pre) RETURN_IF_ERROR(byte_level_steps(*p, &steps));
    // The named pre-tokenizers keep their tokenizer.ggml.pre name (so a GGUF
    // written from this metadata works elsewhere); anything else is kept as steps.
    std::string pre_name;
    if (steps.size() == 1 && steps[0] == "isolated:" + std::string(kGpt2Regex)) {
      pre_name = "gpt-2";
    } else if (steps.size() == 1 && steps[0] == "isolated:" + std::string(kLlama3Regex)) {
      pre_name = "llama-bpe";
    } else if (steps.size() == 1 && steps[0] == "isolated:" + std::string(kQwen2Regex)) {
      pre_name = "qwen2";
    }
    md_->erase(kPreSplitKey);
    md_->erase("tokenizer.ggml.pre");
    if (!pre_name.empty()) {
      md_->set("tokenizer.ggml.pre", MetaValue::str(pre_name));
    } else {
      md_->set(kPreSplitKey, string_array(std::move(steps)));
    }
    md_->erase(kIgnoreMergesKey);
    if (const json* im = member(*model_, "ignore_merges"); im && im->is_boolean()) {
      md_->set(kIgnoreMergesKey, MetaValue::boolean(im->get<bool>()));
    }
    std::vector<std::string> merges;
    merges.reserve(merges_.size());
    for (const auto& [a, b] : merges_) merges.push_back(a + " " + b);
    md_->set("tokenizer.ggml.model", MetaValue::str("gpt2"));
    md_->set("tokenizer.ggml.merges", string_array(std::move(merges)));
    return Status::ok_status();
  }

  // The id of a special-token field: a string, {"content": ...} or null/absent.
  StatusOr<std::optional<int32_t>> config_token(const json& config, const char* key,
                                                const std::string& path) const {
    const json* v = member(config, key);
    if (!v) return std::optional<int32_t>();
    std::string text;
    if (v->is_string()) {
      text = v->get<std::string>();
    } else if (const json* c = member(*v, "content"); c && c->is_string()) {
      text = c->get<std::string>();
    } else {
      return data_loss("{}: {} must be a string or an object with \"content\"", path, key);
    }
    const auto it = vocab_.ids.find(text);
    if (it == vocab_.ids.end()) return data_loss("{}: {} '{}' is not in the vocabulary", path, key, text);
    return std::optional<int32_t>(it->second);
  }

  // What the post-processor adds: the first/last special token of its "single" template.
  void read_post_processor(std::optional<int32_t>* bos, std::optional<int32_t>* eos) const {
    for (const json* p : flatten(member(root_, "post_processor"), "processors")) {
      if (member_string(*p, "type") != "TemplateProcessing") continue;
      const json* single = member(*p, "single");
      if (!single || !single->is_array() || single->empty()) continue;
      const auto special_id = [&](const json& item) -> std::optional<int32_t> {
        const json* st = member(item, "SpecialToken");
        const std::string name = st ? member_string(*st, "id") : std::string();
        const auto it = vocab_.ids.find(name);
        if (name.empty() || it == vocab_.ids.end()) return std::nullopt;
        return it->second;
      };
      *bos = special_id(single->front());
      if (single->size() > 1) *eos = special_id(single->back());
    }
  }

  Status import_config() {
    std::optional<int32_t> pp_bos, pp_eos;
    read_post_processor(&pp_bos, &pp_eos);
    bool add_bos = pp_bos.has_value(), add_eos = pp_eos.has_value();
    std::optional<int32_t> bos = pp_bos, eos = pp_eos, unk, pad;
    if (const auto it = vocab_.ids.find(member_string(*model_, "unk_token")); it != vocab_.ids.end()) {
      unk = it->second;
    }

    const std::string path = dir_ + "/tokenizer_config.json";
    StatusOr<std::string> text = read_text_file(path);
    if (text.ok()) {
      const json config = json::parse(*text, nullptr, /*allow_exceptions=*/false);
      if (config.is_discarded() || !config.is_object()) return data_loss("{}: not a valid JSON object", path);
      add_bos = member_bool(config, "add_bos_token", add_bos);
      add_eos = member_bool(config, "add_eos_token", add_eos);
      const auto pick = [&](const char* key, std::optional<int32_t>* dst) -> Status {
        ASSIGN_OR_RETURN(std::optional<int32_t> id, config_token(config, key, path));
        if (id) *dst = id;
        return Status::ok_status();
      };
      RETURN_IF_ERROR(pick("bos_token", &bos));
      RETURN_IF_ERROR(pick("eos_token", &eos));
      RETURN_IF_ERROR(pick("unk_token", &unk));
      RETURN_IF_ERROR(pick("pad_token", &pad));
      if (const json* tmpl = member(config, "chat_template")) {
        ASSIGN_OR_RETURN(std::string chat, chat_template(*tmpl, path));
        md_->set("tokenizer.chat_template", MetaValue::str(std::move(chat)));
      }
    } else if (text.status().code() != StatusCode::kNotFound) {
      return text.status();
    }

    const auto set_id = [&](const char* key, const std::optional<int32_t>& id) {
      if (id) {
        md_->set(key, MetaValue::u32(static_cast<uint32_t>(*id)));
      } else if (spm_) {
        md_->set(key, MetaValue::u32(kNoToken));  // overrides the SentencePiece defaults
      } else {
        md_->erase(key);
      }
    };
    set_id("tokenizer.ggml.bos_token_id", bos);
    set_id("tokenizer.ggml.eos_token_id", eos);
    set_id("tokenizer.ggml.unknown_token_id", unk);
    set_id("tokenizer.ggml.padding_token_id", pad);
    md_->set("tokenizer.ggml.add_bos_token", MetaValue::boolean(add_bos && bos.has_value()));
    md_->set("tokenizer.ggml.add_eos_token", MetaValue::boolean(add_eos && eos.has_value()));
    return Status::ok_status();
  }

  // chat_template: a string, or a list of {"name", "template"} (the "default" one wins).
  static StatusOr<std::string> chat_template(const json& tmpl, const std::string& path) {
    if (tmpl.is_string()) return tmpl.get<std::string>();
    if (tmpl.is_array()) {
      std::optional<std::string> first;
      for (const json& t : tmpl) {
        const json* body = member(t, "template");
        if (!body || !body->is_string()) continue;
        if (member_string(t, "name") == "default") return body->get<std::string>();
        if (!first) first = body->get<std::string>();
      }
      if (first) return *first;
    }
    return data_loss("{}: chat_template must be a string or a list of {{name, template}}", path);
  }

  std::string dir_;
  std::string json_path_;
  Metadata* md_;
  json root_;
  const json* model_ = nullptr;
  HfVocab vocab_;
  std::vector<std::pair<std::string, std::string>> merges_;
  bool spm_ = false;
};

}  // namespace

Status import_hf_tokenizer(const std::string& dir, Metadata* md) {
  // Every access above is type-checked; this only guards against a JSON library
  // exception (e.g. allocation failure) escaping the module.
  try {
    return Importer(dir, md).run();
  } catch (const std::exception& e) {
    return data_loss("{}/tokenizer.json: {}", dir, e.what());
  }
}

Status import_hf_tokenizer_json(std::string_view text, const std::string& dir, Metadata* md) {
  try {
    return Importer(dir, md).run_text(text);
  } catch (const std::exception& e) {
    return data_loss("{}/tokenizer.json: {}", dir, e.what());
  }
}

}  // namespace sluice
