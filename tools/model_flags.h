// The flags that choose a model and what it runs on (-m, -c, -t, --mem-budget
// with --disk-rate-cap, --gpu-budget, --backend, --lora, --parallel), registered once for every
// subcommand that loads a model. A subcommand says which of them it takes and
// its words for them (ModelFlagSpec); after parsing, ModelFlags turns them into
// the library's options (LoadOptions, EngineConfig, dist::WorkerOptions).
// They come first in a subcommand's help, right after -m.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli_parallel.h"
#include "default_model.h"
#include "runtime/load_model.h"
#include "sluice/engine.h"
#include "sluice/lora.h"

namespace sluice::cli {

// Which model flags a subcommand takes, and the help of those whose meaning
// varies between subcommands.
struct ModelFlagSpec {
  std::string model = "GGUF file or HF folder";   // -m,--model's help
  std::optional<ShippedModel> fallback = kDenseModel;  // without -m; nullopt: -m is required
  std::string threads = "threads (default: all cores)";  // -t,--threads's help
  std::string ctx;              // -c,--ctx-size's help; "": the subcommand has no -c
  bool mem_budget = true;       // --mem-budget and --disk-rate-cap
  bool gpu_budget = true;       // --gpu-budget
  bool backend = true;          // --backend (and the Backends footer)
  std::optional<std::string> lora = "several apply together (their deltas add up)";  // --lora: what several do; nullopt: no --lora
  bool parallel = true;         // --parallel, --parallel-timeout
};

// --disk-rate-cap RATE (100M, 100M/s: 100 MB/s) into *bytes_per_s: the weight
// store's disk reads capped, emulating or sharing a slower disk. The one
// registration, for ModelFlags and for `plan train` (which plans with it).
void add_disk_rate_cap_option(CLI::App* c, double* bytes_per_s);

struct ModelFlags {
  std::string model;
  int n_threads = 0;        // 0: one per core
  int64_t ctx_size = 0;     // 0: the subcommand's default
  uint64_t mem_budget = 0;  // 0: every weight resident
  double disk_rate_cap = 0; // bytes/s the streamed weights are read at most (0: no cap)
  uint64_t gpu_budget = 0;
  std::string backend = "cpu";
  std::vector<LoraSpec> loras;
  ParallelArgs parallel;

  // Registers the flags `spec` names on `c`, bound to this object (which must
  // outlive parsing). Uses the subcommand's final callback when -m has a fallback.
  void add_to(CLI::App* c, const ModelFlagSpec& spec = {});

  // What load_model() takes from these flags (-c as the longest context).
  LoadOptions load_options() const;
  // `base` (the subcommand's own engine settings) with these flags' fields set.
  EngineConfig engine_config(EngineConfig base = {}) const;
  // What a worker rank of a --parallel job loads with.
  dist::WorkerOptions worker_options() const;
  // join_parallel() (cli_parallel.h) with these flags.
  StatusOr<std::shared_ptr<dist::Session>> join(std::optional<int>* worker_exit) const;
};

}  // namespace sluice::cli
