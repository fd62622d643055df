// Shared pieces of the sluice CLI subcommands: registration and model loading.
// Each subcommand lives in tools/cmd_<name>.cpp and only parses flags and calls
// the library; errors are printed as "error: ..." with a non-zero exit code.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/units.h"
#include "dist/session.h"
#include "format/model_file.h"
#include "runtime/load_model.h"
#include "model/model.h"
#include "sluice/engine.h"
#include "sluice/lora.h"
#include "sluice/status.h"
#include "tokenizer/tokenizer.h"
#include "weights/store_source.h"

namespace sluice::cli {

// Each subcommand registers itself on the app and returns the function that runs
// it after parsing (exit code).
using Runner = std::function<int()>;
Runner add_run(CLI::App& app);
Runner add_tokenize(CLI::App& app);
Runner add_info(CLI::App& app);
Runner add_convert(CLI::App& app);
Runner add_synth(CLI::App& app);
Runner add_plan(CLI::App& app);
Runner add_bench(CLI::App& app);
Runner add_stream_bench(CLI::App& app);
Runner add_bench_serve(CLI::App& app);
Runner add_bench_spec(CLI::App& app);
Runner add_bench_experts(CLI::App& app);
Runner add_serve(CLI::App& app);
Runner add_gpu_bench(CLI::App& app);
Runner add_finetune(CLI::App& app);

// Prints "error: <message>" to stderr and returns 1.
int fail(const Status& status);

// load_model() (runtime/load_model.h), printing the placement map to stderr
// when weights stream (unless quiet).
// With a parallel session (rank 0 of an MPI job), through the pipeline
// (dist::load_pipelined), printing its placement map.
StatusOr<LoadedModel> load_model_verbose(const std::string& path, const LoadOptions& options, bool quiet = false,
                                         dist::Session* parallel = nullptr);

// Adds the speculative decoding flags (--spec, --draft-model, --draft-max,
// --no-spec-adapt, --spec-ngram) to a subcommand that runs the engine.
void add_speculative_options(CLI::App* c, EngineConfig* config);
// After parsing: --draft-model alone means --spec draft.
void finish_speculative_options(EngineConfig* config);
// One line of speculative decoding counters ("" when none were drafted).
std::string speculative_line(const EngineStats& s);

// Tokenizer only (no weights bound), for `sluice tokenize`.
StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& path);

// "1.23 GiB", "512 KiB", ...
using bench::human_bytes;

}  // namespace sluice::cli
