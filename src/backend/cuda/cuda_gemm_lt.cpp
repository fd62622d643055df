#include "backend/cuda/cuda_gemm_lt.h"

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

#include "backend/cuda/cuda_check.cuh"
#include "base/check.h"

namespace sluice::cuda {
namespace {

// cuBLAS's advice for Hopper: 32 MiB lets every kernel it has run.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

// The largest power of two (up to 256) that divides the address.
int alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int al = 256;
  while (al > 1 && a % static_cast<uintptr_t>(al) != 0) al /= 2;
  return al;
}

// The alignment every row of a matrix at p keeps, its rows row_bytes apart:
// that of p and of row_bytes, whichever is less, and at most 16 (the most a
// kernel asks), so that slices of one matrix share a plan.
int rows_alignment(const void* p, int64_t row_bytes) {
  return std::min({16, alignment_of(p), alignment_of(reinterpret_cast<void*>(static_cast<uintptr_t>(row_bytes)))});
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

Status GemmLt::error(const char* call, cublasStatus_t st, const Gemm& g) const {
  return internal_error("cuBLASLt {} failed for a {} GEMM c[{}x{}] = {}[{}x{}] {}[{}x{}]: {} ({})", call,
                        g.type == CUDA_R_16BF ? "BF16" : "F32", g.m, g.n, g.trans_x ? "x^T" : "x", g.m, g.k,
                        g.trans_y ? "y^T" : "y", g.k, g.n, lt_->get_status_name(st), lt_->get_status_string(st));
}

GemmLt::Key GemmLt::key_of(const Gemm& g) {
  const int64_t elem = g.type == CUDA_R_16BF ? 2 : 4;
  return Key{static_cast<int>(g.type), g.trans_x, g.trans_y, g.m, g.n, g.k, g.ldx, g.ldy, g.ldc,
             rows_alignment(g.x, g.ldx * elem), rows_alignment(g.y, g.ldy * elem), rows_alignment(g.c, g.ldc * 4)};
}

// cuBLASLt is column-major, and a row-major [r, c] matrix with stride ld is
// the column-major [c, r] with that ld. So row-major c = op(x) op(y) is the
// column-major c' [n, m] = op(y)' op(x)': cuBLAS's A is y as it lies ([n, k]
// column-major, op N; or [k, n] with trans_y, op T), its B is x ([k, m], op
// N; or [m, k] with trans_x, op T). The forward's y = W x is x times W
// transposed (the "TN" GEMM, K contiguous in both); the input gradient
// dx = dy W is the "NN" one.
StatusOr<const GemmLt::Plan*> GemmLt::plan_of(const Gemm& g) {
  const Key key = key_of(g);
  auto it = plans_.find(key);
  if (it != plans_.end()) return &it->second;
  Plan p;
  cublasStatus_t st = lt_->matmul_desc_create(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (st != CUBLAS_STATUS_SUCCESS) return error("MatmulDescCreate", st, g);
  const cublasOperation_t op_a = g.trans_y ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = g.trans_x ? CUBLAS_OP_T : CUBLAS_OP_N;
  lt_->matmul_desc_set_attribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a));
  lt_->matmul_desc_set_attribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b));
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  st = lt_->matrix_layout_create(&p.a, g.type, u(g.trans_y ? g.k : g.n), u(g.trans_y ? g.n : g.k), g.ldy);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = lt_->matrix_layout_create(&p.b, g.type, u(g.trans_x ? g.m : g.k), u(g.trans_x ? g.k : g.m), g.ldx);
  if (st == CUBLAS_STATUS_SUCCESS) st = lt_->matrix_layout_create(&p.c, CUDA_R_32F, u(g.n), u(g.m), g.ldc);
  if (st != CUBLAS_STATUS_SUCCESS) {
    destroy(p);
    return error("MatrixLayoutCreate", st, g);
  }
  cublasLtMatmulPreference_t pref = nullptr;
  st = lt_->matmul_preference_create(&pref);
  if (st != CUBLAS_STATUS_SUCCESS) {
    destroy(p);
    return error("MatmulPreferenceCreate", st, g);
  }
  // The heuristic must know how aligned the pointers are (cuBLAS's A is y, B is x).
  const uint32_t a_align = static_cast<uint32_t>(std::get<10>(key)), b_align = static_cast<uint32_t>(std::get<9>(key)),
                 c_align = static_cast<uint32_t>(std::get<11>(key));
  lt_->matmul_preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_,
                                       sizeof(workspace_bytes_));
  lt_->matmul_preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &a_align, sizeof(a_align));
  lt_->matmul_preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &b_align, sizeof(b_align));
  lt_->matmul_preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &c_align, sizeof(c_align));
  lt_->matmul_preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &c_align, sizeof(c_align));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  st = lt_->matmul_algo_get_heuristic(handle_, p.op, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
  lt_->matmul_preference_destroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    destroy(p);
    return error("MatmulAlgoGetHeuristic", st == CUBLAS_STATUS_SUCCESS ? CUBLAS_STATUS_NOT_SUPPORTED : st, g);
  }
  p.algo = result.algo;
  return &plans_.emplace(key, p).first->second;
}

Status GemmLt::plan(const Gemm& g) {
  if (g.m == 0 || g.n == 0 || g.k == 0) return Status();
  return plan_of(g).status();
}

Status GemmLt::run(const Gemm& g, cudaStream_t s) {
  CHECK(g.type == CUDA_R_16BF || g.type == CUDA_R_32F);
  const uintptr_t elem = g.type == CUDA_R_16BF ? 2 : 4;
  CHECK(reinterpret_cast<uintptr_t>(g.x) % elem == 0 && reinterpret_cast<uintptr_t>(g.y) % elem == 0 &&
        reinterpret_cast<uintptr_t>(g.c) % 4 == 0);
  CHECK(g.ldx >= (g.trans_x ? g.m : g.k) && g.ldy >= (g.trans_y ? g.k : g.n) && g.ldc >= g.n);
  if (g.m == 0 || g.n == 0) return Status();
  CHECK(g.k > 0);  // c = beta c is the caller's
  auto p = plan_of(g);
  if (!p.ok()) return p.status();
  const Plan& pl = **p;
  const cublasStatus_t st = lt_->matmul(handle_, pl.op, &g.alpha, g.y, pl.a, g.x, pl.b, &g.beta, g.c, pl.c, g.c, pl.c,
                                        &pl.algo, workspace_, workspace_bytes_, s);
  if (st != CUBLAS_STATUS_SUCCESS) return error("Matmul", st, g);
  return Status();
}

void GemmLt::run_planned(const Gemm& g, cudaStream_t s, const char* hint) {
  if (const Status st = run(g, s); !st.ok()) {
    fmt::print(stderr, "[sluice] cuda: {}{}\n", st.message(), hint);
    std::abort();
  }
}

Status GemmLt::run(const uint16_t* w, const uint16_t* x, float* y, int64_t n_out, int64_t n_in, int64_t n_tok,
                   int64_t y_stride, cudaStream_t s) {
  CHECK(reinterpret_cast<uintptr_t>(w) % 16 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0);
  return run({.type = CUDA_R_16BF, .m = n_tok, .n = n_out, .k = n_in, .x = x, .ldx = n_in, .y = w, .ldy = n_in,
              .trans_y = true, .c = y, .ldc = y_stride},
             s);
}

}  // namespace sluice::cuda
