#include "weights/expert_cache.h"

#include <limits>

#include "base/check.h"

namespace sluice::weights {

const char* cache_policy_name(CachePolicy p) { return p == CachePolicy::kLru ? "lru" : "usage"; }

ExpertCache::ExpertCache(const ExpertCacheConfig& config)
    : config_(config),
      slots_(static_cast<size_t>(config.n_slots)),
      limit_(config.n_slots),
      where_(static_cast<size_t>(config.n_layer * config.n_expert), -1),
      usage_(where_.size(), 0.0),
      last_use_(where_.size(), 0),
      protected_(where_.size(), 0) {
  CHECK(config.n_layer > 0 && config.n_expert > 0 && config.n_slots > 0);
}

double ExpertCache::keep_score(const Slot& s) const {
  const size_t i = index(s.layer, s.expert);
  // Recency breaks ties (and is all of kLru): a fraction of one use.
  const double recency = static_cast<double>(last_use_[i]) / static_cast<double>(clock_ + 1);
  if (config_.policy == CachePolicy::kLru) return recency;
  return usage_[i] * scale_ + 1e-3 * recency;
}

ExpertCache::Placement ExpertCache::insert(int64_t layer, int64_t expert) {
  CHECK(where_[index(layer, expert)] < 0);
  // An empty slot, else the lowest score among unprotected, else among protected.
  int64_t best = -1;
  double best_score = std::numeric_limits<double>::infinity();
  bool best_protected = true;
  for (size_t s = 0; s < static_cast<size_t>(limit_); ++s) {
    const Slot& slot = slots_[s];
    if (slot.layer < 0) {
      best = static_cast<int64_t>(s);
      best_protected = false;
      break;
    }
    if (slot.pins > 0) continue;
    const bool prot = protected_[index(slot.layer, slot.expert)] != 0;
    const double score = keep_score(slot);
    if ((best_protected && !prot) || (prot == best_protected && score < best_score)) {
      best = static_cast<int64_t>(s);
      best_score = score;
      best_protected = prot;
    }
  }
  Placement p;
  if (best < 0) return p;
  Slot& slot = slots_[static_cast<size_t>(best)];
  if (slot.layer >= 0) {
    p.evicted_layer = slot.layer;
    p.evicted_expert = slot.expert;
    where_[index(slot.layer, slot.expert)] = -1;
  }
  slot = Slot{.layer = layer, .expert = expert};
  where_[index(layer, expert)] = best;
  p.slot = best;
  return p;
}

void ExpertCache::set_limit(int64_t n) {
  CHECK(n >= 1 && n <= n_slot_ids());
  for (size_t s = static_cast<size_t>(n); s < slots_.size(); ++s) CHECK(slots_[s].layer < 0);
  limit_ = n;
}

void ExpertCache::clear_slot(int64_t s) {
  Slot& slot = slots_[static_cast<size_t>(s)];
  CHECK(slot.pins == 0);
  if (slot.layer >= 0) where_[index(slot.layer, slot.expert)] = -1;
  slot = Slot{};
}

void ExpertCache::restore(int64_t s, int64_t layer, int64_t expert) {
  Slot& slot = slots_[static_cast<size_t>(s)];
  CHECK(slot.layer < 0 && where_[index(layer, expert)] < 0);
  slot = Slot{.layer = layer, .expert = expert};
  where_[index(layer, expert)] = s;
}

void ExpertCache::pin(int64_t layer, int64_t expert) {
  const int64_t s = where_[index(layer, expert)];
  CHECK(s >= 0);
  ++slots_[static_cast<size_t>(s)].pins;
}

void ExpertCache::unpin(int64_t layer, int64_t expert) {
  const int64_t s = where_[index(layer, expert)];
  CHECK(s >= 0 && slots_[static_cast<size_t>(s)].pins > 0);
  --slots_[static_cast<size_t>(s)].pins;
}

void ExpertCache::protect(int64_t layer, int64_t expert) { protected_[index(layer, expert)] = 1; }

void ExpertCache::unprotect(int64_t layer, int64_t expert) { protected_[index(layer, expert)] = 0; }

void ExpertCache::unprotect_layer(int64_t layer) {
  for (int64_t e = 0; e < config_.n_expert; ++e) protected_[index(layer, e)] = 0;
}

void ExpertCache::note_use(int64_t layer, int64_t expert) {
  const size_t i = index(layer, expert);
  usage_[i] += 1.0 / scale_;
  last_use_[i] = ++clock_;
}

void ExpertCache::end_step() {
  scale_ *= config_.decay;
  if (scale_ < 1e-100) {  // fold the decay into the counts before it underflows
    for (double& u : usage_) u *= scale_;
    scale_ = 1.0;
  }
}

int64_t ExpertCache::count_layer(int64_t layer) const {
  int64_t n = 0;
  for (const Slot& s : slots_) n += s.layer == layer;
  return n;
}

}  // namespace sluice::weights
