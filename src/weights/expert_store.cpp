#include "weights/expert_store.h"

#include <algorithm>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/check.h"
#include "base/huge_buffer.h"
#include "base/timer.h"
#include "model/model_weights.h"

namespace sluice::weights {
namespace {

constexpr TensorRole kExpertRoles[3] = {TensorRole::kFfnGateExps, TensorRole::kFfnUpExps, TensorRole::kFfnDownExps};

// The three stacked tensors of a routed layer, or an error naming what is wrong.
StatusOr<std::array<const TensorInfo*, 3>> expert_tensors(const ModelFile& file, const ModelHparams& hp, int64_t l) {
  std::array<const TensorInfo*, 3> out{};
  for (int i = 0; i < 3; ++i) {
    const std::string name = gguf_tensor_name(*hp.spec->find(kExpertRoles[i]), l);
    const TensorInfo* t = file.find(name);
    if (!t) return data_loss("tensor '{}' is missing", name);
    if (t->file_offset < 0 || t->n_bytes % static_cast<uint64_t>(hp.n_expert) != 0)
      return unimplemented("tensor '{}' cannot be read expert by expert from the file", name);
    out[static_cast<size_t>(i)] = t;
  }
  return out;
}

ExtentLayout expert_layout(const std::array<const TensorInfo*, 3>& t, int64_t n_expert, int64_t e) {
  TensorRange ranges[3];
  for (size_t i = 0; i < 3; ++i) {
    const uint64_t slice = t[i]->n_bytes / static_cast<uint64_t>(n_expert);
    ranges[i] = {static_cast<uint64_t>(t[i]->file_offset) + static_cast<uint64_t>(e) * slice, slice};
  }
  return layout_extents(ranges, kDirectAlign);
}

}  // namespace

ExpertLayerStats ExpertStatsSnapshot::total() const {
  ExpertLayerStats t;
  for (const ExpertLayerStats& l : layers) t += l;
  return t;
}

std::string ExpertStatsSnapshot::per_token(const WeightCountersSnapshot& w) const {
  const double n = static_cast<double>(std::max<uint64_t>(1, w.n_tokens));
  const double dense_host = static_cast<double>(w.host_read_bytes - std::min(w.host_read_bytes, host_bytes));
  return fmt::format("per token: experts {:.2f} MB from disk + {:.2f} MB from slots, dense weights {:.2f} MB from "
                     "host; stall {:.2f} ms",
                     static_cast<double>(disk_bytes) / n / 1e6, static_cast<double>(host_bytes) / n / 1e6,
                     dense_host / n / 1e6, w.stall_s / n * 1e3);
}

nlohmann::ordered_json ExpertStatsSnapshot::json(const WeightCountersSnapshot& w) const {
  const double n = static_cast<double>(std::max<uint64_t>(1, w.n_tokens));
  nlohmann::ordered_json j;
  j["slots"] = n_slots;
  j["policy"] = cache_policy_name(policy);
  j["restored"] = restored;
  j["disk_bytes_per_token"] = static_cast<double>(disk_bytes) / n;
  j["host_bytes_per_token"] = static_cast<double>(host_bytes) / n;
  j["dense_host_bytes_per_token"] = static_cast<double>(w.host_read_bytes - std::min(w.host_read_bytes, host_bytes)) / n;
  j["stall_s_per_token"] = w.stall_s / n;
  const ExpertLayerStats t = total();
  j["recall"] = t.recall();
  j["precision"] = t.precision();
  j["hit_rate"] = t.hit_rate();
  j["kept_rate"] = t.kept_rate();
  j["chosen"] = t.chosen;
  j["ready"] = t.ready;
  j["late"] = t.late;
  j["missed"] = t.missed;
  j["late_ms_mean"] = t.late_mean_ms();
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (size_t l = 0; l < layers.size(); ++l) {
    const ExpertLayerStats& x = layers[l];
    if (x.chosen == 0 && x.resident == 0) continue;
    rows.push_back({{"layer", l}, {"resident", x.resident}, {"recall", x.recall()}, {"precision", x.precision()},
                    {"hit_rate", x.hit_rate()}, {"kept_rate", x.kept_rate()}, {"chosen", x.chosen},
                    {"ready", x.ready}, {"late", x.late}, {"missed", x.missed}, {"late_ms_mean", x.late_mean_ms()},
                    {"late_ms_max", 1e3 * x.late_max_s}, {"cancelled", x.cancelled}});
  }
  j["layers"] = rows;
  return j;
}

std::string ExpertStatsSnapshot::table() const {
  std::string s = fmt::format("experts ({} slots, {} policy): {:.1f} MB read from disk, {:.1f} MB used from slots; "
                              "{} cancelled prefetches had not begun and left their slot's expert in place\n",
                              n_slots, cache_policy_name(policy), static_cast<double>(disk_bytes) / 1e6,
                              static_cast<double>(host_bytes) / 1e6, restored);
  s += fmt::format("  {:>5} {:>9} {:>8} {:>9} {:>8} {:>8} {:>7} {:>6} {:>6} {:>7} {:>17} {:>9}\n", "layer", "resident",
                   "recall", "precision", "hit", "kept", "chosen", "ready", "late", "missed", "late ms mean/max",
                   "cancelled");
  auto row = [&](const std::string& name, const ExpertLayerStats& l) {
    s += fmt::format("  {:>5} {:>9} {:>7.1f}% {:>8.1f}% {:>7.1f}% {:>7.1f}% {:>7} {:>6} {:>6} {:>7} {:>8.2f}/{:<8.2f} {:>9}\n",
                     name, l.resident, 100 * l.recall(), 100 * l.precision(), 100 * l.hit_rate(), 100 * l.kept_rate(),
                     l.chosen, l.ready, l.late, l.missed, l.late_mean_ms(), 1e3 * l.late_max_s, l.cancelled);
  };
  for (size_t l = 0; l < layers.size(); ++l)
    if (layers[l].chosen > 0 || layers[l].resident > 0) row(std::to_string(l), layers[l]);
  row("all", total());
  return s;
}

std::string ExpertStatsSnapshot::prometheus() const {
  std::string s;
  for (size_t l = 0; l < layers.size(); ++l) {
    const ExpertLayerStats& x = layers[l];
    if (x.chosen == 0 && x.resident == 0) continue;
    auto line = [&](const char* name, double v) { s += fmt::format("{}{{layer=\"{}\"}} {}\n", name, l, v); };
    line("sluice_experts_chosen_total", static_cast<double>(x.chosen));
    line("sluice_experts_predicted_total", static_cast<double>(x.predicted));
    line("sluice_experts_predicted_chosen_total", static_cast<double>(x.predicted_chosen));
    line("sluice_experts_ready_total", static_cast<double>(x.ready));
    line("sluice_experts_kept_total", static_cast<double>(x.kept));
    line("sluice_experts_late_total", static_cast<double>(x.late));
    line("sluice_experts_missed_total", static_cast<double>(x.missed));
    line("sluice_experts_late_seconds_total", x.late_s);
    line("sluice_experts_resident", static_cast<double>(x.resident));
  }
  s += fmt::format("sluice_weights_read_bytes_total{{tier=\"disk\",kind=\"experts\"}} {}\n", static_cast<double>(disk_bytes));
  s += fmt::format("sluice_weights_read_bytes_total{{tier=\"host\",kind=\"experts\"}} {}\n", static_cast<double>(host_bytes));
  return s;
}

uint64_t ExpertStore::slot_bytes_for(const ModelFile& file, const ModelHparams& hp) {
  uint64_t most = 0;
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    if (!hp.layer_is_moe(l)) continue;
    auto t = expert_tensors(file, hp, l);
    if (!t.ok()) continue;
    for (int64_t e = 0; e < hp.n_expert; ++e) most = std::max(most, expert_layout(*t, hp.n_expert, e).buffer_bytes);
  }
  return most;
}

uint64_t ExpertStore::expert_bytes_for(const ModelFile& file, const ModelHparams& hp) {
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    if (!hp.layer_is_moe(l)) continue;
    auto t = expert_tensors(file, hp, l);
    if (!t.ok()) return 0;
    uint64_t n = 0;
    for (const TensorInfo* x : *t) n += x->n_bytes / static_cast<uint64_t>(hp.n_expert);
    return n;
  }
  return 0;
}

ExpertStore::ExpertStore(const ModelHparams& hp, const ExpertStoreOptions& o, BandwidthArbiter& arbiter,
                         WeightCounters& counters)
    : hp_(hp),
      arbiter_(arbiter),
      counters_(counters),
      slot_bytes_(o.slot_bytes),
      expert_begin_(o.expert_begin),
      expert_end_(o.expert_end < 0 ? hp.n_expert : o.expert_end),
      cache_({.n_layer = hp.n_layer, .n_expert = hp.n_expert, .n_slots = o.n_slots, .policy = o.policy}),
      io_(static_cast<size_t>(o.n_slots)),
      prepared_(static_cast<size_t>(o.n_slots), 0),
      fresh_(static_cast<size_t>(o.n_slots), 0),
      predicted_(static_cast<size_t>(hp.n_layer * hp.n_expert), 0),
      layer_counters_(new LayerCounters[static_cast<size_t>(hp.n_layer)]),
      resident_(new std::atomic<int64_t>[static_cast<size_t>(hp.n_layer)]),
      heat_(hp.n_layer, hp.n_expert),
      policy_(o.policy) {
  for (int64_t l = 0; l < hp.n_layer; ++l) resident_[static_cast<size_t>(l)].store(0);
  pinned_.reserve(static_cast<size_t>(hp.n_expert));
  handed_.reserve(static_cast<size_t>(hp.n_expert));
  late_since_.reserve(static_cast<size_t>(hp.n_expert));
  in_flight_.reserve(static_cast<size_t>(o.n_slots));
}

ExpertStore::~ExpertStore() {
  for (int64_t s : in_flight_) arbiter_.cancel(io_[static_cast<size_t>(s)].transfer);
}

StatusOr<std::unique_ptr<ExpertStore>> ExpertStore::open(const ModelFile& file, const ModelHparams& hp,
                                                         const ExpertStoreOptions& o, BandwidthArbiter& arbiter,
                                                         WeightCounters& counters) {
  if (!hp.is_moe()) return invalid_argument("expert streaming needs a mixture-of-experts model");
  const int64_t end = o.expert_end < 0 ? hp.n_expert : o.expert_end;
  if (o.expert_begin < 0 || o.expert_begin >= end || end > hp.n_expert)
    return invalid_argument("expert share [{}, {}) is not inside the model's {} experts", o.expert_begin, o.expert_end,
                            hp.n_expert);
  if (o.n_slots < end - o.expert_begin)
    return invalid_argument("{} expert slots cannot hold the {} experts one layer may need", o.n_slots,
                            end - o.expert_begin);
  std::unique_ptr<ExpertStore> s(new ExpertStore(hp, o, arbiter, counters));
  s->experts_.resize(static_cast<size_t>(hp.n_layer * hp.n_expert));
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    if (!hp.layer_is_moe(l)) continue;
    ASSIGN_OR_RETURN(auto t, expert_tensors(file, hp, l));
    for (int64_t e = 0; e < hp.n_expert; ++e) {
      ExpertInfo& x = s->info(l, e);
      x.layout = expert_layout(t, hp.n_expert, e);
      if (x.layout.buffer_bytes > o.slot_bytes)
        return invalid_argument("expert {} of layer {} needs {} bytes but slots hold {}", e, l, x.layout.buffer_bytes,
                                o.slot_bytes);
      for (size_t i = 0; i < 3; ++i) x.offsets[i] = x.layout.tensor_offsets[i];
    }
    if (s->expert_bytes_ == 0)
      for (const TensorInfo* x : t) s->expert_bytes_ += x->n_bytes / static_cast<uint64_t>(hp.n_expert);
  }
  ASSIGN_OR_RETURN(s->pool_, AlignedBuffer::allocate(static_cast<uint64_t>(o.n_slots) * o.slot_bytes));
  return s;
}

Status ExpertStore::set_slot_limit(int64_t n) {
  if (n < min_slots() || n > max_slots())
    return invalid_argument("{} expert slots: between {} (one layer's experts) and {}", n, min_slots(), max_slots());
  CHECK(pinned_.empty());
  const int64_t old = cache_.n_slots();
  for (int64_t slot = n; slot < old; ++slot) {
    if (const int64_t l = cache_.slot_layer(slot); l >= 0 && reuse_hook_ && bytes_in(slot))
      reuse_hook_(l, static_cast<int32_t>(cache_.slot_expert(slot)));
    forget(slot);
  }
  cache_.set_limit(n);
  const size_t kept = static_cast<size_t>(n) * slot_bytes_;
  if (n < old) release_pages(pool_.data() + kept, pool_.size() - kept);  // the slots past n
  for (int64_t slot = std::min(n, old); slot < std::max(n, old); ++slot) {
    prepared_[static_cast<size_t>(slot)] = 0;
    fresh_[static_cast<size_t>(slot)] = 0;
  }
  return Status();
}

bool ExpertStore::bytes_in(int64_t slot) const {
  const SlotIo& io = io_[static_cast<size_t>(slot)];
  return !io.transfer || arbiter_.landed(io.transfer);
}

bool ExpertStore::stop_read(int64_t slot) {
  SlotIo& io = io_[static_cast<size_t>(slot)];
  if (!io.transfer) return false;
  const BandwidthArbiter::Cancelled c = arbiter_.cancel(io.transfer);
  disk_bytes_.fetch_add(c.bytes_read, std::memory_order_relaxed);
  counters_.add_disk_read(c.bytes_read);
  io = SlotIo{};
  in_flight_.erase(std::find(in_flight_.begin(), in_flight_.end(), slot));
  return c.untouched;
}

void ExpertStore::forget(int64_t slot) {
  stop_read(slot);
  const int64_t layer = cache_.slot_layer(slot);
  if (layer >= 0) {
    resident_[static_cast<size_t>(layer)].fetch_sub(1, std::memory_order_relaxed);
    heat_.set_resident(layer, cache_.slot_expert(slot), false);
  }
  cache_.clear_slot(slot);
}

void ExpertStore::drop_prefetch(int64_t slot) {
  const SlotIo io = io_[static_cast<size_t>(slot)];
  const bool untouched = stop_read(slot);
  forget(slot);
  const Evicted& e = io.prev;
  if (!untouched || e.layer < 0 || cache_.slot_of(e.layer, e.expert) >= 0) return;
  cache_.restore(slot, e.layer, e.expert);
  resident_[static_cast<size_t>(e.layer)].fetch_add(1, std::memory_order_relaxed);
  heat_.set_resident(e.layer, e.expert, true);
  prepared_[static_cast<size_t>(slot)] = e.prepared;
  fresh_[static_cast<size_t>(slot)] = e.fresh;
  restored_.fetch_add(1, std::memory_order_relaxed);
}

void ExpertStore::retire_landed() {
  for (size_t i = 0; i < in_flight_.size();) {
    SlotIo& io = io_[static_cast<size_t>(in_flight_[i])];
    // A pinned expert's read is retired by land(), which reports its errors.
    if (cache_.pinned(in_flight_[i]) || !arbiter_.landed(io.transfer)) {
      ++i;
      continue;
    }
    const TransferResult r = arbiter_.wait(io.transfer);
    disk_bytes_.fetch_add(r.bytes, std::memory_order_relaxed);
    counters_.add_disk_read(r.bytes);
    io.transfer = 0;
    const int64_t slot = in_flight_[i];
    in_flight_[i] = in_flight_.back();
    in_flight_.pop_back();
    if (!r.status.ok()) forget(slot);  // a failed read holds nothing
  }
}

StatusOr<bool> ExpertStore::start(int64_t layer, int64_t expert, TransferClass cls, bool predicted) {
  const ExpertCache::Placement p = cache_.insert(layer, expert);
  if (p.slot < 0) return false;
  // Whoever reads the evicted expert's bytes where they lie lets go first.
  if (p.evicted_layer >= 0 && reuse_hook_ && bytes_in(p.slot))
    reuse_hook_(p.evicted_layer, static_cast<int32_t>(p.evicted_expert));
  // What this read replaces stays whole in the slot until the read begins:
  // an evicted expert that had landed, or what an evicted read that never
  // began had replaced itself.
  const size_t si = static_cast<size_t>(p.slot);
  const Evicted landed{.layer = p.evicted_layer, .expert = static_cast<int32_t>(p.evicted_expert),
                       .prepared = prepared_[si] != 0, .fresh = fresh_[si] != 0};
  const bool whole = p.evicted_layer >= 0 && bytes_in(p.slot);
  const Evicted before = io_[si].prev;
  const bool untouched = stop_read(p.slot);  // the evicted expert's read, if it was still going
  SlotIo io{.cls = cls, .predicted = predicted, .seq = ++next_seq_, .submit_s = now_seconds(),
            .prev = whole ? landed : (untouched ? before : Evicted{})};
  resident_[static_cast<size_t>(layer)].fetch_add(1, std::memory_order_relaxed);
  heat_.set_resident(layer, expert, true);
  if (p.evicted_layer >= 0) {
    resident_[static_cast<size_t>(p.evicted_layer)].fetch_sub(1, std::memory_order_relaxed);
    heat_.set_resident(p.evicted_layer, p.evicted_expert, false);
  }
  const ExpertInfo& x = info(layer, expert);
  StatusOr<TransferId> id =
      arbiter_.submit(cls, x.layout.extents, pool_.data() + static_cast<uint64_t>(p.slot) * slot_bytes_);
  if (!id.ok()) {
    forget(p.slot);
    return id.status();
  }
  io.transfer = *id;
  io_[static_cast<size_t>(p.slot)] = io;
  prepared_[static_cast<size_t>(p.slot)] = 0;
  fresh_[static_cast<size_t>(p.slot)] = 1;
  in_flight_.push_back(p.slot);
  return true;
}

void ExpertStore::predict(int64_t layer, std::span<const int32_t> experts) {
  retire_landed();
  LayerCounters& c = layer_counters_[static_cast<size_t>(layer)];
  // An earlier prediction of this layer: what this one drops is demoted.
  int32_t* pred = predicted_.data() + layer * hp_.n_expert;
  for (int64_t e = 0; e < hp_.n_expert; ++e) {
    if (!pred[e] || std::find(experts.begin(), experts.end(), static_cast<int32_t>(e)) != experts.end()) continue;
    pred[e] = 0;
    cache_.unprotect(layer, e);
    const int64_t slot = cache_.slot_of(layer, e);
    if (slot >= 0 && io_[static_cast<size_t>(slot)].transfer && !cache_.pinned(slot)) {
      drop_prefetch(slot);
      c.cancelled.fetch_add(1, std::memory_order_relaxed);
    }
  }
  for (int32_t e : experts) {
    if (!in_share(e)) continue;  // another process's
    predicted_[static_cast<size_t>(layer * hp_.n_expert + e)] = 1;
    cache_.protect(layer, e);
    if (cache_.slot_of(layer, e) >= 0) continue;
    // A prefetch that finds no slot or no transfer record is dropped: the
    // expert is read on demand if it is chosen.
    StatusOr<bool> started = start(layer, e, TransferClass::kPredicted, true);
    if (started.ok() && *started) c.prefetch_reads.fetch_add(1, std::memory_order_relaxed);
  }
}

Status ExpertStore::acquire(int64_t layer, std::span<const int32_t> experts, ExpertPointers* out) {
  CHECK(pinned_.empty());  // release() the previous layer first
  for (int32_t e : experts)
    if (!in_share(e))
      return invalid_argument("expert {} of layer {} is not this store's (experts {}-{})", e, layer, expert_begin_,
                              expert_end_ - 1);
  retire_landed();
  LayerCounters& c = layer_counters_[static_cast<size_t>(layer)];
  int32_t* pred = predicted_.data() + layer * hp_.n_expert;
  cache_.unprotect_layer(layer);
  // Predictions the routing did not choose: stop those still reading.
  uint64_t n_predicted = 0, n_predicted_chosen = 0;
  for (int64_t e = 0; e < hp_.n_expert; ++e) {
    if (!pred[e]) continue;
    ++n_predicted;
    const bool chosen = std::find(experts.begin(), experts.end(), static_cast<int32_t>(e)) != experts.end();
    n_predicted_chosen += chosen;
    heat_.count_predicted(layer, e, chosen);
    const int64_t slot = cache_.slot_of(layer, e);
    if (!chosen && slot >= 0 && io_[static_cast<size_t>(slot)].transfer) {
      drop_prefetch(slot);
      c.cancelled.fetch_add(1, std::memory_order_relaxed);
    }
    pred[e] = 0;
  }
  c.predicted.fetch_add(n_predicted, std::memory_order_relaxed);
  c.predicted_chosen.fetch_add(n_predicted_chosen, std::memory_order_relaxed);
  c.chosen.fetch_add(experts.size(), std::memory_order_relaxed);
  // Chosen experts: in a slot (landed, or still reading: promoted), or read
  // now. Those in slots are pinned first: a missed one's read must not take
  // the slot of one chosen after it, which would then be read again.
  for (int32_t e : experts)
    if (cache_.slot_of(layer, e) >= 0) cache_.pin(layer, e);
  const auto unpin_chosen = [&] {
    for (int32_t x : experts)
      if (const int64_t s = cache_.slot_of(layer, x); s >= 0 && cache_.pinned(s)) cache_.unpin(layer, x);
    pinned_.clear();
  };
  const double routed_s = now_seconds();
  late_since_.clear();
  for (int32_t e : experts) {
    late_since_.push_back(-1);
    if (const int64_t slot = cache_.slot_of(layer, e); slot >= 0) {
      SlotIo& io = io_[static_cast<size_t>(slot)];
      if (!fresh_[static_cast<size_t>(slot)]) c.kept.fetch_add(1, std::memory_order_relaxed);
      if (bytes_in(slot)) {
        c.ready.fetch_add(1, std::memory_order_relaxed);
        heat_.count_chosen(layer, e, ExpertReadiness::kReady);
      } else {
        c.late.fetch_add(1, std::memory_order_relaxed);
        heat_.count_chosen(layer, e, ExpertReadiness::kLate);
        late_since_.back() = routed_s;
        if (io.cls != TransferClass::kCritical) {
          arbiter_.reprioritize(io.transfer, TransferClass::kCritical);
          io.cls = TransferClass::kCritical;
        }
      }
    } else {
      c.missed.fetch_add(1, std::memory_order_relaxed);
      heat_.count_chosen(layer, e, ExpertReadiness::kMissed);
      StatusOr<bool> started = start(layer, e, TransferClass::kCritical, false);
      if (!started.ok() || !*started) {
        unpin_chosen();
        return started.ok() ? resource_exhausted("no free expert slot for expert {} of layer {}", e, layer)
                            : started.status();
      }
      cache_.pin(layer, e);
    }
    cache_.note_use(layer, e);
    pinned_.push_back(e);
  }
  // What the layer holds now counts as kept at its next routing.
  for (int64_t s = 0; s < cache_.n_slots(); ++s)
    if (cache_.slot_layer(s) == layer) fresh_[static_cast<size_t>(s)] = 0;
  pinned_layer_ = layer;
  handed_.assign(pinned_.size(), 0);
  for (size_t i = 0; i < experts.size(); ++i) {
    out[i] = pointers_in(cache_.slot_of(layer, experts[i]), layer, experts[i]);
  }
  host_bytes_.fetch_add(expert_bytes_ * experts.size(), std::memory_order_relaxed);
  counters_.add_host_read(expert_bytes_ * experts.size());
  return Status();
}

Status ExpertStore::land(size_t i) {
  handed_[i] = 1;
  const int32_t e = pinned_[i];
  SlotIo& io = io_[static_cast<size_t>(cache_.slot_of(pinned_layer_, e))];
  if (!io.transfer) return Status();
  const bool landed = arbiter_.landed(io.transfer);
  const TransferResult r = arbiter_.wait(io.transfer);
  if (!landed) counters_.add_stall(r.wait_s);
  disk_bytes_.fetch_add(r.bytes, std::memory_order_relaxed);
  counters_.add_disk_read(r.bytes);
  if (late_since_[i] >= 0) {
    // Landed at submit + service time; late by what is past the routing.
    const double late_s = std::max(0.0, io.submit_s + r.service_s - late_since_[i]);
    const auto us = static_cast<uint64_t>(late_s * 1e6 + 0.5);
    LayerCounters& c = layer_counters_[static_cast<size_t>(pinned_layer_)];
    c.late_us.fetch_add(us, std::memory_order_relaxed);
    if (us > c.late_max_us.load(std::memory_order_relaxed)) c.late_max_us.store(us, std::memory_order_relaxed);
  }
  in_flight_.erase(std::find(in_flight_.begin(), in_flight_.end(), cache_.slot_of(pinned_layer_, e)));
  io = SlotIo{};
  if (!r.status.ok()) return r.status.with_context(fmt::format("reading expert {} of layer {}", e, pinned_layer_));
  return Status();
}

Status ExpertStore::next_landed(int64_t layer, int64_t* index) {
  CHECK(layer == pinned_layer_);
  *index = -1;
  // One that has landed (or never needed a read), else the one the arbiter
  // finishes first: critical reads go oldest first, so the lowest sequence.
  uint64_t first_seq = 0;
  for (size_t i = 0; i < pinned_.size(); ++i) {
    if (handed_[i]) continue;
    const int64_t slot = cache_.slot_of(layer, pinned_[i]);
    const SlotIo& io = io_[static_cast<size_t>(slot)];
    if (bytes_in(slot)) {
      *index = static_cast<int64_t>(i);
      break;
    }
    if (*index < 0 || io.seq < first_seq) {
      *index = static_cast<int64_t>(i);
      first_seq = io.seq;
    }
  }
  if (*index < 0) return Status();
  return land(static_cast<size_t>(*index));
}

void ExpertStore::mark_prepared(int64_t layer, int64_t index) {
  CHECK(layer == pinned_layer_ && handed_[static_cast<size_t>(index)]);
  prepared_[static_cast<size_t>(cache_.slot_of(layer, pinned_[static_cast<size_t>(index)]))] = 1;
}

bool ExpertStore::next_ready(int64_t layer) const {
  CHECK(layer == pinned_layer_);
  bool left = false;
  for (size_t i = 0; i < pinned_.size(); ++i) {
    if (handed_[i]) continue;
    if (bytes_in(cache_.slot_of(layer, pinned_[i]))) return true;
    left = true;
  }
  return !left;  // all handed out
}

bool ExpertStore::unprepared(int64_t* layer, int32_t* expert, ExpertPointers* out) const {
  // Predicted experts first: they are the likeliest to be used next.
  int64_t best = -1;
  for (int64_t s = 0; s < cache_.n_slots(); ++s) {
    const int64_t l = cache_.slot_layer(s);
    if (l < 0 || prepared_[static_cast<size_t>(s)] || cache_.pinned(s) || !bytes_in(s)) continue;
    best = s;
    if (predicted_[static_cast<size_t>(l * hp_.n_expert + cache_.slot_expert(s))]) break;
  }
  if (best < 0) return false;
  *layer = cache_.slot_layer(best);
  *expert = static_cast<int32_t>(cache_.slot_expert(best));
  *out = pointers_in(best, *layer, *expert);  // not prepared: the loop skips those
  return true;
}

ExpertPointers ExpertStore::pointers_in(int64_t slot, int64_t layer, int64_t expert) const {
  const uint8_t* base = pool_.data() + static_cast<uint64_t>(slot) * slot_bytes_;
  const ExpertInfo& x = experts_[static_cast<size_t>(layer * hp_.n_expert + expert)];
  return ExpertPointers{base + x.offsets[0], base + x.offsets[1], base + x.offsets[2],
                        prepared_[static_cast<size_t>(slot)] != 0};
}

bool ExpertStore::landed(int64_t layer, int32_t expert, ExpertPointers* out) const {
  if (!in_share(expert)) return false;
  const int64_t slot = cache_.slot_of(layer, expert);
  if (slot < 0 || !bytes_in(slot)) return false;
  *out = pointers_in(slot, layer, expert);
  return true;
}

void ExpertStore::mark_prepared_expert(int64_t layer, int32_t expert) {
  const int64_t slot = cache_.slot_of(layer, expert);
  CHECK(slot >= 0 && !cache_.pinned(slot));
  prepared_[static_cast<size_t>(slot)] = 1;
}

void ExpertStore::release(int64_t layer) {
  if (pinned_layer_ != layer) return;
  for (int32_t e : pinned_) cache_.unpin(layer, e);
  pinned_.clear();
  handed_.clear();
  late_since_.clear();
  pinned_layer_ = -1;
}

void ExpertStore::end_step() { cache_.end_step(); }

ExpertStatsSnapshot ExpertStore::stats() const {
  ExpertStatsSnapshot s{.n_slots = cache_.n_slots(), .policy = policy_};
  s.layers.resize(static_cast<size_t>(hp_.n_layer));
  for (int64_t l = 0; l < hp_.n_layer; ++l) {
    const LayerCounters& c = layer_counters_[static_cast<size_t>(l)];
    ExpertLayerStats& x = s.layers[static_cast<size_t>(l)];
    x.chosen = c.chosen.load(std::memory_order_relaxed);
    x.predicted = c.predicted.load(std::memory_order_relaxed);
    x.predicted_chosen = c.predicted_chosen.load(std::memory_order_relaxed);
    x.ready = c.ready.load(std::memory_order_relaxed);
    x.kept = c.kept.load(std::memory_order_relaxed);
    x.late = c.late.load(std::memory_order_relaxed);
    x.missed = c.missed.load(std::memory_order_relaxed);
    x.prefetch_reads = c.prefetch_reads.load(std::memory_order_relaxed);
    x.cancelled = c.cancelled.load(std::memory_order_relaxed);
    x.late_s = 1e-6 * static_cast<double>(c.late_us.load(std::memory_order_relaxed));
    x.late_max_s = 1e-6 * static_cast<double>(c.late_max_us.load(std::memory_order_relaxed));
    x.resident = resident_[static_cast<size_t>(l)].load(std::memory_order_relaxed);
  }
  s.disk_bytes = disk_bytes_.load(std::memory_order_relaxed);
  s.host_bytes = host_bytes_.load(std::memory_order_relaxed);
  s.restored = restored_.load(std::memory_order_relaxed);
  s.experts = heat_.snapshot();
  return s;
}

}  // namespace sluice::weights
