// ExpertCache: which experts occupy the compute tier's expert slots, and which
// one gives way when another must come in. Pure bookkeeping (no bytes, no I/O):
// the weight store drives it with real transfers, and replay_routing() with a
// recorded trace, so a policy is judged on the same code that runs.
//
// The unit is one expert of one layer (its gate, up and down slices). Slots are
// one pool shared by every layer: a step pins the experts its current layer
// uses, and the rest of the pool holds what is most likely to be used next.
//
//   pin(l, e)      the layer is running on it: never evicted until unpin()
//   protect(l, e)  predicted for a coming layer: evicted only after everything
//                  unprotected (a prediction that turns out wrong is demoted at
//                  the layer's routing: unprotect_layer)
//   victim()       the slot to reuse: an empty one, else by policy among the
//                  unpinned, unprotected ones first
//
// Policies:
//   kLru    least recently used (the baseline)
//   kUsage  least used, online: each use adds 1 to the expert's count and every
//           step decays all counts by `decay` (an exponential moving frequency,
//           "the most-used experts stay"), ties to the least recently used
// Not thread-safe: the forward pass's thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice::weights {

enum class CachePolicy { kLru, kUsage };
const char* cache_policy_name(CachePolicy p);

struct ExpertCacheConfig {
  int64_t n_layer = 0;
  int64_t n_expert = 0;
  int64_t n_slots = 0;
  CachePolicy policy = CachePolicy::kUsage;
  double decay = 0.98;  // kUsage: counts multiplied by this at every step
};

class ExpertCache {
 public:
  explicit ExpertCache(const ExpertCacheConfig& config);

  // Slots in use: the limit (set_limit; all of them at first).
  int64_t n_slots() const { return limit_; }
  // Slots the cache was made with.
  int64_t n_slot_ids() const { return static_cast<int64_t>(slots_.size()); }
  // From now on only slots 0 .. n-1 take experts (1 .. n_slot_ids()). The
  // slots past n must be empty (the caller clears them, clear_slot).
  void set_limit(int64_t n);
  // The slot holding (l, e), or -1.
  int64_t slot_of(int64_t layer, int64_t expert) const { return where_[index(layer, expert)]; }
  // What a slot holds (layer -1 when empty).
  int64_t slot_layer(int64_t slot) const { return slots_[static_cast<size_t>(slot)].layer; }
  int64_t slot_expert(int64_t slot) const { return slots_[static_cast<size_t>(slot)].expert; }
  bool pinned(int64_t slot) const { return slots_[static_cast<size_t>(slot)].pins > 0; }

  // The slot (l, e) should go into, evicting its holder if any (which is
  // returned as evicted_layer/expert, -1 if none); -1 if every slot is pinned.
  struct Placement {
    int64_t slot = -1;
    int64_t evicted_layer = -1;
    int64_t evicted_expert = -1;
  };
  // Puts (l, e) in a slot (it must not be in one) and returns where.
  Placement insert(int64_t layer, int64_t expert);
  // Forgets what a slot holds (e.g. a prefetch that was cancelled).
  void clear_slot(int64_t slot);
  // Puts (l, e) back into an empty slot whose bytes still hold it (a read
  // that would have replaced it was cancelled before it began). Its use
  // counts are as they were.
  void restore(int64_t slot, int64_t layer, int64_t expert);

  void pin(int64_t layer, int64_t expert);
  void unpin(int64_t layer, int64_t expert);
  void protect(int64_t layer, int64_t expert);
  void unprotect(int64_t layer, int64_t expert);
  // Drops the protection of every expert of a layer (its routing is known).
  void unprotect_layer(int64_t layer);
  // The layer used these experts now (usage counts, recency).
  void note_use(int64_t layer, int64_t expert);
  // One forward step is over (decays usage counts).
  void end_step();

  // How many slots hold experts of layer l.
  int64_t count_layer(int64_t layer) const;
  double usage(int64_t layer, int64_t expert) const { return usage_[index(layer, expert)]; }

 private:
  struct Slot {
    int64_t layer = -1;
    int64_t expert = -1;
    int32_t pins = 0;
  };
  size_t index(int64_t layer, int64_t expert) const {
    return static_cast<size_t>(layer * config_.n_expert + expert);
  }
  // Lower is evicted first.
  double keep_score(const Slot& s) const;

  ExpertCacheConfig config_;
  std::vector<Slot> slots_;
  int64_t limit_ = 0;               // slots 0 .. limit_-1 take experts
  std::vector<int64_t> where_;      // [n_layer * n_expert] slot or -1
  std::vector<double> usage_;       // [n_layer * n_expert] decayed use counts
  std::vector<uint64_t> last_use_;  // [n_layer * n_expert] clock of the last use
  std::vector<uint8_t> protected_;  // [n_layer * n_expert]
  uint64_t clock_ = 1;
  double scale_ = 1.0;              // usage counts are stored divided by this (lazy decay)
};

}  // namespace sluice::weights
