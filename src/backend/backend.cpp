#include "backend/backend.h"

#include "kv/kv_store.h"

#include <algorithm>
#include <cmath>

#include "backend/host_buffer.h"
#include "base/check.h"

namespace sluice {

const char* op_name(Op op) {
  switch (op) {
    case Op::kMatmul: return "matmul";
    case Op::kNormMatmul: return "norm + matmul";
    case Op::kGluMatmul: return "activation + matmul";
    case Op::kQkvStore: return "bias + RoPE + KV store";
    case Op::kAttention: return "paged attention";
    case Op::kRoute: return "expert routing";
    case Op::kExpertFfn: return "expert FFN";
    case Op::kLogits: return "logits";
    case Op::kEmbed: return "embedding";
    case Op::kRopeTables: return "RoPE tables";
    case Op::kAdd: return "residual add";
    case Op::kRmsnorm: return "RMSNorm";
    case Op::kLora: return "LoRA";
    case Op::kMatmulT: return "matmul_t (training)";
    case Op::kForwardMatmul: return "matmul over a micro-batch (training)";
    case Op::kRmsnormBackward: return "RMSNorm backward";
    case Op::kRope: return "RoPE on rows (training)";
    case Op::kGlu: return "GLU (training)";
    case Op::kGluBackward: return "GLU backward";
    case Op::kTrainAttention: return "training attention";
    case Op::kTrainAttentionBackward: return "training attention backward";
    case Op::kCrossEntropy: return "cross-entropy";
    case Op::kLoraBackward: return "LoRA backward";
    case Op::kAdamW: return "AdamW";
    case Op::kAddRows: return "bias on rows (training)";
    case Op::kGatherRows: return "gather rows (training)";
    case Op::kSlotSum: return "routed slot sum (training)";
    case Op::kSlotSumBackward: return "routed slot sum backward";
    case Op::kGatedAdd: return "gated add (training)";
    case Op::kGatedAddBackward: return "gated add backward";
  }
  return "?";
}

void Backend::lora(const LoraArgs& a) {
  CHECK(false && "this backend has no LoRA operator: Model::load refuses adapters on it");
}

std::unique_ptr<Buffer> Backend::alloc_host(size_t bytes) { return std::make_unique<HostBuffer>(bytes); }

std::unique_ptr<OpClock> Backend::op_clock() { return std::make_unique<HostOpClock>(); }

StatusOr<KvStore> Backend::create_kv_reserved(const KvLayout& layout, int64_t n_blocks, int64_t n_backed) {
  return create_kv(layout, n_blocks);
}

Status Backend::resize_kv(KvStore& kv, int64_t n_backed) {
  if (n_backed < 1 || n_backed > kv.n_blocks())
    return invalid_argument("a KV store of {} blocks cannot back {}", kv.n_blocks(), n_backed);
  if (kv.host_memory()) kv.release_blocks(n_backed);
  return Status();
}

Status Backend::set_expert_slot_count(int64_t n) {
  return unimplemented("the {} backend keeps no expert slots to resize (asked for {})", name(), n);
}

void Backend::read_floats(const float* src, float* dst, int64_t n) {
  std::copy(src, src + n, dst);
}

void Backend::write_floats(const float* src, float* dst, int64_t n) { std::copy(src, src + n, dst); }

void Backend::copy_floats(const float* src, float* dst, int64_t n) { std::copy(src, src + n, dst); }

void Backend::in_place_layouts(std::span<const WeightView> group, WeightLayout* layouts) const {
  for (size_t i = 0; i < group.size(); ++i) layouts[i] = WeightLayout::kRows;
}

void Backend::routed_ffn(const RouteArgs& r, const ExpertFfnArgs& e) {
  route(r);
  ExpertFfnArgs chosen = e;
  chosen.ids = r.ids;
  chosen.weights = r.weights;
  expert_ffn(chosen);
}

void route_topk(const RouteArgs& a) {
  for (int64_t t = 0; t < a.n_tok; ++t) {
    const float* lg = a.logits + t * a.n_expert;
    int32_t* ids = a.ids + t * a.n_used;
    float* w = a.weights + t * a.n_used;
    // The n_used largest logits (softmax is monotonic), descending, lower id first among equals.
    for (int64_t j = 0; j < a.n_used; ++j) {
      int32_t best = -1;
      for (int32_t e = 0; e < a.n_expert; ++e) {
        bool taken = false;
        for (int64_t i = 0; i < j; ++i) taken |= ids[i] == e;
        if (!taken && (best < 0 || lg[e] > lg[best])) best = e;
      }
      ids[j] = best;
    }
    float mx = lg[0];
    for (int64_t e = 1; e < a.n_expert; ++e) mx = std::max(mx, lg[e]);
    float sum = 0;
    for (int64_t e = 0; e < a.n_expert; ++e) sum += std::exp(lg[e] - mx);
    float kept = 0;
    for (int64_t j = 0; j < a.n_used; ++j) {
      w[j] = std::exp(lg[ids[j]] - mx) / sum;
      kept += w[j];
    }
    if (a.renormalize)
      for (int64_t j = 0; j < a.n_used; ++j) w[j] /= kept;
  }
}

float shared_gate_weight(const float* gate, const float* x, int64_t n) {
  float dot = 0;
  for (int64_t i = 0; i < n; ++i) dot += gate[i] * x[i];
  return 1.0f / (1.0f + std::exp(-dot));
}

}  // namespace sluice
