// CudaBackend's mixture-of-experts half: route(), expert_ffn() and
// routed_ffn().
//
// expert_ffn groups the step's (token, slot) rows by expert. Experts whose
// weights are resident on the device and whose rows are too few for the
// tensor cores go as one grouped launch per matrix for all of them
// (cuda_matmul.cuh's MatmulGroup), which is what decode needs: at one token a
// routed layer is k experts of small matrices, and 5-7 launches each (~50 a
// layer at top-8) would be mostly launch latency. The others (many rows:
// prefill; or bytes a copy must bring in first: expert slots, host views, the
// streamed ring) go one expert at a time.
//
//   grouped:  [quantize x]  gate|up (2 parts, x rows by token)  act(*)  down (y rows by slot)
//   one by one per expert:  gather x rows  gate|up  act  down  scatter to slots
//   then:     shared expert, expert_sum (slots in order, weighted)
//
// (*) with 8-bit activations, act writes h and its quantization in one kernel.
//
// routed_ffn does the grouped path without the host: the routing kernel
// (cuda_route.cuh) writes the ids, quantizes x and builds the groups' table
// from a per-layer table of the experts' pointers (route_table), and the ids
// reach the caller's arrays at the next wait (drain_routes).
//
// SLUICE_CUDA_GROUPED_EXPERTS=0 sends every expert one at a time, and
// SLUICE_CUDA_DEVICE_ROUTING=0 routes on the host (the A/Bs in
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
#include "backend/cuda/cuda_route.cuh"
#include "base/check.h"

namespace sluice::cuda {

namespace {

bool env_off(const char* name) {
  const char* e = std::getenv(name);
  return e && std::strcmp(e, "0") == 0;
}

bool grouping_on() {
  static const bool on = !env_off("SLUICE_CUDA_GROUPED_EXPERTS");
  return on;
}

bool device_routing_on() {
  static const bool on = !env_off("SLUICE_CUDA_DEVICE_ROUTING");
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

void CudaBackend::route(const RouteArgs& a) {
  flush_add();
  settle();
  host_logits_.resize(static_cast<size_t>(a.n_tok * a.n_expert));
  SLUICE_CUDA_OK(cudaMemcpyAsync(host_logits_.data(), a.logits, host_logits_.size() * sizeof(float),
                                 cudaMemcpyDeviceToHost, stream_));
  SLUICE_CUDA_OK(cudaStreamSynchronize(stream_));
  drain_routes();  // before these ids: an earlier routed_ffn's may share the caller's arrays
  RouteArgs h = a;
  h.logits = host_logits_.data();
  route_topk(h);
}

void CudaBackend::wait_idle() {
  flush_add();
  settle();
  SLUICE_CUDA_OK(cudaStreamSynchronize(stream_));
  drain_routes();
}

void CudaBackend::drain_routes() {
  for (const PendingRoute& p : routes_pending_) {
    const auto n = static_cast<size_t>(p.n);
    std::memcpy(p.ids, route_log_ + p.off, n * sizeof(int32_t));
    std::memcpy(p.weights, route_log_ + p.off + n * sizeof(int32_t), n * sizeof(float));
  }
  routes_pending_.clear();
  route_log_used_ = 0;
}

const uint8_t* const* CudaBackend::route_table(const ExpertFfnArgs& e) {
  const auto n_expert = static_cast<size_t>(e.experts.size());
  auto fits = [&] {
    for (const ExpertWeights& w : e.experts)
      if (!groupable(w, e.experts[0])) return false;
    return true;
  };
  auto fill = [&](std::vector<const uint8_t*>& t) {
    t.resize(3 * n_expert);
    for (size_t i = 0; i < n_expert; ++i)
      t[3 * i] = e.experts[i].gate.data, t[3 * i + 1] = e.experts[i].up.data, t[3 * i + 2] = e.experts[i].down.data;
  };
  std::vector<const uint8_t*>& host = route_host_;
  if (e.layer < 0) {  // no promise the views stay: checked and sent each call
    if (!fits()) return nullptr;
    fill(host);
    return static_cast<const uint8_t* const*>(route_table_.upload(host.data(), host.size() * sizeof(void*), stream_));
  }
  if (route_tables_.size() <= static_cast<size_t>(e.layer)) route_tables_.resize(static_cast<size_t>(e.layer) + 1);
  RouteTable& t = route_tables_[static_cast<size_t>(e.layer)];
  // A layer's views change only when it is bound anew (the fluid split
  // demoting or promoting it), and then its first expert's gate does too.
  if (t.experts != e.experts.data() || t.gate0 != e.experts[0].gate.data) {
    t.experts = e.experts.data();
    t.gate0 = e.experts[0].gate.data;
    t.ok = fits();
    if (t.ok) {
      settle();  // a synchronous copy below
      fill(host);
      if (!t.dev) SLUICE_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&t.dev), host.size() * sizeof(void*)));
      SLUICE_CUDA_OK(cudaStreamSynchronize(stream_));  // kernels queued may read the old table
      SLUICE_CUDA_OK(cudaMemcpy(t.dev, host.data(), host.size() * sizeof(void*), cudaMemcpyHostToDevice));
    }
  }
  return t.ok ? t.dev : nullptr;
}

void CudaBackend::routed_ffn(const RouteArgs& r, const ExpertFfnArgs& e) {
  flush_add();
  const int64_t n_slot = r.n_tok * r.n_used, n_expert = r.n_expert;
  const bool shape_ok = grouping_on() && device_routing_on() && e.next == nullptr && r.n_tok > 0 &&
                        n_slot <= kGroupedRows && n_expert <= kMaxRouteExperts && r.n_used <= kMaxRouteUsed &&
                        r.n_used <= n_expert && static_cast<int64_t>(e.experts.size()) == n_expert &&
                        reinterpret_cast<uintptr_t>(e.x) % 16 == 0 && e.n_embd % 4 == 0;
  // No expert takes more rows than there are tokens: too few for the tensor cores.
  const MatmulOut gate_up[2] = {{e.experts.empty() ? WeightView{} : e.experts[0].gate, nullptr},
                                {e.experts.empty() ? WeightView{} : e.experts[0].up, nullptr}};
  const uint8_t* const* table = shape_ok && !prefill_->takes(gate_up, r.n_tok) ? route_table(e) : nullptr;
  if (!table) {
    Backend::routed_ffn(r, e);
    return;
  }
  // Device scratch: ids, weights, x rows, y rows [n_slot] each, then the
  // gate|up and down groups [n_groups] each (8-aligned).
  const int64_t n_groups = std::min(n_slot, n_expert);
  const size_t groups_at = (static_cast<size_t>(4 * n_slot) * 4 + 7) / 8 * 8;
  const size_t bytes = groups_at + 2 * static_cast<size_t>(n_groups) * sizeof(MatmulGroup);
  auto* dev = reinterpret_cast<uint8_t*>(scratch(kRoute, static_cast<int64_t>((bytes + 3) / 4)));
  auto* d_ids = reinterpret_cast<int32_t*>(dev);
  auto* d_wts = reinterpret_cast<float*>(d_ids + n_slot);
  int32_t* d_x_rows = reinterpret_cast<int32_t*>(d_wts + n_slot);
  int32_t* d_y_rows = d_x_rows + n_slot;
  auto* d_gate_up = reinterpret_cast<MatmulGroup*>(dev + groups_at);
  MatmulGroup* d_down = d_gate_up + n_groups;
  // One launch: the top-k, x quantized for the experts' 8-bit kernels, the groups.
  if (!route_counter_) {
    SLUICE_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&route_counter_), sizeof(int32_t)));
    SLUICE_CUDA_OK(cudaMemsetAsync(route_counter_, 0, sizeof(int32_t), stream_));
  }
  const bool q8_in = group_kernel(e.experts[0].gate) == GroupKernel::kQ8;
  launch_route({.logits = r.logits, .n_expert = static_cast<int32_t>(n_expert),
                .n_used = static_cast<int32_t>(r.n_used),
                .renormalize = r.renormalize, .ids = d_ids, .weights = d_wts, .x = e.x,
                .n_embd = static_cast<int32_t>(e.n_embd), .qx = q8_in ? quantized_x(e.n_embd, r.n_tok) : QuantizedX{},
                .table = table, .n_groups = static_cast<int32_t>(n_groups), .gate_up = d_gate_up, .down = d_down,
                .x_rows = d_x_rows, .y_rows = d_y_rows, .counter = route_counter_},
               r.n_tok, stream_);
  // The ids and weights to the host, in pinned memory until the next wait.
  const size_t log_bytes = static_cast<size_t>(n_slot) * (sizeof(int32_t) + sizeof(float));
  if (route_log_used_ + log_bytes > route_log_cap_) {
    wait_idle();  // the copies into the log are done and handed over
    if (log_bytes > route_log_cap_) {
      if (route_log_) SLUICE_CUDA_OK(cudaFreeHost(route_log_));
      route_log_cap_ = std::max<size_t>({log_bytes, 2 * route_log_cap_, size_t{64} << 10});
      SLUICE_CUDA_OK(cudaMallocHost(reinterpret_cast<void**>(&route_log_), route_log_cap_));
    }
  }
  SLUICE_CUDA_OK(cudaMemcpyAsync(route_log_ + route_log_used_, dev, log_bytes, cudaMemcpyDeviceToHost, stream_));
  routes_pending_.push_back({.off = route_log_used_, .ids = r.ids, .weights = r.weights, .n = n_slot});
  route_log_used_ += log_bytes;
  // Rows a pass takes: the mean rows an expert gets (a group with more takes more passes).
  const int64_t per_group = (n_slot + n_groups - 1) / n_groups;
  float* y = scratch(kExpertY, n_slot * e.n_embd);
  grouped_ffn(e, e.experts[0],
              GroupedRows{.groups = d_gate_up, .n_groups = n_groups, .max_count = per_group, .x_rows = d_x_rows,
                          .y_rows = d_y_rows},
              d_down, n_slot, y, /*routed_here=*/true);
  float* ys = nullptr;
  if (e.shared) {
    ys = scratch(kSharedY, e.n_tok * e.n_embd);
    ffn_rows(*e.shared, e.x, e.n_tok, e.n_embd, e.n_ff_shared, e.act, ys);
  }
  launch_expert_sum(y, d_wts, e.n_used, ys, vec(e.shared_gate, e.n_embd), e.x, e.out, e.n_tok, e.n_embd, stream_);
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

bool CudaBackend::groupable(const ExpertWeights& w, const ExpertWeights& first) const {
  if (!on_device(w.gate) || !on_device(w.up) || !on_device(w.down)) return false;
  if (!same_matrix_kind(w.gate, first.gate) || !same_matrix_kind(w.up, first.up) ||
      !same_matrix_kind(w.down, first.down))
    return false;
  // Alignment is per matrix (a view may start anywhere in the arena).
  const GroupKernel gate = group_kernel(w.gate), up = group_kernel(w.up), down = group_kernel(w.down);
  return gate != GroupKernel::kNone && gate == up && down != GroupKernel::kNone;
}

void CudaBackend::expert_ffn(const ExpertFfnArgs& a) {
  flush_add();
  settle();  // experts may come from the host through the copy queue
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
      if (a.ids[i] == e) {
        tok_[static_cast<size_t>(k)] = static_cast<int32_t>(i / a.n_used);
        slot_[static_cast<size_t>(k)] = static_cast<int32_t>(i);
        ++k;
      }
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
    const MatmulOut gate_up[2] = {{w.gate, nullptr}, {w.up, nullptr}};
    if (prefill_->takes(gate_up, counts_[i])) continue;  // rows enough for the tensor cores
    if (grouped_rows + counts_[i] <= kGroupedRows && groupable(w, first ? *first : w)) {
      if (!first) first = &w;
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
  // The routing is known: the layer's predicted copies that were right go
  // first, the wrong ones not copied yet are dropped (DeviceExperts).
  if (experts_dev_ && a.layer >= 0) experts_dev_->settle_predictions(a.layer, order);
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
                              const MatmulGroup* down, int64_t n_rows, float* y, bool routed_here) {
  // h = act(gate x) * up x for every grouped row: [n_rows, n_ff] in grouped order
  float* g = scratch(kExpertGate, n_rows * a.n_ff);
  float* u = scratch(kExpertUp, n_rows * a.n_ff);
  float* const gate_up[2] = {g, u};
  const int32_t* slots = rows.y_rows;
  rows.y_rows = nullptr;  // gate|up: x rows by token, h rows in grouped order
  const bool q8_in = group_kernel(like.gate) == GroupKernel::kQ8, q8_down = group_kernel(like.down) == GroupKernel::kQ8;
  {
    // The launch reads its group before it waits for the kernel before it
    // (cuda_pdl.cuh): not early when that kernel (routed_ffn's) wrote the groups.
    std::optional<PdlBlock> plain;
    if (routed_here) plain.emplace();
    if (q8_in) {
      // x quantized once per token (rows pick theirs): by the routing kernel when it ran
      const QuantizedX qx = quantized_x(a.n_embd, a.n_tok);
      if (!routed_here) quantize_x(a.x, a.n_embd, a.n_embd, a.n_tok, qx, stream_);
      launch_matmul_q8_grouped(like.gate.type, like.gate.layout, a.n_embd, a.n_ff, rows, qx, gate_up, a.n_ff, stream_);
    } else {
      launch_matmul_grouped(like.gate.type, a.n_embd, a.n_ff, rows, a.x, a.n_embd, gate_up, a.n_ff, stream_);
    }
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
