// ExpertStore: a routed model's experts, one expert of one layer at a time,
// in a pool of slots in the compute tier, fed from the model file.
//
// An expert is its three slices of the layer's stacked tensors (gate, up and
// down rows e*n_ff .. (e+1)*n_ff): three aligned extents read with O_DIRECT
// through the arbiter into one slot. Which experts the slots hold is the
// ExpertCache's decision (expert_cache.h: pinned while their layer runs,
// protected while predicted, the least used given up first).
//
//   predict(l, likely)      before layer l routes: each likely expert not in a
//                           slot is read at prefetch priority, and all are
//                           protected from eviction; a later predict() of
//                           the same layer replaces it (experts it no longer
//                           names lose their protection, and their reads are
//                           cancelled if still going)
//   acquire(l, chosen)      after it routes: predictions it did not choose are
//                           cancelled if still reading (else left as cache);
//                           chosen experts not in a slot are read at critical
//                           priority, prefetches still reading are promoted;
//                           returns without waiting
//   next_landed(l, &i)      hands out the chosen experts one at a time in the
//                           order they land (waiting for the next if none
//                           has: stall time), so the layer computes the ones
//                           in memory while the others are still reading
//   landed(l, e, &p)        whether (l, e) is whole in a slot now (read and
//                           landed, chosen or not), and where: its bytes
//                           stay while it is pinned, else until a read
//                           reuses the slot, which calls the reuse hook
//                           first (a device copies predicted experts ahead
//                           from there, and lets go of them in the hook)
//   mark_prepared(l, i)     the caller reordered handed-out expert i in place
//                           (ExpertPointers::prepared says so while the slot
//                           holds it; a new read clears it)
//   release(l)              unpins them
//   next_ready(l)           whether next_landed(l) would return without
//                           waiting
//   unprepared(&l, &e, &p)  while the caller would wait: an expert that has
//                           landed in a slot, is not pinned and was not
//                           reordered yet (predicted ones first), for the
//                           caller to reorder with its idle threads; then
//                           mark_prepared_expert(l, e)
//
// An expert share (options.expert_begin/end; --parallel ep, weights/
// placement.h rule 7) holds and reads only the experts [begin, end) of each
// routed layer: predict() passes over the others, acquire() refuses them.
//
// Counted per layer: chosen, predicted, predicted and chosen (precision and
// recall), ready (landed when the layer routed), late (a prefetch still
// reading) and by how long (routing to landing, summed and the longest),
// missed (read on demand), and bytes: read from disk, served from slots; the
// same per expert (expert_heat.h: outcomes, predictions, in a slot or not).
// Threads: calls from the forward pass's thread; stats() from any.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "format/model_file.h"
#include "model/hparams.h"
#include "model/weight_source.h"
#include "weights/arbiter.h"
#include "weights/expert_cache.h"
#include "weights/expert_heat.h"
#include "weights/expert_stats.h"
#include "weights/extent_layout.h"
#include "weights/weight_counters.h"

namespace sluice::weights {

struct ExpertStatsSnapshot {
  std::vector<ExpertLayerStats> layers;  // [n_layer]; dense layers all zero
  uint64_t disk_bytes = 0;               // expert bytes read from the file
  uint64_t host_bytes = 0;               // expert bytes the layers used from slots
  uint64_t restored = 0;                 // cancelled prefetches that left their slot's expert in place
  int64_t n_slots = 0;
  CachePolicy policy = CachePolicy::kUsage;
  ExpertHeatSnapshot experts;            // per layer and expert

  ExpertLayerStats total() const;
  // Bytes per token by tier, split into experts and dense weights, given the
  // weight store's counters of the same run: "experts a MB from disk + b MB
  // from slots, dense c MB from host; stall d ms per token".
  std::string per_token(const WeightCountersSnapshot& w) const;
  // {"slots", "policy", "disk_bytes_per_token", "host_bytes_per_token",
  //  "dense_host_bytes_per_token", "stall_s_per_token", "recall", "precision",
  //  "hit_rate", "layers": [{"layer", "resident", "recall", "precision", "hit_rate", ...}]}
  nlohmann::ordered_json json(const WeightCountersSnapshot& w) const;
  // Per layer: resident experts, recall, precision, hit rate; Prometheus lines.
  std::string table() const;
  std::string prometheus() const;
};

struct ExpertStoreOptions {
  int64_t n_slots = 0;       // at least the share's experts (one routed layer's worth)
  uint64_t slot_bytes = 0;   // at least the largest expert's aligned extents
  CachePolicy policy = CachePolicy::kUsage;
  int64_t expert_begin = 0;  // the experts this store holds and reads, of every routed layer
  int64_t expert_end = -1;   // (-1: to the last)
};

class ExpertStore {
 public:
  // The slots' memory, [n_slots, slot_bytes] (WeightStore::host_regions).
  std::span<const uint8_t> pool() const { return {pool_.data(), pool_.size()}; }
  // The largest aligned buffer one expert of this model needs.
  static uint64_t slot_bytes_for(const ModelFile& file, const ModelHparams& hp);
  // One expert's own bytes (its three slices), the same for every expert of a model.
  static uint64_t expert_bytes_for(const ModelFile& file, const ModelHparams& hp);

  // Errors: the file has no stacked expert tensors by offset; a share outside
  // the model's experts, or more experts in it than slots; slot allocation.
  static StatusOr<std::unique_ptr<ExpertStore>> open(const ModelFile& file, const ModelHparams& hp,
                                                     const ExpertStoreOptions& options, BandwidthArbiter& arbiter,
                                                     WeightCounters& counters);
  ~ExpertStore();

  void predict(int64_t layer, std::span<const int32_t> experts);
  // out[i]: where experts[i] will be in memory; read it only once
  // next_landed() has handed out i. Errors: an expert outside the share
  // (nothing is read), no slot free.
  Status acquire(int64_t layer, std::span<const int32_t> experts, ExpertPointers* out);
  // After acquire(layer, ...): *index = i of an expert of that call that
  // has now landed and was not handed out before (-1 when all were). Errors:
  // its read failed.
  Status next_landed(int64_t layer, int64_t* index);
  void mark_prepared(int64_t layer, int64_t index);
  bool next_ready(int64_t layer) const;
  // false: none.
  bool unprepared(int64_t* layer, int32_t* expert, ExpertPointers* out) const;
  // false: not in a slot, or still reading.
  bool landed(int64_t layer, int32_t expert, ExpertPointers* out) const;
  // Called with (layer, expert) just before a slot whose expert had landed
  // is given to another or emptied (from predict, acquire or
  // set_slot_limit, on their thread). Null: none.
  void set_reuse_hook(std::function<void(int64_t, int32_t)> hook) { reuse_hook_ = std::move(hook); }
  void mark_prepared_expert(int64_t layer, int32_t expert);
  void release(int64_t layer);
  void end_step();

  ExpertStatsSnapshot stats() const;
  int64_t n_slots() const { return cache_.n_slots(); }
  // The fluid split, between steps (nothing pinned): from now on only slots
  // 0 .. n-1 hold experts. Slots past n are emptied (their reads stopped) and
  // their memory given back; raising n brings empty slots back. n from
  // min_slots() (one layer's experts) to max_slots(). Errors: n outside that.
  Status set_slot_limit(int64_t n);
  int64_t min_slots() const { return expert_end_ - expert_begin_; }
  int64_t max_slots() const { return cache_.n_slot_ids(); }

 private:
  struct ExpertInfo {
    ExtentLayout layout;       // gate, up, down slices
    uint64_t offsets[3] = {};  // where they land in a slot
  };
  // An expert a read evicted, with its slot's flags (prepared_, fresh_).
  struct Evicted {
    int64_t layer = -1;  // -1: none
    int32_t expert = -1;
    bool prepared = false;
    bool fresh = false;
  };
  struct SlotIo {
    TransferId transfer = 0;   // a read not yet retired
    TransferClass cls = TransferClass::kPrefetch;
    bool predicted = false;    // read because of a prediction
    uint64_t seq = 0;          // submission order (the arbiter serves a class oldest first)
    double submit_s = 0;       // when it was submitted (now_seconds): with service_s, when it landed
    // What this read evicted, whole in the slot until the read's first byte
    // lands: a prefetch cancelled before it began gives the slot back to it
    // (none if its bytes were not whole).
    Evicted prev;
  };
  struct LayerCounters {
    std::atomic<uint64_t> chosen{0}, predicted{0}, predicted_chosen{0}, ready{0}, kept{0}, late{0}, missed{0},
        prefetch_reads{0}, cancelled{0};
    std::atomic<uint64_t> late_us{0}, late_max_us{0};  // lateness in microseconds: summed, the longest
  };

  ExpertStore(const ModelHparams& hp, const ExpertStoreOptions& options, BandwidthArbiter& arbiter,
              WeightCounters& counters);
  ExpertInfo& info(int64_t layer, int64_t expert) { return experts_[static_cast<size_t>(layer * hp_.n_expert + expert)]; }
  // Reads (l, e) into a slot the cache chooses; false if every slot is pinned.
  // Errors: no transfer record free.
  StatusOr<bool> start(int64_t layer, int64_t expert, TransferClass cls, bool predicted);
  // Where (l, e)'s three slices lie in slot `slot`, and whether it is reordered.
  ExpertPointers pointers_in(int64_t slot, int64_t layer, int64_t expert) const;
  // Whether a slot's bytes are in memory: no read, or its read has landed.
  bool bytes_in(int64_t slot) const;
  bool in_share(int64_t expert) const { return expert >= expert_begin_ && expert < expert_end_; }
  // Stops a slot's read (if any) and retires it. True if no read of it had
  // begun, so the slot's bytes are as they were before it was started.
  bool stop_read(int64_t slot);
  // Empties a slot (its read stopped first).
  void forget(int64_t slot);
  // A prediction's read that is no longer wanted: stopped, and the slot given
  // back to the expert it evicted if not a byte of it was overwritten.
  void drop_prefetch(int64_t slot);
  // Waits for pinned expert i's read (if any) and retires it; marks it handed out.
  Status land(size_t i);
  // Retires reads that have landed, so transfer records stay few.
  void retire_landed();

  ModelHparams hp_;
  BandwidthArbiter& arbiter_;
  WeightCounters& counters_;
  uint64_t slot_bytes_ = 0;
  uint64_t expert_bytes_ = 0;
  int64_t expert_begin_ = 0, expert_end_ = 0;  // the share, resolved
  ExpertCache cache_;
  AlignedBuffer pool_;                       // [n_slots, slot_bytes]
  std::vector<ExpertInfo> experts_;          // [n_layer * n_expert]
  std::vector<SlotIo> io_;                   // [n_slots]
  std::vector<char> prepared_;               // [n_slots] reordered in place since it was read
  std::vector<char> fresh_;                  // [n_slots] read since its layer last routed
  std::vector<int64_t> in_flight_;           // slots with a read not retired
  std::vector<int32_t> pinned_;              // experts pinned for pinned_layer_
  std::vector<char> handed_;                 // [pinned_.size()] landed and handed out
  std::vector<double> late_since_;           // [pinned_.size()] when a late expert's layer routed; else -1
  uint64_t next_seq_ = 0;
  int64_t pinned_layer_ = -1;
  std::vector<int32_t> predicted_;           // [n_layer * n_expert] 1: predicted since the layer last routed
  std::unique_ptr<LayerCounters[]> layer_counters_;  // [n_layer]
  std::unique_ptr<std::atomic<int64_t>[]> resident_;  // [n_layer] experts in slots (for stats())
  ExpertHeat heat_;                                   // the per-expert figures
  std::atomic<uint64_t> disk_bytes_{0};
  std::atomic<uint64_t> restored_{0};  // drop_prefetch() gave a slot back
  std::atomic<uint64_t> host_bytes_{0};
  CachePolicy policy_;
  std::function<void(int64_t, int32_t)> reuse_hook_;
};

}  // namespace sluice::weights
