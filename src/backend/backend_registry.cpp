#include "backend/backend_registry.h"

#include <fmt/format.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/reference_backend.h"
#ifdef SLUICE_HAVE_CUDA
#include "backend/cuda/cuda_api.h"
#endif

namespace sluice {
namespace {

std::string runs_anywhere() { return ""; }

StatusOr<std::shared_ptr<Backend>> create_cpu(const BackendOptions& o) {
  return std::shared_ptr<Backend>(std::make_shared<cpu::CpuBackend>(cpu::CpuBackendOptions{.n_threads = o.n_threads}));
}

StatusOr<std::shared_ptr<Backend>> create_reference(const BackendOptions&) {
  return std::shared_ptr<Backend>(std::make_shared<ReferenceBackend>());
}

#ifdef SLUICE_HAVE_CUDA
std::string cuda_unavailable() {
  std::string why;
  return cuda::device_available(&why) ? std::string() : why;
}

StatusOr<std::shared_ptr<Backend>> create_cuda(const BackendOptions& o) {
  return cuda::create_cuda_backend({.budget_bytes = o.device_budget_bytes});
}
#else
std::string cuda_unavailable() { return "built without nvcc (CMake found none at configure time)"; }

StatusOr<std::shared_ptr<Backend>> create_cuda(const BackendOptions&) {
  return unimplemented("the cuda backend is not in this build (CMake found no nvcc at configure time)");
}
#endif

// The list. A backend's row is all the rest of the tree needs to reach it.
constexpr RegisteredBackend kBackends[] = {
    {.name = "cpu",
     .about = "this machine's CPU (AVX-512, AVX2 or scalar kernels, chosen at run time)",
     .unavailable = runs_anywhere,
     .create = create_cpu},
    {.name = "cuda",
     .about = "an NVIDIA GPU (sm_80 or newer; in builds where CMake found nvcc)",
     .uses_device_budget = true,
     .unavailable = cuda_unavailable,
     .create = create_cuda},
    {.name = "reference",
     .about = "plain scalar loops, one thread, slow: the yardstick, for checking a result",
     .unavailable = runs_anywhere,
     .create = create_reference},
};

}  // namespace

std::span<const RegisteredBackend> registered_backends() { return kBackends; }

const RegisteredBackend* find_backend(std::string_view name) {
  for (const RegisteredBackend& b : kBackends)
    if (name == b.name) return &b;
  return nullptr;
}

std::string backend_names() {
  std::string s;
  for (const RegisteredBackend& b : kBackends) s += fmt::format("{}{}", s.empty() ? "" : ", ", b.name);
  return s;
}

std::string describe_backends() {
  std::string s;
  for (const RegisteredBackend& b : kBackends) {
    const std::string why = b.unavailable();
    s += fmt::format("  {:<10} {}{}\n", b.name, b.about, why.empty() ? "" : fmt::format(" [unavailable: {}]", why));
  }
  return s;
}

StatusOr<std::shared_ptr<Backend>> create_backend(const BackendOptions& o) {
  const RegisteredBackend* b = find_backend(o.name);
  if (!b) return invalid_argument("unknown backend '{}' ({})", o.name, backend_names());
  if (o.device_budget_bytes > 0 && !b->uses_device_budget) {
    std::string takers;
    for (const RegisteredBackend& r : kBackends)
      if (r.uses_device_budget) takers += fmt::format("{}--backend {}", takers.empty() ? "" : " or ", r.name);
    return invalid_argument("--gpu-budget is a budget of GPU memory: it applies to {}, not {} "
                            "(host memory for weights is --mem-budget)",
                            takers, o.name);
  }
  return b->create(o);
}

}  // namespace sluice
