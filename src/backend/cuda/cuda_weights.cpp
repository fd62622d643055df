// CudaBackend's weight placement: prepare_weights (the resident arena, the
// split-scales layout, and under --gpu-budget the dispatches that stream from
// pinned host memory through the WeightRing) and bind / unbind, which point a
// call's streamed views into their ring slots.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "backend/cuda/cuda_align.h"
#include "backend/cuda/cuda_api.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.cuh"
#include "base/check.h"
#include "quant/quant.h"
#include "quant/split_scales.h"

namespace sluice::cuda {

DeviceBuffer::DeviceBuffer(size_t bytes) : size_(bytes) {
  SLUICE_CUDA_OK(cudaMalloc(&data_, std::max<size_t>(bytes, 4)));
  SLUICE_CUDA_OK(cudaMemset(data_, 0, std::max<size_t>(bytes, 4)));
}

PreparedWeights CudaBackend::prepare_weights(std::span<const WeightGroup> groups) {
  flush_add();
  settle();
  // One device arena for the resident matrices, each 256-byte aligned; a
  // matrix seen twice (the same host bytes) is copied once, with the first
  // group that has it. Q4_0 / Q8_0 go with their scales split off
  // (quant/split_scales.h) unless SLUICE_CUDA_Q8_LAYOUT=rows.
  const char* env = std::getenv("SLUICE_CUDA_Q8_LAYOUT");
  const bool split = !(env && std::strcmp(env, "rows") == 0);
  auto splits = [&](const WeightView& w) { return split && split_scales_takes(w.type, w.n_in); };
  auto bytes_of = [](const WeightView& w) { return row_bytes(w.type, w.n_in) * static_cast<size_t>(w.n_out); };
  const size_t n_groups = groups.size();
  std::unordered_map<const uint8_t*, size_t> owner;  // host bytes -> the first group that has them
  std::vector<size_t> group_bytes(n_groups, 0);
  size_t total = 0;
  for (size_t gi = 0; gi < n_groups; ++gi)
    for (WeightView* w : groups[gi]) {
      if (!w->data || owner.count(w->data)) continue;
      CHECK(w->layout == WeightLayout::kRows);
      owner[w->data] = gi;
      group_bytes[gi] += weight_aligned(bytes_of(*w));
      total += weight_aligned(bytes_of(*w));
    }
  PreparedWeights p;
  if (total == 0) return p;

  // Under a budget: the largest group (the output head) and the groups from
  // the front stay resident while they fit beside a ring of kSlots slots the
  // size of the largest streamed group; every group after them streams.
  constexpr int kSlots = 3;
  std::vector<uint8_t> streams(n_groups, 0);
  size_t slot = 0;
  if (budget_ > 0 && reserve_ >= budget_) {
    p.status = resource_exhausted("--gpu-budget {:.2f} GiB leaves nothing for weights after the {:.2f} GiB kept for "
                                  "the KV cache (a shorter context, fewer sequences or --kv-budget shrink it)",
                                  static_cast<double>(budget_) / (1 << 30), static_cast<double>(reserve_) / (1 << 30));
    return p;
  }
  // For the weights: the budget less the KV pool's reserve and the ring that
  // host views (a weight store's layers) are copied through.
  const uint64_t staging = host_views_ ? host_views_->capacity() : 0;
  if (budget_ > 0 && reserve_ + staging >= budget_) {
    p.status = resource_exhausted("--gpu-budget {:.2f} GiB leaves nothing for resident weights after {:.2f} GiB for "
                                  "the KV cache and {:.2f} GiB for the layers copied in from host memory",
                                  static_cast<double>(budget_) / (1 << 30), static_cast<double>(reserve_) / (1 << 30),
                                  static_cast<double>(staging) / (1 << 30));
    return p;
  }
  const uint64_t budget = budget_ > 0 ? budget_ - reserve_ - staging : 0;
  if (budget > 0 && total > budget) {
    if (ring_) {
      p.status = invalid_argument("--gpu-budget: the cuda backend streams the weights of one model, and one is "
                                     "already streaming on it");
      return p;
    }
    const size_t largest = static_cast<size_t>(std::max_element(group_bytes.begin(), group_bytes.end()) - group_bytes.begin());
    for (size_t gi = 0; gi < n_groups; ++gi)
      if (gi != largest) slot = std::max(slot, group_bytes[gi]);
    const size_t floor = group_bytes[largest] + kSlots * slot;
    if (budget < floor) {
      p.status = resource_exhausted(
          "--gpu-budget {:.2f} GiB leaves {:.2f} GiB for weights (after {:.2f} GiB for the KV cache), below the "
          "smallest that can stream them, {:.2f} GiB: the largest dispatch ({:.2f} GiB, resident) and a ring of {} "
          "slots of {:.2f} GiB",
          static_cast<double>(budget_) / (1 << 30), static_cast<double>(budget) / (1 << 30),
          static_cast<double>(reserve_) / (1 << 30), static_cast<double>(floor) / (1 << 30),
          static_cast<double>(group_bytes[largest]) / (1 << 30), kSlots, static_cast<double>(slot) / (1 << 30));
      return p;
    }
    size_t resident = floor;
    bool spill = false;
    for (size_t gi = 0; gi < n_groups; ++gi) {
      if (gi == largest || group_bytes[gi] == 0) continue;
      spill = spill || resident + group_bytes[gi] > budget;
      if (spill) streams[gi] = 1;
      else resident += group_bytes[gi];
    }
  }
  // Offsets: resident matrices in the arena, streamed ones in their group.
  std::vector<int> ring_index(n_groups, -1);
  std::vector<size_t> streamed_bytes;
  for (size_t gi = 0; gi < n_groups; ++gi)
    if (streams[gi]) {
      ring_index[gi] = static_cast<int>(streamed_bytes.size());
      streamed_bytes.push_back(group_bytes[gi]);
    }
  std::unordered_map<const uint8_t*, size_t> offset;  // in the arena, or in the group
  std::vector<size_t> group_fill(n_groups, 0);
  size_t arena_bytes = 0;
  for (size_t gi = 0; gi < n_groups; ++gi)
    for (WeightView* w : groups[gi]) {
      if (!w->data || owner.at(w->data) != gi || offset.count(w->data)) continue;
      size_t& at = streams[gi] ? group_fill[gi] : arena_bytes;
      offset[w->data] = at;
      at += weight_aligned(bytes_of(*w));
    }
  std::unique_ptr<DeviceBuffer> arena;
  if (arena_bytes > 0) arena = std::make_unique<DeviceBuffer>(arena_bytes);
  if (!streamed_bytes.empty()) {
    ring_ = std::make_unique<WeightRing>(streamed_bytes, kSlots, copy_queue());
    ring_of_group_ = ring_index;
    p.host_groups = streams;
  }
  std::unordered_map<const uint8_t*, const uint8_t*> placed;  // host bytes -> where the views now point
  std::vector<uint8_t> tmp;  // one resident matrix in the split layout
  size_t n_split = 0, split_bytes = 0;
  for (size_t gi = 0; gi < n_groups; ++gi)
    for (WeightView* w : groups[gi]) {
      if (!w->data) continue;
      const uint8_t* host = w->data;
      const bool sp = splits(*w);
      auto it = placed.find(host);
      if (it == placed.end()) {
        const size_t g = owner.at(host), off = offset.at(host), n = bytes_of(*w);
        if (streams[g]) {  // into the pinned host tier, in the layout the kernels read
          uint8_t* dst = ring_->host(ring_index[g]) + off;
          if (sp) split_scales(w->type, host, w->n_out, w->n_in, dst);
          else std::memcpy(dst, host, n);
          streamed_[dst] = StreamedAt{.group = ring_index[g], .offset = off};
          it = placed.emplace(host, dst).first;
        } else {
          const uint8_t* src = host;
          if (sp) {
            tmp.resize(n);
            split_scales(w->type, host, w->n_out, w->n_in, tmp.data());
            src = tmp.data();
          }
          uint8_t* dev = arena->data() + off;
          SLUICE_CUDA_OK(cudaMemcpy(dev, src, n, cudaMemcpyHostToDevice));
          it = placed.emplace(host, dev).first;
        }
        if (sp) ++n_split, split_bytes += n;
      }
      w->data = it->second;
      if (sp) w->layout = WeightLayout::kSplitScales;
    }
  p.copied_bytes = total;
  p.summary = fmt::format("{:.2f} GiB of weights copied to {}", static_cast<double>(arena_bytes) / (1 << 30),
                          device_description());
  if (ring_)
    p.summary += fmt::format("; {:.2f} GiB in {} dispatches stream from pinned host memory through {} slots of "
                             "{:.1f} MiB (--gpu-budget {:.2f} GiB, {:.2f} GiB of it kept for the KV cache)",
                             static_cast<double>(ring_->host_bytes()) / (1 << 30), ring_->n_groups(), ring_->n_slots(),
                             static_cast<double>(ring_->slot_bytes()) / (1 << 20), static_cast<double>(budget_) / (1 << 30),
                             static_cast<double>(reserve_) / (1 << 30));
  if (n_split > 0)
    p.summary += fmt::format("; {} Q4_0/Q8_0 matrices ({:.2f} GiB) with their scales split off for 16-byte loads",
                             n_split, static_cast<double>(split_bytes) / (1 << 30));
  // What the budget leaves after the resident matrices holds the experts
  // copied in from host views (three tiers, a routed model).
  const uint64_t used = arena_bytes + (ring_ ? static_cast<uint64_t>(ring_->n_slots()) * ring_->slot_bytes() : 0);
  p.summary += make_expert_slots(budget > 0 ? (budget > used ? budget - used : 1) : 0);
  p.arena = std::move(arena);
  return p;
}

Status CudaBackend::set_weight_schedule(std::span<const int> groups) {
  if (!ring_) return Status();
  ring_order_.clear();
  for (int g : groups) {
    if (g < 0 || static_cast<size_t>(g) >= ring_of_group_.size())
      return invalid_argument("a weight schedule names group {} of {}", g, ring_of_group_.size());
    if (const int r = ring_of_group_[static_cast<size_t>(g)]; r >= 0) ring_order_.push_back(r);
  }
  CHECK(ring_->set_schedule(ring_order_));  // ring indices, from ring_of_group_
  return Status();
}

int CudaBackend::bind(std::span<const MatmulOut> outs, MatmulOut* bound, Held* held) {
  int n = 0;
  for (size_t i = 0; i < outs.size(); ++i) {
    bound[i] = outs[i];
    const WeightView& w = outs[i].w;
    if (host_views_ && w.data && host_views_->holds(w.data)) {  // a weight source's host memory
      settle();  // the copy queue's stream
      const HostViews::Copy c =
          host_views_->copy_in(w.data, row_bytes(w.type, w.n_in) * static_cast<size_t>(w.n_out), stream_);
      held[n++] = Held{.group = -1, .base = c.device, .ticket = c.ticket};
      bound[i].w.data = c.device;
      continue;
    }
    if (streamed_.empty()) continue;
    const auto it = streamed_.find(outs[i].w.data);
    if (it == streamed_.end()) continue;
    settle();  // the ring's copies
    const int g = it->second.group;
    int j = 0;
    while (j < n && held[j].group != g) ++j;
    if (j == n) held[n++] = Held{.group = g, .base = ring_->acquire(g, stream_)};
    bound[i].w.data = held[j].base + it->second.offset;
  }
  return n;
}

void CudaBackend::unbind(const Held* held, int n) {
  for (int i = 0; i < n; ++i) {
    if (held[i].group < 0) host_views_->read(held[i].ticket, stream_);
    else ring_->release(held[i].group, stream_);
  }
}

CudaBackend::HeldWeight CudaBackend::hold_weight(const WeightView& w) {
  const MatmulOut out{w, nullptr};
  MatmulOut bound;
  Held held[1];
  HeldWeight h;
  h.n_held = bind(std::span(&out, 1), &bound, held);
  h.w = bound.w;
  if (h.n_held > 0) h.group = held[0].group, h.ticket = held[0].ticket;
  return h;
}

void CudaBackend::release_weight(const HeldWeight& h) {
  if (h.n_held == 0) return;
  const Held held{.group = h.group, .base = nullptr, .ticket = h.ticket};
  unbind(&held, 1);
}

void CudaBackend::register_host(const uint8_t* data, size_t bytes) {
  settle();
  if (!host_views_) host_views_ = std::make_unique<HostViews>(size_t{1} << 20, copy_queue());  // grown by reserve()
  host_views_->register_range(data, bytes);
}

void CudaBackend::unregister_host(const uint8_t* data) {
  settle();
  if (host_views_) host_views_->unregister_range(data);
}

Backend::MemoryRates CudaBackend::measure_memory_rates() {
  settle();
  const CopyBandwidth bw = measure_copy_bandwidth(size_t{256} << 20, 3, /*with_pageable=*/false);
  return MemoryRates{.read_gbps = bw.d2d_gbps, .host_copy_gbps = bw.h2d_pinned_gbps};
}

void CudaBackend::finish_host_reads() {
  settle();
  if (host_views_) host_views_->finish();
  if (experts_dev_) experts_dev_->finish();
}

std::string CudaBackend::make_expert_slots(uint64_t left) {
  if (expert_bytes_ == 0 || !host_views_ || experts_dev_) return "";
  const size_t slot = DeviceExperts::slot_bytes_for(expert_bytes_);
  int64_t n = expert_layers_ * n_expert_;  // every expert, where the memory allows
  if (left > 0) {
    n = std::min<int64_t>(n, static_cast<int64_t>(left / slot));
  } else {
    size_t free = 0, total = 0;
    SLUICE_CUDA_OK(cudaMemGetInfo(&free, &total));
    n = std::min<int64_t>(n, static_cast<int64_t>(free / 2 / slot));  // half left for the KV cache and scratch
  }
  if (n < 2) return "; no device slots for experts (each is copied in when chosen)";
  // In chunks of a routed layer's worth, which the fluid split gives up and takes back.
  experts_dev_ = std::make_unique<DeviceExperts>(expert_layers_, n_expert_, expert_bytes_, static_cast<int>(n),
                                                 copy_queue(), n_expert_ >= 2 ? static_cast<int>(n_expert_) : 0);
  return fmt::format("; {} device slots of {:.1f} MiB keep the experts copied in ({:.1f} a routed layer)", n,
                     static_cast<double>(slot) / (1 << 20),
                     static_cast<double>(n) / static_cast<double>(std::max<int64_t>(1, expert_layers_)));
}

void CudaBackend::prefetch_experts(int64_t layer, std::span<const int32_t> ids, std::span<const ExpertWeights> experts,
                                   bool transient) {
  if (!experts_dev_ || !host_views_) return;
  settle();  // the copy queue's stream
  for (int32_t e : ids) {
    const ExpertWeights& w = experts[static_cast<size_t>(e)];
    if (w.gate.data && host_views_->holds(w.gate.data)) experts_dev_->prefetch(layer, e, w, transient);
  }
}

void CudaBackend::settle_expert_prefetches(int64_t layer, std::span<const int32_t> keep) {
  if (!experts_dev_ || !experts_dev_->has_transient()) return;
  settle();  // a copy may wait for kernels being recorded
  experts_dev_->settle_transient(layer, keep);
}

ExpertSlotRange CudaBackend::expert_slots() const {
  // In chunks of a routed layer's worth: movable when there are two or more.
  if (!experts_dev_ || n_expert_ < 2 || experts_dev_->max_slots() < 2 * n_expert_) return {};
  return {.now = experts_dev_->n_slots(),
          .min = n_expert_,
          .max = experts_dev_->max_slots(),
          .slot_bytes = experts_dev_->slot_bytes()};
}

Status CudaBackend::set_expert_slot_count(int64_t n) {
  const ExpertSlotRange c = expert_slots();
  if (c.max == 0) return invalid_argument("the cuda backend keeps no expert slots that can move");
  if (n < c.min || n > c.max || (c.max - n) % c.min != 0)
    return invalid_argument("{} device expert slots: the count moves from {} in steps of {} (at least {})", n, c.max,
                            c.min, c.min);
  if (n == c.now) return Status();
  settle();
  finish_host_reads();
  SLUICE_CUDA_OK(cudaStreamSynchronize(stream_));  // no kernel reads a slot given up
  if (!experts_dev_->set_n_slots(static_cast<int>(n)))
    return resource_exhausted("the device could not take back {} expert slots of {:.1f} MiB ({} in use)", n - c.now,
                              static_cast<double>(c.slot_bytes) / (1 << 20), experts_dev_->n_slots());
  return Status();
}

ExpertSlotCounts CudaBackend::expert_slot_counts() const {
  if (!experts_dev_) return {};
  const DeviceExperts& e = *experts_dev_;
  const uint64_t ahead = std::min(e.ready(), e.hits());
  return {.kept = e.hits() - ahead, .ahead = ahead, .late = std::min(e.late(), ahead), .missed = e.misses(),
          .copies_ahead = e.prefetched(), .dropped = e.cancelled(), .declined = e.declined()};
}

std::string CudaBackend::copy_summary() const {
  std::string s;
  if (const uint64_t b = bytes_streamed(); b > 0)
    s = fmt::format("gpu: {:.3f} GB of weights copied host to device", static_cast<double>(b) / 1e9);
  if (experts_dev_) {
    const ExpertSlotCounts c = expert_slot_counts();
    const uint64_t found = c.kept + c.ahead, all = found + c.missed;
    s += fmt::format("{}experts in {} device slots: {} of {} chosen found there ({:.1f}%: {} kept from before, {} "
                     "copied ahead of their use, by the router's prediction or as they landed in host memory; {} of "
                     "those found still copying); {} copied ahead in all ({} wrong ones dropped before they were "
                     "copied; {} not copied ahead: the slot they would take held another not used yet)",
                     s.empty() ? "" : "; ", experts_dev_->n_slots(), found, all,
                     all ? 100.0 * static_cast<double>(found) / static_cast<double>(all) : 0.0, c.kept, c.ahead,
                     c.late, c.copies_ahead, c.dropped, c.declined);
  }
  if (copies_) {
    const auto b = copies_->bytes_issued();
    s += fmt::format("{}copy queue: {:.3f} GB critical, {:.3f} GB predicted, {:.3f} GB kv swap",
                     s.empty() ? "" : "; ", static_cast<double>(b[0]) / 1e9, static_cast<double>(b[1]) / 1e9,
                     static_cast<double>(b[2]) / 1e9);
  }
  if (const std::string g = graph_->summary(); !g.empty()) s += (s.empty() ? "" : "; ") + g;
  return s;
}

}  // namespace sluice::cuda
