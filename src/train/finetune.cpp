#include "train/finetune.h"

#include <cmath>
#include <algorithm>
#include <filesystem>

#include "base/meminfo.h"
#include "model/model_weights.h"
#include "runtime/load_model.h"
#include "server/chat_template.h"
#include "train/lora_init.h"
#include "train/step_meter.h"
#include "train/train_step.h"

namespace sluice {
namespace {

std::string duration(double s) {
  const auto t = static_cast<int64_t>(std::llround(s));
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, t / 60 % 60);
  if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

StatusOr<std::optional<server::ChatTemplate>> chat_template_for(const LoadedModel& lm, const std::string& path) {
  const Tokenizer& tok = *lm.tokenizer;
  const std::string bos = tok.bos_id() >= 0 ? tok.token_text(tok.bos_id()) : "";
  const std::string eos = tok.eos_id() >= 0 ? tok.token_text(tok.eos_id()) : "";
  if (!path.empty()) {
    ASSIGN_OR_RETURN(server::ChatTemplate t, server::ChatTemplate::from_file(path, bos, eos));
    return std::optional<server::ChatTemplate>(std::move(t));
  }
  const auto source = lm.file->metadata.get_string("tokenizer.chat_template");
  if (!source) return std::optional<server::ChatTemplate>();
  ASSIGN_OR_RETURN(server::ChatTemplate t, server::ChatTemplate::create(*source, bos, eos));
  return std::optional<server::ChatTemplate>(std::move(t));
}

// Whether the step keeps every layer's intermediates (--recompute), and the
// line that says so.
StatusOr<std::pair<bool, std::string>> keep_activations(const FinetuneOptions& o, const Model& model,
                                                        int64_t max_rank) {
  const uint64_t bytes =
      TrainStep::kept_activation_bytes(model.hparams(), o.train.batch * o.train.seq, max_rank);
  const auto b = static_cast<double>(bytes);
  const std::string size = b >= 1e9 ? fmt::format("{:.2f} GB", b / 1e9) : fmt::format("{:.1f} MB", b / 1e6);
  if (o.recompute == "on") {
    return std::pair{false, std::string("activations: recomputed in the backward (--recompute on)")};
  }
  if (o.recompute == "off") {
    return std::pair{true, fmt::format("activations: kept, {} more memory (--recompute off)", size)};
  }
  if (o.recompute != "auto") return invalid_argument("--recompute takes auto, on or off, not '{}'", o.recompute);
  if (!model.backend().host_visible() || o.mem_budget_bytes > 0) {
    return std::pair{false, fmt::format("activations: recomputed in the backward (--recompute auto: {})",
                                        o.mem_budget_bytes > 0 ? "the base streams under --mem-budget"
                                                               : "the backend's memory is not the host's")};
  }
  const uint64_t available = meminfo_bytes("MemAvailable").value_or(0);
  if (bytes > available / 4) {
    return std::pair{false, fmt::format("activations: recomputed in the backward (--recompute auto: keeping them "
                                        "takes {}, over a quarter of the {:.2f} GB available)",
                                        size, static_cast<double>(available) / 1e9)};
  }
  return std::pair{true, fmt::format("activations: kept, {} more memory (--recompute auto; the backward does not "
                                     "rerun the forward)", size)};
}

}  // namespace

StatusOr<FinetuneResult> finetune(const FinetuneOptions& o, const LogFn& log) {
  if (o.out_path.empty()) return invalid_argument("give the adapter to write with -o");
  const TrainerOptions& to = o.train;
  // Under --mem-budget the placement plans for training's order and FLOPs.
  std::optional<plan::TrainWorkload> work;
  if (o.mem_budget_bytes > 0) {
    ASSIGN_OR_RETURN(work, train_workload(to.seq, o.rank, o.targets, o.init_adapter));
    // Under --mem-budget auto recomputes (keep_activations): only off keeps.
    work->keep_activations = o.recompute == "off";
  }
  ASSIGN_OR_RETURN(LoadedModel lm,
                   load_model(o.model_path, {.n_threads = o.n_threads, .n_batch = 1, .max_seqs = 1, .repack = false,
                                             .backend = o.backend, .mem_budget_bytes = o.mem_budget_bytes,
                                             .disk_rate_cap_bytes_per_s = o.disk_rate_cap_bytes_per_s,
                                             .gpu_budget_bytes = o.gpu_budget_bytes,
                                             .tokens_per_step = to.batch * to.seq, .training = work}));
  Model& model = *lm.model;
  if (!lm.placement_report.empty()) log(lm.placement_report);
  if (!model.repack_summary().empty()) log("weights: " + model.repack_summary());
  RETURN_IF_ERROR(check_trainable(model));

  ASSIGN_OR_RETURN(std::optional<server::ChatTemplate> chat, chat_template_for(lm, o.chat_template));
  const TrainDataOptions dopt{.seq = to.seq, .tokenizer = lm.tokenizer.get(), .chat = chat ? &*chat : nullptr};
  ASSIGN_OR_RETURN(TrainData train, load_train_data(o.data_path, dopt));
  TrainData heldout;
  if (!o.val_data_path.empty()) {
    ASSIGN_OR_RETURN(heldout, load_train_data(o.val_data_path, dopt));
  } else {
    ASSIGN_OR_RETURN(heldout, split_heldout(train, o.val_split));
  }
  log(fmt::format("data: {} ({}): {} examples, {} tokens, {} in the loss; held out: {} examples{}{}", o.data_path,
                  train.kind, train.examples.size(), train.n_tokens, train.n_counted, heldout.examples.size(),
                  train.n_truncated ? fmt::format("; {} cut to --seq {}", train.n_truncated, to.seq) : "",
                  train.n_dropped ? fmt::format("; {} dropped (nothing to learn within --seq)", train.n_dropped)
                                  : ""));

  LoraAdapter init;
  if (!o.init_adapter.empty()) {
    ASSIGN_OR_RETURN(init, read_lora(o.init_adapter));
    RETURN_IF_ERROR(check_lora(init, *lm.file));
  } else {
    ASSIGN_OR_RETURN(const std::vector<TensorRole> targets, parse_lora_targets(o.targets));
    ASSIGN_OR_RETURN(init, init_lora(model, {.targets = targets, .rank = o.rank, .alpha = o.alpha,
                                             .seed = to.seed,
                                             .name = std::filesystem::path(o.out_path).stem().string(),
                                             .only_present = o.targets == "all"}));
  }
  ASSIGN_OR_RETURN(LoraParams params, LoraParams::create(model.backend(), init));
  ASSIGN_OR_RETURN(const auto keep, keep_activations(o, model, params.max_rank()));
  log(keep.second);
  TrainerOptions step_opt = to;
  step_opt.keep_activations = keep.first;
  ASSIGN_OR_RETURN(std::unique_ptr<LoraTrainer> trainer, LoraTrainer::create(model, params, train, step_opt));
  const std::string ckpt = o.checkpoint_path.empty() ? o.out_path + ".ckpt" : o.checkpoint_path;
  if (!o.resume.empty()) {
    RETURN_IF_ERROR(trainer->load_checkpoint(o.resume));
    log(fmt::format("resumed from {} at step {}", o.resume, trainer->step()));
  }
  log(fmt::format("training {} LoRA parameters ({} matrices, rank {}, alpha {}) on {} for {} steps of {} x {} "
                  "examples of up to {} tokens",
                  params.n_params(), params.slots().size(), params.max_rank(), init.alpha, model.backend().name(),
                  trainer->n_steps(), to.grad_accum, to.batch, to.seq));

  FinetuneResult res;
  auto eval = [&](const std::string& when) -> StatusOr<double> {
    if (heldout.examples.empty()) return -1.0;
    ASSIGN_OR_RETURN(const double l, trainer->mean_loss(heldout));
    log(fmt::format("held-out loss {}: {:.4f}", when, l));
    return l;
  };
  ASSIGN_OR_RETURN(res.heldout_before, eval(trainer->step() == 0 ? "before training" : "at resume"));
  const int64_t eval_every = o.eval_every > 0 ? o.eval_every : std::max<int64_t>(1, trainer->n_steps() / 10);
  const int64_t first = trainer->step();
  std::vector<double> step_s;
  // A device copies the base in: the layers outside its device tier from
  // host views at each visit, or under --gpu-budget alone its own ring on
  // its schedule.
  const Backend* device = model.backend().host_visible() ? nullptr : &model.backend();
  uint64_t layer_bytes = 0;
  if (device) {
    for (int64_t l = 0; l < model.hparams().n_layer; ++l)
      if (!model.on_device(l)) layer_bytes += layer_matrix_bytes(model.weights().layers[static_cast<size_t>(l)]);
  }
  StepMeter meter(lm.stream.get(), to.grad_accum, device, layer_bytes);
  while (trainer->step() < trainer->n_steps()) {
    meter.begin();
    ASSIGN_OR_RETURN(const TrainReport r, trainer->train_step());
    meter.end(r.seconds);
    if (r.step == first + 1) res.first_loss = r.loss;
    res.last_loss = r.loss;
    res.seconds += r.seconds;
    res.tokens_per_s = r.tokens_per_s;
    res.tokens_per_step = r.tokens;
    step_s.push_back(r.seconds);
    ++res.steps;
    if (o.log_every > 0 && (r.step % o.log_every == 0 || r.step == r.n_steps)) {
      log(fmt::format("step {}/{}  loss {:.4f}  lr {:.2e}  grad norm {:.3f}  {:.0f} tok/s  ETA {}", r.step,
                      r.n_steps, r.loss, r.lr, r.grad_norm, r.tokens_per_s, duration(r.eta_s)));
    }
    if (r.step % eval_every == 0 && r.step < r.n_steps) RETURN_IF_ERROR(eval(fmt::format("at step {}", r.step)).status());
    if (o.checkpoint_every > 0 && r.step % o.checkpoint_every == 0 && r.step < r.n_steps) {
      RETURN_IF_ERROR(trainer->save_checkpoint(ckpt));
      log(fmt::format("checkpoint: {} (step {})", ckpt, r.step));
    }
  }
  if (!step_s.empty()) {
    std::sort(step_s.begin(), step_s.end());
    res.median_step_s = step_s[step_s.size() / 2];
  }
  res.timing = meter.figures();
  if (const std::string report = step_report(res.timing); !report.empty()) log(report);
  ASSIGN_OR_RETURN(res.heldout_after, eval("after training"));
  RETURN_IF_ERROR(write_lora_gguf(params.to_adapter(), o.out_path));
  log(fmt::format("wrote {} ({} steps, {:.1f} s, {:.0f} tok/s)", o.out_path, res.steps, res.seconds,
                  res.tokens_per_s));
  return res;
}

}  // namespace sluice
