#include "backend/cuda/cuda_train_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.cuh"
#include "backend/cuda/cuda_kernels.cuh"
#include "backend/cuda/cuda_prefill.h"
#include "base/check.h"

namespace sluice::cuda {
namespace {

// matmul_t's decoded panel: about 64 MiB of f32 rows (at least one row).
constexpr int64_t kPanelFloats = int64_t{16} << 20;
// lora_backward's du: [n_tok, rank] doubles, rank at most this.
constexpr int64_t kMaxLoraRank = 256;

int64_t panel_rows(int64_t n_in, int64_t n_out) {
  return std::clamp<int64_t>(kPanelFloats / std::max<int64_t>(1, n_in), 1, std::max<int64_t>(1, n_out));
}

}  // namespace

CudaTrainOps::CudaTrainOps(CudaBackend& be) : be_(be), areas_(kNumAreas, {nullptr, 0}) {}

CudaTrainOps::~CudaTrainOps() {
  cudaStreamSynchronize(stream());
  for (auto& [p, n] : areas_)
    if (p) cudaFree(p);
  if (sent_) cudaEventDestroy(sent_);
  if (pinned_) cudaFreeHost(pinned_);
  if (losses_copied_) cudaEventDestroy(losses_copied_);
  if (loss_host_) cudaFreeHost(loss_host_);
}

cudaStream_t CudaTrainOps::stream() const { return be_.stream(); }

bool CudaTrainOps::supports_matmul_t(DType type, WeightLayout layout) const {
  return (type == DType::kF32 && layout == WeightLayout::kRows) || weights_to_f32_type(type, layout);
}

void* CudaTrainOps::area(int which, size_t bytes) {
  auto& [p, cap] = areas_[static_cast<size_t>(which)];
  if (bytes > cap) {
    if (p) {  // kernels still queued may read the old one
      SLUICE_CUDA_OK(cudaStreamSynchronize(stream()));
      SLUICE_CUDA_OK(cudaFree(p));
    }
    SLUICE_CUDA_OK(cudaMalloc(&p, bytes));
    cap = bytes;
    if (which == kRows) rows_on_device_.clear();
  }
  return p;
}

void* CudaTrainOps::pinned(size_t bytes) {
  if (sent_) SLUICE_CUDA_OK(cudaEventSynchronize(sent_));
  if (bytes > pinned_cap_) {
    if (pinned_) SLUICE_CUDA_OK(cudaFreeHost(pinned_));
    pinned_cap_ = std::max(bytes, 2 * pinned_cap_);
    SLUICE_CUDA_OK(cudaMallocHost(&pinned_, pinned_cap_));
  }
  return pinned_;
}

void CudaTrainOps::stage(std::initializer_list<std::pair<const void*, size_t>> parts, const void** dev) {
  auto padded = [](size_t b) { return (b + 255) / 256 * 256; };
  size_t total = 0;
  for (const auto& [p, b] : parts) total += p ? padded(b) : 0;
  auto* d = static_cast<uint8_t*>(area(kStaged, std::max<size_t>(total, 1)));
  auto* h = static_cast<uint8_t*>(pinned(std::max<size_t>(total, 1)));
  size_t at = 0;
  for (const auto& [p, b] : parts) {
    *dev++ = p ? d + at : nullptr;
    if (p == nullptr) continue;
    std::memcpy(h + at, p, b);
    at += padded(b);
  }
  if (total == 0) return;
  SLUICE_CUDA_OK(cudaMemcpyAsync(d, h, total, cudaMemcpyHostToDevice, stream()));
  if (!sent_) SLUICE_CUDA_OK(cudaEventCreateWithFlags(&sent_, cudaEventDisableTiming));
  SLUICE_CUDA_OK(cudaEventRecord(sent_, stream()));
}

void CudaTrainOps::reserve(const TrainScratchNeeds& n) {
  be_.flush_pending();
  const int64_t n_in = std::max<int64_t>(1, n.n_in_max);
  area(kPanel, static_cast<size_t>(std::min(kPanelFloats, n_in * std::max<int64_t>(1, kPanelFloats / n_in)) *
                                   static_cast<int64_t>(sizeof(float))));
  area(kDu, static_cast<size_t>(n.n_tok * kMaxLoraRank) * sizeof(double));
  area(kDsum, static_cast<size_t>(n.n_tok * n.n_head) * sizeof(double));
  area(kRows, static_cast<size_t>(n.n_tok) * sizeof(TrainRowDev));
  finish_losses();
  reserve_losses(n.n_tok);
  pending_losses_.reserve(64);
  pinned(static_cast<size_t>(n.n_tok) * sizeof(TrainRowDev));
  rows_.reserve(static_cast<size_t>(n.n_tok));
}

void CudaTrainOps::reserve_losses(int64_t rows) {
  CHECK(pending_losses_.empty());
  if (rows <= loss_cap_) return;
  if (loss_host_) SLUICE_CUDA_OK(cudaFreeHost(loss_host_));  // nothing pending: its last copy was waited for
  loss_cap_ = std::max(rows, 2 * loss_cap_);
  const auto cap = static_cast<size_t>(loss_cap_);
  SLUICE_CUDA_OK(cudaMallocHost(reinterpret_cast<void**>(&loss_host_), cap * (sizeof(int32_t) + sizeof(double))));
  area(kTargets, cap * sizeof(int32_t));
  area(kLoss, cap * sizeof(double));
}

void CudaTrainOps::matmul_t(const MatmulTArgs& a) {
  be_.flush_pending();
  CHECK(supports_matmul_t(a.w.type, a.w.layout));
  if (a.n_tok == 0 || a.w.n_in == 0) return;
  // A streamed matrix (--gpu-budget) or a weight store's (--mem-budget) is
  // copied into device memory first.
  const CudaBackend::HeldWeight held = be_.hold_weight(a.w);
  matmul_t_held(a, held.w);
  be_.release_weight(held);
}

bool CudaTrainOps::matmul_t_rounds_to_bf16(DType type, int64_t n_tok) const {
  return be_.tensor_cores().takes_type(type, n_tok);  // never F32
}

void CudaTrainOps::matmul_t_held(const MatmulTArgs& a, const WeightView& w) {
  // Many tokens through a matrix the forward multiplies on the tensor cores
  // go back on them too, rounded to BF16 as the forward rounds (F32 stays
  // on the exact kernels both ways).
  PrefillMatmul& tc = be_.tensor_cores();
  if (tc.takes_t(w, a.dy, a.n_tok) && tc.run_t(w, a.dy, a.dx, a.n_tok, a.accumulate, stream())) return;
  if (w.type == DType::kF32) {  // rows read in place, in panels only to bound a thread's loop
    const auto* wf = reinterpret_cast<const float*>(w.data);
    launch_matmul_t_panel(wf, w.n_out, 0, a.dy, w.n_out, a.dx, w.n_in, a.n_tok, !a.accumulate, stream());
    return;
  }
  CHECK(weights_to_f32_takes(w));
  const int64_t rows = panel_rows(w.n_in, w.n_out);
  auto* panel = static_cast<float*>(area(kPanel, static_cast<size_t>(rows * w.n_in) * sizeof(float)));
  for (int64_t r0 = 0; r0 < w.n_out; r0 += rows) {
    const int64_t n = std::min(rows, w.n_out - r0);
    launch_weights_to_f32(w, r0, n, panel, stream());
    launch_matmul_t_panel(panel, n, r0, a.dy, w.n_out, a.dx, w.n_in, a.n_tok, r0 == 0 && !a.accumulate, stream());
  }
  if (w.n_out == 0 && !a.accumulate) {
    SLUICE_CUDA_OK(cudaMemsetAsync(a.dx, 0, static_cast<size_t>(a.n_tok * w.n_in) * sizeof(float), stream()));
  }
}

void CudaTrainOps::rmsnorm_backward(const RmsNormBackArgs& a) {
  be_.flush_pending();
  launch_rmsnorm_backward(a.x, a.w, a.dy, a.dx, a.n_tok, a.n, a.eps, stream());
}

void CudaTrainOps::rope(const RopeArgs& a) {
  be_.flush_pending();
  launch_train_rope(a.x, a.cos_sin, a.n_tok, a.n_head, a.head_dim, a.n_rot, a.layout, a.inverse, stream());
}

void CudaTrainOps::glu(const GluArgs& a) {
  be_.flush_pending();
  launch_train_glu(a.g, a.u, a.h, a.n_tok * a.n_ff, a.act, stream());
}

void CudaTrainOps::glu_backward(const GluBackArgs& a) {
  be_.flush_pending();
  launch_glu_backward(a.g, a.u, a.dh, a.dg, a.du, a.n_tok * a.n_ff, a.act, stream());
}

TrainAttnDev CudaTrainOps::attn_dev(const TrainAttentionArgs& a) {
  rows_.clear();
  for (const TrainSeq& sq : a.seqs) {
    for (int64_t t = sq.tok0; t < sq.tok0 + sq.n_tok; ++t) {
      rows_.push_back({.row = static_cast<int32_t>(t), .tok0 = static_cast<int32_t>(sq.tok0),
                       .n_tok = static_cast<int32_t>(sq.n_tok)});
    }
  }
  const size_t bytes = rows_.size() * sizeof(TrainRowDev);
  auto* dev = static_cast<TrainRowDev*>(area(kRows, std::max<size_t>(bytes, 1)));
  const bool changed =  // (memcmp is not given the empty vectors' null pointers)
      rows_on_device_.size() != rows_.size() ||
      (bytes > 0 && std::memcmp(rows_on_device_.data(), rows_.data(), bytes) != 0);
  if (bytes > 0 && changed) {
    // Stream-ordered: kernels queued before this copy still read the old rows.
    rows_on_device_ = rows_;
    std::memcpy(pinned(bytes), rows_.data(), bytes);
    SLUICE_CUDA_OK(cudaMemcpyAsync(dev, pinned_, bytes, cudaMemcpyHostToDevice, stream()));
    if (!sent_) SLUICE_CUDA_OK(cudaEventCreateWithFlags(&sent_, cudaEventDisableTiming));
    SLUICE_CUDA_OK(cudaEventRecord(sent_, stream()));
  }
  CHECK(a.head_dim <= kTrainMaxHeadDim && a.n_head_kv > 0 && a.n_head % a.n_head_kv == 0);
  return TrainAttnDev{.rows = dev, .n_rows = static_cast<int32_t>(rows_.size()),
                      .n_head = static_cast<int32_t>(a.n_head), .n_head_kv = static_cast<int32_t>(a.n_head_kv),
                      .head_dim = static_cast<int32_t>(a.head_dim), .window = static_cast<int32_t>(a.window),
                      .scale = a.scale, .softcap = a.softcap, .q = a.q, .k = a.k, .v = a.v, .out = a.out,
                      .lse = a.lse};
}

void CudaTrainOps::attention(const TrainAttentionArgs& a) {
  be_.flush_pending();
  launch_train_attention(attn_dev(a), stream());
}

void CudaTrainOps::attention_backward(const TrainAttentionBackArgs& b) {
  be_.flush_pending();
  const TrainAttnDev a = attn_dev(b.fwd);
  int64_t rows_end = 0;  // dsum is indexed by row
  for (const TrainSeq& sq : b.fwd.seqs) rows_end = std::max(rows_end, sq.tok0 + sq.n_tok);
  auto* dsum = static_cast<double*>(area(kDsum, static_cast<size_t>(std::max<int64_t>(1, rows_end * b.fwd.n_head)) *
                                                    sizeof(double)));
  launch_train_attention_backward(a, b.dout, b.dq, b.dk, b.dv, dsum, stream());
}

void CudaTrainOps::cross_entropy(const CrossEntropyArgs& a) {
  be_.flush_pending();
  for (int64_t t = 0; t < a.n_tok; ++t) CHECK(a.targets[t] < a.n_vocab);
  if (a.n_tok > 0) {
    if (loss_rows_ + a.n_tok > loss_cap_) {
      finish_losses();
      reserve_losses(a.n_tok);
    }
    // Each call's rows of the staging areas stay its own until finish_losses().
    const int64_t at = loss_rows_;
    auto* host_targets = reinterpret_cast<int32_t*>(loss_host_) + at;
    double* host_loss = host_losses() + at;
    auto* targets = static_cast<int32_t*>(areas_[kTargets].first) + at;
    auto* loss = static_cast<double*>(areas_[kLoss].first) + at;
    const size_t tb = static_cast<size_t>(a.n_tok) * sizeof(int32_t), lb = static_cast<size_t>(a.n_tok) * sizeof(double);
    std::memcpy(host_targets, a.targets, tb);
    SLUICE_CUDA_OK(cudaMemcpyAsync(targets, host_targets, tb, cudaMemcpyHostToDevice, stream()));
    launch_cross_entropy(a.logits, targets, loss, a.n_tok, a.n_vocab, a.grad_scale, stream());
    SLUICE_CUDA_OK(cudaMemcpyAsync(host_loss, loss, lb, cudaMemcpyDeviceToHost, stream()));
    if (!losses_copied_) SLUICE_CUDA_OK(cudaEventCreateWithFlags(&losses_copied_, cudaEventDisableTiming));
    SLUICE_CUDA_OK(cudaEventRecord(losses_copied_, stream()));
    pending_losses_.push_back({.dst = a.loss, .at = at, .n = a.n_tok});
    loss_rows_ += a.n_tok;
  }
  if (!a.deferred) finish_losses();  // the losses are the caller's on return
}

void CudaTrainOps::finish_losses() {
  if (pending_losses_.empty()) return;
  SLUICE_CUDA_OK(cudaEventSynchronize(losses_copied_));
  for (const PendingLoss& p : pending_losses_)
    std::memcpy(p.dst, host_losses() + p.at, static_cast<size_t>(p.n) * sizeof(double));
  pending_losses_.clear();
  loss_rows_ = 0;
}

void CudaTrainOps::lora_backward(const LoraBackArgs& a) {
  be_.flush_pending();
  CHECK(a.rank > 0 && a.rank <= kMaxLoraRank);
  if (a.n_tok == 0) return;
  if (a.n_tok >= std::max(kLoraGemmMinTokens, be_.batch_invariant_tokens() + 1) && lora_backward_gemms(a)) return;
  auto* du = static_cast<double*>(area(kDu, static_cast<size_t>(a.n_tok * a.rank) * sizeof(double)));
  launch_lora_du(a.b, a.dy, du, a.n_tok, a.n_out, a.rank, a.scale, stream());
  launch_lora_db(a.dy, a.u, a.db, a.n_tok, a.n_out, a.rank, a.scale, stream());
  launch_lora_da(du, a.x, a.da, a.n_tok, a.n_in, a.rank, stream());
  if (a.dx != nullptr) launch_lora_dx(du, a.a, a.dx, a.n_tok, a.n_in, a.rank, stream());
}

bool CudaTrainOps::lora_backward_gemms(const LoraBackArgs& a) {
  // du = s dy B: [n_tok, rank], in the double scratch's first half.
  auto* du = static_cast<float*>(area(kDu, static_cast<size_t>(a.n_tok * a.rank) * sizeof(double)));
  using G = GemmLt::Gemm;
  const int64_t t = a.n_tok, r = a.rank;
  const G gemms[4] = {
      // du = s dy B:  [t, n_out] [n_out, r]
      G{.type = CUDA_R_32F, .m = t, .n = r, .k = a.n_out, .x = a.dy, .ldx = a.n_out, .y = a.b, .ldy = r, .c = du,
        .ldc = r, .alpha = a.scale},
      // dB += s dy^T u:  [n_out, t] [t, r]
      G{.type = CUDA_R_32F, .m = a.n_out, .n = r, .k = t, .x = a.dy, .ldx = a.n_out, .trans_x = true, .y = a.u,
        .ldy = r, .c = a.db, .ldc = r, .alpha = a.scale, .beta = 1.0f},
      // dA += du^T x:  [r, t] [t, n_in]
      G{.type = CUDA_R_32F, .m = r, .n = a.n_in, .k = t, .x = du, .ldx = r, .trans_x = true, .y = a.x, .ldy = a.n_in,
        .c = a.da, .ldc = a.n_in, .beta = 1.0f},
      // dx += du A:  [t, r] [r, n_in]
      G{.type = CUDA_R_32F, .m = t, .n = a.n_in, .k = r, .x = du, .ldx = r, .y = a.a, .ldy = a.n_in, .c = a.dx,
        .ldc = a.n_in, .beta = 1.0f},
  };
  return be_.f32_gemms(std::span(gemms, a.dx != nullptr ? 4 : 3));
}

void CudaTrainOps::add_rows(const AddRowsArgs& a) {
  be_.flush_pending();
  launch_add_rows(a.x, a.v, a.n_tok, a.n, stream());
}

void CudaTrainOps::adamw(const AdamWArgs& a) {
  be_.flush_pending();
  const double bc1 = 1.0 - std::pow(static_cast<double>(a.beta1), static_cast<double>(a.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(a.beta2), static_cast<double>(a.step));
  launch_adamw(a.p, a.g, a.m, a.v, a.n, a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, bc1, bc2, stream());
}

void CudaTrainOps::gather_rows(const GatherRowsArgs& a) {
  be_.flush_pending();
  if (a.n_rows == 0 || a.n == 0) return;
  const void* idx = nullptr;
  stage({{a.idx, static_cast<size_t>(a.n_rows) * sizeof(int32_t)}}, &idx);
  launch_gather_rows(a.src, static_cast<const int32_t*>(idx), a.dst, a.n_rows, a.n, stream());
}

void CudaTrainOps::slot_sum(const SlotSumArgs& a) {
  be_.flush_pending();
  const auto slots = static_cast<size_t>(a.n_tok * a.k);
  if (slots == 0 || a.n == 0) return;
  const void* dev[2];
  stage({{a.row, slots * sizeof(int32_t)}, {a.w, slots * sizeof(float)}}, dev);
  launch_slot_sum(a.y, static_cast<const int32_t*>(dev[0]), static_cast<const float*>(dev[1]), a.out, a.n_tok, a.k,
                  a.n, stream());
}

void CudaTrainOps::slot_sum_backward(const SlotSumBackArgs& a) {
  be_.flush_pending();
  const SlotSumArgs& f = a.fwd;
  const auto slots = static_cast<size_t>(f.n_tok * f.k);
  if (slots == 0) return;
  CHECK(f.w != nullptr);
  const void* dev[2];
  stage({{f.row, slots * sizeof(int32_t)}, {f.w, slots * sizeof(float)}}, dev);
  auto* dw = static_cast<float*>(area(kDw, slots * sizeof(float)));
  launch_slot_sum_backward(f.y, static_cast<const int32_t*>(dev[0]), static_cast<const float*>(dev[1]), a.dout, a.dy,
                           dw, f.n_tok, f.k, f.n, stream());
  SLUICE_CUDA_OK(cudaMemcpyAsync(a.dw, dw, slots * sizeof(float), cudaMemcpyDeviceToHost, stream()));
  SLUICE_CUDA_OK(cudaStreamSynchronize(stream()));  // dw is the caller's on return
}

void CudaTrainOps::gated_add(const GatedAddArgs& a) {
  be_.flush_pending();
  launch_gated_add(a.x, a.gate, a.y, a.out, a.s, a.n_tok, a.n, stream());
}

void CudaTrainOps::gated_add_backward(const GatedAddBackArgs& a) {
  be_.flush_pending();
  const GatedAddArgs& f = a.fwd;
  launch_gated_add_backward(f.gate, f.y, f.s, a.dout, a.dy, a.dx, f.n_tok, f.n, stream());
}

}  // namespace sluice::cuda
