// sluice finetune: train a LoRA adapter over a frozen (quantized) base.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "model_flags.h"
#include "train/finetune.h"

namespace sluice::cli {

Runner add_finetune(CLI::App& app) {
  auto o = std::make_shared<FinetuneOptions>();
  auto m = std::make_shared<ModelFlags>();
  auto json = std::make_shared<bool>(false);
  CLI::App* c = app.add_subcommand("finetune", "train a LoRA adapter over the frozen base model");
  m->add_to(c, {.model = "base model (GGUF, HF folder)", .fallback = std::nullopt,
                .threads = "threads (default: one per core)", .lora = std::nullopt, .parallel = false});
  c->add_option("-d,--data", o->data_path,
                "training data: plain text, or JSONL lines of {\"messages\": [...]} (chat; only the assistant's "
                "tokens count) or {\"text\": ...}")
      ->required();
  c->add_option("-o,--output", o->out_path, "the adapter to write (llama.cpp's LoRA GGUF)")->required();
  c->add_option("--rank", o->rank, "LoRA rank")->capture_default_str();
  c->add_option("--alpha", o->alpha, "LoRA alpha (the update is scaled by alpha / rank)")->capture_default_str();
  c->add_option("--targets", o->targets,
                "matrices to adapt: q,k,v,o,gate,up,down, or all (those the base has: a routed model's attention)")
      ->capture_default_str();
  c->add_option("--init-adapter", o->init_adapter, "start from this adapter's factors (its rank and targets)");
  c->add_option("--steps", o->train.steps, "optimizer steps (0: --epochs over the data)")->capture_default_str();
  c->add_option("--epochs", o->train.epochs, "passes over the data when --steps is 0")->capture_default_str();
  c->add_option("--batch", o->train.batch, "examples per micro-batch")->capture_default_str();
  c->add_option("--grad-accum", o->train.grad_accum, "micro-batches per optimizer step")->capture_default_str();
  c->add_option("--seq", o->train.seq, "longest example in tokens (text is cut into windows of this)")
      ->capture_default_str();
  c->add_option("--lr", o->train.lr, "peak learning rate (AdamW)")->capture_default_str();
  c->add_option("--warmup", o->train.warmup, "steps of linear warmup, then cosine decay")->capture_default_str();
  c->add_option("--min-lr-ratio", o->train.min_lr_ratio, "the cosine ends at lr times this")->capture_default_str();
  c->add_option("--weight-decay", o->train.weight_decay, "AdamW's decoupled weight decay")->capture_default_str();
  c->add_option("--grad-clip", o->train.grad_clip, "clip the gradient's global norm to this (0: off)")
      ->capture_default_str();
  c->add_option("--seed", o->train.seed, "seed of the adapter's init and the data order")->capture_default_str();
  c->add_option("--val-data", o->val_data_path, "held-out data (default: --val-split of the training data)");
  c->add_option("--val-split", o->val_split, "fraction of the examples held out when --val-data is not given")
      ->capture_default_str();
  c->add_option("--eval-every", o->eval_every, "steps between held-out losses (0: ten times a run)")
      ->capture_default_str();
  c->add_option("--log-every", o->log_every, "steps between progress lines")->capture_default_str();
  c->add_option("--checkpoint-every", o->checkpoint_every, "steps between checkpoints (0: none)")
      ->capture_default_str();
  c->add_option("--checkpoint", o->checkpoint_path, "checkpoint file (default: OUTPUT.ckpt)");
  c->add_option("--resume", o->resume, "continue from this checkpoint (same data and settings)");
  c->add_option("--recompute", o->recompute,
                "rerun each layer's forward in the backward (on: least memory), keep every layer's "
                "activations (off: a third fewer matrix products), or auto (off when the base is resident in host "
                "memory and they take under a quarter of the available memory)")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  c->add_option("--chat-template", o->chat_template, "Jinja chat template for chat data (default: the model's)");
  c->add_flag("--json", *json, "print a summary object to stdout at the end");
  return [o, m, json] {
    o->model_path = m->model;
    o->n_threads = m->n_threads;
    o->backend = m->backend;
    o->mem_budget_bytes = m->mem_budget;
    o->disk_rate_cap_bytes_per_s = m->disk_rate_cap;
    o->gpu_budget_bytes = m->gpu_budget;
    auto res = finetune(*o, [](const std::string& line) {
      fmt::print(stderr, "[sluice] {}{}", line, !line.empty() && line.back() == '\n' ? "" : "\n");
    });
    if (!res.ok()) return fail(res.status());
    if (*json) {
      const StepFigures& t = res->timing;
      nlohmann::json j{{"engine", "sluice"},
                       {"steps", res->steps},
                       {"tokens_per_step", res->tokens_per_step},
                       {"tokens_per_s", res->tokens_per_s},
                       {"median_step_s", res->median_step_s},
                       {"first_loss", res->first_loss},
                       {"last_loss", res->last_loss},
                       {"heldout_before", res->heldout_before},
                       {"heldout_after", res->heldout_after},
                       {"timed_steps", t.n_steps},
                       {"median_timed_step_s", t.median_step_s},
                       {"streamed", t.streamed}};
      if (t.streamed) {
        j["stream"] = {{"micro_batches", t.micro_batches}, {"predicted_step_s", t.predicted_step_s},
                       {"predicted_compute_s", t.predicted_compute_s},
                       {"predicted_layer_forward_s", t.predicted_layer_forward_s},
                       {"predicted_layer_backward_s", t.predicted_layer_backward_s},
                       {"predicted_stall_s", t.predicted_stall_s},
                       {"predicted_read_bytes", t.predicted_read_bytes},
                       {"predicted_step_at_run_disk_s", t.predicted_step_at_run_disk_s},
                       {"measured_stall_s", t.measured_stall_s}, {"measured_read_bytes", t.measured_read_bytes},
                       {"run_disk_gbps", t.run_disk_gbps}, {"predicted_copy_bytes", t.predicted_copy_bytes},
                       {"measured_copy_bytes", t.measured_copy_bytes}};
      } else if (t.predicted_copy_bytes > 0) {  // --gpu-budget alone: the backend's ring
        j["device_ring"] = {{"predicted_copy_bytes", t.predicted_copy_bytes},
                            {"measured_copy_bytes", t.measured_copy_bytes}};
      }
      fmt::print("{}\n", j.dump());
    }
    return 0;
  };
}

}  // namespace sluice::cli
