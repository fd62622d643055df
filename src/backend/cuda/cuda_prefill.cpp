#include "backend/cuda/cuda_prefill.h"

#include <algorithm>
#include <cstdlib>
#include <vector>

#include <fmt/format.h>

#include "backend/cuda/cuda_api.h"
#include "backend/cuda/cuda_check.cuh"
#include "backend/cuda/cuda_gemm_lt.h"
#include "backend/cuda/cuda_to_bf16.cuh"
#include "base/check.h"

namespace sluice::cuda {

PrefillMatmul::PrefillMatmul(int64_t max_scratch_elems) : max_scratch_(max_scratch_elems) {
  if (const char* env = std::getenv("SLUICE_CUDA_GEMM_MIN_TOKENS")) {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (end == env || *end != '\0' || v < 0) {
      fmt::print(stderr, "[sluice] SLUICE_CUDA_GEMM_MIN_TOKENS='{}' is not a token count; using {} / {}\n", env,
                 kMinTokensBf16, kMinTokensDecoded);
    } else if (v == 0) {
      return;  // the path off: every matmul on the GEMV kernels
    } else {
      min_bf16_ = min_decoded_ = v;
    }
  }
  auto lt = GemmLt::create();
  if (!lt.ok()) {
    fmt::print(stderr, "[sluice] cuda: no tensor-core matmuls ({}); prefill runs on the GEMV kernels\n",
               lt.status().message());
    return;
  }
  lt_ = std::move(*lt);
}

PrefillMatmul::~PrefillMatmul() {
  if (x16_) cudaFree(x16_);
  if (w16_) cudaFree(w16_);
  if (ycat_) cudaFree(ycat_);
}

namespace {

// A BF16 matrix cuBLASLt reads in place.
bool bf16_in_place(const WeightView& w) {
  return w.type == DType::kBF16 && w.layout == WeightLayout::kRows && w.n_in % 8 == 0 &&
         reinterpret_cast<uintptr_t>(w.data) % 16 == 0;
}

}  // namespace

void PrefillMatmul::turn_off(const Status& why) {
  fmt::print(stderr, "[sluice] cuda: tensor-core matmul off from here on: {}\n", why.message());
  lt_.reset();
}

bool PrefillMatmul::takes(std::span<const MatmulOut> outs, int64_t n_tok) const {
  if (!lt_ || outs.empty()) return false;
  for (const MatmulOut& o : outs) {
    const WeightView& w = o.w;
    if (bf16_in_place(w) ? n_tok < min_bf16_ : (n_tok < min_decoded_ || !to_bf16_takes(w))) return false;
    if (reinterpret_cast<uintptr_t>(o.y) % 4 != 0) return false;
  }
  return true;
}

bool PrefillMatmul::takes_type(DType type, int64_t n_tok) const {
  if (!lt_) return false;
  if (type == DType::kBF16) return n_tok >= min_bf16_;
  return n_tok >= min_decoded_ && to_bf16_type(type, WeightLayout::kRows);
}

template <class T>
T* PrefillMatmul::grow(T** p, int64_t* cap, int64_t n, cudaStream_t s) {
  if (n > *cap) {
    if (*p) {
      SLUICE_CUDA_OK(cudaStreamSynchronize(s));  // queued GEMMs may still read it
      SLUICE_CUDA_OK(cudaFree(*p));
    }
    SLUICE_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(p), static_cast<size_t>(n) * sizeof(T)));
    *cap = n;
  }
  return *p;
}

uint16_t* PrefillMatmul::x_bf16(int64_t n, cudaStream_t s) { return grow(&x16_, &x16_cap_, n, s); }

bool PrefillMatmul::run(std::span<const MatmulOut> outs, const float* x, int64_t n_in, int64_t n_tok, cudaStream_t s) {
  CHECK(takes(outs, n_tok) && reinterpret_cast<uintptr_t>(x) % 16 == 0);
  uint16_t* xb = x_bf16(n_tok * n_in, s);
  launch_floats_to_bf16(x, n_tok * n_in, xb, s);
  return run_bf16(outs, xb, n_in, n_tok, s);
}

bool PrefillMatmul::run_bf16(std::span<const MatmulOut> outs, const uint16_t* xb, int64_t n_in, int64_t n_tok,
                             cudaStream_t s) {
  CHECK(takes(outs, n_tok) && reinterpret_cast<uintptr_t>(xb) % 16 == 0);
  if (const int64_t total = merged_rows(outs, n_in); total > 0) {
    const Status st = run_merged(outs, xb, total, n_in, n_tok, s);
    if (st.ok()) return true;
    turn_off(st);
    return false;
  }
  for (const MatmulOut& o : outs) {
    const WeightView& w = o.w;
    CHECK(w.n_in == n_in);
    Status st;
    if (w.type == DType::kBF16 && w.layout == WeightLayout::kRows) {
      st = lt_->run(reinterpret_cast<const uint16_t*>(w.data), xb, o.y, w.n_out, n_in, n_tok, w.n_out, s);
    } else {
      // Slices of rows that fit the scratch, each decoded then multiplied.
      const int64_t rows = std::max<int64_t>(1, std::min(w.n_out, max_scratch_ / n_in));
      uint16_t* wb = grow(&w16_, &w16_cap_, rows * n_in, s);
      for (int64_t r0 = 0; r0 < w.n_out && st.ok(); r0 += rows) {
        const int64_t n = std::min(rows, w.n_out - r0);
        launch_weights_to_bf16(w, r0, n, wb, s);
        st = lt_->run(wb, xb, o.y + r0, n, n_in, n_tok, w.n_out, s);
      }
    }
    if (!st.ok()) {
      turn_off(st);
      return false;
    }
  }
  return true;
}

bool PrefillMatmul::takes_t(const WeightView& w, const float* dy, int64_t n_tok) const {
  if (!lt_ || w.n_out == 0 || w.n_in % 8 != 0 || w.n_out % 8 != 0 || reinterpret_cast<uintptr_t>(dy) % 16 != 0)
    return false;
  return bf16_in_place(w) ? n_tok >= min_bf16_ : n_tok >= min_decoded_ && to_bf16_takes(w);
}

bool PrefillMatmul::run_t(const WeightView& w, const float* dy, float* dx, int64_t n_tok, bool accumulate,
                          cudaStream_t s) {
  CHECK(takes_t(w, dy, n_tok));
  const int64_t n_in = w.n_in, n_out = w.n_out;
  const bool in_place = bf16_in_place(w);
  // Slices of a multiple of 8 rows, so that each slice's columns of dy keep
  // 16-byte alignment; a BF16 matrix read in place is one slice.
  const int64_t rows = in_place ? n_out : std::clamp<int64_t>(max_scratch_ / n_in / 8 * 8, 8, n_out);
  uint16_t* dyb = grow(&x16_, &x16_cap_, n_tok * n_out, s);
  uint16_t* wb = in_place ? nullptr : grow(&w16_, &w16_cap_, rows * n_in, s);
  // dx[t] (+)= dy[t][r0 .. r0 + n) times the slice's rows: x = dy's columns, y = the rows.
  auto slice = [&](int64_t r0, int64_t n, const uint16_t* rows_at) {
    return GemmLt::Gemm{.type = CUDA_R_16BF, .m = n_tok, .n = n_in, .k = n, .x = dyb + r0, .ldx = n_out,
                        .y = rows_at, .ldy = n_in, .c = dx, .ldc = n_in, .beta = accumulate || r0 > 0 ? 1.0f : 0.0f};
  };
  const uint16_t* rows_at = in_place ? reinterpret_cast<const uint16_t*>(w.data) : wb;
  // Both slice shapes planned before anything is enqueued: a refusal leaves dx as it was.
  const int64_t last = n_out - (n_out - 1) / rows * rows;
  for (const GemmLt::Gemm& g : {slice(0, rows, rows_at), slice(n_out - last, last, rows_at)}) {
    if (const Status st = lt_->plan(g); !st.ok()) {
      turn_off(st);
      return false;
    }
  }
  launch_floats_to_bf16(dy, n_tok * n_out, dyb, s);
  for (int64_t r0 = 0; r0 < n_out; r0 += rows) {
    const int64_t n = std::min(rows, n_out - r0);
    if (!in_place) launch_weights_to_bf16(w, r0, n, wb, s);
    lt_->run_planned(slice(r0, n, rows_at), s, " (SLUICE_CUDA_GEMM_MIN_TOKENS=0 turns the tensor-core path off)");
  }
  return true;
}

int64_t PrefillMatmul::merged_rows(std::span<const MatmulOut> outs, int64_t n_in) const {
  if (outs.size() < 2 || outs.size() > 4) return 0;
  auto is_bf16 = [](const WeightView& w) { return w.type == DType::kBF16 && w.layout == WeightLayout::kRows; };
  const bool bf16 = is_bf16(outs[0].w);
  int64_t total = 0, smallest = outs[0].w.n_out;
  for (size_t p = 0; p < outs.size(); ++p) {
    const WeightView& w = outs[p].w;
    if (is_bf16(w) != bf16) return 0;
    // BF16 parts must follow each other in memory (prepare_weights' arena keeps a group's order).
    if (bf16 && p > 0 && w.data != outs[p - 1].w.data + outs[p - 1].w.n_out * n_in * 2) return 0;
    total += w.n_out;
    smallest = std::min(smallest, w.n_out);
  }
  if (smallest >= kMergeBelowRows || (!bf16 && total * n_in > max_scratch_)) return 0;
  return total;
}

Status PrefillMatmul::run_merged(std::span<const MatmulOut> outs, const uint16_t* xb, int64_t total, int64_t n_in,
                                 int64_t n_tok, cudaStream_t s) {
  const uint16_t* w = reinterpret_cast<const uint16_t*>(outs[0].w.data);
  if (outs[0].w.type != DType::kBF16) {
    uint16_t* wb = grow(&w16_, &w16_cap_, total * n_in, s);
    int64_t r = 0;
    for (const MatmulOut& o : outs) {
      launch_weights_to_bf16(o.w, 0, o.w.n_out, wb + r * n_in, s);
      r += o.w.n_out;
    }
    w = wb;
  }
  float* y = grow(&ycat_, &ycat_cap_, n_tok * total, s);
  const Status st = lt_->run(w, xb, y, total, n_in, n_tok, total, s);
  if (!st.ok()) return st;
  ColumnParts parts{.n_parts = static_cast<int>(outs.size())};
  int64_t end = 0;
  for (size_t p = 0; p < outs.size(); ++p) {
    end += outs[p].w.n_out;
    parts.y[p] = outs[p].y;
    parts.end[p] = end;
  }
  launch_split_columns(y, n_tok, parts, s);
  return Status();
}

double measure_gemm_bf16_tflops(int64_t n_tok, int64_t n_in, int64_t n_out, int reps) {
  auto lt = GemmLt::create();
  if (!lt.ok()) return 0;
  // Random BF16 of magnitude 2^-8 .. 2 and either sign (zeros would flatter the clocks).
  const size_t n_w = static_cast<size_t>(n_out * n_in), n_x = static_cast<size_t>(n_tok * n_in);
  std::vector<uint16_t> host(std::max(n_w, n_x));
  uint32_t state = 2024;
  for (uint16_t& v : host) {
    state = state * 1664525u + 1013904223u;
    v = static_cast<uint16_t>(0x3b80u + ((state >> 16) % 0x480u)) | static_cast<uint16_t>((state >> 8) & 0x8000u);
  }
  void *w = nullptr, *x = nullptr, *y = nullptr;
  SLUICE_CUDA_OK(cudaMalloc(&w, n_w * 2));
  SLUICE_CUDA_OK(cudaMalloc(&x, n_x * 2));
  SLUICE_CUDA_OK(cudaMalloc(&y, static_cast<size_t>(n_tok * n_out) * 4));
  SLUICE_CUDA_OK(cudaMemcpy(w, host.data(), n_w * 2, cudaMemcpyHostToDevice));
  SLUICE_CUDA_OK(cudaMemcpy(x, host.data(), n_x * 2, cudaMemcpyHostToDevice));
  cudaStream_t s = nullptr;
  SLUICE_CUDA_OK(cudaStreamCreate(&s));
  cudaEvent_t t0 = nullptr, t1 = nullptr;
  SLUICE_CUDA_OK(cudaEventCreate(&t0));
  SLUICE_CUDA_OK(cudaEventCreate(&t1));
  auto call = [&] {
    return (*lt)->run(static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(x), static_cast<float*>(y), n_out,
                      n_in, n_tok, n_out, s);
  };
  double tflops = 0;
  bool ok = true;
  for (int i = 0; i < 3 && ok; ++i) ok = call().ok();  // warm-up (and the plan)
  std::vector<double> runs;
  for (int r = 0; r < 5 && ok; ++r) {
    SLUICE_CUDA_OK(cudaEventRecord(t0, s));
    for (int i = 0; i < reps && ok; ++i) ok = call().ok();
    SLUICE_CUDA_OK(cudaEventRecord(t1, s));
    SLUICE_CUDA_OK(cudaEventSynchronize(t1));
    float ms = 0;
    SLUICE_CUDA_OK(cudaEventElapsedTime(&ms, t0, t1));
    runs.push_back(2.0 * static_cast<double>(n_tok * n_in) * static_cast<double>(n_out) * reps / (ms * 1e-3) / 1e12);
  }
  if (ok) {
    std::sort(runs.begin(), runs.end());
    tflops = runs[runs.size() / 2];
  }
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  cudaStreamDestroy(s);
  cudaFree(w);
  cudaFree(x);
  cudaFree(y);
  return tflops;
}

}  // namespace sluice::cuda
