// finetune(): one whole fine-tuning run, as `sluice finetune` runs it: load
// the base (resident, or streamed under a memory budget), read the data, make
// or load the adapter, train with held-out losses and checkpoints, write the
// adapter. The tool only parses flags; progress goes to the log callback as
// lines of text.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "train/step_meter.h"
#include "train/trainer.h"

namespace sluice {

struct FinetuneOptions {
  std::string model_path;
  std::string data_path;
  std::string out_path;          // the adapter GGUF written at the end
  std::string val_data_path;     // held-out data; "": val_split of the training data
  double val_split = 0.05;
  std::string init_adapter;      // start from this adapter's factors ("": a new one)
  std::string targets = "all";
  int64_t rank = 8;
  float alpha = 16.0f;
  TrainerOptions train;
  int64_t eval_every = 0;        // steps between held-out losses (0: a tenth of the run)
  int64_t log_every = 1;         // steps between progress lines
  int64_t checkpoint_every = 0;  // steps between checkpoints (0: none)
  std::string checkpoint_path;   // "": out_path + ".ckpt"
  std::string resume;            // a checkpoint to continue from
  std::string chat_template;     // a template file for chat data ("": the model's)
  std::string backend = "cpu";
  int n_threads = 0;
  uint64_t mem_budget_bytes = 0;
  double disk_rate_cap_bytes_per_s = 0;  // under mem_budget_bytes: the disk capped (LoadOptions)
  uint64_t gpu_budget_bytes = 0;
  // "on": the backward reruns each layer's forward (memory bounded); "off":
  // the forward keeps every layer's intermediates; "auto": off where the base
  // is resident in host memory and they take under a quarter of MemAvailable.
  std::string recompute = "auto";
};

struct FinetuneResult {
  int64_t steps = 0;             // steps taken by this run
  double first_loss = 0;         // of the first step taken
  double last_loss = 0;          // of the last
  double heldout_before = -1;    // -1: no held-out data
  double heldout_after = -1;
  double seconds = 0;            // training time
  double tokens_per_s = 0;       // over the whole run
  double median_step_s = 0;      // median wall time of a step
  int64_t tokens_per_step = 0;   // input tokens of the last step
  StepFigures timing;            // steps after the first; streamed: predicted against measured
};

using LogFn = std::function<void(const std::string& line)>;

StatusOr<FinetuneResult> finetune(const FinetuneOptions& options, const LogFn& log);

}  // namespace sluice
