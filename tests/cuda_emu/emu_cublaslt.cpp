// A stand-in libcublasLt for the CUDA emulator: the calls of cublasLt.h, with
// the matmul computed on the CPU in float (column major, as cuBLASLt; A and B
// in F32, F16 or BF16; C and D in F32). Built as its own shared library so
// that sluice loads it exactly as it loads the real one (cublaslt_api.h).
#include <cstdint>
#include <cstring>
#include <functional>
#include <new>

#include "cublasLt.h"
#include "sluice_emu/halves.h"

struct cublasLtContext {
  int unused;
};
struct cublasLtMatmulDescOpaque_t {
  cublasOperation_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
};
struct cublasLtMatrixLayoutOpaque_t {
  cudaDataType type;
  uint64_t rows, cols;
  int64_t ld;
};
// The alignments a preference promises for A, B, C and D (cuBLASLt's
// default: 256 bytes); the heuristic's algorithm may rely on them up to 16
// bytes, so the matmul refuses pointers less aligned than that.
struct cublasLtMatmulPreferenceOpaque_t {
  uint32_t align[4] = {256, 256, 256, 256};
};

// The emulator's device memory is closed to host code outside its own calls
// (emu_memory.cpp); the executable exports this to open it around the matmul.
extern "C" void sluice_emu_device_access(int open) __attribute__((weak));
extern "C" void sluice_emu_submit(cudaStream_t stream, std::function<void()>* work) __attribute__((weak));

namespace {

struct OpenDevice {
  OpenDevice() {
    if (sluice_emu_device_access) sluice_emu_device_access(1);
  }
  ~OpenDevice() {
    if (sluice_emu_device_access) sluice_emu_device_access(0);
  }
};

bool operand_type(cudaDataType t) { return t == CUDA_R_32F || t == CUDA_R_16F || t == CUDA_R_16BF; }

float element(const void* p, cudaDataType t, int64_t i) {
  switch (t) {
    case CUDA_R_16F: return sluice_emu::f16_bits_to_float(static_cast<const uint16_t*>(p)[i]);
    case CUDA_R_16BF: return sluice_emu::bf16_bits_to_float(static_cast<const uint16_t*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

// D = alpha op(A) op(B) + beta C (below), with copies of the layouts.
void product(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float al, float be, const void* a,
             const cublasLtMatrixLayoutOpaque_t& ad, const void* b, const cublasLtMatrixLayoutOpaque_t& bd,
             const void* c, const cublasLtMatrixLayoutOpaque_t& cd, void* d, const cublasLtMatrixLayoutOpaque_t& dd);

}  // namespace

extern "C" {

size_t cublasLtGetVersion() { return CUBLAS_VER_MAJOR * 10000; }
const char* cublasLtGetStatusName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}
const char* cublasLtGetStatusString(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS ? "success" : "the emulated cuBLASLt refused the call";
}
cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
  *h = new cublasLtContext();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute, cudaDataType_t scale) {
  if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  *d = new cublasLtMatmulDescOpaque_t();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  if (size != sizeof(cublasOperation_t)) return CUBLAS_STATUS_INVALID_VALUE;
  cublasOperation_t op;
  std::memcpy(&op, buf, size);
  if (attr == CUBLASLT_MATMUL_DESC_TRANSA) d->trans_a = op;
  else if (attr == CUBLASLT_MATMUL_DESC_TRANSB) d->trans_b = op;
  else return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
  if (ld < static_cast<int64_t>(rows) || ld <= 0) return CUBLAS_STATUS_INVALID_VALUE;
  *l = new cublasLtMatrixLayoutOpaque_t{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  *p = new cublasLtMatmulPreferenceOpaque_t();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size) {
  int which = -1;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: which = 0; break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: which = 1; break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: which = 2; break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: which = 3; break;
    default: return CUBLAS_STATUS_SUCCESS;
  }
  if (size != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&p->align[which], buf, size);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t* results, int* found) {
  *found = 0;
  if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
  const uint64_t m = op->trans_a == CUBLAS_OP_N ? a->rows : a->cols, ka = op->trans_a == CUBLAS_OP_N ? a->cols : a->rows;
  const uint64_t kb = op->trans_b == CUBLAS_OP_N ? b->rows : b->cols, n = op->trans_b == CUBLAS_OP_N ? b->cols : b->rows;
  if (!operand_type(a->type) || !operand_type(b->type) || c->type != CUDA_R_32F || d->type != CUDA_R_32F)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (ka != kb || c->rows != m || c->cols != n || d->rows != m || d->cols != n) return CUBLAS_STATUS_INVALID_VALUE;
  results[0] = {};
  results[0].state = CUBLAS_STATUS_SUCCESS;
  for (int i = 0; i < 4; ++i) results[0].algo.data[i] = pref->align[i] < 16 ? pref->align[i] : 16;
  *found = 1;
  return CUBLAS_STATUS_SUCCESS;
}

// D[i][j] = alpha sum_l op(A)[i][l] op(B)[l][j] + beta C[i][j], every matrix
// column major with its layout's leading dimension.
cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t op, const void* alpha, const void* a,
                              cublasLtMatrixLayout_t ad, const void* b, cublasLtMatrixLayout_t bd, const void* beta,
                              const void* c, cublasLtMatrixLayout_t cd, void* d, cublasLtMatrixLayout_t dd,
                              const cublasLtMatmulAlgo_t* algo, void*, size_t, cudaStream_t stream) {
  if (algo != nullptr) {  // the alignments the heuristic chose it for
    const void* ptrs[4] = {a, b, c, d};
    for (int i = 0; i < 4; ++i) {
      if (algo->data[i] > 1 && reinterpret_cast<uintptr_t>(ptrs[i]) % algo->data[i] != 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    }
  }
  const bool ta = op->trans_a == CUBLAS_OP_T, tb = op->trans_b == CUBLAS_OP_T;
  const int64_t m = static_cast<int64_t>(dd->rows), n = static_cast<int64_t>(dd->cols);
  const int64_t k = static_cast<int64_t>(ta ? ad->rows : ad->cols);
  if ((ta ? ad->cols : ad->rows) != dd->rows || (tb ? bd->rows : bd->cols) != dd->cols ||
      static_cast<int64_t>(tb ? bd->cols : bd->rows) != k)
    return CUBLAS_STATUS_INVALID_VALUE;
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  // The descriptors as they are now (the caller may destroy them), the
  // product when the stream gets to it.
  std::function<void()> work = [ta, tb, m, n, k, al, be, a, b, c, d, ad = *ad, bd = *bd, cd = *cd, dd = *dd] {
    product(ta, tb, m, n, k, al, be, a, ad, b, bd, c, cd, d, dd);
  };
  if (sluice_emu_submit) {
    sluice_emu_submit(stream, &work);
  } else {
    work();
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"

namespace {

void product(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float al, float be, const void* a,
             const cublasLtMatrixLayoutOpaque_t& ad_, const void* b, const cublasLtMatrixLayoutOpaque_t& bd_,
             const void* c, const cublasLtMatrixLayoutOpaque_t& cd_, void* d, const cublasLtMatrixLayoutOpaque_t& dd_) {
  const cublasLtMatrixLayoutOpaque_t *ad = &ad_, *bd = &bd_, *cd = &cd_, *dd = &dd_;
  const OpenDevice open;
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < m; ++i) {
      float s = 0.0f;
      for (int64_t l = 0; l < k; ++l) {
        const float x = element(a, ad->type, ta ? l + i * ad->ld : i + l * ad->ld);
        const float y = element(b, bd->type, tb ? j + l * bd->ld : l + j * bd->ld);
        s += x * y;
      }
      float r = al * s;
      if (be != 0.0f) r += be * static_cast<const float*>(c)[i + j * cd->ld];
      static_cast<float*>(d)[i + j * dd->ld] = r;
    }
  }
}

}  // namespace
