#include "backend/cuda/cuda_gemm_lt.h"

#include <algorithm>

#include "backend/cuda/cuda_check.cuh"
#include "base/check.h"

namespace sluice::cuda {
namespace {

// cuBLAS's advice for Hopper: 32 MiB lets every kernel it has run.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

Status lt_error(const CublasLtApi& lt, const char* call, cublasStatus_t st, int64_t n_out, int64_t n_in,
                int64_t n_tok) {
  return internal_error("cuBLASLt {} failed for y[{}x{}] = W[{}x{}] x: {} ({})", call, n_tok, n_out, n_out, n_in,
                        lt.get_status_name(st), lt.get_status_string(st));
}

// The largest power of two (up to 256) that divides the address.
int alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int al = 256;
  while (al > 1 && a % static_cast<uintptr_t>(al) != 0) al /= 2;
  return al;
}

}  // namespace

StatusOr<std::unique_ptr<GemmLt>> GemmLt::create() {
  auto api = cublaslt_api();
  if (!api.ok()) return api.status();
  std::unique_ptr<GemmLt> g(new GemmLt());
  g->lt_ = *api;
  const cublasStatus_t st = g->lt_->create(&g->handle_);
  if (st != CUBLAS_STATUS_SUCCESS) {
    g->handle_ = nullptr;
    return unavailable("cublasLtCreate: {} ({})", g->lt_->get_status_name(st), g->lt_->get_status_string(st));
  }
  if (cudaMalloc(&g->workspace_, kWorkspaceBytes) != cudaSuccess) {
    cudaGetLastError();  // clear it: the backend goes on without this path
    g->workspace_ = nullptr;
    return resource_exhausted("cuBLASLt workspace: {} MiB of device memory", kWorkspaceBytes >> 20);
  }
  g->workspace_bytes_ = kWorkspaceBytes;
  return g;
}

GemmLt::~GemmLt() {
  for (auto& [k, p] : plans_) destroy(p);
  if (workspace_) cudaFree(workspace_);
  if (handle_) lt_->destroy(handle_);
}

void GemmLt::destroy(Plan& p) {
  if (p.a) lt_->matrix_layout_destroy(p.a);
  if (p.b) lt_->matrix_layout_destroy(p.b);
  if (p.c) lt_->matrix_layout_destroy(p.c);
  if (p.op) lt_->matmul_desc_destroy(p.op);
  p = {};
}

// cuBLASLt is column-major: y row-major [n_tok, y_stride] is the column-major
// D [n_out, n_tok] with ld y_stride; W row-major [n_out, n_in] is the
// column-major [n_in, n_out], transposed (op T); x is column-major [n_in,
// n_tok] as it stands. D = W^T' x: the "TN" GEMM, K (n_in) contiguous in both.
StatusOr<const GemmLt::Plan*> GemmLt::plan(const Key& key) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return &it->second;
  const auto [n_out, n_in, n_tok, y_stride, y_align] = key;
  Plan p;
  cublasStatus_t st = lt_->matmul_desc_create(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (st != CUBLAS_STATUS_SUCCESS) return lt_error(*lt_, "MatmulDescCreate", st, n_out, n_in, n_tok);
  const cublasOperation_t trans = CUBLAS_OP_T, none = CUBLAS_OP_N;
  lt_->matmul_desc_set_attribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof(trans));
  lt_->matmul_desc_set_attribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &none, sizeof(none));
  st = lt_->matrix_layout_create(&p.a, CUDA_R_16BF, static_cast<uint64_t>(n_in), static_cast<uint64_t>(n_out), n_in);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = lt_->matrix_layout_create(&p.b, CUDA_R_16BF, static_cast<uint64_t>(n_in), static_cast<uint64_t>(n_tok), n_in);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = lt_->matrix_layout_create(&p.c, CUDA_R_32F, static_cast<uint64_t>(n_out), static_cast<uint64_t>(n_tok),
                                    y_stride);
  if (st != CUBLAS_STATUS_SUCCESS) {
    destroy(p);
    return lt_error(*lt_, "MatrixLayoutCreate", st, n_out, n_in, n_tok);
  }
  cublasLtMatmulPreference_t pref = nullptr;
  st = lt_->matmul_preference_create(&pref);
  if (st != CUBLAS_STATUS_SUCCESS) {
    destroy(p);
    return lt_error(*lt_, "MatmulPreferenceCreate", st, n_out, n_in, n_tok);
  }
  // W and x come from cudaMalloc'd scratch or 16-byte aligned weights; y may
  // be any float of an activation buffer: the heuristic must know.
  const uint32_t ab_align = 16, c_align = static_cast<uint32_t>(y_align);
  lt_->matmul_preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_,
                                       sizeof(workspace_bytes_));
  lt_->matmul_preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &ab_align, sizeof(ab_align));
  lt_->matmul_preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab_align, sizeof(ab_align));
  lt_->matmul_preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &c_align, sizeof(c_align));
  lt_->matmul_preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &c_align, sizeof(c_align));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  st = lt_->matmul_algo_get_heuristic(handle_, p.op, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
  lt_->matmul_preference_destroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    destroy(p);
    return lt_error(*lt_, "MatmulAlgoGetHeuristic", st == CUBLAS_STATUS_SUCCESS ? CUBLAS_STATUS_NOT_SUPPORTED : st,
                    n_out, n_in, n_tok);
  }
  p.algo = result.algo;
  return &plans_.emplace(key, p).first->second;
}

Status GemmLt::run(const uint16_t* w, const uint16_t* x, float* y, int64_t n_out, int64_t n_in, int64_t n_tok,
                   int64_t y_stride, cudaStream_t s) {
  CHECK(reinterpret_cast<uintptr_t>(w) % 16 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
        reinterpret_cast<uintptr_t>(y) % 4 == 0 && y_stride >= n_out);
  if (n_out == 0 || n_tok == 0) return Status();
  // The alignment y's rows keep: that of y and of the stride's bytes, whichever is less.
  int y_align = std::min(alignment_of(y), alignment_of(reinterpret_cast<void*>(static_cast<uintptr_t>(y_stride * 4))));
  auto p = plan(Key{n_out, n_in, n_tok, y_stride, y_align});
  if (!p.ok()) return p.status();
  const float one = 1.0f, zero = 0.0f;
  const Plan& pl = **p;
  const cublasStatus_t st = lt_->matmul(handle_, pl.op, &one, w, pl.a, x, pl.b, &zero, y, pl.c, y, pl.c, &pl.algo,
                                           workspace_, workspace_bytes_, s);
  if (st != CUBLAS_STATUS_SUCCESS) return lt_error(*lt_, "Matmul", st, n_out, n_in, n_tok);
  return Status();
}

}  // namespace sluice::cuda
