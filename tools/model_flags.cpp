#include "model_flags.h"

#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "backend/backend_registry.h"
#include "weights/store_source.h"

namespace sluice::cli {
namespace {

void add_backend_option(CLI::App* c, std::string* name) {
  std::vector<std::string> names;
  for (const RegisteredBackend& b : registered_backends()) names.push_back(b.name);
  c->add_option("--backend", *name, fmt::format("backend the model runs on: {} (see Backends below)", backend_names()))
      ->check(CLI::IsMember(names))
      ->capture_default_str();
  // Asked only when help is printed: whether a GPU is there is probed then.
  c->footer([] {
    std::string s = "Backends (--backend):\n" + describe_backends();
    s.pop_back();  // the formatter ends the footer's line
    return s;
  });
}

// An option taking a size in bytes (600M, 2G, ...; weights::parse_byte_size).
void add_byte_size_option(CLI::App* c, const std::string& name, uint64_t* bytes, const std::string& help) {
  c->add_option_function<std::string>(
      name,
      [name, bytes](const std::string& v) {
        auto n = weights::parse_byte_size(v);
        if (!n.ok()) throw CLI::ValidationError(name, n.status().message());
        *bytes = *n;
      },
      help);
}

void add_mem_budget_option(CLI::App* c, uint64_t* bytes) {
  add_byte_size_option(c, "--mem-budget", bytes,
                       "memory for weights (e.g. 600M, 2G): layers beyond it stream from disk through the weight store");
}

// "RATE" or "RATE/s", RATE a byte size (parse_byte_size).
StatusOr<double> parse_disk_rate(std::string text) {
  if (text.size() > 2 && (text.ends_with("/s") || text.ends_with("/S"))) text.resize(text.size() - 2);
  ASSIGN_OR_RETURN(const uint64_t bytes, weights::parse_byte_size(text));
  return static_cast<double>(bytes);
}

void add_gpu_budget_option(CLI::App* c, uint64_t* bytes) {
  add_byte_size_option(c, "--gpu-budget", bytes,
                       "GPU memory for weights with --backend cuda (e.g. 6G; serve and bench-serve keep their KV pool "
                       "out of it first): the layers beyond it stay in pinned host memory and are copied to the GPU "
                       "ahead of use, each step");
}

void add_lora_option(CLI::App* c, std::vector<LoraSpec>* loras, const std::string& several) {
  c->add_option_function<std::vector<std::string>>(
       "--lora",
       [loras](const std::vector<std::string>& values) {
         for (const std::string& v : values) {
           // FILE[:SCALE]: a suffix after the last ':' that reads as a number is the scale.
           LoraSpec l{.path = v};
           const size_t colon = v.rfind(':');
           if (colon != std::string::npos && colon > 0) {
             const std::string tail = v.substr(colon + 1);
             char* end = nullptr;
             const float scale = std::strtof(tail.c_str(), &end);
             if (!tail.empty() && end == tail.c_str() + tail.size()) {
               if (!std::isfinite(scale)) throw CLI::ValidationError("--lora", "scale '" + tail + "' is not finite");
               l = LoraSpec{.path = v.substr(0, colon), .scale = scale};
             }
           }
           loras->push_back(std::move(l));
         }
       },
       "LoRA adapter FILE[:SCALE] (llama.cpp adapter GGUF or PEFT folder; SCALE default 1), repeatable; " +
           several)
      ->type_name("FILE[:SCALE]");
}

}  // namespace

void add_disk_rate_cap_option(CLI::App* c, double* bytes_per_s) {
  c->add_option_function<std::string>(
       "--disk-rate-cap",
       [bytes_per_s](const std::string& v) {
         auto r = parse_disk_rate(v);
         if (!r.ok()) throw CLI::ValidationError("--disk-rate-cap", r.status().message());
         *bytes_per_s = *r;
       },
       "with --mem-budget: cap the weight store's disk reads at RATE bytes/s (e.g. 100M = 100 MB/s; 0: none), a "
       "slower disk emulated (reads stay in flight as long as they would take there) or this one shared")
      ->type_name("RATE");
}

void ModelFlags::add_to(CLI::App* c, const ModelFlagSpec& spec) {
  if (spec.fallback) {
    add_model_option(c, &model, spec.model, *spec.fallback);
  } else {
    c->add_option("-m,--model", model, spec.model)->required();
  }
  if (!spec.ctx.empty()) c->add_option("-c,--ctx-size", ctx_size, spec.ctx);
  c->add_option("-t,--threads", n_threads, spec.threads);
  if (spec.mem_budget) {
    add_mem_budget_option(c, &mem_budget);
    add_disk_rate_cap_option(c, &disk_rate_cap);
  }
  if (spec.gpu_budget) add_gpu_budget_option(c, &gpu_budget);
  if (spec.backend) add_backend_option(c, &backend);
  if (spec.lora) add_lora_option(c, &loras, *spec.lora);
  if (spec.parallel) add_parallel_options(c, &parallel);
}

LoadOptions ModelFlags::load_options() const {
  return {.n_threads = n_threads,
          .n_ctx_max = std::max<int64_t>(0, ctx_size),
          .backend = backend,
          .mem_budget_bytes = mem_budget,
          .disk_rate_cap_bytes_per_s = disk_rate_cap,
          .gpu_budget_bytes = gpu_budget,
          .loras = loras};
}

EngineConfig ModelFlags::engine_config(EngineConfig base) const {
  base.model_path = model;
  base.backend = backend;
  base.n_threads = n_threads;
  base.ctx_size = ctx_size;
  base.mem_budget_bytes = mem_budget;
  base.disk_rate_cap_bytes_per_s = disk_rate_cap;
  base.gpu_budget_bytes = gpu_budget;
  base.loras = loras;
  return base;
}

dist::WorkerOptions ModelFlags::worker_options() const {
  return {.n_threads = n_threads, .mem_budget_bytes = mem_budget, .disk_rate_cap_bytes_per_s = disk_rate_cap,
          .backend = backend};
}

StatusOr<std::shared_ptr<dist::Session>> ModelFlags::join(std::optional<int>* worker_exit) const {
  return join_parallel(parallel, model, worker_options(), worker_exit);
}

}  // namespace sluice::cli
