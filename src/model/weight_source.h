// LayerWeightSource: where the forward pass gets weight bytes when they are not
// simply resident in the ModelFile's mapping (e.g. streamed through a ring of
// layer slots by the weight store).
//
// The model asks for layer l before computing it and releases it after; the
// source may block in acquire() until the bytes have landed, and uses the
// known layer order to prefetch ahead: 0 .. n_layer-1 per step unless the
// caller sets another schedule (training walks the layers forward, then back). Tensors outside the blocks (embeddings,
// output, norms) are resident for the whole run. Called from the model's
// forward pass only (one thread at a time).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "arch/arch_spec.h"
#include "base/expert_slot_range.h"
#include "sluice/status.h"

namespace sluice {

// Pointers to one layer's weight matrices (GGUF rows) by role, valid until
// release(); null for roles the layer does not have. The model binds the
// matrices of its ArchSpec that the layer's file holds (vectors are resident).
struct LayerWeightPointers {
  std::array<const uint8_t*, kNumTensorRoles> by_role{};
  const uint8_t* operator[](TensorRole r) const { return by_role[static_cast<size_t>(r)]; }
};

// One expert's matrices (GGUF rows of its slices of the stacked tensors).
// The bytes are in the source's own writable memory: once handed out, the
// model may reorder them in place for its backend (Backend::prepare_in_place)
// and says so with expert_prepared(); `prepared` tells it the next time the
// same bytes come back (a cache hit).
struct ExpertPointers {
  const uint8_t* gate = nullptr;
  const uint8_t* up = nullptr;
  const uint8_t* down = nullptr;
  bool prepared = false;
};

// Layer schedules for LayerWeightSource::set_schedule(), one period each.
// A forward pass per step (inference, held-out evaluation): 0 .. n_layer-1.
inline std::vector<int64_t> forward_schedule(int64_t n_layer) {
  std::vector<int64_t> order;
  for (int64_t l = 0; l < n_layer; ++l) order.push_back(l);
  return order;
}
// A training step (train/train_step.h): the forward 0 .. n_layer-1, then the
// backward n_layer-1 .. 0, one acquire per layer each way.
inline std::vector<int64_t> training_schedule(int64_t n_layer) {
  std::vector<int64_t> order = forward_schedule(n_layer);
  for (int64_t l = n_layer - 1; l >= 0; --l) order.push_back(l);
  return order;
}

// Sources may also hold a routed layer's experts one by one (an expert cache)
// instead of with the layer: then acquire() leaves the stacked expert tensors
// unbound, and the model asks for the experts its routing chose.
//
//   acquire(l) -> [route] -> begin_experts(l, chosen)
//              -> (next_expert(l) -> [prepare, expert_prepared] -> compute
//                  that one)* -> release(l)
//   predict_experts(l', likely)   any time before layer l' routes: a hint to prefetch;
//                                 a later call for the same l' replaces it
//   while !next_expert_ready(l): unprepared_expert() -> [prepare] ->
//       unpinned_expert_prepared()   the wait for a read is spent reordering
//                                    experts that landed earlier
// Each expert is computed as soon as it has landed, while the others read.
class LayerWeightSource {
 public:
  virtual ~LayerWeightSource() = default;
  // Bytes of a tensor that stays resident (full GGUF name), or nullptr.
  virtual const uint8_t* resident(const std::string& name) const = 0;
  // Whether `data`, a resident tensor's bytes from resident(), is the
  // source's own writable copy, which it never reads into again: then the
  // model may reorder it in place for its backend (Backend::prepare_in_place)
  // before its first step. Default: no, leave it as it is.
  virtual bool reorderable(const uint8_t* data) const { return false; }
  // Whether layer l's matrices belong to the device tier (--gpu-budget with
  // --mem-budget on a GPU): resident() gives their bytes (the file's mapping)
  // for the backend to copy into its memory at load; acquire() still
  // brackets the layer, and the model keeps the backend's copies bound.
  // Default: no.
  virtual bool device_resident(int64_t layer) const { return false; }
  // The source's own host memory weight views point into (resident copies,
  // ring and expert slots), for a backend to pin (Backend::register_host).
  // Default: none.
  virtual std::vector<std::span<const uint8_t>> host_regions() const { return {}; }
  // Layer l's matrices; blocks only if their transfer has not landed.
  virtual Status acquire(int64_t layer, LayerWeightPointers* out) = 0;
  virtual void release(int64_t layer) = 0;
  // One forward step of n_tokens tokens is done (for per-token counters).
  virtual void end_step(int64_t n_tokens) = 0;
  // From the next acquire on, layers come in `order` (one period that
  // repeats; every layer at least once), e.g. training_schedule(): a source
  // that prefetches follows it. Default: ignored (0 .. n_layer-1 assumed).
  // Errors: an order that names a layer the model lacks or skips one.
  virtual Status set_schedule(std::span<const int64_t> order) { return Status(); }

  // Whether experts come from begin_experts() (default: with their layer).
  virtual bool streams_experts() const { return false; }
  // These experts of `layer` will probably be needed (its predicted routing).
  // A later prediction of the same layer replaces this one.
  virtual void predict_experts(int64_t layer, std::span<const int32_t> experts) {}
  // Makes the experts available until release(layer), without waiting for
  // them: read expert i only once next_expert() has handed out i.
  // out: [experts.size()], out[i] for experts[i] (distinct ids).
  virtual Status begin_experts(int64_t layer, std::span<const int32_t> experts, ExpertPointers* out) {
    return unimplemented("this weight source keeps experts with their layer");
  }
  // *index = i of an expert of the last begin_experts() that has landed and was
  // not handed out before, waiting for one if none has; -1 when all were.
  virtual Status next_expert(int64_t layer, int64_t* index) {
    return unimplemented("this weight source keeps experts with their layer");
  }
  // Expert `index` of the last begin_experts() (handed out) was reordered in
  // place; it stays so until it is read again.
  virtual void expert_prepared(int64_t layer, int64_t index) {}
  // Whether next_expert(layer) would return without waiting.
  virtual bool next_expert_ready(int64_t layer) const { return true; }
  // An expert (of any layer) in memory, not in use and not reordered yet, for
  // the caller to reorder while it would wait; false: none.
  virtual bool unprepared_expert(int64_t* layer, int32_t* expert, ExpertPointers* out) const { return false; }
  // That expert was reordered in place; it stays so until it is read again.
  virtual void unpinned_expert_prepared(int64_t layer, int32_t expert) {}
  // Expert `expert` of `layer`, whole in memory now (read and landed, not
  // necessarily chosen): where it is. Its bytes stay while it is pinned
  // (begin_experts until release); otherwise until the source reuses its
  // memory, which it says first through the reuse hook. false: not in
  // memory (not read, or still reading).
  virtual bool landed_expert(int64_t layer, int32_t expert, ExpertPointers* out) const { return false; }
  // Called on the caller's thread, from within predict_experts,
  // begin_experts or set_expert_slots, just before the memory of an expert
  // that had landed is reused (its bytes change from then on). Null: none.
  // The hook must not call back into the source.
  using ExpertReuseHook = std::function<void(int64_t layer, int32_t expert)>;
  virtual void set_expert_reuse_hook(ExpertReuseHook hook) {}

  // The fluid split (engine/fluid_control.h), between steps: the host bytes
  // demote(l) would free by streaming resident layer l (0: it cannot);
  // demote(l) does it; promote(l) makes a streamed layer resident again
  // and gives its matrices (as acquire() would, without acquiring it).
  // Defaults: nothing can move.
  virtual uint64_t demotable_bytes(int64_t layer) const { return 0; }
  // The host memory of layer l's own (a demoted device-tier layer's copy),
  // for a backend to register; empty when none. Default: none.
  virtual std::span<const uint8_t> layer_region(int64_t layer) const { return {}; }
  virtual Status demote(int64_t layer) { return unimplemented("this weight source cannot demote layers"); }
  virtual Status promote(int64_t layer, LayerWeightPointers* out) {
    return unimplemented("this weight source cannot promote layers");
  }
  // A pool of expert slots the split can shrink and grow (streams_experts()),
  // then set_expert_slots(n) between steps. Defaults: no pool.
  using ExpertSlotRange = sluice::ExpertSlotRange;
  virtual ExpertSlotRange expert_slot_range() const { return {}; }
  virtual Status set_expert_slots(int64_t n) { return unimplemented("this weight source keeps no expert pool"); }
};

}  // namespace sluice
