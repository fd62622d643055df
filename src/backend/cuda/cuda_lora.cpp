// CudaBackend's LoRA term (backend.h LoraArgs): segments of many tokens as
// two F32 GEMMs on cuBLASLt, the rest in one kernel launch.
//
// A segment of kLoraGemmMinTokens or more tokens (a prefill with an adapter,
// training's micro-batches) is u = x A^T, then y += scale u B^T, u kept
// where the caller asks (the backward's) or in scratch: the factors are read
// once per GEMM tile, not once per token as the kernel reads them. Shorter
// segments, every one a decode step has, stay on launch_lora (one block per
// token), so a token's rows there do not depend on the batch around it, and
// a recorded step (cuda_step_graph.h, at most 64 tokens) never meets a GEMM.
// Up to kLoraInlineSegs segments travel in the launch's arguments; more go
// through a Mirror (a staging copy when the table changes).
#include <algorithm>

#include <fmt/format.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_gemm_lt.h"
#include "base/check.h"

namespace sluice::cuda {

GemmLt* CudaBackend::f32_gemm() {
  if (!f32_gemm_tried_) {
    f32_gemm_tried_ = true;
    settle();  // create() allocates its workspace
    auto g = GemmLt::create();
    if (g.ok()) f32_gemm_ = std::move(*g);
    else fmt::print(stderr, "[sluice] cuda: LoRA terms and gradients on plain kernels ({})\n", g.status().message());
  }
  return f32_gemm_.get();
}

bool CudaBackend::f32_gemms(std::span<const GemmLt::Gemm> gemms) {
  if (f32_gemm() == nullptr) return false;
  for (const GemmLt::Gemm& g : gemms) {
    if (const Status st = f32_gemm_->plan(g); !st.ok()) {
      fmt::print(stderr, "[sluice] cuda: LoRA terms and gradients on plain kernels from here on: {}\n", st.message());
      f32_gemm_.reset();
      return false;
    }
  }
  for (const GemmLt::Gemm& g : gemms) f32_gemm_->run_planned(g, stream_);
  return true;
}

bool CudaBackend::lora_gemms(const LoraArgs& a, const LoraSegment& sg) {
  const int64_t n = sg.n_tok, r = sg.rank;
  float* u = a.u != nullptr ? a.u + sg.tok0 * a.u_stride : scratch(kLoraU, n * r);
  const int64_t ldu = a.u != nullptr ? a.u_stride : r;
  using G = GemmLt::Gemm;
  const G gemms[2] = {
      // u = x A^T:  [n, n_in] [n_in, r]   (A: [r, n_in])
      G{.type = CUDA_R_32F, .m = n, .n = r, .k = a.n_in, .x = a.x + sg.tok0 * a.n_in, .ldx = a.n_in, .y = sg.a,
        .ldy = a.n_in, .trans_y = true, .c = u, .ldc = ldu},
      // y += scale u B^T:  [n, r] [r, n_out]   (B: [n_out, r])
      G{.type = CUDA_R_32F, .m = n, .n = a.n_out, .k = r, .x = u, .ldx = ldu, .y = sg.b, .ldy = r, .trans_y = true,
        .c = a.y + sg.tok0 * a.n_out, .ldc = a.n_out, .alpha = sg.scale, .beta = 1.0f},
  };
  return f32_gemms(gemms);
}

void CudaBackend::lora(const LoraArgs& a) {
  flush_add();
  lora_pack_.clear();
  int32_t n = 0;
  for (const LoraSegment& sg : a.segs) {
    CHECK(sg.rank > 0 && sg.rank <= kLoraMaxRank);
    if (sg.n_tok >= kLoraGemmMinTokens && lora_gemms(a, sg)) continue;
    lora_pack_.push_back({.a = sg.a, .b = sg.b, .tok0 = sg.tok0, .n_tok = static_cast<int32_t>(sg.n_tok),
                          .rank = static_cast<int32_t>(sg.rank), .scale = sg.scale, .first = n});
    n += static_cast<int32_t>(sg.n_tok);
  }
  if (n == 0) return;
  LoraSegs segs{.n = static_cast<int32_t>(lora_pack_.size())};
  if (lora_pack_.size() <= kLoraInlineSegs) {  // in the launch: a decode step's seven calls a layer copy nothing
    std::copy(lora_pack_.begin(), lora_pack_.end(), segs.in_args);
  } else {
    segs.dev = static_cast<const LoraSegDev*>(
        lora_segs_.upload(lora_pack_.data(), lora_pack_.size() * sizeof(LoraSegDev), stream_));
  }
  launch_lora(segs, n, a.x, a.y, a.n_in, a.n_out, a.u, a.u_stride, stream_);
}

}  // namespace sluice::cuda
