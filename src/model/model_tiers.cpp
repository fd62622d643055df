// Model's weights across tiers: the three tiers' device layers (planned,
// prepared an arena each for a dense model) and the fluid split's moves of
// layers and expert slots between tiers (model.h).
#include <algorithm>

#include "model/model.h"

namespace sluice {

void Model::register_region(std::span<const uint8_t> r) {
  backend_->register_host(r.data(), r.size());
  registered_.push_back(r.data());
}

Status Model::plan_device_tiers() {
  if (!backend_->reads_host_weights()) {
    return unimplemented("--mem-budget streams weights through host memory, which the {} backend does not read; "
                         "load the model whole on it (no --mem-budget) or use --backend cpu",
                         backend_->name());
  }
  device_layer_.assign(static_cast<size_t>(hp_.n_layer), 0);
  for (int64_t l = layer_begin_; l < layer_end_; ++l) {
    const auto lu = static_cast<size_t>(l);
    const LayerWeights& lw = weights_.layers[lu];
    device_layer_[lu] = source_->device_resident(l) ? 1 : 0;
    // What one layer copies in: all of it, or a device layer's chosen experts.
    const uint64_t copied = !device_layer_[lu] ? layer_matrix_bytes(lw)
                            : lw.experts.empty() ? 0
                                                 : expert_bytes(lw.experts[0]) *
                                                       static_cast<uint64_t>(std::max<int64_t>(1, hp_.n_expert_used));
    host_weight_bytes_ = std::max(host_weight_bytes_, copied);
    if (!lw.experts.empty()) host_expert_bytes_ = std::max(host_expert_bytes_, expert_bytes(lw.experts[0]));
  }
  // What host layers are copied through is sized now, before the device tier's
  // weights are placed: a device backend counts it in its budget.
  if (host_weight_bytes_ > 0) backend_->reserve({.host_weight_bytes = host_weight_bytes_});
  for (std::span<const uint8_t> r : source_->host_regions()) {
    register_region(r);
  }
  return Status();
}

std::vector<std::vector<WeightView*>> Model::device_groups(int64_t only_layer) {
  // The device tier's layers' groups (a routed layer's dense part) and the
  // output head; only_layer >= 0: that layer's groups alone.
  std::vector<std::vector<WeightView*>> groups = dispatch_groups(weights_, arch());
  std::erase_if(groups, [&](const std::vector<WeightView*>& g) {
    if (!holds(g[0]) || !g[0]->data) return true;
    bool expert = false;
    const int64_t l = layer_of_view(weights_, g[0], &expert);
    if (only_layer >= 0) return l != only_layer || expert;
    return l >= 0 && (expert || !device_layer_[static_cast<size_t>(l)] || per_layer_arenas());
  });
  return groups;
}

PreparedWeights Model::prepare_groups(int64_t only_layer) {
  const std::vector<std::vector<WeightView*>> groups = device_groups(only_layer);
  const std::vector<WeightGroup> spans(groups.begin(), groups.end());
  return backend_->prepare_weights(spans);
}

Status Model::prepare_device_layers() {
  // The device tier's layers (a routed layer's dense part) and the output
  // head go to the backend's memory once; every other view stays in the
  // source's host memory and is copied in at each use
  // (Backend::reads_host_weights), experts into slots the backend keeps. A
  // dense model's layers get an arena each, which the fluid split frees when
  // it demotes the layer (demote_layer).
  device_prepared_.resize(static_cast<size_t>(hp_.n_layer));
  uint64_t layer_bytes = 0;
  int64_t n_arenas = 0;
  if (per_layer_arenas()) {
    for (int64_t l = layer_begin_; l < layer_end_; ++l) {
      if (!device_layer_[static_cast<size_t>(l)]) continue;
      PreparedWeights& p = device_prepared_[static_cast<size_t>(l)];
      p = prepare_groups(l);
      RETURN_IF_ERROR(p.status);
      layer_bytes += p.copied_bytes + p.repacked_bytes;
      ++n_arenas;
    }
  }
  prepared_ = prepare_groups(-1);
  RETURN_IF_ERROR(prepared_.status);
  if (n_arenas > 0)
    prepared_.summary += fmt::format("{}the device tier's {} layers in an arena each ({:.2f} GiB)",
                                     prepared_.summary.empty() ? "" : "; ", n_arenas,
                                     static_cast<double>(layer_bytes) / (1 << 30));
  // What each layer reads from host memory: all of it, or a device layer's
  // experts when they are resident there (streamed ones are the disk's).
  host_layer_bytes_.assign(static_cast<size_t>(hp_.n_layer), 0);
  for (int64_t l = layer_begin_; l < layer_end_; ++l) {
    const LayerWeights& lw = weights_.layers[static_cast<size_t>(l)];
    host_layer_bytes_[static_cast<size_t>(l)] =
        !device_layer_[static_cast<size_t>(l)]          ? layer_matrix_bytes(lw)
        : lw.experts.empty() || source_->streams_experts() ? 0
                                                           : expert_bytes(lw.experts[0]) * lw.experts.size();
  }
  return Status();
}

uint64_t Model::demotable_bytes(int64_t l) const {
  if (!source_ || l < layer_begin_ || l >= layer_end_) return 0;
  const uint64_t moved = source_->demotable_bytes(l);
  if (moved == 0) return 0;
  if (on_device(l)) {  // the backend's copy is what the split frees
    if (!per_layer_arenas()) return 0;
    const PreparedWeights& p = device_prepared_[static_cast<size_t>(l)];
    return std::max<uint64_t>(moved, p.copied_bytes + p.repacked_bytes);
  }
  return backend_->host_visible() ? moved : 0;
}

Status Model::demote_layer(int64_t l) {
  if (demotable_bytes(l) == 0) return invalid_argument("layer {} cannot be demoted", l);
  RETURN_IF_ERROR(source_->demote(l));
  LayerWeights& w = weights_.layers[static_cast<size_t>(l)];
  if (on_device(l)) {
    backend_->finish_host_reads();
    device_prepared_[static_cast<size_t>(l)] = PreparedWeights{};  // the device copy goes
    device_layer_[static_cast<size_t>(l)] = 0;
    host_layer_bytes_[static_cast<size_t>(l)] = layer_matrix_bytes(w);
    // Read into host memory of its own (no ring, or room): the backend reads it there.
    if (const std::span<const uint8_t> r = source_->layer_region(l); !r.empty()) register_region(r);
  }
  // The ring holds the file's rows: what was reordered (or copied) is not.
  for (WeightView& v : w.mats) v.layout = WeightLayout::kRows;
  return Status();
}

Status Model::promote_layer(int64_t l) {
  if (!source_ || l < layer_begin_ || l >= layer_end_) return invalid_argument("layer {} cannot be promoted", l);
  // A demoted device layer's host copy is about to go: the backend lets go of it first.
  if (!device_layer_.empty()) {
    const std::span<const uint8_t> r = source_->layer_region(l);
    if (const auto it = std::find(registered_.begin(), registered_.end(), r.data()); !r.empty() && it != registered_.end()) {
      backend_->finish_host_reads();
      backend_->unregister_host(r.data());
      registered_.erase(it);
    }
  }
  LayerWeightPointers p;
  RETURN_IF_ERROR(source_->promote(l, &p));
  LayerWeights& w = weights_.layers[static_cast<size_t>(l)];
  bind_layer(w, p);
  if (source_->device_resident(l)) {  // back in the device tier: the backend copies it again
    PreparedWeights& prepared = device_prepared_[static_cast<size_t>(l)];
    prepared = prepare_groups(l);
    RETURN_IF_ERROR(prepared.status);
    device_layer_[static_cast<size_t>(l)] = 1;
    host_layer_bytes_[static_cast<size_t>(l)] = 0;
  } else if (repack_) {
    reorder_in_place(l);
  }
  return Status();
}

LayerWeightSource::ExpertSlotRange Model::expert_slot_range() const {
  if (!source_) return {};
  if (!backend_->host_visible()) return backend_->expert_slots();  // the device's slots
  if (!source_->streams_experts()) return {};
  return source_->expert_slot_range();
}

Status Model::set_expert_slots(int64_t n) {
  if (expert_slot_range().max == 0) return invalid_argument("this model keeps no expert slots that can move");
  if (!backend_->host_visible()) return backend_->set_expert_slot_count(n);
  return source_->set_expert_slots(n);
}

bool Model::on_device(int64_t l) const { return !device_layer_.empty() && device_layer_[static_cast<size_t>(l)]; }

}  // namespace sluice
