#include "cli.h"

#include <fmt/format.h>

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

}  // namespace sluice::cli
