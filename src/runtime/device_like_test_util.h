// DeviceLike: a backend for testing what runs on a device without one (three
// tiers, the fluid split on a device).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/reference_backend.h"
#include "quant/dtype.h"

namespace sluice::testing {

// A backend whose memory is not the host's, over the reference kernels: its
// "device" copies are an arena of its own, and every matrix an operator reads
// must be there or in a registered host range, never the file's mapping of a
// device-tier layer (the model must keep the prepared copies bound).
class DeviceLike final : public ReferenceBackend {
 public:
  bool host_visible() const override { return false; }
  bool reads_host_weights() const override { return true; }
  void register_host(const uint8_t* data, size_t bytes) override { ranges.emplace_back(data, bytes); }
  void unregister_host(const uint8_t* data) override { ++unregistered; }
  void finish_host_reads() override {
    ++finishes;
    unfinished = false;
    // The chosen transient prefetches are read by now (their layer ran).
    std::erase_if(in_flight, [this](const Copy& c) { return c.layer <= last_layer && let_go(c); });
  }
  void reserve(const ScratchNeeds& needs) override {
    host_weight_bytes = std::max(host_weight_bytes, needs.host_weight_bytes);
    ReferenceBackend::reserve(needs);
  }
  PreparedWeights prepare_weights(std::span<const WeightGroup> groups) override {
    for (const WeightGroup& g : groups)
      for (WeightView* w : g) {
        const size_t n = row_bytes(w->type, w->n_in) * static_cast<size_t>(w->n_out);
        arena.emplace_back(w->data, w->data + n);
        w->data = arena.back().data();
        ++prepared;
      }
    return {};
  }
  void matmul(std::span<const MatmulOut> outs, const float* x, int64_t n_in, int64_t n_tok) override {
    for (const MatmulOut& o : outs) check(o.w);
    ReferenceBackend::matmul(outs, x, n_in, n_tok);
  }
  void norm_matmul(const NormMatmulArgs& a) override {
    for (const MatmulOut& o : a.outs) check(o.w);
    ReferenceBackend::norm_matmul(a);
  }
  void glu_matmul(const GluMatmulArgs& a) override {
    check(a.out.w);
    ReferenceBackend::glu_matmul(a);
  }
  void logits(const LogitsArgs& a) override {
    check(a.output);
    ReferenceBackend::logits(a);
  }
  void expert_ffn(const ExpertFfnArgs& a) override {
    // The layer, for a device that keeps experts in slots by (layer, id).
    if (a.layer < 0) stray = "an expert call without its layer";
    // The chosen experts only (the others' views may be unbound).
    for (int64_t i = 0; i < a.n_tok * a.n_used; ++i) {
      const ExpertWeights& e = a.experts[static_cast<size_t>(a.ids[i])];
      for (const WeightView* v : {&e.gate, &e.up, &e.down}) {
        check(*v);
        if (in_arena(*v)) prepared_expert = true;
      }
    }
    if (a.shared)
      for (const WeightView* v : {&a.shared->gate, &a.shared->up, &a.shared->down}) check(*v);
    last_layer = a.layer;
    ReferenceBackend::expert_ffn(a);
  }
  // A transient prefetch is "copied" as late as the contract lets it be: its
  // host bytes, kept here when it was made, must be the same when it is let
  // go (settle_expert_prefetches, or finish_host_reads once its layer ran).
  void prefetch_experts(int64_t layer, std::span<const int32_t> ids, std::span<const ExpertWeights> experts,
                        bool transient) override {
    ++prefetches;
    if (layer < 0 || ids.empty()) stray = "a prefetch for no layer the router predicts";
    for (int32_t e : ids) {
      const ExpertWeights& w = experts[static_cast<size_t>(e)];
      if (!in_ranges(w.gate)) stray = "a prefetch of an expert outside host memory";
      if (!transient) continue;
      ++transient_prefetches;
      Copy c{.layer = layer, .expert = e};
      for (const WeightView* v : {&w.gate, &w.up, &w.down})
        c.bytes.emplace_back(v->data, std::vector<uint8_t>(v->data, v->data + row_bytes(v->type, v->n_in) * v->n_out));
      in_flight.push_back(std::move(c));
    }
  }
  void settle_expert_prefetches(int64_t layer, std::span<const int32_t> keep) override {
    std::erase_if(in_flight, [&](const Copy& c) {
      return (layer < 0 || c.layer == layer) && std::find(keep.begin(), keep.end(), c.expert) == keep.end() &&
             let_go(c);
    });
  }

  std::vector<std::pair<const uint8_t*, size_t>> ranges;
  std::vector<std::vector<uint8_t>> arena;
  uint64_t host_weight_bytes = 0;
  int prepared = 0, host_reads = 0, device_reads = 0, finishes = 0, unregistered = 0;
  bool unfinished = false;   // a host view read since the last finish_host_reads()
  bool prepared_expert = false;  // an expert's view in the arena (experts must stay the store's)
  int prefetches = 0;            // prefetch_experts() calls
  int transient_prefetches = 0;  // experts prefetched from transient host bytes
  std::string stray;         // a view found neither here nor in a registered range

 private:
  struct Copy {
    int64_t layer = -1;
    int32_t expert = -1;
    std::vector<std::pair<const uint8_t*, std::vector<uint8_t>>> bytes;  // gate, up, down as prefetched
  };
  // The copy is let go now (true): its host bytes must still be as prefetched.
  bool let_go(const Copy& c) {
    for (const auto& [at, was] : c.bytes)
      if (std::memcmp(at, was.data(), was.size()) != 0)
        stray = "the host bytes of a transient prefetch reused before it was let go";
    return true;
  }
  std::vector<Copy> in_flight;  // transient prefetches not let go yet
  int64_t last_layer = -1;      // the layer whose experts ran last

  bool in_arena(const WeightView& w) const {
    for (const auto& a : arena)
      if (w.data >= a.data() && w.data < a.data() + a.size()) return true;
    return false;
  }
  bool in_ranges(const WeightView& w) const {
    for (const auto& [p, n] : ranges)
      if (w.data >= p && w.data < p + n) return true;
    return false;
  }
  void check(const WeightView& w) {
    if (in_arena(w)) {
      ++device_reads;
      return;
    }
    for (const auto& [p, n] : ranges)
      if (w.data >= p && w.data < p + n) {
        ++host_reads;
        unfinished = true;
        return;
      }
    stray = "a view outside the device copies and the registered host memory";
  }
};

}  // namespace sluice::testing
