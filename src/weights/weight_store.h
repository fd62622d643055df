// WeightStore: hands the forward pass each layer's weights, resident or
// streamed from disk through a ring of K slots, per a PlacementPlan.
//
// Built from a ModelFile (GGUF) and a PlacementPlan. At open:
//   - essentials (embeddings, output, norms) and resident layers are read once
//     into aligned host buffers with O_DIRECT, so a resident run does not lean
//     on the page cache either. With options.direct = false they are not read
//     at all: pointers go into the ModelFile's mmap (and the page cache).
//   - K slots of slot_bytes are allocated. With options.ring_probe_s > 0 the
//     streamed layers first go through the ring as it will read them (layer
//     order, every slot in flight) for that long, and the plan's disk figures
//     are re-rated with the rate those reads got: a virtual disk's rate depends
//     on the access pattern, so only the ring's own reads predict the ring.
//     Then the first K streamed layers start loading.
// Per layer of a step:
//
//   acquire(i) -> LayerView   blocks only if layer i has not landed (stall time)
//   ...compute layer i...
//   release(i)                the slot may now take another layer
//
// The store walks a schedule: one period of the layers in the order they will
// be acquired, repeating. By default it is 0 .. n_layer-1 (a forward pass per
// step); training sets 0 .. L-1, L-1 .. 0 (forward, then the backward last
// layer first) with set_schedule(). After acquire(i) (and again after
// release(i)) the store keeps the next distinct streamed layers of the
// schedule in flight, as many as free slots allow: with layer i held in the
// default order that is i+1 .. i+K-1, wrapping into the next step. The first
// of them goes to the arbiter as kCritical, the rest as kPrefetch. A layer
// stays in its slot until a later fill reuses the slot, and a slot is reused
// only for a layer wanted sooner, so a layer the schedule comes back to within
// K distinct streamed layers costs no second read.
//
//   ring (K = 3), streamed layers 0..5, computing layer 2:
//     slot 0: [layer 2 acquired]  slot 1: [layer 3 landed]  slot 2: [layer 4 loading]
//     release(2) -> slot 0 starts layer 5; acquire(5) later wraps: slots take 0, 1 ...
//
//   training order (K = 3), streamed layers 0..5:
//     schedule 0 1 2 3 4 5 | 5 4 3 2 1 0 | 0 1 2 ...
//     acquire(4) forward: wanted next 4, 5, then 3 (the backward comes back
//     to it): 3 keeps its slot; after the turn 5, 4, 3 are read once for
//     both passes, and 0, 1, 2 likewise at the turn into the next step.
//     Layer reads per step in the steady state: 2 x max(0, S - K) for S
//     streamed layers (training_layer_reads()).
//
// Threads: the layer calls (acquire, release, prefetch, cancel, reprioritize,
// end_step) come from one thread, the forward pass; counters() and
// arbiter_stats() may be read from any thread. Transfers run on the arbiter's
// IO thread. acquire/release take the arbiter's lock once per layer; they never
// allocate.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "format/model_file.h"
#include "sluice/status.h"
#include "weights/arbiter.h"
#include "weights/expert_store.h"
#include "weights/extent_layout.h"
#include "weights/io_engine.h"
#include "weights/placement.h"
#include "weights/weight_counters.h"

namespace sluice::weights {

// One tensor of a layer as the compute tier sees it.
struct LayerTensor {
  std::string suffix;            // "attn_q.weight"
  const uint8_t* data = nullptr; // valid from acquire() until release()
  uint64_t n_bytes = 0;
  bool streamed = false;         // lives in a ring slot
};

struct LayerView {
  int64_t layer = -1;
  bool streamed = false;
  std::span<const LayerTensor> tensors;
  // Bytes of the tensor with this suffix, or nullptr.
  const uint8_t* find(std::string_view suffix) const;
};

enum class LayerState {
  kResident,  // in host memory for the whole run
  kAbsent,    // streamed, not in a slot
  kLoading,   // streamed, transfer in flight
  kLanded,    // streamed, in a slot, not acquired
  kAcquired,  // streamed, held by the caller
};
const char* layer_state_name(LayerState s);

struct WeightStoreOptions {
  IoBackend io = IoBackend::kAuto;
  int queue_depth = 16;
  bool direct = true;               // O_DIRECT for streamed and resident reads
  uint64_t chunk_bytes = 1u << 20;  // largest single read
  double cap_bytes_per_s = 0;       // bandwidth cap of the arbiter (reads spaced, not in flight); 0: none
  // The disk tier's read-rate cap (IoEngineOptions::rate_cap_bytes_per_s): a
  // slower disk, whose reads stay in flight for as long as they take there; 0: none.
  double disk_rate_cap_bytes_per_s = 0;
  bool auto_prefetch = true;        // keep the next layers in flight (off: only explicit prefetch)
  double ring_probe_s = 0;          // seconds of the ring's own reads at open, to re-rate the plan (0: off)
  // Host memory the store's buffers may take; nullopt: MemAvailable from
  // /proc/meminfo at open (no check where it cannot be read).
  std::optional<uint64_t> host_available_bytes;
};

class WeightStore {
 public:
  // Reads the resident set and starts the ring. Errors: the file cannot be
  // opened or read; the plan does not match the file; the plan's host buffers
  // (resident set read from the file, ring, expert pool) exceed the host memory
  // available (resource exhausted, before anything is allocated).
  static StatusOr<std::unique_ptr<WeightStore>> open(std::shared_ptr<const ModelFile> file, PlacementPlan plan,
                                                     const WeightStoreOptions& options = {});
  // Cancels transfers in flight before freeing the slots.
  ~WeightStore();
  WeightStore(const WeightStore&) = delete;
  WeightStore& operator=(const WeightStore&) = delete;

  // Layer i's tensors; blocks until a streamed layer has landed. Errors: every
  // slot is held by the caller (resource exhausted), or the read failed.
  StatusOr<LayerView> acquire(int64_t layer);
  // Ends the caller's use of layer i (its pointers may be reused from now on).
  void release(int64_t layer);
  // Starts loading layer i at `priority` into a slot not needed by the next
  // layers; true if it is resident, in a slot, or now loading.
  bool prefetch(int64_t layer, TransferClass priority);
  // Drops layer i from its slot, stopping its transfer; false if it was not in
  // a slot or is acquired.
  bool cancel(int64_t layer);
  // Cancels every slot not held by the caller (e.g. when a step is abandoned).
  void cancel_all();
  // Changes the priority of layer i's transfer; false if it is not loading.
  bool reprioritize(int64_t layer, TransferClass priority);
  // From now on layers are acquired in `order`, one period of the schedule
  // that then repeats (see above); the next acquire is order[0]'s. Layers in
  // slots that the new order wants soon stay there. Errors: an entry outside
  // 0 .. n_layer-1, or a layer the order never visits.
  Status set_schedule(std::span<const int64_t> order);
  std::span<const int64_t> schedule() const { return order_; }
  // Counts the tokens of the step just computed (bytes per token, ...).
  void end_step(int64_t n_tokens) {
    counters_.add_tokens(static_cast<uint64_t>(n_tokens));
    if (experts_) experts_->end_step();
  }

  // Routed models under an expert placement (plan().n_expert_slots > 0): the
  // experts come one by one from the ExpertStore (expert_store.h), not with
  // their layer's view. release(l) also releases layer l's experts.
  bool streams_experts() const { return experts_ != nullptr; }
  void predict_experts(int64_t layer, std::span<const int32_t> experts) { experts_->predict(layer, experts); }
  Status begin_experts(int64_t layer, std::span<const int32_t> experts, ExpertPointers* out) {
    return experts_->acquire(layer, experts, out);
  }
  Status next_expert(int64_t layer, int64_t* index) { return experts_->next_landed(layer, index); }
  void expert_prepared(int64_t layer, int64_t index) { experts_->mark_prepared(layer, index); }
  bool next_expert_ready(int64_t layer) const { return experts_->next_ready(layer); }
  bool unprepared_expert(int64_t* layer, int32_t* expert, ExpertPointers* out) const {
    return experts_->unprepared(layer, expert, out);
  }
  void unpinned_expert_prepared(int64_t layer, int32_t expert) { experts_->mark_prepared_expert(layer, expert); }
  bool landed_expert(int64_t layer, int32_t expert, ExpertPointers* out) const {
    return experts_->landed(layer, expert, out);
  }
  void set_expert_reuse_hook(std::function<void(int64_t, int32_t)> hook) {
    if (experts_) experts_->set_reuse_hook(std::move(hook));
  }
  // The fluid split over the expert pool (ExpertStore::set_slot_limit):
  // slots in use, the fewest and the most. Errors: no expert pool, or n
  // outside [min, max].
  int64_t expert_slots() const { return experts_ ? experts_->n_slots() : 0; }
  int64_t min_expert_slots() const { return experts_ ? experts_->min_slots() : 0; }
  int64_t max_expert_slots() const { return experts_ ? experts_->max_slots() : 0; }
  Status set_expert_slots(int64_t n);
  // Per-layer expert counters (empty when experts are not streamed).
  ExpertStatsSnapshot expert_stats() const { return experts_ ? experts_->stats() : ExpertStatsSnapshot{}; }

  // The fluid split (engine/fluid_control.h), between steps (no layer
  // acquired): demote() moves a layer a tier down. One resident in a buffer
  // of its own streams through the ring from then on (the buffer is freed);
  // one of the device tier (rule 8: the backend's copy is the caller's to
  // free) is read into a buffer of its own while the host budget has room,
  // else streams through the ring. promote() undoes it: a host layer is read
  // into a buffer of its own again (blocking until it has landed), a
  // device-tier one is served from the file's memory for the backend to copy
  // again (its host buffer freed: the caller unregisters it first,
  // layer_buffer()). Both update the plan (its map, byte counts) and keep the
  // slots' read-ahead going. (weight_store_fluid.cpp)
  // Whether demote(layer) can: a dense model's layer resident in a buffer of
  // its own, fitting a ring slot in a store with a ring; or in the device
  // tier, fitting a slot or the host budget's room.
  bool demotable(int64_t layer) const;
  // Errors: not demotable (invalid argument).
  Status demote(int64_t layer);
  // Errors: the layer is not streamed, or acquired (invalid argument); the
  // read failed (the layer stays streamed).
  Status promote(int64_t layer);
  // The host buffer of the layer's own (a resident or a demoted device
  // layer's; empty when none): what a backend registered to read it.
  std::span<const uint8_t> layer_buffer(int64_t layer) const;
  // A resident (or device-tier) layer's tensors, without acquiring it (the
  // model binds a promoted layer with them).
  LayerView resident_view(int64_t layer) const;
  // Bytes a demote() moves out of the layer's tier: its host buffer, or the
  // device tier's tensor bytes; 0 when not demotable.
  uint64_t demotable_bytes(int64_t layer) const;

  // A resident tensor by full name ("token_embd.weight", "blk.3.attn_norm.weight",
  // or any tensor of a resident layer); nullptr for streamed or unknown names.
  const uint8_t* resident_tensor(const std::string& name) const;
  // Whether `data` (a resident tensor's bytes) lies in a buffer the store read
  // once at open and never reads into again; not the ModelFile's memory, a
  // ring slot or an expert slot.
  bool owns_resident(const uint8_t* data) const;
  // Every buffer of the store's that weight views point into: the resident
  // copies, the ring's slots and the expert pool (a GPU pins them).
  std::vector<std::span<const uint8_t>> host_regions() const;
  LayerState state(int64_t layer) const;
  int64_t n_layer() const { return plan_.n_layer; }
  const PlacementPlan& plan() const { return plan_; }
  std::string placement_map() const { return weights::placement_map(plan_); }
  std::string io_description() const { return plan_.io_note; }
  WeightCountersSnapshot counters() const { return counters_.snapshot(); }
  ArbiterStats arbiter_stats() const;

 private:
  struct Slot {
    AlignedBuffer buf;
    int64_t layer = -1;       // layer whose bytes are (or are becoming) here
    TransferId transfer = 0;  // unretired transfer, or 0 once landed
    TransferClass cls = TransferClass::kPrefetch;
    bool acquired = false;
    double acquired_s = 0;
  };
  // Per layer: its tensors, and for a streamed layer where each lands in a slot.
  struct LayerInfo {
    bool streamed = false;
    ExtentLayout layout;                // streamed matrices (streamed layers only)
    std::vector<LayerTensor> resident;  // view table of a resident layer
    uint64_t matrix_bytes = 0;
    int buffer = -1;                    // resident_bufs_ index of its own buffer, or -1
    bool device_home = false;           // placed in the device tier (rule 8): promote() goes back there
    std::vector<size_t> moved;          // plan_.tensors in that buffer (or tier), which demote() streams
  };

  WeightStore(std::shared_ptr<const ModelFile> file, PlacementPlan plan, const WeightStoreOptions& options);
  Status load(const WeightStoreOptions& options);
  // Keeps the next streamed layers of the schedule from position `from` on
  // (cyclic) in the free slots.
  Status fill(int64_t from);
  // desired_ = the next distinct streamed layers of the schedule from
  // position `from` on, none held, at most `want` (at most one period).
  void upcoming(int64_t from, size_t want);
  // The schedule position of layer's next acquire after pos_.
  int64_t next_position(int64_t layer) const;
  Status start(int slot, int64_t layer, TransferClass cls);
  // Moves the slot's unretired read up to `cls` when that is more urgent than
  // its class (lower is more urgent).
  void raise_priority(Slot& slot, TransferClass cls);
  // The streamed layers read through the slots as the ring reads them, for
  // `seconds` or four passes over the streamed layers, whichever ends first.
  // Leaves every slot empty.
  struct RingReads {
    uint64_t bytes = 0;  // landed
    double seconds = 0;  // first read issued -> last landed
  };
  StatusOr<RingReads> probe_ring_reads(double seconds);
  void drop(int slot);
  LayerView view(int slot, int64_t layer) const;
  // Makes layer l streamed: its extents over li.moved's tensors and a view
  // table per slot (the others point where they are resident).
  Status make_streamed(int64_t l);
  // streamed_ and streamed_pos_ from layers_.
  void index_streamed();
  // The aligned extents of li.moved's tensors (what a slot or a buffer of the
  // layer's own holds of it).
  ExtentLayout moved_layout(const LayerInfo& li) const;
  // Whether the host budget holds `bytes` more.
  bool host_room(uint64_t bytes) const;
  // The layer's view table from the plan's tensors that are not on disk.
  void table_resident(int64_t layer);
  // A layer's buffer of `bytes` allocated (added) or freed: the plan's host figures follow.
  void count_resident_buffer(uint64_t bytes, bool added);
  // Frees the layer's own buffer (its index stays for a later promotion), counted.
  void free_own_buffer(LayerInfo& li);
  // Tensor bytes that became resident (added) or left: the counters' placement follows.
  void count_resident_tensors(uint64_t bytes, bool added);
  // Reads li.moved's tensors into a buffer of the layer's own and serves
  // them from there (tier host); *bytes: their bytes. Errors: the read.
  Status read_own_buffer(int64_t layer, std::string_view why, uint64_t* bytes);
  // li.moved's tensors served from the file's memory again, in the device
  // tier (the backend copies them); returns their bytes.
  uint64_t serve_from_file(int64_t layer);
  // A device-tier layer read into a buffer of its own (demote without a
  // ring or with room), and back (promote).
  Status device_to_host(int64_t layer);
  Status host_to_device(int64_t layer);

  std::shared_ptr<const ModelFile> file_;
  PlacementPlan plan_;
  bool auto_prefetch_ = true;
  std::unique_ptr<IoEngine> engine_;
  std::vector<AlignedBuffer> resident_bufs_;
  std::unordered_map<std::string, const uint8_t*> resident_;  // by full tensor name
  std::vector<LayerInfo> layers_;
  std::vector<int64_t> streamed_;          // streamed layer ids, ascending
  std::vector<int64_t> streamed_pos_;      // [n_layer] index in streamed_, or -1
  std::vector<Slot> slots_;
  std::vector<int> layer_slot_;            // [n_layer] slot index or -1
  std::vector<std::vector<LayerTensor>> slot_tables_;  // [slot * n_layer + layer]
  std::vector<double> resident_acquired_s_;            // [n_layer]
  std::vector<int64_t> desired_;           // fill() scratch, capacity K
  std::vector<int> reusable_;              // fill() scratch, capacity K
  std::vector<int64_t> order_;             // one period of the schedule (default 0 .. n_layer-1)
  int64_t pos_ = -1;                       // schedule position of the last acquire; -1: none yet
  int n_acquired_ = 0;
  WeightCounters counters_;
  std::unique_ptr<ExpertStore> experts_;       // reset by the destructor while the arbiter lives
  std::unique_ptr<BandwidthArbiter> arbiter_;  // last: destroyed first, before the buffers
};

}  // namespace sluice::weights
