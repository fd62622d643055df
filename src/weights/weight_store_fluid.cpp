// WeightStore's side of the fluid split, between steps (weight_store.h): a
// layer demoted to the ring (or, from the device tier, to a buffer of its
// own) and promoted back, and the expert pool resized.
#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "weights/weight_store.h"

namespace sluice::weights {

ExtentLayout WeightStore::moved_layout(const LayerInfo& li) const {
  std::vector<TensorRange> ranges;
  for (size_t i : li.moved) {
    const TensorInfo& info = file_->tensors[plan_.tensors[i].index];
    ranges.push_back({static_cast<uint64_t>(info.file_offset), info.n_bytes});
  }
  return layout_extents(ranges, kDirectAlign);
}

Status WeightStore::make_streamed(int64_t l) {
  LayerInfo& li = layers_[static_cast<size_t>(l)];
  ExtentLayout layout = moved_layout(li);
  if (layout.buffer_bytes > plan_.slot_bytes)
    return invalid_argument("layer {} needs {} bytes but the plan's slots hold {}", l, layout.buffer_bytes,
                            plan_.slot_bytes);
  const auto n = static_cast<size_t>(plan_.n_layer);
  for (size_t s = 0; s < slots_.size(); ++s) {
    std::vector<LayerTensor>& table = slot_tables_[s * n + static_cast<size_t>(l)];
    table.clear();
    size_t streamed_index = 0;
    for (size_t i = 0; i < plan_.tensors.size(); ++i) {
      const TensorPlacement& t = plan_.tensors[i];
      if (t.layer != l) continue;
      if (std::find(li.moved.begin(), li.moved.end(), i) != li.moved.end()) {
        table.push_back({.suffix = t.suffix,
                         .data = slots_[s].buf.data() + layout.tensor_offsets[streamed_index++],
                         .n_bytes = t.n_bytes,
                         .streamed = true});
      } else if (t.tier != Tier::kDisk) {  // kDisk: experts, streamed one by one
        table.push_back({.suffix = t.suffix, .data = resident_.at(file_->tensors[t.index].name), .n_bytes = t.n_bytes});
      }
    }
  }
  li.layout = std::move(layout);
  li.streamed = true;
  return Status();
}

void WeightStore::index_streamed() {
  streamed_.clear();
  streamed_pos_.assign(static_cast<size_t>(plan_.n_layer), -1);
  for (int64_t l = 0; l < plan_.n_layer; ++l) {
    if (!layers_[static_cast<size_t>(l)].streamed) continue;
    streamed_pos_[static_cast<size_t>(l)] = static_cast<int64_t>(streamed_.size());
    streamed_.push_back(l);
  }
}

void WeightStore::table_resident(int64_t layer) {
  LayerInfo& li = layers_[static_cast<size_t>(layer)];
  li.resident.clear();
  for (const TensorPlacement& t : plan_.tensors)
    if (t.layer == layer && t.tier != Tier::kDisk)
      li.resident.push_back({.suffix = t.suffix, .data = resident_.at(file_->tensors[t.index].name), .n_bytes = t.n_bytes});
}

void WeightStore::count_resident_buffer(uint64_t bytes, bool added) {
  for (uint64_t* figure : {&plan_.resident_layer_bytes, &plan_.resident_bytes, &plan_.host_bytes})
    *figure = added ? *figure + bytes : *figure - std::min(*figure, bytes);
}

void WeightStore::free_own_buffer(LayerInfo& li) {
  AlignedBuffer& b = resident_bufs_[static_cast<size_t>(li.buffer)];
  count_resident_buffer(b.size(), /*added=*/false);
  b = AlignedBuffer();
}

void WeightStore::count_resident_tensors(uint64_t bytes, bool added) {
  const uint64_t resident = counters_.snapshot().resident_bytes;
  counters_.set_placement(added ? resident + bytes : resident - std::min(resident, bytes), plan_.streamed_bytes);
}

bool WeightStore::demotable(int64_t layer) const {
  CHECK(layer >= 0 && layer < plan_.n_layer);
  const LayerInfo& li = layers_[static_cast<size_t>(layer)];
  if (li.streamed || plan_.n_expert > 0 || li.moved.empty()) return false;
  // What a slot must hold is the extents' size (a buffer may be allocated larger).
  const uint64_t extents = moved_layout(li).buffer_bytes;
  const bool to_ring = !slots_.empty() && extents <= plan_.slot_bytes;
  if (li.buffer >= 0) return !li.device_home && to_ring;
  return li.device_home && (to_ring || host_room(extents));
}

bool WeightStore::host_room(uint64_t bytes) const {
  return plan_.budget_bytes == 0 || plan_.host_bytes + bytes <= plan_.budget_bytes;
}

Status WeightStore::read_own_buffer(int64_t layer, std::string_view why, uint64_t* bytes) {
  LayerInfo& li = layers_[static_cast<size_t>(layer)];
  li.layout = moved_layout(li);
  ASSIGN_OR_RETURN(AlignedBuffer buf, AlignedBuffer::allocate(li.layout.buffer_bytes));
  if (arbiter_) {
    ASSIGN_OR_RETURN(const TransferId id, arbiter_->submit(TransferClass::kCritical, li.layout.extents, buf.data()));
    const TransferResult r = arbiter_->wait(id);
    counters_.add_disk_read(r.bytes);
    RETURN_IF_ERROR(r.status.with_context(fmt::format("{} layer {}", why, layer)));
  }
  *bytes = 0;
  for (size_t j = 0; j < li.moved.size(); ++j) {
    TensorPlacement& t = plan_.tensors[li.moved[j]];
    const TensorInfo& info = file_->tensors[t.index];
    uint8_t* at = buf.data() + li.layout.tensor_offsets[j];
    if (!arbiter_) std::memcpy(at, info.data, info.n_bytes);  // the file's memory map
    resident_[info.name] = at;
    t.tier = Tier::kHost;
    *bytes += t.n_bytes;
  }
  count_resident_buffer(buf.size(), /*added=*/true);
  if (li.buffer < 0) {
    li.buffer = static_cast<int>(resident_bufs_.size());
    resident_bufs_.push_back(std::move(buf));
  } else {
    resident_bufs_[static_cast<size_t>(li.buffer)] = std::move(buf);
  }
  return Status();
}

Status WeightStore::device_to_host(int64_t layer) {
  uint64_t bytes = 0;
  RETURN_IF_ERROR(read_own_buffer(layer, "demoting to host memory", &bytes));
  table_resident(layer);
  plan_.layers[static_cast<size_t>(layer)].device = false;
  count_resident_tensors(bytes, /*added=*/true);
  return Status();
}

std::span<const uint8_t> WeightStore::layer_buffer(int64_t layer) const {
  const LayerInfo& li = layers_[static_cast<size_t>(layer)];
  if (li.buffer < 0) return {};
  const AlignedBuffer& b = resident_bufs_[static_cast<size_t>(li.buffer)];
  return {b.data(), b.size()};
}

uint64_t WeightStore::demotable_bytes(int64_t layer) const {
  if (!demotable(layer)) return 0;
  const LayerInfo& li = layers_[static_cast<size_t>(layer)];
  if (li.buffer >= 0) return resident_bufs_[static_cast<size_t>(li.buffer)].size();
  uint64_t bytes = 0;
  for (size_t i : li.moved) bytes += plan_.tensors[i].n_bytes;
  return bytes;
}

Status WeightStore::demote(int64_t layer) {
  if (!demotable(layer))
    return invalid_argument("layer {} cannot be demoted: it is not resident in a buffer of its own or the device "
                            "tier, fitting a ring slot{}",
                            layer, slots_.empty() ? " (the store has no ring: nothing streams)" : "");
  CHECK(n_acquired_ == 0);
  LayerInfo& li = layers_[static_cast<size_t>(layer)];
  // A device layer goes to host memory while the budget has room (no reads
  // per step), else to the ring.
  if (li.device_home && li.buffer < 0 && host_room(moved_layout(li).buffer_bytes)) return device_to_host(layer);
  RETURN_IF_ERROR(make_streamed(layer));
  index_streamed();
  uint64_t bytes = 0;
  for (size_t i : li.moved) {
    TensorPlacement& t = plan_.tensors[i];
    resident_.erase(file_->tensors[t.index].name);
    t.tier = Tier::kDisk;
    bytes += t.n_bytes;
  }
  li.resident.clear();
  LayerPlacement& lp = plan_.layers[static_cast<size_t>(layer)];
  lp.streamed = true;
  ++plan_.n_streamed;
  plan_.streamed_bytes += bytes;
  if (li.buffer >= 0) {  // a host layer: its buffer goes
    free_own_buffer(li);
    count_resident_tensors(bytes, /*added=*/false);
  } else {  // the device tier's: the backend frees its copy
    lp.device = false;
    count_resident_tensors(0, /*added=*/true);
  }
  if (auto_prefetch_) RETURN_IF_ERROR(fill(pos_ + 1));
  return Status();
}

Status WeightStore::promote(int64_t layer) {
  CHECK(layer >= 0 && layer < plan_.n_layer);
  LayerInfo& li = layers_[static_cast<size_t>(layer)];
  if (li.device_home && !li.streamed && li.buffer >= 0) return host_to_device(layer);
  if (!li.streamed || li.moved.empty())
    return invalid_argument("layer {} is not streamed", layer);
  const int s = layer_slot_[static_cast<size_t>(layer)];
  if (s >= 0 && slots_[static_cast<size_t>(s)].acquired)
    return invalid_argument("layer {} is acquired; promote it between steps", layer);
  if (s >= 0) drop(s);
  LayerPlacement& lp = plan_.layers[static_cast<size_t>(layer)];
  uint64_t bytes = 0;
  if (li.device_home) {  // back to the device tier: the file's memory, for the backend to copy
    bytes = serve_from_file(layer);
  } else {
    RETURN_IF_ERROR(read_own_buffer(layer, "promoting", &bytes));
  }
  table_resident(layer);
  li.streamed = false;
  index_streamed();
  lp.streamed = false;
  --plan_.n_streamed;
  plan_.streamed_bytes -= std::min(plan_.streamed_bytes, bytes);
  count_resident_tensors(li.device_home ? 0 : bytes, /*added=*/true);
  if (auto_prefetch_) RETURN_IF_ERROR(fill(pos_ + 1));
  return Status();
}

uint64_t WeightStore::serve_from_file(int64_t layer) {
  uint64_t bytes = 0;
  for (size_t i : layers_[static_cast<size_t>(layer)].moved) {
    TensorPlacement& t = plan_.tensors[i];
    const TensorInfo& info = file_->tensors[t.index];
    resident_[info.name] = info.data;
    t.tier = Tier::kDevice;
    bytes += t.n_bytes;
  }
  plan_.layers[static_cast<size_t>(layer)].device = true;
  return bytes;
}

Status WeightStore::host_to_device(int64_t layer) {
  const uint64_t bytes = serve_from_file(layer);
  free_own_buffer(layers_[static_cast<size_t>(layer)]);
  table_resident(layer);
  count_resident_tensors(bytes, /*added=*/false);
  return Status();
}

Status WeightStore::set_expert_slots(int64_t n) {
  if (!experts_) return invalid_argument("this store keeps no expert pool");
  const int64_t old = experts_->n_slots();
  RETURN_IF_ERROR(experts_->set_slot_limit(n));
  const int64_t delta = n - old;  // the plan's figures follow the pool
  plan_.n_expert_slots = n;
  const uint64_t moved = static_cast<uint64_t>(delta < 0 ? -delta : delta) * plan_.expert_slot_bytes;
  plan_.host_bytes = delta < 0 ? plan_.host_bytes - std::min(plan_.host_bytes, moved) : plan_.host_bytes + moved;
  return Status();
}

LayerView WeightStore::resident_view(int64_t layer) const {
  CHECK(layer >= 0 && layer < plan_.n_layer && !layers_[static_cast<size_t>(layer)].streamed);
  return LayerView{.layer = layer, .streamed = false, .tensors = layers_[static_cast<size_t>(layer)].resident};
}

}  // namespace sluice::weights
