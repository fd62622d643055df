// cuBLASLt is loaded at first use, not linked: the library the build found
// loads, has every entry point the GEMM path calls, and is the major version
// of the headers it was compiled against. Needs no GPU (loading is host-only).
#ifdef SLUICE_HAVE_CUDA

#include "backend/cuda/cublaslt_api.h"

#include <gtest/gtest.h>

namespace sluice::cuda {
namespace {

TEST(CublasLtApi, LoadsWithEveryEntryPointAndTheHeadersMajorVersion) {
  auto api = cublaslt_api();
  ASSERT_TRUE(api.ok()) << api.status().to_string();
  const CublasLtApi& a = **api;
  EXPECT_NE(a.get_version, nullptr);
  EXPECT_NE(a.create, nullptr);
  EXPECT_NE(a.matmul, nullptr);
  EXPECT_NE(a.matmul_algo_get_heuristic, nullptr);
  EXPECT_NE(a.matrix_layout_destroy, nullptr);
  EXPECT_EQ(a.get_version() / 10000, static_cast<size_t>(CUBLAS_VER_MAJOR));
  EXPECT_STREQ(a.get_status_name(CUBLAS_STATUS_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED");
  // The second call returns the same table.
  EXPECT_EQ(*cublaslt_api(), &a);
}

}  // namespace
}  // namespace sluice::cuda

#endif  // SLUICE_HAVE_CUDA
