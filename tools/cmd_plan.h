// The `sluice plan` command's arguments and the pieces its halves share:
// cmd_plan.cpp answers from the performance model alone (decode, kv, experts,
// stream, spec, cost, --calibrate); cmd_plan_train.cpp plans fine-tuning over a
// streamed base (train); cmd_plan_parallel.cpp plans a job over processes
// (parallel: --parallel pp, ep or pp,ep, as a job prints its plan at load);
// cmd_plan_tiers.cpp plans weights over HBM, pinned host and disk (tiers);
// cmd_plan_measure.cpp checks those answers against the engine on this
// machine (--measure).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json_fwd.hpp>

#include "plan/calibrate.h"
#include "plan/hardware.h"
#include "plan/model_shape.h"
#include "plan/weight_bytes.h"
#include "sluice/status.h"

namespace sluice::cli::plan_cmd {

constexpr int kMaxRounds = 100;            // --rounds: more would take hours on a large model
constexpr double kRoundTolerance = 0.15;   // "within 15%": |measured / predicted - 1| <= this

struct PlanArgs {
  bool json = false;
  bool calibrate = false;
  std::string measure;
  double budget_gb = 0;
  int n_threads = 0;
  // Model and formats.
  std::string model = "llama-3-8b";
  std::string weights = "bf16";
  std::string kv = "f16";
  // Hardware.
  std::string hw = "h100";
  double mem_gbps = 0;
  double tflops = 0;
  double memory_gb = 0;
  // Workload.
  std::vector<int64_t> batches = {1, 8, 32, 64, 128, 256};
  std::vector<int64_t> ctxs = {4096, 32768, 131072};
  int64_t ctx = 4096;
  int64_t kv_block = 16;           // KV block size in tokens (the engine's --kv-block-size default)
  int64_t prompt = 1024;
  int64_t measure_prompt = 128;
  int64_t measure_decode = 32;
  int rounds = 3;                  // --measure: calibrate-then-measure rounds (medians reported)
  int64_t chunk = 0;
  double reserve_gb = 0;
  double price_per_hour = 0;
  double tokens_per_s = 0;
  // Streaming.
  std::vector<std::string> disks = {"nvme-gen3", "nvme-gen4", "2x nvme-gen4", "2x nvme-gen5"};
  std::vector<std::string> links = {"pcie3", "pcie4", "pcie5"};
  double ram_gb = 32;
  double vram_gb = 24;
  double flops_per_param = 2;
  double layer_gb = 0;
  double layer_params = 0;
  double active_fraction = 1;
  int64_t layers = 0;
  std::optional<double> hit_rate;  // experts: measured hit rate (else the uniform estimate)
  // Training (plan train).
  std::vector<int64_t> train_tokens = {16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
  int64_t seq = 512;
  int64_t rank = 8;
  std::string targets = "all";
  std::string recompute = "on";  // plan train: as finetune's --recompute (off keeps the activations)
  double budget_fraction = 0;
  double disk_gbps = 0;
  double disk_rate_cap = 0;  // --disk-rate-cap: bytes/s (0: none), as finetune's
  // Speculative decoding.
  double acceptance = 0.8;
  int64_t draft = 5;
  double cost_ratio = 0.05;
  int64_t max_draft = 16;
  // Processes of a job (plan parallel).
  std::string parallel;            // pp, ep or pp,ep, as the engine's --parallel
  int n_ranks = 2;
  int64_t ep_size = 0;             // pp,ep: ranks per stage (--ep-size)
  double link_us = 50;             // one small message, one way
  double link_gbps = 1.25;         // large messages, one way (10 Gb Ethernet)
  int64_t n_batch = 256;           // tokens per prefill step (the engine's default)
  std::string ep_attention = "auto";  // ep: rank0, every or auto, as the engine's --ep-attention
  // Three tiers on a GPU (plan tiers); rates default to an H200's.
  std::string gpu_budget;          // byte size (6G); "": unlimited
  std::string mem_budget;          // byte size; "": --budget-gb, else unlimited
  double hbm_gbps = 4200;          // HBM copy roof
  double h2d_gbps = 50;            // pinned host -> device
  double nvme_gbps = 6;            // O_DIRECT file reads
  int64_t decode_batch = 1;        // sequences in a decode step
  int64_t prefill_tokens = 512;    // one prompt's prefill step
};

struct ModelInput {
  plan::ModelShape shape;
  plan::WeightBytes weights;
  std::string weights_note;  // "exact, from the file" or the format used
};
// -m as a preset name, a GGUF file (exact tensor bytes), or an HF config.json
// / folder; presets and HF configs at --weights.
StatusOr<ModelInput> load_model_input(const PlanArgs& a);

// Prints `j` with --json, else `text`.
void emit(const PlanArgs& a, const nlohmann::json& j, const std::string& text);
nlohmann::json calibration_json(const plan::Calibration& c);
std::string calibration_text(const plan::Calibration& c);

// The hardware: --calibrate's measure of this machine, else the --hw
// profile; --mem-gbps, --tflops and --memory-gb override its figures.
StatusOr<plan::Hardware> load_hardware(const PlanArgs& a, const std::optional<plan::Calibration>& cal);

// `plan --measure FILE`: --rounds rounds of calibrate-then-measure, each
// prediction against the engine's measured figures, and their medians.
int run_measure(const PlanArgs& a);

// `plan train -m FILE.gguf`: fine-tuning with the base streamed under a
// budget, per micro-batch size (cmd_plan_train.cpp).
int run_train(const PlanArgs& a);

// `plan parallel -m FILE --parallel pp|ep|pp,ep --ranks N [--ep-size E]`: the job's placement map
// and predicted steps for N ranks alike (cmd_plan_parallel.cpp).
int run_parallel(const PlanArgs& a, const std::optional<plan::Calibration>& cal);

// `plan tiers`: registers the subcommand on `plan` with its flags bound to
// `a`; run_tiers prints the three-tier placement map and predicted steps
// (cmd_plan_tiers.cpp).
CLI::App* add_tiers(CLI::App* plan, PlanArgs& a);
int run_tiers(const PlanArgs& a);

}  // namespace sluice::cli::plan_cmd
