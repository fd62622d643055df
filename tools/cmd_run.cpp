// sluice run: generate a continuation of a prompt.
#include <chrono>
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "model/generate.h"
#include "sample/sampler.h"
#include "tokenizer/stream_decoder.h"

namespace sluice::cli {
namespace {

struct RunArgs {
  std::string model;
  std::string prompt;
  int32_t n_predict = 128;
  int64_t n_ctx = 0;
  int n_threads = 0;
  bool json = false;
  bool special = false;
  bool ignore_eos = false;
  int64_t seed = -1;
  uint64_t mem_budget = 0;
  SamplingParams sampling;
};

int run(const RunArgs& a) {
  ModelOptions mo{.n_threads = a.n_threads};
  auto lm_or = load_model(a.model, mo, a.mem_budget);
  if (!lm_or.ok()) return fail(lm_or.status());
  LoadedModel& lm = *lm_or;
  const Tokenizer& tok = *lm.tokenizer;
  const ModelHparams& hp = lm.model->hparams();

  std::vector<int32_t> prompt = tok.encode(a.prompt, /*add_special=*/true, a.special);
  if (prompt.empty()) return fail(invalid_argument("the prompt is empty and the model adds no BOS token"));
  if (a.n_predict < 0) return fail(invalid_argument("-n must be >= 0"));
  int64_t n_ctx = a.n_ctx > 0 ? a.n_ctx : static_cast<int64_t>(prompt.size()) + a.n_predict;
  if (a.n_ctx <= 0 && n_ctx > hp.n_ctx_train) n_ctx = hp.n_ctx_train;
  if (static_cast<int64_t>(prompt.size()) >= n_ctx) {
    return fail(invalid_argument("prompt has {} tokens but the context is {} (raise -c)", prompt.size(), n_ctx));
  }
  SamplingParams sp = a.sampling;
  sp.seed = a.seed >= 0 ? static_cast<uint64_t>(a.seed)
                        : static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  if (Status st = validate_sampling_params(sp); !st.ok()) return fail(st);
  Sampler sampler(sp, static_cast<int32_t>(hp.n_vocab));
  KvCache kv = lm.model->make_kv_cache(n_ctx);

  GenerateParams gp{.n_predict = a.n_predict};
  if (!a.ignore_eos) {
    for (int32_t id = 0; id < tok.n_vocab(); ++id)
      if (tok.is_eog(id)) gp.stop_tokens.push_back(id);
  }
  StreamDecoder dec(tok);
  auto on_token = [&](int32_t id) {
    if (!a.json && !tok.is_eog(id)) {
      const std::string piece = dec.push(id);
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  };
  auto res = generate(*lm.model, kv, prompt, sampler, gp, on_token);
  if (!res.ok()) return fail(res.status());
  const GenerateResult& r = *res;
  if (a.json) {
    std::vector<int32_t> text_ids;
    for (int32_t id : r.tokens)
      if (!tok.is_eog(id)) text_ids.push_back(id);
    nlohmann::json j;
    j["tokens"] = r.tokens;
    j["text"] = tok.decode(text_ids);
    j["finish_reason"] = r.finish_reason;
    fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  } else {
    const std::string tail = dec.finish();
    std::fwrite(tail.data(), 1, tail.size(), stdout);
    std::fputc('\n', stdout);
  }
  const double n_gen = static_cast<double>(r.tokens.size());
  fmt::print(stderr,
             "\n[sluice] model {} | load {:.2f} s | threads {} | seed {}\n"
             "[sluice] prompt {} tokens, TTFT {:.1f} ms ({:.1f} tok/s) | generated {} tokens, {:.1f} tok/s | finish: {}\n",
             a.model, lm.load_seconds, lm.model->n_threads(), sp.seed, r.n_prompt, r.prompt_seconds * 1e3,
             r.n_prompt / std::max(r.prompt_seconds, 1e-9), r.tokens.size(),
             n_gen > 1 ? (n_gen - 1) / std::max(r.decode_seconds, 1e-9) : 0.0, r.finish_reason);
  if (lm.stream) fmt::print(stderr, "[sluice] weights: {}\n", lm.stream->store().counters().summary());
  if (!lm.model->repack_summary().empty()) fmt::print(stderr, "[sluice] weights: {}\n", lm.model->repack_summary());
  return 0;
}

}  // namespace

Runner add_run(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  CLI::App* c = app.add_subcommand("run", "generate text from a prompt (continuation to stdout, summary to stderr)");
  c->add_option("-m,--model", a->model, "GGUF file or HF folder")->required();
  c->add_option("-p,--prompt", a->prompt, "prompt text (BOS is added as the model says)");
  c->add_option("-n,--n-predict", a->n_predict, "tokens to generate")->capture_default_str();
  c->add_option("-c,--ctx-size", a->n_ctx, "context size (default: prompt + n, capped at the trained context)");
  c->add_option("-t,--threads", a->n_threads, "threads (default: all cores)");
  c->add_option("--temp", a->sampling.temperature, "temperature; 0 = greedy")->capture_default_str();
  c->add_option("--top-k", a->sampling.top_k, "top-k; 0 = off")->capture_default_str();
  c->add_option("--top-p", a->sampling.top_p, "top-p; 1 = off")->capture_default_str();
  c->add_option("--min-p", a->sampling.min_p, "min-p; 0 = off")->capture_default_str();
  c->add_option("--repeat-penalty", a->sampling.repeat_penalty, "repetition penalty; 1 = off")->capture_default_str();
  c->add_option("--repeat-last-n", a->sampling.repeat_last_n, "penalty window; -1 = all")->capture_default_str();
  c->add_option("--frequency-penalty", a->sampling.frequency_penalty, "OpenAI-style frequency penalty");
  c->add_option("--presence-penalty", a->sampling.presence_penalty, "OpenAI-style presence penalty");
  c->add_option("-s,--seed", a->seed, "RNG seed (default: random, printed in the summary)");
  c->add_flag("--json", a->json, "print one JSON object {\"tokens\": [...], \"text\": ...} instead of streaming");
  c->add_flag("--special", a->special, "parse special-token text (e.g. <|im_start|>) in the prompt");
  c->add_flag("--ignore-eos", a->ignore_eos, "keep generating past end-of-generation tokens");
  add_mem_budget_option(c, &a->mem_budget);
  return [a] { return run(*a); };
}

}  // namespace sluice::cli
