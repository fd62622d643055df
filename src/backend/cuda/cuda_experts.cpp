// CudaBackend's mixture-of-experts half: route() and expert_ffn().
//
// expert_ffn groups the step's (token, slot) rows by expert. Experts whose
// weights are resident on the device and whose rows are too few for the
// tensor cores go as one grouped launch per matrix for all of them
// (cuda_matmul.cuh's MatmulGroup), which is what decode needs: at one token a
// routed layer is k experts of small matrices, and one launch each would be
// ~5k short kernels a layer, mostly launch latency. The others (many rows:
// prefill; or bytes a copy must bring in first: expert slots, host views, the
// streamed ring) go one expert at a time as before.
//
//   grouped:  [quantize x]  gate|up (2 parts, x rows by token)  act(*)  down (y rows by slot)
//   one by one per expert:  gather x rows  gate|up  act  down  scatter to slots
//   then:     shared expert, expert_sum (slots in order, weighted)
//
// (*) with 8-bit activations, act writes h and its quantization in one kernel.
//
// SLUICE_CUDA_GROUPED_EXPERTS=0 sends every expert one at a time (the A/B in
// scripts/cuda-device-run).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.cuh"
#include "backend/cuda/cuda_kernels.cuh"
#include "backend/cuda/cuda_matmul.cuh"
#include "backend/cuda/cuda_matmul_q8.cuh"
#include "backend/cuda/cuda_pdl.cuh"
#include "backend/cuda/cuda_prefill.h"
#include "base/check.h"

namespace sluice::cuda {

void CudaBackend::route(const RouteArgs& a) {
  flush_add();
  host_logits_.resize(static_cast<size_t>(a.n_tok * a.n_expert));
  SLUICE_CUDA_OK(cudaMemcpyAsync(host_logits_.data(), a.logits, host_logits_.size() * sizeof(float),
                                 cudaMemcpyDeviceToHost, stream_));
  SLUICE_CUDA_OK(cudaStreamSynchronize(stream_));
  RouteArgs h = a;
  h.logits = host_logits_.data();
  route_topk(h);
}

void CudaBackend::ffn_rows(const ExpertWeights& w, const float* x, int64_t n, int64_t n_embd, int64_t n_ff,
                           Activation act, float* y) {
  float* g = scratch(kExpertGate, n * n_ff);
  float* u = scratch(kExpertUp, n * n_ff);
  const MatmulOut gate_up[2] = {{w.gate, g}, {w.up, u}};
  matmul(gate_up, x, n_embd, n);
  launch_glu(g, u, n * n_ff, act, stream_);
  const MatmulOut down{w.down, y};
  matmul(std::span(&down, 1), g, n_ff, n);
}

bool CudaBackend::on_device(const WeightView& w) const {
  if (host_views_ && host_views_->holds(w.data)) return false;
  return streamed_.empty() || streamed_.find(w.data) == streamed_.end();
}

namespace {

bool grouping_on() {
  static const bool on = [] {
    const char* e = std::getenv("SLUICE_CUDA_GROUPED_EXPERTS");
    return !(e && std::strcmp(e, "0") == 0);
  }();
  return on;
}

// How a grouped launch reads one role's matrices (gate|up or down).
enum class GroupKernel { kNone, kQ8, kFloat };

GroupKernel group_kernel(const WeightView& w) {
  if (matmul_q8_takes(w)) return GroupKernel::kQ8;
  if (matmul_grouped_takes(w)) return GroupKernel::kFloat;
  return GroupKernel::kNone;
}

bool same_matrix_kind(const WeightView& a, const WeightView& b) {
  return a.type == b.type && a.layout == b.layout && a.n_in == b.n_in && a.n_out == b.n_out;
}

}  // namespace

bool CudaBackend::groups_expert(const ExpertWeights& w, const ExpertWeights& first, int64_t count) const {
  if (!on_device(w.gate) || !on_device(w.up) || !on_device(w.down)) return false;
  const MatmulOut gate_up[2] = {{w.gate, nullptr}, {w.up, nullptr}};
  if (prefill_->takes(gate_up, count)) return false;  // rows enough for the tensor cores
  if (!same_matrix_kind(w.gate, first.gate) || !same_matrix_kind(w.up, first.up) ||
      !same_matrix_kind(w.down, first.down))
    return false;
  // Alignment is per matrix (a view may start anywhere in the arena).
  const GroupKernel gate = group_kernel(w.gate), up = group_kernel(w.up), down = group_kernel(w.down);
  return gate != GroupKernel::kNone && gate == up && down != GroupKernel::kNone;
}

void CudaBackend::expert_ffn(const ExpertFfnArgs& a) {
  flush_add();
  const int64_t n_slot = a.n_tok * a.n_used, n_expert = static_cast<int64_t>(a.experts.size());
  // The order experts are computed in: as handed out, else ascending ids.
  std::vector<int32_t>& order = order_;
  order.clear();
  if (a.next) {
    for (int64_t e; (e = (*a.next)()) >= 0;) order.push_back(static_cast<int32_t>(e));
  } else {
    seen_.assign(static_cast<size_t>(n_expert), 0);
    for (int64_t i = 0; i < n_slot; ++i)
      if (a.ids[i] >= 0) seen_[static_cast<size_t>(a.ids[i])] = 1;
    for (int32_t e = 0; e < n_expert; ++e)
      if (seen_[static_cast<size_t>(e)]) order.push_back(e);
  }
  // Rows by expert: [n_slot] token of each gathered row, [n_slot] slot it
  // lands in (t * n_used + j), in `order`.
  counts_.clear();
  tok_.resize(static_cast<size_t>(n_slot));
  slot_.resize(static_cast<size_t>(n_slot));
  int64_t k = 0;
  for (int32_t e : order) {
    const int64_t start = k;
    for (int64_t i = 0; i < n_slot; ++i)
      if (a.ids[i] == e)
        tok_[static_cast<size_t>(k)] = static_cast<int32_t>(i / a.n_used), slot_[static_cast<size_t>(k)] = static_cast<int32_t>(i), ++k;
    counts_.push_back(k - start);
  }
  // Which experts go grouped: resident, too few rows for the tensor cores,
  // every one like the first of them, within the scratch reserve() sized.
  grouped_.assign(order.size(), 0);
  int64_t n_grouped = 0, grouped_rows = 0, max_count = 0;
  const ExpertWeights* first = nullptr;
  const bool x_aligned = reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && a.n_embd % 4 == 0;
  for (size_t i = 0; i < order.size() && x_aligned && grouping_on(); ++i) {
    const ExpertWeights& w = a.experts[static_cast<size_t>(order[i])];
    if (!first && groups_expert(w, w, counts_[i])) first = &w;
    if (first && grouped_rows + counts_[i] <= kGroupedRows && groups_expert(w, *first, counts_[i])) {
      grouped_[i] = 1;
      ++n_grouped;
      grouped_rows += counts_[i];
      max_count = std::max(max_count, counts_[i]);
    }
  }
  // The device copy: tok, slot, the weights, the grouped rows (tok and slot
  // again, grouped experts only, contiguous), then the groups (8-aligned):
  // gate|up's, then down's (the same rows, down's matrix as part 0).
  const size_t ints = static_cast<size_t>(2 * n_slot + n_slot + 2 * grouped_rows);
  const size_t groups_at = (ints * sizeof(int32_t) + 7) / 8 * 8;
  pack_.resize(groups_at + 2 * static_cast<size_t>(n_grouped) * sizeof(MatmulGroup));
  auto* p_tok = reinterpret_cast<int32_t*>(pack_.data());
  int32_t* p_slot = p_tok + n_slot;
  auto* p_wts = reinterpret_cast<float*>(p_slot + n_slot);
  int32_t* p_gtok = reinterpret_cast<int32_t*>(p_wts + n_slot);
  int32_t* p_gslot = p_gtok + grouped_rows;
  std::memcpy(p_tok, tok_.data(), static_cast<size_t>(n_slot) * sizeof(int32_t));
  std::memcpy(p_slot, slot_.data(), static_cast<size_t>(n_slot) * sizeof(int32_t));
  std::memcpy(p_wts, a.weights, static_cast<size_t>(n_slot) * sizeof(float));
  auto* p_groups = reinterpret_cast<MatmulGroup*>(pack_.data() + groups_at);
  {
    int64_t off = 0, g_off = 0, g = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      const int64_t c = counts_[i];
      if (grouped_[i]) {
        const ExpertWeights& w = a.experts[static_cast<size_t>(order[i])];
        std::copy_n(tok_.data() + off, c, p_gtok + g_off);
        std::copy_n(slot_.data() + off, c, p_gslot + g_off);
        p_groups[g] = MatmulGroup{.w = {w.gate.data, w.up.data}, .off = static_cast<int32_t>(g_off),
                                  .count = static_cast<int32_t>(c)};
        p_groups[n_grouped + g] = MatmulGroup{.w = {w.down.data, nullptr}, .off = static_cast<int32_t>(g_off),
                                              .count = static_cast<int32_t>(c)};
        ++g;
        g_off += c;
      }
      off += c;
    }
  }
  const auto* dev = static_cast<const uint8_t*>(experts_.upload(pack_.data(), pack_.size(), stream_));
  const auto* d_tok = reinterpret_cast<const int32_t*>(dev);
  const int32_t* d_slot = d_tok + n_slot;
  const auto* d_wts = reinterpret_cast<const float*>(d_slot + n_slot);
  const int32_t* d_gtok = reinterpret_cast<const int32_t*>(d_wts + n_slot);
  const int32_t* d_gslot = d_gtok + grouped_rows;
  float* y = scratch(kExpertY, n_slot * a.n_embd);
  if (n_grouped > 0) {
    const auto* d_groups = reinterpret_cast<const MatmulGroup*>(dev + groups_at);
    grouped_ffn(a, *first,
                GroupedRows{.groups = d_groups, .n_groups = n_grouped, .max_count = max_count, .x_rows = d_gtok,
                            .y_rows = d_gslot},
                d_groups + n_grouped, grouped_rows, y);
  }
  float* xg = scratch(kExpertX, n_slot * a.n_embd);
  float* yd = scratch(kExpertDown, a.n_tok * a.n_embd);
  int64_t off = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const int64_t c = counts_[i];
    if (grouped_[i]) {
      off += c;
      continue;
    }
    ExpertWeights w = a.experts[static_cast<size_t>(order[i])];
    // An expert in a weight source's host memory: from its device slot, copied there if it is not.
    const bool slotted = experts_dev_ && a.layer >= 0 && host_views_ && host_views_->holds(w.gate.data);
    if (slotted) w = experts_dev_->acquire(a.layer, order[i], w, stream_);
    {
      std::optional<PdlBlock> plain;  // a copy may just have written the slot: no early weight loads (cuda_pdl.cuh)
      if (slotted) plain.emplace();
      launch_gather_rows(a.x, d_tok + off, xg, c, a.n_embd, stream_);
      ffn_rows(w, xg, c, a.n_embd, a.n_ff, a.act, yd);
    }
    if (slotted) experts_dev_->release(stream_);
    launch_scatter_rows(yd, d_slot + off, y, c, a.n_embd, stream_);
    off += c;
  }
  float* ys = nullptr;
  if (a.shared) {
    ys = scratch(kSharedY, a.n_tok * a.n_embd);
    ffn_rows(*a.shared, a.x, a.n_tok, a.n_embd, a.n_ff_shared, a.act, ys);
  }
  launch_expert_sum(y, d_wts, a.n_used, ys, vec(a.shared_gate, a.n_embd), a.x, a.out, a.n_tok, a.n_embd, stream_);
}

// rows: x_rows the token of each grouped row, y_rows its slot.
void CudaBackend::grouped_ffn(const ExpertFfnArgs& a, const ExpertWeights& like, GroupedRows rows,
                              const MatmulGroup* down, int64_t n_rows, float* y) {
  // h = act(gate x) * up x for every grouped row: [n_rows, n_ff] in grouped order
  float* g = scratch(kExpertGate, n_rows * a.n_ff);
  float* u = scratch(kExpertUp, n_rows * a.n_ff);
  float* const gate_up[2] = {g, u};
  const int32_t* slots = rows.y_rows;
  rows.y_rows = nullptr;  // gate|up: x rows by token, h rows in grouped order
  const bool q8_in = group_kernel(like.gate) == GroupKernel::kQ8, q8_down = group_kernel(like.down) == GroupKernel::kQ8;
  if (q8_in) {
    const QuantizedX qx = quantized_x(a.n_embd, a.n_tok);  // each token once; rows pick theirs
    quantize_x(a.x, a.n_embd, a.n_embd, a.n_tok, qx, stream_);
    launch_matmul_q8_grouped(like.gate.type, like.gate.layout, a.n_embd, a.n_ff, rows, qx, gate_up, a.n_ff, stream_);
  } else {
    launch_matmul_grouped(like.gate.type, a.n_embd, a.n_ff, rows, a.x, a.n_embd, gate_up, a.n_ff, stream_);
  }
  // down: h's rows in grouped order, each to its slot's row of y
  rows.x_rows = nullptr;
  rows.y_rows = slots;
  rows.groups = down;
  float* const out[1] = {y};
  if (q8_down) {
    const QuantizedX qx = quantized_x(a.n_ff, n_rows);
    glu_quantize_x(g, u, n_rows, a.n_ff, a.act, qx, stream_);
    launch_matmul_q8_grouped(like.down.type, like.down.layout, a.n_ff, a.n_embd, rows, qx, out, a.n_embd, stream_);
  } else {
    launch_glu(g, u, n_rows * a.n_ff, a.act, stream_);
    launch_matmul_grouped(like.down.type, a.n_ff, a.n_embd, rows, g, a.n_ff, out, a.n_embd, stream_);
  }
}

}  // namespace sluice::cuda
