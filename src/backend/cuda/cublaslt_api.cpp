#include "backend/cuda/cublaslt_api.h"

#include <dlfcn.h>

#include <mutex>
#include <string>
#include <vector>

namespace sluice::cuda {
namespace {

// Where CMake found the library (SLUICE_CUBLASLT_PATH), tried after the soname.
std::vector<std::string> candidates() {
  std::vector<std::string> v = {"libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR)};
#ifdef SLUICE_CUBLASLT_PATH
  v.push_back(SLUICE_CUBLASLT_PATH);
#endif
  return v;
}

// *out = the library's `name`; a missing one is added to *missing.
template <typename Fn>
void resolve(void* lib, const char* name, Fn* out, std::string* missing) {
  *out = reinterpret_cast<Fn>(dlsym(lib, name));
  if (*out == nullptr) *missing += std::string(missing->empty() ? "" : ", ") + name;
}

StatusOr<CublasLtApi> load() {
  void* lib = nullptr;
  std::string tried;
  for (const std::string& path : candidates()) {
    lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) break;
    const char* why = dlerror();
    tried += fmt::format("{}{} ({})", tried.empty() ? "" : "; ", path, why ? why : "not found");
  }
  if (lib == nullptr) return unavailable("cuBLASLt could not be loaded: {}", tried);
  CublasLtApi a;
  std::string missing;
  resolve(lib, "cublasLtGetVersion", &a.get_version, &missing);
  resolve(lib, "cublasLtGetStatusName", &a.get_status_name, &missing);
  resolve(lib, "cublasLtGetStatusString", &a.get_status_string, &missing);
  resolve(lib, "cublasLtCreate", &a.create, &missing);
  resolve(lib, "cublasLtDestroy", &a.destroy, &missing);
  resolve(lib, "cublasLtMatmulDescCreate", &a.matmul_desc_create, &missing);
  resolve(lib, "cublasLtMatmulDescDestroy", &a.matmul_desc_destroy, &missing);
  resolve(lib, "cublasLtMatmulDescSetAttribute", &a.matmul_desc_set_attribute, &missing);
  resolve(lib, "cublasLtMatrixLayoutCreate", &a.matrix_layout_create, &missing);
  resolve(lib, "cublasLtMatrixLayoutDestroy", &a.matrix_layout_destroy, &missing);
  resolve(lib, "cublasLtMatmulPreferenceCreate", &a.matmul_preference_create, &missing);
  resolve(lib, "cublasLtMatmulPreferenceDestroy", &a.matmul_preference_destroy, &missing);
  resolve(lib, "cublasLtMatmulPreferenceSetAttribute", &a.matmul_preference_set_attribute, &missing);
  resolve(lib, "cublasLtMatmulAlgoGetHeuristic", &a.matmul_algo_get_heuristic, &missing);
  resolve(lib, "cublasLtMatmul", &a.matmul, &missing);
  if (!missing.empty()) return unavailable("cuBLASLt lacks {}", missing);
  // cublasLtGetVersion: major * 10000 + minor * 100 + patch.
  const size_t major = a.get_version() / 10000;
  if (major != CUBLAS_VER_MAJOR)
    return unavailable("cuBLASLt {} was loaded; sluice was built against version {}", major, CUBLAS_VER_MAJOR);
  return a;
}

}  // namespace

StatusOr<const CublasLtApi*> cublaslt_api() {
  static std::once_flag once;
  static StatusOr<CublasLtApi> api = unavailable("cuBLASLt not loaded yet");
  std::call_once(once, [] { api = load(); });
  if (!api.ok()) return api.status();
  return &*api;
}

}  // namespace sluice::cuda
