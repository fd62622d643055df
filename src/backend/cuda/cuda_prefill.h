// Matmuls of many tokens (prefill, large batches) on the tensor cores: the
// activations are rounded to BF16 once per call, each matrix that is not BF16
// already is decoded to BF16 into a scratch matrix (cuda_to_bf16.cuh), and
// cuBLASLt multiplies (cuda_gemm_lt.h) with float sums and float output.
//
// Which calls come here: n_tok at or above the threshold of the matrix's kind
// (kMinTokensBf16 for BF16, kMinTokensDecoded for the types decoded first;
// SLUICE_CUDA_GEMM_MIN_TOKENS sets both, 0 turns the path off), for matrices
// to_bf16_takes() reads or BF16 (F32 stays on the exact float kernels).
// Below the threshold the GEMV kernels (cuda_matmul.cuh, cuda_matmul_q8.cuh)
// run as before, and a token's output there still does not depend on the
// batch around it; here it does, within BF16 rounding (the per-op tests bound
// it against the reference: x and decoded weights rounded to BF16 give an
// error of ~1e-3 of each output's scale).
//
// Parts that share x (q/k/v) go as one GEMM when one of them has fewer than
// kMergeBelowRows rows (k and v of GQA alone would fill few SMs): their BF16
// rows one after the other (decoded into the scratch, or BF16 matrices that
// lie so in memory), into a float scratch [n_tok, rows of all], then split
// into each part's y (cuda_to_bf16.cuh).
//
// Scratch (device): x in BF16 [n_tok, n_in] (converted here, or written by
// the kernel before: run_bf16), and one decoded matrix of at most
// kMaxScratchElems (a larger matrix, the output head, goes in slices of rows),
// and the merged output.
// Both grow to the largest call seen and are kept; growing waits for the
// stream. If cuBLASLt cannot be initialised, or refuses a call, the path says
// so once on stderr and turns itself off; the caller then runs the GEMV kernels.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>

#include <cuda_runtime.h>

#include "backend/backend.h"

namespace sluice::cuda {

class GemmLt;

class PrefillMatmul {
 public:
  // BF16 weights need no decoding: the GEMM beats the GEMV kernel (which reads
  // the matrix once per 8 tokens) from a couple of passes on.
  static constexpr int64_t kMinTokensBf16 = 16;
  // Decoding writes and re-reads 2 bytes a weight, against the 8-bit kernels'
  // ~0.6 bytes a weight per 8 tokens: worth it from a few more passes on.
  static constexpr int64_t kMinTokensDecoded = 32;
  // 128 MiB of BF16: every Llama-8B matrix but the output head in one piece.
  static constexpr int64_t kMaxScratchElems = int64_t{64} << 20;
  static constexpr int64_t kMergeBelowRows = 2048;

  // Tries cuBLASLt; without it the path is off (said once on stderr).
  // max_scratch_elems: the decoded matrix's scratch cap (tests make it small
  // to cut matrices in slices).
  explicit PrefillMatmul(int64_t max_scratch_elems = kMaxScratchElems);
  ~PrefillMatmul();
  PrefillMatmul(const PrefillMatmul&) = delete;
  PrefillMatmul& operator=(const PrefillMatmul&) = delete;

  // Whether the path is on (cuBLASLt initialised, not turned off).
  bool on() const { return lt_ != nullptr; }
  // The fewest tokens a call it takes has (either kind of matrix).
  int64_t min_tokens() const { return std::min(min_bf16_, min_decoded_); }
  // Whether run() takes every one of outs at n_tok tokens.
  bool takes(std::span<const MatmulOut> outs, int64_t n_tok) const;
  // Whether it takes matrices of this type in GGUF rows at n_tok tokens
  // (alignment aside): what rounds a call's activations to BF16.
  bool takes_type(DType type, int64_t n_tok) const;
  // y = W x for every out, on s.  x: [n_tok, n_in] (device, 16-byte aligned)
  // Returns false when cuBLASLt failed (said once; the path is off from then
  // on): the caller computes every out again on the GEMV kernels.
  bool run(std::span<const MatmulOut> outs, const float* x, int64_t n_in, int64_t n_tok, cudaStream_t s);
  // The same with x already in BF16: a kernel before the matmul (the norm, the
  // activation) writes x_bf16(n_tok * n_in, s) as it writes its float output,
  // and run_bf16 reads it there, so no conversion pass is left between them.
  // x_bf16 grows the scratch (after a stream sync) and returns it: valid until
  // the next call of run, run_bf16 or run_t.
  uint16_t* x_bf16(int64_t n, cudaStream_t s);
  //   xb: [n_tok, n_in] BF16, what x_bf16 returned; otherwise as run().
  bool run_bf16(std::span<const MatmulOut> outs, const uint16_t* xb, int64_t n_in, int64_t n_tok, cudaStream_t s);

  // Training's input gradient through a frozen matrix on the tensor cores
  // (TrainOps::matmul_t), with dy and the weights rounded to BF16 as the
  // forward rounds x and the weights, at the same token thresholds.
  // Whether run_t() takes w and dy at n_tok tokens: the forward's types with
  // n_in and n_out multiples of 8, dy 16-byte aligned.
  bool takes_t(const WeightView& w, const float* dy, int64_t n_tok) const;
  // dx[t] = W^T dy[t] (+= with accumulate), on s.
  //   dy: [n_tok, w.n_out]   dx: [n_tok, w.n_in]   (device)
  // A matrix past the scratch goes in slices of rows, each adding its share.
  // Returns false, dx untouched, when cuBLASLt refuses the shape (said once;
  // the path is off from then on): the caller computes dx on its own kernels.
  bool run_t(const WeightView& w, const float* dy, float* dx, int64_t n_tok, bool accumulate, cudaStream_t s);

 private:
  // A device scratch of at least n elements, grown (after a stream sync) when short.
  template <class T>
  static T* grow(T** p, int64_t* cap, int64_t n, cudaStream_t s);
  // Says why the path turns off, and turns it off.
  void turn_off(const Status& why);
  // The rows of all parts when run() merges them into one GEMM (see above), else 0.
  int64_t merged_rows(std::span<const MatmulOut> outs, int64_t n_in) const;
  // One GEMM over the parts' rows, split into their ys.
  Status run_merged(std::span<const MatmulOut> outs, const uint16_t* xb, int64_t total, int64_t n_in, int64_t n_tok,
                    cudaStream_t s);

  std::unique_ptr<GemmLt> lt_;  // null: the path is off
  int64_t max_scratch_;
  int64_t min_bf16_ = kMinTokensBf16, min_decoded_ = kMinTokensDecoded;
  uint16_t* x16_ = nullptr;  // [n_tok, n_in]
  int64_t x16_cap_ = 0;
  uint16_t* w16_ = nullptr;  // a decoded matrix (or slice of rows)
  int64_t w16_cap_ = 0;
  float* ycat_ = nullptr;    // a merged GEMM's output
  int64_t ycat_cap_ = 0;
};

}  // namespace sluice::cuda
