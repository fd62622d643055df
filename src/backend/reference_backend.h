// ReferenceBackend: the Backend in plain scalar C++, one thread, weights as
// GGUF rows. Every operator is the obvious loop (matmuls are quant/quant.h
// dot_row per row and token, attention a softmax over K/V rows loaded from
// the store), so it is the yardstick other backends are tested against, op by
// op and on whole models: a golden model run through it reproduces the
// reference outputs too. Slow; for tests and debugging (`--backend reference`
// where a tool offers it). Not thread-safe.
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/reference_train_ops.h"

namespace sluice {

class ReferenceBackend : public Backend {  // not final: tests record calls through it
 public:
  ReferenceBackend();

  std::string name() const override { return "reference"; }
  int n_threads() const override { return 1; }
  bool supports(Op op, const OpTypes& types) const override;
  ThreadPool& host_pool() override { return *pool_; }

  std::unique_ptr<Buffer> alloc(size_t bytes) override;
  bool host_visible() const override { return true; }
  void reserve(const ScratchNeeds& needs) override;
  StatusOr<KvStore> create_kv(const KvLayout& layout, int64_t n_blocks) override;
  void copy_kv_block(KvStore& kv, int32_t src, int32_t dst) override;
  void move_kv_block(const KvStore& from, int32_t src, KvStore& to, int32_t dst) override;
  // Leaves every matrix where it is (GGUF rows).
  PreparedWeights prepare_weights(std::span<const WeightGroup> groups) override { return {}; }

  void embed(const WeightView& table, std::span<const int32_t> tokens, float scale, float* x) override;
  void rope_tables(std::span<const int64_t> positions, std::span<const double> inv_freq, double magnitude,
                   float* cos_sin) override;
  void matmul(std::span<const MatmulOut> outs, const float* x, int64_t n_in, int64_t n_tok) override;
  void norm_matmul(const NormMatmulArgs& a) override;
  void glu_matmul(const GluMatmulArgs& a) override;
  void qkv_store(const QkvStoreArgs& a) override;
  void attention(const AttentionArgs& a) override;
  void route(const RouteArgs& a) override { route_topk(a); }
  void expert_ffn(const ExpertFfnArgs& a) override;
  void add(float* x, const float* y, int64_t n) override;
  void rmsnorm(const float* x, const float* norm, float eps, float* out, int64_t n_tok, int64_t n) override;
  void logits(const LogitsArgs& a) override;
  void lora(const LoraArgs& a) override { reference_lora(a); }
  TrainOps* train_ops() override { return &train_ops_; }

 private:
  ReferenceTrainOps train_ops_;
  std::unique_ptr<ThreadPool> pool_;  // one thread: host work runs inline
  std::vector<float> k_;       // [n_ctx, n_embd_kv] one sequence's K rows
  std::vector<float> v_;       // [n_ctx, n_embd_kv]
  std::vector<float> scores_;  // [n_ctx]
  std::vector<float> hidden_;  // [2, max(n_ff, n_ff_shared)] one token's expert gate and up
  std::vector<float> y_;       // [n_embd] one expert's output
};

}  // namespace sluice
