#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include "backend/cuda/cuda_align.h"
#include "backend/cuda/cuda_api.h"
#include "backend/cuda/cuda_check.cuh"
#include "backend/cuda/cuda_flash_attn.cuh"
#include "backend/cuda/cuda_gemm_lt.h"
#include "backend/cuda/cuda_kernels.cuh"
#include "backend/cuda/cuda_matmul.cuh"
#include "backend/cuda/cuda_matmul_q8.cuh"
#include "backend/cuda/cuda_op_clock.h"
#include "backend/cuda/cuda_pdl.cuh"
#include "backend/cuda/cuda_train_ops.h"
#include "backend/rope_tables.h"
#include "base/check.h"
#include "quant/quant.h"

namespace sluice::cuda {
// ---- staging ----------------------------------------------------------------

Staging::~Staging() {
  for (Buffer& b : ring_) {
    if (b.queued) cudaEventSynchronize(b.sent);  // a queued copy still reads it
    if (b.sent) cudaEventDestroy(b.sent);
    if (b.host) cudaFreeHost(b.host);
  }
}

void Staging::attach(StepGraph* g) {
  graph_ = g;
  g->listen(this);
  // Buffers there from the start: a first use in a recorded step would settle it to allocate.
  for (Buffer& b : ring_) {
    if (b.cap >= kFirstBytes) continue;
    if (b.host) SLUICE_CUDA_OK(cudaFreeHost(b.host));
    SLUICE_CUDA_OK(cudaMallocHost(&b.host, kFirstBytes));
    b.cap = kFirstBytes;
  }
}

uint8_t* Staging::host(size_t n) {
  at_ = (at_ + 1) % ring_.size();
  if (graph_ && graph_->recording()) {
    if (ring_[at_].recorded) grow(n);                  // come round to a buffer the recording reads
    else if (ring_[at_].cap < n) graph_->settle();     // nothing is allocated while a step is recorded
  }
  Buffer& b = ring_[at_];
  if (b.queued) SLUICE_CUDA_OK(cudaEventSynchronize(b.sent));
  b.queued = false;
  if (n > b.cap) {
    if (b.host) SLUICE_CUDA_OK(cudaFreeHost(b.host));
    b.cap = std::max<size_t>(n, 2 * b.cap);
    SLUICE_CUDA_OK(cudaMallocHost(&b.host, b.cap));
  }
  return b.host;
}

void Staging::send(void* dst, size_t n, cudaStream_t s) {
  Buffer& b = ring_[at_];
  if (!b.sent) SLUICE_CUDA_OK(cudaEventCreateWithFlags(&b.sent, cudaEventDisableTiming));
  SLUICE_CUDA_OK(cudaMemcpyAsync(dst, b.host, n, cudaMemcpyHostToDevice, s));
  if (graph_ && graph_->recording()) {  // read when the graph runs: its event comes with the launch
    b.recorded = true;
    return;
  }
  SLUICE_CUDA_OK(cudaEventRecord(b.sent, s));
  b.queued = true;
}

void Staging::grow(size_t n) {
  graph_->settle();  // nothing is allocated while a step is recorded: what it holds is launched first
  size_t cap = n;
  for (const Buffer& b : ring_) cap = std::max(cap, b.cap);
  std::vector<Buffer> more(ring_.size());
  for (Buffer& b : more) {
    SLUICE_CUDA_OK(cudaMallocHost(&b.host, cap));
    b.cap = cap;
  }
  ring_.insert(ring_.begin() + static_cast<std::ptrdiff_t>(at_), more.begin(), more.end());  // at_: the first of them
}

void Staging::settle() {
  if (graph_) graph_->settle();
}

void Staging::launched(cudaStream_t s) {
  for (Buffer& b : ring_) {
    if (!b.recorded) continue;
    SLUICE_CUDA_OK(cudaEventRecord(b.sent, s));
    b.queued = true;
    b.recorded = false;
  }
}

Mirror::~Mirror() {
  if (dev_) cudaFree(dev_);
}

const void* Mirror::upload(const void* src, size_t n, cudaStream_t s) {
  if (n == last_.size() && n > 0 && std::memcmp(src, last_.data(), n) == 0) return dev_;
  if (n > cap_) {
    // Kernels still queued may read the old copy: free it only after them.
    staging_.settle();
    if (dev_) {
      SLUICE_CUDA_OK(cudaStreamSynchronize(s));
      SLUICE_CUDA_OK(cudaFree(dev_));
    }
    cap_ = std::max<size_t>(n, 2 * cap_);
    SLUICE_CUDA_OK(cudaMalloc(&dev_, cap_));
  }
  std::memcpy(staging_.host(n), src, n);
  staging_.send(dev_, n, s);
  last_.assign(static_cast<const uint8_t*>(src), static_cast<const uint8_t*>(src) + n);
  return dev_;
}

// ---- the backend ------------------------------------------------------------

CudaBackend::CudaBackend(int device, uint64_t budget_bytes)
    : budget_(budget_bytes), pool_(std::make_unique<ThreadPool>(0)) {
  SLUICE_CUDA_OK(cudaSetDevice(device));
  // A blocking stream: the plain cudaMemcpy/cudaMemset of loading (weights,
  // vectors, zeroed buffers) run on the legacy default stream, and a copy from
  // pageable memory may still be in flight when cudaMemcpy returns; a
  // blocking stream's kernels wait for them.
  SLUICE_CUDA_OK(cudaStreamCreateWithFlags(&stream_, cudaStreamDefault));
  scratch_.assign(kNumScratch, {nullptr, 0});
  prefill_ = std::make_unique<PrefillMatmul>();  // on this device
  graph_ = std::make_unique<StepGraph>(stream_);
  for (Staging* s : {&embed_staging_, &rope_staging_}) s->attach(graph_.get());
  for (Mirror* m : {&kv_rows_, &attn_, &logit_rows_, &experts_, &lora_segs_, &route_table_}) m->attach(graph_.get());
}

CudaBackend::~CudaBackend() {
  graph_->settle();
  cudaStreamSynchronize(stream_);
  train_.reset();
  experts_dev_.reset();
  host_views_.reset();
  ring_.reset();
  copies_.reset();  // after every user of it
  if (swap_after_) cudaEventDestroy(swap_after_);
  for (auto& [p, n] : scratch_)
    if (p) cudaFree(p);
  for (void* p : vec_blocks_) cudaFree(p);
  for (RouteTable& t : route_tables_)
    if (t.dev) cudaFree(t.dev);
  if (route_log_) cudaFreeHost(route_log_);
  if (route_counter_) cudaFree(route_counter_);
  graph_.reset();
  cudaStreamDestroy(stream_);
}

bool CudaBackend::supports(Op op, const OpTypes& t) const {
  switch (op) {
    case Op::kEmbed:
    case Op::kRoute:
      return true;  // on the host: dequantize_row and route_topk cover every type
    case Op::kRopeTables:
    case Op::kAdd:
    case Op::kRmsnorm:
      return true;
    case Op::kQkvStore:
    case Op::kAttention:
      return t.kv == KvDtype::kF32 || t.kv == KvDtype::kF16;
    case Op::kMatmul:
    case Op::kNormMatmul:
    case Op::kGluMatmul:
    case Op::kExpertFfn:
    case Op::kLogits:
      return matmul_supports(t.weight);
    case Op::kLora:
      return true;  // launch_lora; the op cases hold it to the reference where a device runs them
    case Op::kMatmulT:
      return t.weight == DType::kF32 || weights_to_f32_type(t.weight, WeightLayout::kRows);
    case Op::kForwardMatmul:
      return false;  // the Backend's matmul of many tokens is cuBLASLt's already
    case Op::kRmsnormBackward:
    case Op::kRope:
    case Op::kGlu:
    case Op::kGluBackward:
    case Op::kTrainAttention:
    case Op::kTrainAttentionBackward:
    case Op::kCrossEntropy:
    case Op::kLoraBackward:
    case Op::kAdamW:
    case Op::kAddRows:
    case Op::kGatherRows:
    case Op::kSlotSum:
    case Op::kSlotSumBackward:
    case Op::kGatedAdd:
    case Op::kGatedAddBackward:
      return true;  // CudaTrainOps (cuda_train_ops.h)
  }
  return false;
}

ActRounding CudaBackend::matmul_act_rounding(DType weight, int64_t n_tok) const {
  if (prefill_->takes_type(weight, n_tok)) return ActRounding::kBF16;  // the tensor-core path (cuda_prefill.h)
  // The dp4a kernels' 8-bit x (any width of the type's blocks, aligned data), or float x.
  const bool dp4a = matmul_q8_takes({.type = weight, .n_in = 256, .n_out = 1});
  return dp4a ? ActRounding::kInt8Blocks32 : ActRounding::kNone;
}

AttnRounding CudaBackend::attention_rounding(int64_t head_dim, int64_t n_query) const {
  const bool flash = n_query >= kFlashMinQueries && (head_dim == 64 || head_dim == 96 || head_dim == 128);
  return flash ? AttnRounding::kF16 : AttnRounding::kNone;  // flash attention's F16 products (cuda_flash_attn.cuh)
}

int64_t CudaBackend::batch_invariant_tokens() const {
  int64_t n = kFlashMinQueries - 1;  // fewer query tokens of a sequence stay on launch_attention
  if (prefill_->on()) n = std::min(n, prefill_->min_tokens() - 1);
  // Quantized batches past the dp4a kernels' 8 tokens take the tensor cores (cuda_mmq.cu).
  return mmq_on() ? std::min(n, kMmqMinTokens - 1) : n;
}

TrainOps* CudaBackend::train_ops() {
  settle();
  if (!train_) train_ = std::make_unique<CudaTrainOps>(*this);
  return train_.get();
}

std::unique_ptr<Buffer> CudaBackend::alloc(size_t bytes) {
  settle();  // a synchronous fill
  return std::make_unique<DeviceBuffer>(bytes);
}

namespace {

// Page-locked host memory (cudaMallocHost): the device's copies into it run
// at the bus's rate, with no staging copy through the driver's own buffer.
class PinnedBuffer final : public sluice::Buffer {
 public:
  PinnedBuffer(void* p, size_t bytes) : data_(static_cast<uint8_t*>(p)), size_(bytes) { std::memset(p, 0, bytes); }
  ~PinnedBuffer() override { cudaFreeHost(data_); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  uint8_t* data() override { return data_; }
  size_t size() const override { return size_; }

 private:
  uint8_t* data_;
  size_t size_;
};

}  // namespace

std::unique_ptr<sluice::Buffer> CudaBackend::alloc_host(size_t bytes) {
  void* p = nullptr;
  if (cudaMallocHost(&p, std::max<size_t>(bytes, 4)) == cudaSuccess) return std::make_unique<PinnedBuffer>(p, bytes);
  cudaGetLastError();  // clears the failure: pageable memory still works, only slower
  fmt::print(stderr, "[sluice] cuda: could not page-lock {:.1f} MiB of host memory; the logits go to pageable memory\n",
             static_cast<double>(bytes) / (1 << 20));
  return Backend::alloc_host(bytes);
}

void CudaBackend::read_floats(const float* src, float* dst, int64_t n) {
  flush_add();
  settle();
  SLUICE_CUDA_OK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDefault, stream_));
  SLUICE_CUDA_OK(cudaStreamSynchronize(stream_));
  drain_routes();
}

void CudaBackend::write_floats(const float* src, float* dst, int64_t n) {
  flush_add();
  settle();
  SLUICE_CUDA_OK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDefault, stream_));
  SLUICE_CUDA_OK(cudaStreamSynchronize(stream_));  // src may go away when this returns
}

void CudaBackend::copy_floats(const float* src, float* dst, int64_t n) {
  flush_add();
  settle();
  SLUICE_CUDA_OK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
}

float* CudaBackend::scratch(int which, int64_t n) {
  auto& [p, cap] = scratch_[static_cast<size_t>(which)];
  if (n > cap) {
    settle();
    if (p) {
      SLUICE_CUDA_OK(cudaStreamSynchronize(stream_));
      SLUICE_CUDA_OK(cudaFree(p));
    }
    SLUICE_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&p), static_cast<size_t>(n) * sizeof(float)));
    cap = n;
  }
  return p;
}

void CudaBackend::reserve(const ScratchNeeds& n) {
  flush_add();
  settle();
  if (n.expert_bytes > 0) {
    expert_layers_ = std::max(expert_layers_, n.n_layer);
    n_expert_ = std::max(n_expert_, n.n_expert);
    expert_bytes_ = std::max(expert_bytes_, n.expert_bytes);
  }
  if (n.host_weight_bytes > 0) {
    // Two layers' copies in flight and in use, each matrix 256-byte aligned.
    const size_t want = 2 * (n.host_weight_bytes + 32 * kWeightAlign);
    if (!host_views_) host_views_ = std::make_unique<HostViews>(want, copy_queue());
    if (host_views_->capacity() < want) {
      SLUICE_CUDA_OK(cudaStreamSynchronize(stream_));  // the copies' readers are done
      host_views_->grow(want);
    }
  }
  scratch(kPartial, kMaxSplitItems * (n.head_dim + 2));
  if (n.lora_rank > 0 && n.n_tok >= kLoraGemmMinTokens) {  // lora()'s GEMMs: their handle, and u when not kept
    f32_gemm();
    scratch(kLoraU, n.n_tok * n.lora_rank);
  }
  const int64_t x_rows = n.n_tok * std::max<int64_t>(1, n.n_used);  // expert rows gathered
  scratch(kXq, (x_rows * n.n_in_max + 3) / 4);
  scratch(kXd, x_rows * n.n_in_max / 32 + 1);
  scratch(kXs, x_rows * n.n_in_max / 32 + 1);
  if (n.n_expert > 0) {
    const int64_t rows = n.n_tok * std::max<int64_t>(1, n.n_used);
    const int64_t ff = std::max(n.n_ff_expert, n.n_ff_shared);
    scratch(kExpertX, rows * n.n_embd);
    const int64_t gate_up = std::max(n.n_tok * ff, std::min(rows, kGroupedRows) * n.n_ff_expert);  // cuda_experts.cpp
    scratch(kExpertGate, gate_up);
    scratch(kExpertUp, gate_up);
    scratch(kExpertDown, n.n_tok * n.n_embd);
    scratch(kExpertY, rows * n.n_embd);
    if (n.n_ff_shared > 0) scratch(kSharedY, n.n_tok * n.n_embd);
  }
}

const float* CudaBackend::vec(const float* host, int64_t n) {
  if (!host) return nullptr;
  auto it = vecs_.find(host);
  if (it != vecs_.end()) return it->second;
  settle();  // a synchronous copy below
  const size_t bytes = (static_cast<size_t>(n) * sizeof(float) + 255) / 256 * 256;
  if (bytes > vec_left_) {
    const size_t block = std::max<size_t>(bytes, size_t{4} << 20);
    void* p = nullptr;
    SLUICE_CUDA_OK(cudaMalloc(&p, block));
    vec_blocks_.push_back(p);
    vec_next_ = static_cast<uint8_t*>(p);
    vec_left_ = block;
  }
  auto* dev = reinterpret_cast<float*>(vec_next_);
  vec_next_ += bytes;
  vec_left_ -= bytes;
  SLUICE_CUDA_OK(cudaMemcpy(dev, host, static_cast<size_t>(n) * sizeof(float), cudaMemcpyHostToDevice));
  vecs_[host] = dev;
  return dev;
}

void CudaBackend::embed(const WeightView& table, std::span<const int32_t> tokens, float scale, float* x) {
  flush_add();
  const int64_t n = table.n_in, n_tok = static_cast<int64_t>(tokens.size());
  const size_t rb = row_bytes(table.type, n);
  auto* rows = reinterpret_cast<float*>(embed_staging_.host(static_cast<size_t>(n_tok * n) * sizeof(float)));
  for (int64_t t = 0; t < n_tok; ++t) {
    float* row = rows + t * n;
    dequantize_row(table.type, table.data + static_cast<size_t>(tokens[static_cast<size_t>(t)]) * rb, row, n);
    if (scale != 1.0f)
      for (int64_t i = 0; i < n; ++i) row[i] *= scale;
  }
  embed_staging_.send(x, static_cast<size_t>(n_tok * n) * sizeof(float), stream_);
}

void CudaBackend::rope_tables(std::span<const int64_t> positions, std::span<const double> inv_freq, double magnitude,
                              float* cos_sin) {
  flush_add();
  const size_t bytes = positions.size() * inv_freq.size() * 2 * sizeof(float);
  rope_cos_sin(positions, inv_freq, magnitude, reinterpret_cast<float*>(rope_staging_.host(bytes)));
  rope_staging_.send(cos_sin, bytes, stream_);
}

void CudaBackend::matmul(std::span<const MatmulOut> outs, const float* x, int64_t n_in, int64_t n_tok) {
  flush_add();
  if (outs.size() > 4) {  // launches take up to 4 parts
    matmul(outs.first(4), x, n_in, n_tok);
    matmul(outs.subspan(4), x, n_in, n_tok);
    return;
  }
  MatmulOut bound[4];
  Held held[4];
  const int n_held = bind(outs, bound, held);
  {
    std::optional<PdlBlock> plain;  // weights a copy just brought in: no early start (cuda_pdl.cuh)
    if (n_held > 0) plain.emplace();
    matmul_bound(std::span<const MatmulOut>(bound, outs.size()), x, n_in, n_tok);
  }
  unbind(held, n_held);
}

void CudaBackend::matmul_bound(std::span<const MatmulOut> outs, const float* x, int64_t n_in, int64_t n_tok) {
  for (const MatmulOut& o : outs) CHECK(o.w.n_in == n_in);
  // Many tokens: tensor cores (cuda_prefill.h); false when cuBLASLt failed, then the kernels below.
  // cuBLASLt's calls are not recorded in a step's graph.
  if (reinterpret_cast<uintptr_t>(x) % 16 == 0 && prefill_->takes(outs, n_tok)) {
    settle();
    if (prefill_->run(outs, x, n_in, n_tok, stream_)) return;
  }
  // Quantized matrices (matmul_q8_takes) take x quantized to 8 bits, once for the call.
  std::optional<QuantizedX> qx;
  auto quantized = [&] {
    if (!qx) {
      qx = quantized_x(n_in, n_tok);
      quantize_x(x, n_in, n_in, n_tok, *qx, stream_);
    }
    return *qx;
  };
  if (one_q8_launch(outs, n_tok)) {  // the group in one launch
    launch_q8(outs, quantized(), n_tok);
    return;
  }
  WeightView ws[4];
  float* ys[4];
  for (size_t i = 0; i < outs.size(); ++i) ws[i] = outs[i].w, ys[i] = outs[i].y;
  const std::span<const WeightView> wspan(ws, outs.size());
  if (outs.size() > 1 && matmul_groupable(wspan) && reinterpret_cast<uintptr_t>(x) % 16 == 0) {
    launch_matmul_group(wspan, std::span<float* const>(ys, outs.size()), x, n_tok, stream_);
    return;
  }
  for (size_t i = 0; i < outs.size(); ++i) {  // mixed types (llama.cpp's mixes): one launch each
    if (matmul_q8_takes(ws[i])) launch_q8(outs.subspan(i, 1), quantized(), n_tok);
    else launch_matmul(ws[i], x, n_in, n_tok, ys[i], ws[i].n_out, stream_);
  }
}

bool CudaBackend::one_q8_launch(std::span<const MatmulOut> outs, int64_t n_tok) const {
  if (outs.empty() || outs.size() > 4 || prefill_->takes(outs, n_tok)) return false;
  for (const MatmulOut& o : outs)
    if (!matmul_q8_takes(o.w) || o.w.type != outs[0].w.type || o.w.layout != outs[0].w.layout) return false;
  return true;
}

QuantizedX CudaBackend::quantized_x(int64_t n_in, int64_t n_tok) {
  return QuantizedX{.q = reinterpret_cast<int8_t*>(scratch(kXq, (n_tok * n_in + 3) / 4)),
                    .d = scratch(kXd, n_tok * n_in / 32), .s = scratch(kXs, n_tok * n_in / 32), .n_in = n_in};
}

void CudaBackend::launch_q8(std::span<const MatmulOut> outs, const QuantizedX& qx, int64_t n_tok) {
  WeightView ws[4];
  float* ys[4];
  for (size_t i = 0; i < outs.size(); ++i) ws[i] = outs[i].w, ys[i] = outs[i].y;
  const std::span<const WeightView> wspan(ws, outs.size());
  const std::span<float* const> yspan(ys, outs.size());
  // Batches: the tensor cores, one pass over the weights per 32 tokens (the dp4a kernels: 8 a pass)
  if (n_tok >= kMmqMinTokens && mmq_on()) {
    launch_matmul_mmq(wspan, yspan, qx, n_tok, stream_);
    return;
  }
  launch_matmul_q8(wspan, yspan, qx, n_tok, stream_);
}

bool CudaBackend::mmq_on() {
  static const bool on = [] {
    const char* e = std::getenv("SLUICE_CUDA_MMQ");
    return !(e && std::strcmp(e, "0") == 0);
  }();
  return on;
}

void CudaBackend::norm_matmul(const NormMatmulArgs& a) {
  const float* add = take_add(a.x, a.n_tok * a.n_embd);  // the residual add before this norm, fused
  auto* x = const_cast<float*>(a.x);  // written only when add is set (then it is add()'s x)
  const float* norm = vec(a.norm, a.n_embd);
  if (a.outs.size() > 4) {  // launches take up to 4 parts: the norm, then matmul() splits them
    launch_rmsnorm(x, nullptr, norm, a.eps, a.xn, a.n_tok, a.n_embd, stream_, add);
    matmul(a.outs, a.xn, a.n_embd, a.n_tok);
    return;
  }
  MatmulOut bound[4];
  Held held[4];
  const int n_held = bind(a.outs, bound, held);
  const std::span<const MatmulOut> outs(bound, a.outs.size());
  {
    std::optional<PdlBlock> plain;  // as in matmul()
    if (n_held > 0) plain.emplace();
    if (one_q8_launch(outs, a.n_tok)) {  // the norm writes xn and its 8-bit copy in one kernel
      const QuantizedX qx = quantized_x(a.n_embd, a.n_tok);
      rmsnorm_quantize_x(x, add, norm, a.eps, a.xn, a.n_tok, a.n_embd, qx, stream_);
      launch_q8(outs, qx, a.n_tok);
    } else if (prefill_->takes(outs, a.n_tok)) {  // the norm writes xn and its BF16 copy: no conversion pass
      settle();  // cuBLASLt's calls are not recorded in a step's graph
      uint16_t* xb = prefill_->x_bf16(a.n_tok * a.n_embd, stream_);
      launch_rmsnorm(x, nullptr, norm, a.eps, a.xn, a.n_tok, a.n_embd, stream_, add, xb);
      if (!prefill_->run_bf16(outs, xb, a.n_embd, a.n_tok, stream_)) matmul_bound(outs, a.xn, a.n_embd, a.n_tok);
    } else {
      launch_rmsnorm(x, nullptr, norm, a.eps, a.xn, a.n_tok, a.n_embd, stream_, add);
      matmul_bound(outs, a.xn, a.n_embd, a.n_tok);
    }
  }
  unbind(held, n_held);
}

void CudaBackend::glu_matmul(const GluMatmulArgs& a) {
  flush_add();
  MatmulOut bound[1];
  Held held[1];
  const int n_held = bind(std::span(&a.out, 1), bound, held);
  {
    std::optional<PdlBlock> plain;  // as in matmul()
    if (n_held > 0) plain.emplace();
    if (one_q8_launch(std::span(bound, 1), a.n_tok)) {  // the activation writes h and its 8-bit copy in one kernel
      const QuantizedX qx = quantized_x(a.n_ff, a.n_tok);
      glu_quantize_x(a.gate, a.up, a.n_tok, a.n_ff, a.act, qx, stream_);
      launch_q8(std::span(bound, 1), qx, a.n_tok);
    } else if (prefill_->takes(std::span(bound, 1), a.n_tok)) {  // the activation writes h and its BF16 copy
      settle();
      uint16_t* xb = prefill_->x_bf16(a.n_tok * a.n_ff, stream_);
      launch_glu(a.gate, a.up, a.n_tok * a.n_ff, a.act, stream_, xb);
      if (!prefill_->run_bf16(std::span(bound, 1), xb, a.n_ff, a.n_tok, stream_))
        matmul_bound(std::span(bound, 1), a.gate, a.n_ff, a.n_tok);
    } else {
      launch_glu(a.gate, a.up, a.n_tok * a.n_ff, a.act, stream_);
      matmul_bound(std::span(bound, 1), a.gate, a.n_ff, a.n_tok);
    }
  }
  unbind(held, n_held);
}

void CudaBackend::add(float* x, const float* y, int64_t n) {
  flush_add();
  pending_ = {x, y, n};  // launched by the next call, or fused into its norm
}

void CudaBackend::flush_add() {
  if (!pending_.x) return;
  launch_add(pending_.x, pending_.y, pending_.n, stream_);
  pending_ = {};
}

const float* CudaBackend::take_add(const float* x, int64_t n) {
  if (pending_.x && pending_.x == x && pending_.n == n) {
    const float* y = pending_.y;
    pending_ = {};
    return y;
  }
  flush_add();
  return nullptr;
}

void CudaBackend::rmsnorm(const float* x, const float* norm, float eps, float* out, int64_t n_tok, int64_t n) {
  const float* add = take_add(x, n_tok * n);
  launch_rmsnorm(x, nullptr, vec(norm, n), eps, out, n_tok, n, stream_, add);
}

void CudaBackend::logits(const LogitsArgs& a) {
  flush_add();
  const auto* rows = static_cast<const int64_t*>(
      logit_rows_.upload(a.rows, static_cast<size_t>(a.n_out) * sizeof(int64_t), stream_));
  launch_rmsnorm(a.x, rows, vec(a.norm, a.n_embd), a.eps, a.xn, a.n_out, a.n_embd, stream_);
  const int64_t n_vocab = a.output.n_out;
  float* dev = scratch(kLogits, a.n_out * n_vocab);
  const MatmulOut out{a.output, dev};
  matmul(std::span(&out, 1), a.xn, a.n_embd, a.n_out);
  graph_->end();  // the step's graph runs (its last work is above); the logits go to the host after it
  // (page-locked when the caller took the memory from alloc_host: then at the bus's rate)
  SLUICE_CUDA_OK(cudaMemcpyAsync(a.logits, dev, static_cast<size_t>(a.n_out * n_vocab) * sizeof(float),
                                 cudaMemcpyDeviceToHost, stream_));
  SLUICE_CUDA_OK(cudaStreamSynchronize(stream_));
  drain_routes();
}

void CudaBackend::begin_step(int64_t n_tok, const void* who) {
  flush_add();
  if (op_clocks_ == 0) graph_->begin(n_tok, who);  // a clock's events would be captured, not timed
}

std::unique_ptr<OpClock> CudaBackend::op_clock() {
  settle();  // a step recorded so far runs as it was recorded
  return std::make_unique<CudaOpClock>(stream_, &op_clocks_);
}

void CudaBackend::end_step() {
  flush_add();
  graph_->end();
}

}  // namespace sluice::cuda
