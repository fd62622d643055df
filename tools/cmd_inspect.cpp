// sluice tokenize / sluice info: look inside a model without running it.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "default_model.h"
#include "model/hparams.h"
#include "model/model_weights.h"
#include "server/tool_calls.h"
#include "tokenizer/tokenizer.h"

namespace sluice::cli {
namespace {

// What the architecture's table says the decoder does.
std::string arch_summary(const ModelHparams& hp) {
  const ArchSpec& s = *hp.spec;
  std::string out = fmt::format("{}: RMSNorm, RoPE {} pairs, {} FFN", s.name,
                                s.rope == RopeLayout::kNeox ? "NeoX" : "adjacent",
                                s.act == Activation::kSilu ? "SwiGLU" : "GeGLU");
  if (hp.is_moe()) {
    out += fmt::format(", mixture of experts ({} of {}, softmax{})", hp.n_expert_used, hp.n_expert,
                       hp.expert_weights_norm ? ", top-k renormalized" : "");
  }
  if (s.qk_norm) out += ", q/k norm";
  return out;
}

// Required tensors of the spec the file lacks.
std::vector<std::string> missing_tensors(const ModelFile& f, const ModelHparams& hp) {
  std::vector<std::string> out;
  for (const TensorSpec& t : hp.spec->tensors) {
    if (t.optional) continue;
    for (int64_t l = t.per_layer ? 0 : -1; l < (t.per_layer ? hp.n_layer : 0); ++l) {
      if (t.per_layer && !applies_to_layer(t, hp, l)) continue;
      const std::string name = gguf_tensor_name(t, l);
      if (!f.find(name)) out.push_back(name);
    }
  }
  return out;
}

}  // namespace

Runner add_tokenize(CLI::App& app) {
  struct Args {
    std::string model, prompt;
    bool special = false, no_bos = false, pieces = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand("tokenize", "print the token ids of a text as a JSON array");
  add_model_option(c, &a->model, "GGUF file or HF folder");
  c->add_option("-p,--prompt", a->prompt, "text to tokenize")->required();
  c->add_flag("--special", a->special, "parse special-token text in the input");
  c->add_flag("--no-bos", a->no_bos, "do not add BOS/EOS even if the model asks for them");
  c->add_flag("--pieces", a->pieces, "print [[id, \"piece\"], ...] instead of ids");
  return [a] {
    auto tok = load_tokenizer(a->model);
    if (!tok.ok()) return fail(tok.status());
    const std::vector<int32_t> ids = (*tok)->encode(a->prompt, !a->no_bos, a->special);
    nlohmann::json j = nlohmann::json::array();
    for (int32_t id : ids) {
      if (a->pieces) j.push_back({id, (*tok)->token_text(id)});
      else j.push_back(id);
    }
    fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    return 0;
  };
}

Runner add_info(CLI::App& app) {
  struct Args {
    std::string model;
    bool no_tensors = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand("info", "print a model's metadata and tensor table");
  add_model_option(c, &a->model, "GGUF file or HF folder", kDenseModel, "model");
  c->add_flag("--no-tensors", a->no_tensors, "metadata only");
  return [a] {
    auto mf_or = open_model_file(a->model);
    if (!mf_or.ok()) return fail(mf_or.status());
    const ModelFile& mf = *mf_or;
    fmt::print("file: {} ({}{})\n", mf.source_path, mf.format,
               mf.format == "gguf" ? fmt::format(" v{}, alignment {}", mf.gguf_version, mf.alignment) : "");
    fmt::print("metadata: {} keys\n", mf.metadata.size());
    for (const std::string& k : mf.metadata.keys()) {
      const MetaValue* v = mf.metadata.find(k);
      fmt::print("  {:<44} {:<4} {}\n", k, gguf_type_name(v->type), meta_value_summary(*v));
    }
    auto hp = hparams_from_metadata(mf.metadata);
    const ArchSpec* spec = hp.ok() ? hp->spec : nullptr;
    if (hp.ok()) {
      fmt::print("model: {}\n", hparams_summary(*hp));
      fmt::print("architecture: {}\n", arch_summary(*hp));
      const std::vector<std::string> missing = missing_tensors(mf, *hp);
      if (!missing.empty()) {
        fmt::print("missing: {} required tensor(s):", missing.size());
        for (const std::string& m : missing) fmt::print(" {}", m);
        fmt::print("\n");
      }
    } else {
      fmt::print("model: not loadable: {}\n", hp.status().message());
    }
    if (mf.metadata.get_array("tokenizer.ggml.tokens")) {
      auto tok = Tokenizer::from_metadata(mf.metadata);
      fmt::print("tokenizer: {}\n", tok.ok() ? (*tok)->summary() : "not loadable: " + tok.status().message());
    } else {
      fmt::print("tokenizer: none in the file\n");
    }
    if (auto tmpl = mf.metadata.get_string("tokenizer.chat_template")) {
      const server::ToolCallFormat f = server::detect_tool_call_format(*tmpl);
      fmt::print("chat template: tokenizer.chat_template, {} bytes; tool calls: {}\n", tmpl->size(),
                 server::tool_call_format_name(f));
    } else {
      fmt::print("chat template: none in the file (serve needs --chat-template FILE for chat)\n");
    }
    fmt::print("tensors: {} totalling {}\n", mf.tensors.size(), human_bytes(mf.total_tensor_bytes()));
    if (!a->no_tensors) {
      fmt::print("  {:<36} {:<6} {:<22} {:>12} {:>14}  {}\n", "name", "type", "shape", "bytes", "offset", "role");
      for (const TensorInfo& t : mf.tensors) {
        const TensorSpec* role = spec ? spec->find_tensor(t.name) : nullptr;
        fmt::print("  {:<36} {:<6} {:<22} {:>12} {:>14}  {}\n", t.name, dtype_name(t.type), t.shape_string(),
                   t.n_bytes, t.file_offset >= 0 ? std::to_string(t.file_offset) : "(memory)",
                   role ? tensor_role_name(role->role) : (spec ? "(not used)" : ""));
      }
    }
    return 0;
  };
}

}  // namespace sluice::cli
