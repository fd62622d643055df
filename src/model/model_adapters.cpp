#include "model/model_adapters.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include <fmt/format.h>

#include "base/check.h"

namespace sluice {
namespace {

using R = TensorRole;

// One matmul the forward pass adapts: rows [row0, row0 + n_rows) of the
// adapted tensor's output.
struct Part {
  TensorRole role;
  int64_t row0 = 0;
  int64_t n_rows = 0;
};

// The matmuls an adapter on `role` lands on (fused matrices: their parts, in
// row order, as model_weights binds them), or none when the forward pass
// takes no adapter there.
int adapted_parts(TensorRole role, int64_t n_out, const ModelHparams& hp, Part (&parts)[3]) {
  switch (role) {
    case R::kAttnQ:
    case R::kAttnK:
    case R::kAttnV:
    case R::kAttnOutput:
    case R::kFfnGate:
    case R::kFfnUp:
    case R::kFfnDown:
      parts[0] = {role, 0, n_out};
      return 1;
    case R::kAttnQkv:
      parts[0] = {R::kAttnQ, 0, hp.n_embd_q()};
      parts[1] = {R::kAttnK, hp.n_embd_q(), hp.n_embd_kv()};
      parts[2] = {R::kAttnV, hp.n_embd_q() + hp.n_embd_kv(), hp.n_embd_kv()};
      return 3;
    case R::kFfnGateUp:
      parts[0] = {R::kFfnGate, 0, hp.n_ff};
      parts[1] = {R::kFfnUp, hp.n_ff, hp.n_ff};
      return 2;
    default:
      return 0;
  }
}

size_t padded(size_t n_floats) { return (n_floats + 15) / 16 * 16; }  // 64-byte slices

}  // namespace

ModelAdapters::ModelAdapters(const ModelHparams& hp, int64_t max_seqs)
    : hp_(hp), runs_(static_cast<size_t>(max_seqs)), segs_(static_cast<size_t>(max_seqs)) {}

StatusOr<int> ModelAdapters::add(Backend& be, const ModelFile& base, const LoraAdapter& adapter, float scale) {
  if (!be.supports(Op::kLora, {})) {
    return unimplemented("backend '{}' has no LoRA operator, so it cannot apply adapter '{}' (use --backend cpu or "
                         "reference)",
                         be.name(), adapter.name);
  }
  if (size() >= kMaxLoras) return invalid_argument("at most {} adapters can be loaded at once", kMaxLoras);
  if (!std::isfinite(scale)) return invalid_argument("adapter '{}': scale {} is not a number", adapter.name, scale);
  RETURN_IF_ERROR(check_lora(adapter, base));

  Loaded ld;
  ld.info = LoraInfo{.name = adapter.name, .user_scale = scale, .n_params = adapter.n_params()};
  ld.by_role.resize(static_cast<size_t>(hp_.n_layer * kNumTensorRoles));
  size_t n_floats = 0;
  for (const LoraMatrix& m : adapter.mats) {
    Part parts[3];
    if (adapted_parts(m.role, m.n_out, hp_, parts) == 0) {
      return unimplemented(
          "adapter '{}' adapts '{}' ({}), which takes no adapter here: only attention q/k/v/output and a dense "
          "FFN's gate/up/down do (adapters on routed experts, the router or shared experts are not supported)",
          adapter.name, m.base_name, tensor_role_name(m.role));
    }
    if (m.layer < 0 || m.layer >= hp_.n_layer) {
      return invalid_argument("adapter '{}': '{}' is outside the base's {} layers", adapter.name, m.base_name,
                              hp_.n_layer);
    }
    n_floats += padded(m.a.size()) + padded(m.b.size());
  }
  ld.info.bytes = n_floats * sizeof(float);
  ld.mem = be.alloc(ld.info.bytes);
  float* next = ld.mem->floats();
  for (const LoraMatrix& m : adapter.mats) {
    float* a = next;
    float* b = a + padded(m.a.size());
    next = b + padded(m.b.size());
    be.write_floats(m.a.data(), a, static_cast<int64_t>(m.a.size()));
    be.write_floats(m.b.data(), b, static_cast<int64_t>(m.b.size()));
    Part parts[3];
    const int n_parts = adapted_parts(m.role, m.n_out, hp_, parts);
    for (int p = 0; p < n_parts; ++p) {
      Factors& f = ld.by_role[static_cast<size_t>(m.layer * kNumTensorRoles + static_cast<int>(parts[p].role))];
      f = Factors{.a = a, .b = b + parts[p].row0 * m.rank, .rank = m.rank, .scale = scale * adapter.scale(m)};
      ++ld.info.n_matrices;
    }
    ld.info.rank_max = std::max(ld.info.rank_max, m.rank);
  }
  rank_max_ = std::max(rank_max_, ld.info.rank_max);
  loaded_.push_back(std::move(ld));
  return size() - 1;
}

uint64_t ModelAdapters::bytes() const {
  uint64_t n = 0;
  for (const Loaded& l : loaded_) n += l.info.bytes;
  return n;
}

std::string ModelAdapters::summary() const {
  std::string out = loaded_.size() == 1 ? "LoRA adapter " : "LoRA adapters ";
  for (size_t i = 0; i < loaded_.size(); ++i) {
    const LoraInfo& l = loaded_[i].info;
    out += fmt::format("{}{} (rank {}, scale {:g}, {} matrices, {:.0f} KiB)", i ? ", " : "", l.name, l.rank_max,
                       l.user_scale, l.n_matrices, static_cast<double>(l.bytes) / 1024);
  }
  return out;
}

bool ModelAdapters::plan(std::span<const LoraMask> masks, std::span<const int64_t> lens) {
  CHECK(masks.size() == lens.size() && masks.size() <= runs_.size());
  n_runs_ = 0;
  n_passes_ = 0;
  int64_t tok = 0;
  for (size_t i = 0; i < masks.size(); ++i) {
    CHECK((masks[i] & ~all()) == 0);
    if (n_runs_ > 0 && runs_[static_cast<size_t>(n_runs_ - 1)].mask == masks[i]) {
      runs_[static_cast<size_t>(n_runs_ - 1)].n_tok += lens[i];
    } else {
      runs_[static_cast<size_t>(n_runs_++)] = Run{.tok0 = tok, .n_tok = lens[i], .mask = masks[i]};
    }
    n_passes_ = std::max(n_passes_, std::popcount(masks[i]));
    tok += lens[i];
  }
  return n_passes_ > 0;
}

void ModelAdapters::apply(Backend& be, int64_t layer, TensorRole role, const float* x, float* y, int64_t n_in,
                          int64_t n_out) {
  const auto slot = static_cast<size_t>(layer * kNumTensorRoles + static_cast<int>(role));
  for (int p = 0; p < n_passes_; ++p) {
    size_t n = 0;
    for (int64_t i = 0; i < n_runs_; ++i) {
      const Run& run = runs_[static_cast<size_t>(i)];
      LoraMask m = run.mask;
      for (int k = 0; k < p && m != 0; ++k) m &= m - 1;  // drop the p lowest adapters
      if (m == 0) continue;
      const Factors& f = loaded_[static_cast<size_t>(std::countr_zero(m))].by_role[slot];
      if (f.rank == 0) continue;
      LoraSegment* last = n > 0 ? &segs_[n - 1] : nullptr;
      if (last && last->a == f.a && last->b == f.b && last->tok0 + last->n_tok == run.tok0) {
        last->n_tok += run.n_tok;
      } else {
        segs_[n++] = LoraSegment{.tok0 = run.tok0, .n_tok = run.n_tok, .a = f.a, .b = f.b, .rank = f.rank,
                                 .scale = f.scale};
      }
    }
    if (n > 0) be.lora({.x = x, .y = y, .n_in = n_in, .n_out = n_out, .segs = std::span(segs_.data(), n)});
  }
}

}  // namespace sluice
