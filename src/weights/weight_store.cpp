#include "weights/weight_store.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/check.h"
#include "base/enum_names.h"
#include "base/meminfo.h"
#include "base/timer.h"

namespace sluice::weights {

const uint8_t* LayerView::find(std::string_view suffix) const {
  for (const LayerTensor& t : tensors)
    if (t.suffix == suffix) return t.data;
  return nullptr;
}

constexpr EnumName<LayerState> kLayerStateNames[] = {
    {LayerState::kResident, "resident"}, {LayerState::kAbsent, "absent"}, {LayerState::kLoading, "loading"},
    {LayerState::kLanded, "landed"}, {LayerState::kAcquired, "acquired"}};

const char* layer_state_name(LayerState s) { return enum_name(s, kLayerStateNames); }

WeightStore::WeightStore(std::shared_ptr<const ModelFile> file, PlacementPlan plan, const WeightStoreOptions& options)
    : file_(std::move(file)), plan_(std::move(plan)), auto_prefetch_(options.auto_prefetch) {}

StatusOr<std::unique_ptr<WeightStore>> WeightStore::open(std::shared_ptr<const ModelFile> file, PlacementPlan plan,
                                                         const WeightStoreOptions& options) {
  if (plan.tensors.size() != file->tensors.size() || plan.layers.size() != static_cast<size_t>(plan.n_layer))
    return invalid_argument("the placement plan was made for another model file");
  std::unique_ptr<WeightStore> store(new WeightStore(std::move(file), std::move(plan), options));
  RETURN_IF_ERROR(store->load(options));
  return store;
}

WeightStore::~WeightStore() {
  experts_.reset();  // cancels its reads through the arbiter
  if (!arbiter_) return;
  for (Slot& s : slots_)
    if (s.transfer) arbiter_->cancel(s.transfer);
}

Status WeightStore::load(const WeightStoreOptions& options) {
  const ModelFile& f = *file_;
  const int64_t n = plan_.n_layer;
  const int64_t k = plan_.n_ring_slots;
  const bool streams = plan_.n_streamed > 0;

  // The disk tier: needed to stream, and to read the resident set with O_DIRECT.
  if (streams || options.direct) {
    StatusOr<std::unique_ptr<IoEngine>> engine =
        f.format == "gguf" ? IoEngine::open({.path = f.source_path,
                                             .backend = options.io,
                                             .queue_depth = options.queue_depth,
                                             .direct = options.direct,
                                             .rate_cap_bytes_per_s = options.disk_rate_cap_bytes_per_s})
                           : StatusOr<std::unique_ptr<IoEngine>>(
                                 unimplemented("only single GGUF files are read by offset (this is {})", f.format));
    if (engine.ok()) {
      engine_ = std::move(*engine);
      arbiter_ = std::make_unique<BandwidthArbiter>(
          *engine_, ArbiterOptions{.max_transfers = static_cast<int>(std::max<int64_t>(64, k + n + 8 + 4 * plan_.n_expert)),
                                   .chunk_bytes = options.chunk_bytes,
                                   .cap_bytes_per_s = options.cap_bytes_per_s});
      plan_.io_note = engine_->describe();
    } else if (streams) {
      return engine.status().with_context("cannot stream weights");
    } else {
      plan_.io_note = "resident tensors served from the model file's memory map (" + engine.status().message() + ")";
    }
  } else {
    plan_.io_note = "resident tensors served from the model file's memory map (O_DIRECT not requested)";
  }
  if (streams && plan_.n_ring_slots < 1) return invalid_argument("the placement streams layers but has no ring slots");
  if (plan_.n_expert_slots > 0 && !arbiter_) return invalid_argument("streaming experts needs the model file read by offset");

  // Resident reads: group 0 the essentials, group 1 + l resident layer l.
  struct Group {
    std::vector<size_t> tensors;  // plan_.tensors indices
    ExtentLayout layout;
    TransferId transfer = 0;
  };
  std::vector<Group> groups(static_cast<size_t>(n + 1));
  layers_.resize(static_cast<size_t>(n));
  for (size_t i = 0; i < plan_.tensors.size(); ++i) {
    const TensorPlacement& t = plan_.tensors[i];
    const TensorInfo& info = f.tensors[t.index];
    const bool expert_on_disk = t.tier == Tier::kDisk && !plan_.layers[static_cast<size_t>(std::max<int64_t>(0, t.layer))].streamed;
    if (t.layer >= 0 && !is_essential_tensor(t, info) && !expert_on_disk && !t.elsewhere && t.tier != Tier::kDevice)
      layers_[static_cast<size_t>(t.layer)].matrix_bytes += t.n_bytes;
    if (t.tier == Tier::kDevice) {  // rule 8: the backend copies it from the file's memory at load
      resident_[info.name] = info.data;
      continue;
    }
    if (t.tier != Tier::kHost) continue;
    // Another process's (a pipeline stage's rule 6): the file's own memory,
    // bound but never read here.
    if (!arbiter_ || !t.from_file || t.elsewhere) {
      resident_[info.name] = info.data;  // the ModelFile's own memory
      continue;
    }
    groups[is_essential_tensor(t, info) ? 0 : static_cast<size_t>(t.layer + 1)].tensors.push_back(i);
  }
  uint64_t host_bytes = (streams ? static_cast<uint64_t>(k) * plan_.slot_bytes : 0) +
                        static_cast<uint64_t>(plan_.n_expert_slots) * plan_.expert_slot_bytes;
  for (Group& g : groups) {
    if (g.tensors.empty()) continue;
    std::vector<TensorRange> ranges;
    for (size_t i : g.tensors) {
      const TensorInfo& info = f.tensors[plan_.tensors[i].index];
      ranges.push_back({static_cast<uint64_t>(info.file_offset), info.n_bytes});
    }
    g.layout = layout_extents(ranges, kDirectAlign);
    host_bytes += g.layout.buffer_bytes;
  }
  // Past what the machine has, allocation does not fail: the process is
  // killed later, mid-load or mid-run. Refuse the plan while that is cheap.
  const std::optional<uint64_t> available =
      options.host_available_bytes ? options.host_available_bytes : meminfo_bytes("MemAvailable");
  if (available && host_bytes > *available) {
    return resource_exhausted(
        "the placement needs {} of host buffers (resident weights, ring, expert pool) but {} of memory is "
        "available{}; lower --mem-budget below {} (leaving room for the KV cache and activations)",
        format_bytes(static_cast<double>(host_bytes)), format_bytes(static_cast<double>(*available)),
        options.host_available_bytes ? "" : " (MemAvailable in /proc/meminfo)",
        format_bytes(static_cast<double>(*available)));
  }
  uint64_t load_bytes = 0;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    Group& g = groups[gi];
    if (g.tensors.empty()) continue;
    ASSIGN_OR_RETURN(AlignedBuffer buf, AlignedBuffer::allocate(g.layout.buffer_bytes));
    for (size_t j = 0; j < g.tensors.size(); ++j)
      resident_[f.tensors[plan_.tensors[g.tensors[j]].index].name] = buf.data() + g.layout.tensor_offsets[j];
    ASSIGN_OR_RETURN(g.transfer, arbiter_->submit(TransferClass::kCritical, g.layout.extents, buf.data()));
    if (gi > 0) {
      layers_[gi - 1].buffer = static_cast<int>(resident_bufs_.size());
      layers_[gi - 1].moved = g.tensors;
    }
    resident_bufs_.push_back(std::move(buf));
  }
  Status load_status;
  for (Group& g : groups) {
    if (!g.transfer) continue;
    TransferResult r = arbiter_->wait(g.transfer);
    if (!r.status.ok() && load_status.ok()) load_status = r.status.with_context("loading resident weights");
    load_bytes += r.bytes;
  }
  RETURN_IF_ERROR(load_status);
  counters_.add_load(load_bytes);

  // View tables: resident layers once; streamed layers once per slot.
  streamed_pos_.assign(static_cast<size_t>(n), -1);
  layer_slot_.assign(static_cast<size_t>(n), -1);
  resident_acquired_s_.assign(static_cast<size_t>(n), 0.0);
  slots_.resize(static_cast<size_t>(streams ? k : 0));
  for (Slot& slot : slots_) {
    ASSIGN_OR_RETURN(slot.buf, AlignedBuffer::allocate(plan_.slot_bytes));
  }
  slot_tables_.resize(slots_.size() * static_cast<size_t>(n));
  for (int64_t l = 0; l < n; ++l) {
    LayerInfo& li = layers_[static_cast<size_t>(l)];
    li.streamed = plan_.layers[static_cast<size_t>(l)].streamed;
    li.device_home = plan_.layers[static_cast<size_t>(l)].device;
    std::vector<size_t> members;
    for (size_t i = 0; i < plan_.tensors.size(); ++i)
      if (plan_.tensors[i].layer == l) members.push_back(i);
    if (li.device_home)
      for (size_t i : members)
        if (plan_.tensors[i].tier == Tier::kDevice) li.moved.push_back(i);
    if (!li.streamed) {
      for (size_t i : members) {
        const TensorPlacement& t = plan_.tensors[i];
        if (t.tier == Tier::kDisk) continue;  // experts, streamed one by one
        li.resident.push_back({.suffix = t.suffix, .data = resident_.at(f.tensors[t.index].name), .n_bytes = t.n_bytes});
      }
      continue;
    }
    for (size_t i : members)
      if (plan_.tensors[i].tier == Tier::kDisk) li.moved.push_back(i);
    RETURN_IF_ERROR(make_streamed(l));
  }
  index_streamed();
  uint64_t resident_tensor_bytes = 0;
  for (const TensorPlacement& t : plan_.tensors)
    if (t.tier == Tier::kHost && !t.elsewhere) resident_tensor_bytes += t.n_bytes;
  counters_.set_placement(resident_tensor_bytes, plan_.streamed_bytes);
  if (plan_.n_expert_slots > 0) {
    ASSIGN_OR_RETURN(const ModelHparams hp, hparams_from_metadata(f.metadata));
    ASSIGN_OR_RETURN(experts_, ExpertStore::open(f, hp,
                                                 {.n_slots = plan_.n_expert_slots,
                                                  .slot_bytes = plan_.expert_slot_bytes,
                                                  .expert_begin = plan_.expert_share ? plan_.expert_begin : 0,
                                                  .expert_end = plan_.expert_share ? plan_.expert_end : -1},
                                                 *arbiter_, counters_));
  }
  desired_.reserve(slots_.size());
  reusable_.reserve(slots_.size());
  order_.resize(static_cast<size_t>(n));
  for (int64_t l = 0; l < n; ++l) order_[static_cast<size_t>(l)] = l;
  if (streams && options.ring_probe_s > 0) {
    ASSIGN_OR_RETURN(RingReads r, probe_ring_reads(options.ring_probe_s));
    plan_.rerate_disk(static_cast<double>(r.bytes) / r.seconds / 1e9,
                      fmt::format("the ring's own reads ({} slots, the {} streamed layers in order: {:.2f} GB in "
                                  "{:.2f} s; the file probe read {:.2f})",
                                  slots_.size(), streamed_.size(), static_cast<double>(r.bytes) / 1e9, r.seconds,
                                  plan_.sized_disk_gbps));
  }
  if (streams && auto_prefetch_) RETURN_IF_ERROR(fill(0));
  return Status();
}

StatusOr<WeightStore::RingReads> WeightStore::probe_ring_reads(double seconds) {
  CHECK(!slots_.empty() && !streamed_.empty() && pos_ < 0);
  uint64_t pass_bytes = 0;
  for (int64_t l : streamed_) pass_bytes += layers_[static_cast<size_t>(l)].layout.buffer_bytes;
  const size_t k = slots_.size();
  std::vector<TransferId> in_flight(k, 0);
  size_t n_in_flight = 0, next = 0;  // next: index into streamed_, cycling
  uint64_t issued = 0, landed = 0;
  Status status;
  Stopwatch sw;
  auto issue = [&](size_t s) {
    const ExtentLayout& layout = layers_[static_cast<size_t>(streamed_[next++ % streamed_.size()])].layout;
    StatusOr<TransferId> id = arbiter_->submit(TransferClass::kCritical, layout.extents, slots_[s].buf.data());
    if (!id.ok()) {
      status = id.status();
      return;
    }
    in_flight[s] = *id;
    ++n_in_flight;
    issued += layout.buffer_bytes;
  };
  for (size_t s = 0; s < k && status.ok(); ++s) issue(s);
  // Slots in turn, as the ring hands them out: wait for one, give it the next layer.
  for (size_t s = 0; n_in_flight > 0; s = (s + 1) % k) {
    if (in_flight[s] == 0) continue;
    const TransferResult r = arbiter_->wait(in_flight[s]);
    in_flight[s] = 0;
    --n_in_flight;
    landed += r.bytes;
    if (!r.status.ok() && status.ok()) status = r.status;
    if (status.ok() && sw.seconds() < seconds && issued < 4 * pass_bytes) issue(s);
  }
  const RingReads r{.bytes = landed, .seconds = sw.seconds()};
  RETURN_IF_ERROR(status.with_context("reading the streamed layers through the ring"));
  if (r.bytes == 0 || !(r.seconds > 0)) return data_loss("the ring's reads landed no bytes");
  return r;
}

LayerView WeightStore::view(int slot, int64_t layer) const {
  const auto& table = slot_tables_[static_cast<size_t>(slot) * static_cast<size_t>(plan_.n_layer) +
                                   static_cast<size_t>(layer)];
  return LayerView{.layer = layer, .streamed = true, .tensors = table};
}

Status WeightStore::start(int s, int64_t layer, TransferClass cls) {
  Slot& slot = slots_[static_cast<size_t>(s)];
  ASSIGN_OR_RETURN(slot.transfer, arbiter_->submit(cls, layers_[static_cast<size_t>(layer)].layout.extents,
                                                   slot.buf.data()));
  slot.layer = layer;
  slot.cls = cls;
  layer_slot_[static_cast<size_t>(layer)] = s;
  return Status();
}

void WeightStore::drop(int s) {
  Slot& slot = slots_[static_cast<size_t>(s)];
  CHECK(!slot.acquired);
  if (slot.transfer) {
    counters_.add_disk_read(arbiter_->cancel(slot.transfer).bytes_read);
    slot.transfer = 0;
  }
  if (slot.layer >= 0) layer_slot_[static_cast<size_t>(slot.layer)] = -1;
  slot.layer = -1;
}

void WeightStore::upcoming(int64_t from, size_t want) {
  desired_.clear();
  const auto period = static_cast<int64_t>(order_.size());
  const int64_t first = ((from % period) + period) % period;
  for (int64_t j = 0; j < period && desired_.size() < want; ++j) {
    const int64_t l = order_[static_cast<size_t>((first + j) % period)];
    if (!layers_[static_cast<size_t>(l)].streamed) continue;
    const int s = layer_slot_[static_cast<size_t>(l)];
    if (s >= 0 && slots_[static_cast<size_t>(s)].acquired) continue;
    if (std::find(desired_.begin(), desired_.end(), l) != desired_.end()) continue;
    desired_.push_back(l);
  }
}

int64_t WeightStore::next_position(int64_t layer) const {
  const auto period = static_cast<int64_t>(order_.size());
  for (int64_t j = 1; j <= period; ++j) {
    const int64_t p = (pos_ + j) % period;
    if (order_[static_cast<size_t>(p)] == layer) return p;
  }
  CHECK(false);  // set_schedule() admits only orders that visit every layer
  return -1;
}

Status WeightStore::set_schedule(std::span<const int64_t> order) {
  const int64_t n = plan_.n_layer;
  std::vector<bool> seen(static_cast<size_t>(n), false);
  for (int64_t l : order) {
    if (l < 0 || l >= n) return invalid_argument("a layer schedule names layer {} of a {}-layer model", l, n);
    seen[static_cast<size_t>(l)] = true;
  }
  for (int64_t l = 0; l < n; ++l) {
    if (!seen[static_cast<size_t>(l)]) return invalid_argument("a layer schedule never visits layer {}", l);
  }
  order_.assign(order.begin(), order.end());
  pos_ = -1;
  if (!streamed_.empty() && auto_prefetch_) return fill(0);
  return Status();
}

Status WeightStore::fill(int64_t from) {
  if (streamed_.empty()) return Status();
  // The next streamed layers of the schedule, skipping held ones.
  upcoming(from, slots_.size() - static_cast<size_t>(n_acquired_));
  // Slots free to take: empty ones last (taken first), then those holding layers not wanted soon.
  reusable_.clear();
  for (size_t s = 0; s < slots_.size(); ++s) {
    const Slot& slot = slots_[s];
    if (slot.acquired || slot.layer < 0) continue;
    if (std::find(desired_.begin(), desired_.end(), slot.layer) == desired_.end()) reusable_.push_back(static_cast<int>(s));
  }
  for (size_t s = 0; s < slots_.size(); ++s)
    if (!slots_[s].acquired && slots_[s].layer < 0) reusable_.push_back(static_cast<int>(s));
  for (size_t j = 0; j < desired_.size(); ++j) {
    const int64_t l = desired_[j];
    const TransferClass cls = j == 0 ? TransferClass::kCritical : TransferClass::kPrefetch;
    const int s = layer_slot_[static_cast<size_t>(l)];
    if (s >= 0) {
      raise_priority(slots_[static_cast<size_t>(s)], cls);
      continue;
    }
    CHECK(!reusable_.empty());  // |desired| <= free slots by construction
    const int take = reusable_.back();
    reusable_.pop_back();
    drop(take);
    RETURN_IF_ERROR(start(take, l, cls));
  }
  return Status();
}

StatusOr<LayerView> WeightStore::acquire(int64_t layer) {
  CHECK(layer >= 0 && layer < plan_.n_layer);
  counters_.add_acquire();
  const LayerInfo& li = layers_[static_cast<size_t>(layer)];
  if (!li.streamed) {
    counters_.add_host_read(li.matrix_bytes);
    pos_ = next_position(layer);
    if (auto_prefetch_) RETURN_IF_ERROR(fill(pos_ + 1));
    resident_acquired_s_[static_cast<size_t>(layer)] = now_seconds();
    return LayerView{.layer = layer, .streamed = false, .tensors = li.resident};
  }
  int s = layer_slot_[static_cast<size_t>(layer)];
  CHECK(s < 0 || !slots_[static_cast<size_t>(s)].acquired);  // acquired twice without release
  const int64_t pos = next_position(layer);
  if (auto_prefetch_) {
    RETURN_IF_ERROR(fill(pos));  // this layer first, then the ones after it
  } else if (s < 0) {
    // Only this layer: an empty slot, else any slot not held.
    int take = -1;
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i].acquired) continue;
      if (take < 0 || slots_[i].layer < 0) take = static_cast<int>(i);
    }
    if (take >= 0) {
      drop(take);
      RETURN_IF_ERROR(start(take, layer, TransferClass::kCritical));
    }
  }
  s = layer_slot_[static_cast<size_t>(layer)];
  if (s < 0) {
    return resource_exhausted("all {} ring slots are held; release a layer before acquiring layer {}", slots_.size(),
                              layer);
  }
  Slot& slot = slots_[static_cast<size_t>(s)];
  slot.acquired = true;
  ++n_acquired_;
  pos_ = pos;
  if (slot.transfer) {
    raise_priority(slot, TransferClass::kCritical);
    const bool landed = arbiter_->landed(slot.transfer);
    TransferResult r = arbiter_->wait(slot.transfer);
    slot.transfer = 0;
    if (!landed) counters_.add_stall(r.wait_s);
    counters_.add_disk_read(r.bytes);
    if (!r.status.ok()) {
      slot.acquired = false;
      --n_acquired_;
      layer_slot_[static_cast<size_t>(layer)] = -1;
      slot.layer = -1;
      return r.status.with_context(fmt::format("streaming layer {}", layer));
    }
  }
  slot.acquired_s = now_seconds();
  return view(s, layer);
}

void WeightStore::release(int64_t layer) {
  CHECK(layer >= 0 && layer < plan_.n_layer);
  if (experts_) experts_->release(layer);
  const double now = now_seconds();
  if (!layers_[static_cast<size_t>(layer)].streamed) {
    counters_.add_compute(now - resident_acquired_s_[static_cast<size_t>(layer)]);
    return;
  }
  const int s = layer_slot_[static_cast<size_t>(layer)];
  CHECK(s >= 0 && slots_[static_cast<size_t>(s)].acquired);  // release without acquire
  Slot& slot = slots_[static_cast<size_t>(s)];
  counters_.add_compute(now - slot.acquired_s);
  slot.acquired = false;
  --n_acquired_;
  if (auto_prefetch_) {
    const Status st = fill(pos_ + 1);
    CHECK(st.ok());  // submit fails only when transfer records run out, which the sizing rules out
  }
}

bool WeightStore::prefetch(int64_t layer, TransferClass priority) {
  CHECK(layer >= 0 && layer < plan_.n_layer);
  if (!layers_[static_cast<size_t>(layer)].streamed) return true;
  const int s = layer_slot_[static_cast<size_t>(layer)];
  if (s >= 0) {
    raise_priority(slots_[static_cast<size_t>(s)], priority);
    return true;
  }
  // A slot the automatic read-ahead does not need for the coming layers.
  desired_.clear();
  if (auto_prefetch_ && !streamed_.empty()) upcoming(pos_ + 1, slots_.size() - static_cast<size_t>(n_acquired_));
  int take = -1;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& slot = slots_[i];
    if (slot.acquired) continue;
    if (slot.layer >= 0 && std::find(desired_.begin(), desired_.end(), slot.layer) != desired_.end()) continue;
    if (take < 0 || slot.layer < 0) take = static_cast<int>(i);
  }
  if (take < 0) return false;
  drop(take);
  return start(take, layer, priority).ok();
}

bool WeightStore::cancel(int64_t layer) {
  CHECK(layer >= 0 && layer < plan_.n_layer);
  const int s = layer_slot_[static_cast<size_t>(layer)];
  if (s < 0 || slots_[static_cast<size_t>(s)].acquired) return false;
  drop(s);
  return true;
}

void WeightStore::cancel_all() {
  for (size_t s = 0; s < slots_.size(); ++s)
    if (!slots_[s].acquired && slots_[s].layer >= 0) drop(static_cast<int>(s));
}

void WeightStore::raise_priority(Slot& slot, TransferClass cls) {
  if (slot.transfer && cls < slot.cls) {
    arbiter_->reprioritize(slot.transfer, cls);
    slot.cls = cls;
  }
}

bool WeightStore::reprioritize(int64_t layer, TransferClass priority) {
  CHECK(layer >= 0 && layer < plan_.n_layer);
  const int s = layer_slot_[static_cast<size_t>(layer)];
  if (s < 0) return false;
  Slot& slot = slots_[static_cast<size_t>(s)];
  if (!slot.transfer || arbiter_->landed(slot.transfer)) return false;
  arbiter_->reprioritize(slot.transfer, priority);
  slot.cls = priority;
  return true;
}

const uint8_t* WeightStore::resident_tensor(const std::string& name) const {
  auto it = resident_.find(name);
  return it == resident_.end() ? nullptr : it->second;
}

std::vector<std::span<const uint8_t>> WeightStore::host_regions() const {
  std::vector<std::span<const uint8_t>> r;
  for (const AlignedBuffer& b : resident_bufs_)
    if (b.size() > 0) r.emplace_back(b.data(), b.size());
  for (const Slot& s : slots_) r.emplace_back(s.buf.data(), s.buf.size());
  if (experts_) r.push_back(experts_->pool());
  return r;
}

bool WeightStore::owns_resident(const uint8_t* data) const {
  for (const AlignedBuffer& b : resident_bufs_)
    if (data >= b.data() && data < b.data() + b.size()) return true;
  return false;
}

LayerState WeightStore::state(int64_t layer) const {
  CHECK(layer >= 0 && layer < plan_.n_layer);
  if (!layers_[static_cast<size_t>(layer)].streamed) return LayerState::kResident;
  const int s = layer_slot_[static_cast<size_t>(layer)];
  if (s < 0) return LayerState::kAbsent;
  const Slot& slot = slots_[static_cast<size_t>(s)];
  if (slot.acquired) return LayerState::kAcquired;
  if (slot.transfer && !arbiter_->landed(slot.transfer)) return LayerState::kLoading;
  return LayerState::kLanded;
}

ArbiterStats WeightStore::arbiter_stats() const { return arbiter_ ? arbiter_->stats() : ArbiterStats{}; }

}  // namespace sluice::weights
