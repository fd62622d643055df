#include "cli.h"

#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "backend/backend_registry.h"
#include "base/timer.h"

namespace sluice::cli {

int fail(const Status& status) {
  fmt::print(stderr, "error: {}\n", status.message());
  return 1;
}

StatusOr<LoadedModel> load_model_verbose(const std::string& path, const LoadOptions& options, bool quiet,
                                         dist::Session* parallel) {
  ASSIGN_OR_RETURN(LoadedModel lm, parallel ? dist::load_pipelined(path, options, *parallel) : load_model(path, options));
  // A pipeline's map is printed even when quiet (--json): it says where every layer went.
  if ((!quiet || parallel) && !lm.placement_report.empty()) fmt::print(stderr, "{}", lm.placement_report);
  return lm;
}

StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& path) {
  ASSIGN_OR_RETURN(ModelFile mf, open_model_file(path));
  return Tokenizer::from_metadata(mf.metadata);
}

void add_backend_option(CLI::App* c, std::string* name) {
  std::vector<std::string> names;
  for (const RegisteredBackend& b : registered_backends()) names.push_back(b.name);
  c->add_option("--backend", *name, fmt::format("backend the model runs on: {} (see Backends below)", backend_names()))
      ->check(CLI::IsMember(names))
      ->capture_default_str();
  // Asked only when help is printed: whether a GPU is there is probed then.
  c->footer([] {
    std::string s = "Backends (--backend):\n" + describe_backends();
    s.pop_back();  // the formatter ends the footer's line
    return s;
  });
}

namespace {

// An option taking a size in bytes (600M, 2G, ...; weights::parse_byte_size).
void add_byte_size_option(CLI::App* c, const std::string& name, uint64_t* bytes, const std::string& help) {
  c->add_option_function<std::string>(
      name,
      [name, bytes](const std::string& v) {
        auto n = weights::parse_byte_size(v);
        if (!n.ok()) throw CLI::ValidationError(name, n.status().message());
        *bytes = *n;
      },
      help);
}

}  // namespace

void add_mem_budget_option(CLI::App* c, uint64_t* bytes) {
  add_byte_size_option(c, "--mem-budget", bytes,
                       "memory for weights (e.g. 600M, 2G): layers beyond it stream from disk through the weight store");
}

void add_gpu_budget_option(CLI::App* c, uint64_t* bytes) {
  add_byte_size_option(c, "--gpu-budget", bytes,
                       "GPU memory for weights with --backend cuda (e.g. 6G; serve and bench-serve keep their KV pool "
                       "out of it first): the layers beyond it stay in pinned host memory and are copied to the GPU "
                       "ahead of use, each step");
}

void add_lora_option(CLI::App* c, std::vector<LoraSpec>* loras, const std::string& several) {
  c->add_option_function<std::vector<std::string>>(
       "--lora",
       [loras](const std::vector<std::string>& values) {
         for (const std::string& v : values) {
           // FILE[:SCALE]: a suffix after the last ':' that reads as a number is the scale.
           LoraSpec l{.path = v};
           const size_t colon = v.rfind(':');
           if (colon != std::string::npos && colon > 0) {
             const std::string tail = v.substr(colon + 1);
             char* end = nullptr;
             const float scale = std::strtof(tail.c_str(), &end);
             if (!tail.empty() && end == tail.c_str() + tail.size()) {
               if (!std::isfinite(scale)) throw CLI::ValidationError("--lora", "scale '" + tail + "' is not finite");
               l = LoraSpec{.path = v.substr(0, colon), .scale = scale};
             }
           }
           loras->push_back(std::move(l));
         }
       },
       "LoRA adapter FILE[:SCALE] (llama.cpp adapter GGUF or PEFT folder; SCALE default 1), repeatable; " +
           several)
      ->type_name("FILE[:SCALE]");
}

void add_speculative_options(CLI::App* c, EngineConfig* config) {
  c->add_option("--spec", config->speculative, "speculative decoding: off, lookup (n-gram prompt lookup), draft")
      ->check(CLI::IsMember({"off", "lookup", "draft"}))
      ->capture_default_str();
  c->add_option("--draft-model", config->draft_model_path,
                "draft model with the target's vocabulary (implies --spec draft), kept resident");
  c->add_option("--draft-max", config->spec_max_draft, "longest draft per sequence and step (1..16)")
      ->capture_default_str();
  c->add_flag("--no-spec-adapt", [config](int64_t) { config->spec_adaptive = false; },
              "always draft --draft-max tokens (default: adapt the length to each sequence's acceptance)");
  c->add_option("--spec-ngram", config->spec_ngram_max, "prompt lookup: longest n-gram matched")->capture_default_str();
}

void finish_speculative_options(EngineConfig* config) {
  if (!config->draft_model_path.empty() && config->speculative == "off") config->speculative = "draft";
}

std::string speculative_line(const EngineStats& s) {
  if (s.spec_passes == 0) return "";
  return fmt::format("speculative: {} drafted, {} accepted ({:.1f}%), {:.2f} tokens per target pass over {} passes",
                     s.spec_drafted, s.spec_accepted, 100.0 * s.spec_acceptance_rate(), s.spec_tokens_per_pass(),
                     s.spec_passes);
}

std::string human_bytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", n) : fmt::format("{:.2f} {}", v, units[u]);
}

}  // namespace sluice::cli
