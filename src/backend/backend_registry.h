// The backends of this build, in one ordered list: backend_registry.cpp is the
// only file that names them all. Each entry has its name, a line for --help,
// whether it can run in this process (and if not, why), and its factory.
// create_backend() (backend.h), the CLI's --backend option and its help, and
// the tests that run every backend (the op-case list, backend_test.cpp; the
// golden suites' "@backend" cases) read it.
//
// Adding a backend adds one row to the list (docs/ARCHITECTURE.md, "adding a
// backend"). The list is plain constant data, so it may be read from static
// initializers (a test suite's parameters). Thread-safe.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "backend/backend.h"

namespace sluice {

struct RegisteredBackend {
  const char* name = "";             // what --backend and BackendOptions::name take
  const char* about = "";            // one line for --help
  bool uses_device_budget = false;   // takes BackendOptions::device_budget_bytes (--gpu-budget)
  // "" when the backend can be created in this process, else why not ("built
  // without nvcc", "no CUDA device"). The first call may probe the hardware.
  std::string (*unavailable)() = nullptr;
  // A new backend. Errors: why it cannot run here; an option it refuses.
  StatusOr<std::shared_ptr<Backend>> (*create)(const BackendOptions& options) = nullptr;
};

// Every backend of this build, the default (cpu) first.
std::span<const RegisteredBackend> registered_backends();
// The backend of that name, or null.
const RegisteredBackend* find_backend(std::string_view name);
// "cpu, cuda, reference": every name, for messages.
std::string backend_names();
// One line per backend: its name, what it is, and when it cannot run here, why.
//   "  cuda       an NVIDIA GPU ... [unavailable: built without nvcc]"
std::string describe_backends();

}  // namespace sluice
