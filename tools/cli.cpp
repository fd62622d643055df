#include "cli.h"

#include <fmt/format.h>

#include "base/timer.h"

namespace sluice::cli {

int fail(const Status& status) {
  fmt::print(stderr, "error: {}\n", status.message());
  return 1;
}

StatusOr<LoadedModel> load_model(const std::string& path, ModelOptions options, uint64_t mem_budget,
                                 int64_t tokens_per_step) {
  Stopwatch sw;
  LoadedModel lm;
  ASSIGN_OR_RETURN(ModelFile mf, open_model_file(path));
  lm.file = std::make_shared<const ModelFile>(std::move(mf));
  ASSIGN_OR_RETURN(lm.tokenizer, Tokenizer::from_metadata(lm.file->metadata));
  if (mem_budget > 0) {
    ASSIGN_OR_RETURN(weights::StreamingSetup setup,
                     weights::open_streaming(lm.file, {.mem_budget_bytes = mem_budget, .n_threads = options.n_threads,
                                                       .tokens_per_step = tokens_per_step}));
    fmt::print(stderr, "{}", setup.report);
    lm.stream = setup.source;
    options.weights = setup.source;
  }
  ASSIGN_OR_RETURN(lm.model, LlamaModel::load(lm.file, options));
  lm.load_seconds = sw.seconds();
  return lm;
}

StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& path) {
  ASSIGN_OR_RETURN(ModelFile mf, open_model_file(path));
  return Tokenizer::from_metadata(mf.metadata);
}

void add_mem_budget_option(CLI::App* c, uint64_t* bytes) {
  c->add_option_function<std::string>(
       "--mem-budget",
       [bytes](const std::string& v) {
         auto n = weights::parse_byte_size(v);
         if (!n.ok()) throw CLI::ValidationError("--mem-budget", n.status().message());
         *bytes = *n;
       },
       "memory for weights (e.g. 600M, 2G): layers beyond it stream from disk through the weight store");
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
