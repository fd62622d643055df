// CpuBackend: the Backend on this machine's CPU.
//
// Owns its thread pool and the instruction-set level its kernels run at
// (cpu_features.h: the highest the CPU supports, capped by SLUICE_ISA). Every
// operator is one parallel dispatch of the kernels in this folder:
//
//   norm_matmul   matmul_group with the RMSNorm as the per-token prepare step
//   glu_matmul    matmul_group with SwiGLU / GeGLU as the prepare step
//   qkv_store     bias, RoPE and the K/V rows into the store, tokens claimed
//                 one at a time by the threads
//   attention     paged_attention (tiles read K/V where they lie)
//   expert_ffn    tokens grouped by expert, one gate/up and one down dispatch
//                 per selected expert, weighted sum in slot order
//   train_ops()   the training operators (CpuTrainOps, train_ops.h) on the
//                 same pool and level
//   lora          u = A x over (token, rank row) items, then y += scale B u
//                 over (token, 64 outputs) items (cpu_lora.cpp); small calls
//                 (decode) on the calling thread alone
//
// prepare_weights() copies resident matrices into one arena on huge pages,
// repacked where a faster interleaved layout exists at this level (repack.h:
// Q8_0 -> Q8_0x16, Q4_0 -> Q4_0x4 at AVX-512; Q8_0x8, Q4_0x8 at AVX2), so decode reads
// one sequential stream per thread; the kernels give the same bits on either
// layout. Buffers are host memory. Not thread-safe: one operator at a time
// (the scratch is shared by every model on this backend).
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/paged_attention.h"
#include "backend/cpu/train_ops.h"

namespace sluice::cpu {

struct CpuBackendOptions {
  int n_threads = 0;           // <= 0: one per core
  Isa isa = active_isa();      // at most max_supported_isa()
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& options = {});

  Isa isa() const { return isa_; }
  ThreadPool& pool() { return *pool_; }

  std::string name() const override;
  int n_threads() const override { return pool_->n_threads(); }
  bool supports(Op op, const OpTypes& types) const override;
  // As the kernel for (weight, isa()) converts them (matmul.h, act_quant.h).
  ActRounding matmul_act_rounding(DType weight, int64_t n_tok) const override;
  ThreadPool& host_pool() override { return *pool_; }

  std::unique_ptr<Buffer> alloc(size_t bytes) override;
  bool host_visible() const override { return true; }
  void reserve(const ScratchNeeds& needs) override;
  StatusOr<KvStore> create_kv(const KvLayout& layout, int64_t n_blocks) override;
  void copy_kv_block(KvStore& kv, int32_t src, int32_t dst) override;
  void move_kv_block(const KvStore& from, int32_t src, KvStore& to, int32_t dst) override;
  PreparedWeights prepare_weights(std::span<const WeightGroup> groups) override;
  void in_place_layouts(std::span<const WeightView> group, WeightLayout* layouts) const override;
  void prepare_in_place(std::span<WeightView> group) override;

  void embed(const WeightView& table, std::span<const int32_t> tokens, float scale, float* x) override;
  void rope_tables(std::span<const int64_t> positions, std::span<const double> inv_freq, double magnitude,
                   float* cos_sin) override;
  void matmul(std::span<const MatmulOut> outs, const float* x, int64_t n_in, int64_t n_tok) override;
  void norm_matmul(const NormMatmulArgs& a) override;
  void glu_matmul(const GluMatmulArgs& a) override;
  void qkv_store(const QkvStoreArgs& a) override;
  void attention(const ::sluice::AttentionArgs& a) override;
  void route(const RouteArgs& a) override { route_topk(a); }
  void expert_ffn(const ExpertFfnArgs& a) override;
  void add(float* x, const float* y, int64_t n) override;
  void rmsnorm(const float* x, const float* norm, float eps, float* out, int64_t n_tok, int64_t n) override;
  void logits(const LogitsArgs& a) override;
  // The training operators at this backend's level, on its pool (train_ops.h).
  TrainOps* train_ops() override { return &train_ops_; }
  void lora(const LoraArgs& a) override;

 private:
  std::unique_ptr<ThreadPool> pool_;
  Isa isa_;
  CpuTrainOps train_ops_;
  ScratchNeeds needs_;
  std::vector<uint8_t> act_;              // converted matmul activations
  std::vector<float> attn_partials_;      // paged attention scratch
  std::vector<PagedSeq> attn_seqs_;       // [max_seqs]
  std::vector<float> lora_u_;             // [n_tok, lora_rank] A x of a lora() call without LoraArgs::u
  // Expert FFN: tokens grouped by expert.
  std::vector<int64_t> expert_count_;     // [n_expert]
  std::vector<int64_t> expert_start_;     // [n_expert + 1]
  std::vector<int64_t> route_order_;      // [n_tok * n_used] (token, slot) pairs grouped by expert
  std::vector<float> expert_x_;           // [n_tok, n_embd] gathered inputs of one expert
  std::vector<float> expert_gate_;        // [n_tok, n_ff]
  std::vector<float> expert_up_;          // [n_tok, n_ff]
  std::vector<float> expert_y_;           // [n_tok * n_used, n_embd] each (token, slot)'s expert output
  std::vector<float> shared_gate_;        // [n_tok, n_ff_shared]
  std::vector<float> shared_up_;          // [n_tok, n_ff_shared]
  std::vector<float> shared_y_;           // [n_tok, n_embd]
};

}  // namespace sluice::cpu
