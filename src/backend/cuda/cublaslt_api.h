// The cuBLASLt entry points sluice calls, resolved from the shared library at
// first use (dlopen) instead of linked: loading libcublasLt (about 540 MB)
// costs a process about 0.15 s of CPU at start, which every CLI command and
// test process would pay whether or not it ever runs a tensor-core matmul.
//
// The library is looked for by its soname (libcublasLt.so.<major of the
// headers>, through LD_LIBRARY_PATH and the system's paths), then at the path
// CMake found at build time. Thread-safe; the first call loads, later calls
// return the same table.
#pragma once

#include <cublasLt.h>

#include "sluice/status.h"

namespace sluice::cuda {

struct CublasLtApi {
  decltype(&cublasLtGetVersion) get_version = nullptr;
  decltype(&cublasLtGetStatusName) get_status_name = nullptr;
  decltype(&cublasLtGetStatusString) get_status_string = nullptr;
  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtDestroy) destroy = nullptr;
  decltype(&cublasLtMatmulDescCreate) matmul_desc_create = nullptr;
  decltype(&cublasLtMatmulDescDestroy) matmul_desc_destroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) matmul_desc_set_attribute = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) matrix_layout_create = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) matrix_layout_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) matmul_preference_create = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) matmul_preference_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) matmul_preference_set_attribute = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) matmul_algo_get_heuristic = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
};

// The table with every entry set. Errors (kUnavailable): the library is not
// found (the message lists where it looked and dlerror's reason), lacks one
// of the entry points, or its major version differs from the headers'.
StatusOr<const CublasLtApi*> cublaslt_api();

}  // namespace sluice::cuda
