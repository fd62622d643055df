// sluice: an LLM inference engine. Entry point of the command-line tool.
#include <cstdio>
#include <map>

#include "cli.h"

int main(int argc, char** argv) {
  CLI::App app{"sluice: LLM inference that treats weights as data with a placement"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "sluice 0.1.0");
  std::map<std::string, sluice::cli::Runner> runners;
  runners["run"] = sluice::cli::add_run(app);
  runners["tokenize"] = sluice::cli::add_tokenize(app);
  runners["info"] = sluice::cli::add_info(app);
  runners["convert"] = sluice::cli::add_convert(app);
  runners["synth"] = sluice::cli::add_synth(app);
  runners["plan"] = sluice::cli::add_plan(app);
  runners["bench"] = sluice::cli::add_bench(app);
  runners["stream-bench"] = sluice::cli::add_stream_bench(app);
  runners["bench-serve"] = sluice::cli::add_bench_serve(app);
  runners["bench-spec"] = sluice::cli::add_bench_spec(app);
  runners["bench-experts"] = sluice::cli::add_bench_experts(app);
  runners["serve"] = sluice::cli::add_serve(app);
  runners["gpu-bench"] = sluice::cli::add_gpu_bench(app);
  runners["finetune"] = sluice::cli::add_finetune(app);
  CLI11_PARSE(app, argc, argv);
  for (const CLI::App* sub : app.get_subcommands()) return runners.at(sub->get_name())();
  return 1;
}
