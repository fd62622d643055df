#include "weights/placement.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "base/check.h"
#include "base/enum_names.h"
#include "model/hparams.h"
#include "weights/io_engine.h"

namespace sluice::weights {
namespace {

// Reading every streamed layer's slot (training: the layers the ring does not
// keep across a turn, twice) and the experts a step misses at `gbps`: the
// disk's share of a step.
double disk_s_per_step(const PlacementPlan& p, double gbps) {
  if (p.training) return p.train.read_bytes / (gbps * 1e9);  // layers or experts, every visit's
  const double layers = static_cast<double>(p.n_streamed) * static_cast<double>(p.slot_bytes);
  return (layers + p.expert_disk_bytes_per_step) / (gbps * 1e9);
}

// The step when the disk's share of it takes disk_s. In training with experts
// read one by one (train/routed_ffn_train.h) half the reads are the forward
// visits', half the backward's. The backward visits route as the forward did,
// so each routed layer's are read ahead while the layer above computes; the
// forward guesses the next routed layer's from the rows below it (as
// inference does) and reads them while the layer below computes. Given room in
// the pool for a second layer's chosen experts beside the ones pinned, each
// pass's reads hide behind its visits' compute (the guess's misses, a few
// percent of the bytes, are not modelled); without it every read stalls.
// Otherwise the step is the longer of compute and the disk's side with its
// boundary.
double step_with_disk(const PlacementPlan& p, double disk_s) {
  if (p.training && p.n_expert_slots > 0) {
    const double pass = disk_s / 2;
    const double per_layer = p.n_layer_moe > 0 ? p.experts_per_step / static_cast<double>(p.n_layer_moe) : 0.0;
    const bool ahead = static_cast<double>(p.n_expert_slots) >= 2 * per_layer;
    const double layers = static_cast<double>(p.n_layer_moe);
    const double forward_hidden = ahead ? layers * p.layer_compute_s : 0.0;
    const double backward_hidden = ahead ? layers * p.train_backward_s : 0.0;
    return p.predicted_compute_s + std::max(0.0, pass - forward_hidden) + std::max(0.0, pass - backward_hidden);
  }
  return std::max(p.predicted_compute_s, disk_s + p.predicted_boundary_s);
}

// Training: resident layer l_j = 1 + floor((2j + 1)(n - 2) / 2r) for j < r,
// spread evenly between the first and the last layer (which stream), or the
// first n_resident layers when fewer than two stream.
bool training_resident(int64_t l, int64_t n_layer, int64_t n_resident) {
  if (n_resident <= 0) return false;
  if (n_resident >= n_layer - 1) return l < n_resident;
  const int64_t span = n_layer - 2;
  for (int64_t j = 0; j < n_resident; ++j) {
    if (l == 1 + (2 * j + 1) * span / (2 * n_resident)) return true;
  }
  return false;
}

// The training prediction of `p` (its layers placed) per micro-batch.
Status set_training_figures(PlacementPlan& p, const PlacementInputs& in) {
  p.training = true;
  p.train_backward_s = in.train_backward_s;
  p.train_head_s = in.head_compute_s;
  // The reads' exact bytes: each streamed layer's extents, as often as it is read.
  double read_bytes = 0;
  int64_t i = 0;
  for (const LayerPlacement& l : p.layers) {
    if (!l.streamed) continue;
    read_bytes += static_cast<double>(plan::training_reads_of(i++, p.n_streamed, p.n_ring_slots)) *
                  static_cast<double>(l.extent_bytes);
  }
  ASSIGN_OR_RETURN(p.train, plan::plan_train_stream({.n_layer = p.n_layer,
                                                     .n_streamed = p.n_streamed,
                                                     .n_ring_slots = p.n_ring_slots,
                                                     .slot_bytes = static_cast<double>(p.slot_bytes),
                                                     .read_bytes = read_bytes,
                                                     .forward_s = in.layer_compute_s,
                                                     .backward_s = in.train_backward_s,
                                                     .head_s = in.head_compute_s,
                                                     .disk_gbps = in.disk_gbps}));
  p.predicted_compute_s = p.train.compute_s;
  p.predicted_boundary_s = p.train.boundary_s;
  return Status();
}

}  // namespace

// The plan's disk figures at `gbps`; n_streamed, slot_bytes and
// predicted_compute_s must be set.
void set_disk_figures(PlacementPlan& p, double gbps) {
  p.disk_gbps = gbps;
  p.transfer_s = static_cast<double>(p.slot_bytes) / (gbps * 1e9);
  p.predicted_disk_s = disk_s_per_step(p, gbps);
  p.predicted_stall_s = step_with_disk(p, p.predicted_disk_s) - p.predicted_compute_s;
  if (p.training) p.train.stall_s = p.predicted_stall_s;
  if (p.training && p.n_expert_slots > 0) {  // the rest of the training figures, as plan_train_stream gives a ring's
    p.train.disk_s = p.predicted_disk_s;
    p.train.step_s = p.predicted_compute_s + p.predicted_stall_s;
    p.train.overhead = p.predicted_compute_s > 0 ? p.train.step_s / p.predicted_compute_s - 1 : 0.0;
    p.train.bound = p.predicted_stall_s > 0 ? plan::StreamBound::kDisk : plan::StreamBound::kCompute;
  }
}

std::string format_bytes(double bytes) {
  if (bytes >= 1e9) return fmt::format("{:.2f} GB", bytes / 1e9);
  if (bytes >= 1e6) return fmt::format("{:.1f} MB", bytes / 1e6);
  if (bytes >= 1e3) return fmt::format("{:.1f} kB", bytes / 1e3);
  return fmt::format("{:.0f} B", bytes);
}

std::string format_seconds(double s) { return s >= 1 ? fmt::format("{:.2f} s", s) : fmt::format("{:.1f} ms", s * 1e3); }

namespace {

std::string mb(double bytes) { return format_bytes(bytes); }
std::string ms(double s) { return format_seconds(s); }

}  // namespace

bool is_essential_tensor(const TensorPlacement& t, const TensorInfo& info) {
  return t.layer < 0 || info.ne.size() <= 1 || !t.from_file;
}

constexpr EnumName<Tier> kTierNames[] = {{Tier::kDisk, "disk"}, {Tier::kHost, "host"}, {Tier::kDevice, "device"}};

const char* tier_name(Tier t) { return enum_name(t, kTierNames); }

StatusOr<uint64_t> parse_byte_size(const std::string& text) {
  std::string s;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) s += c;
  if (s.empty()) return invalid_argument("empty byte size");
  size_t end = 0;
  while (end < s.size() && (std::isdigit(static_cast<unsigned char>(s[end])) || s[end] == '.')) ++end;
  if (end == 0) return invalid_argument("byte size '{}' does not start with a number", text);
  char* parse_end = nullptr;
  const std::string number = s.substr(0, end);
  const double v = std::strtod(number.c_str(), &parse_end);
  if (parse_end != number.c_str() + number.size()) return invalid_argument("byte size '{}' is not a number", text);
  std::string unit = s.substr(end);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (!unit.empty() && unit.back() == 'B') unit.pop_back();
  double mult = 0;
  if (unit.empty()) mult = 1;
  else if (unit == "K") mult = 1e3;
  else if (unit == "M") mult = 1e6;
  else if (unit == "G") mult = 1e9;
  else if (unit == "T") mult = 1e12;
  else if (unit == "KI") mult = 1024.0;
  else if (unit == "MI") mult = 1024.0 * 1024;
  else if (unit == "GI") mult = 1024.0 * 1024 * 1024;
  else if (unit == "TI") mult = 1024.0 * 1024 * 1024 * 1024;
  else return invalid_argument("byte size '{}': unknown unit (K, M, G, T, Ki, Mi, Gi, Ti)", text);
  return static_cast<uint64_t>(std::llround(v * mult));
}

StatusOr<PlacementPlan> plan_placement(const ModelFile& file, const PlacementInputs& in) {
  PlacementPlan p;
  p.budget_bytes = in.mem_budget_bytes;
  p.disk_gbps = in.disk_gbps;
  p.sized_disk_gbps = in.disk_gbps;
  p.layer_compute_s = in.layer_compute_s;
  p.tokens_per_step = std::max<int64_t>(1, in.tokens_per_step);
  const bool single_file = file.format == "gguf";

  for (size_t i = 0; i < file.tensors.size(); ++i) {
    const TensorInfo& info = file.tensors[i];
    auto [layer, suffix] = split_layer_name(info.name);
    p.tensors.push_back({.index = i, .suffix = suffix, .layer = layer, .tier = Tier::kHost,
                         .from_file = single_file && info.file_offset >= 0, .n_bytes = info.n_bytes});
    p.n_layer = std::max(p.n_layer, layer + 1);
    p.total_tensor_bytes += info.n_bytes;
  }
  if (p.n_layer == 0) return invalid_argument("the model has no blocks (blk.N.*) to place");
  p.layers.resize(static_cast<size_t>(p.n_layer));
  // Rule 6: a pipeline stage places its own layers; the rest are elsewhere.
  p.layer_begin = in.layer_begin;
  p.layer_end = in.layer_end < 0 ? p.n_layer : in.layer_end;
  if (p.layer_begin < 0 || p.layer_begin >= p.layer_end || p.layer_end > p.n_layer)
    return invalid_argument("layer range [{}, {}) is not inside the model's {} layers", in.layer_begin, in.layer_end,
                            p.n_layer);
  const bool stage = p.layer_begin > 0 || p.layer_end < p.n_layer;
  if (stage && in.training) return unimplemented("fine-tuning streams the whole model, not a pipeline stage's layers");
  // Rule 7: an expert share streams expert by expert; with experts_only the
  // rest of the model is another process's.
  const bool share = in.expert_begin != 0 || in.expert_end >= 0 || in.experts_only;
  if (share) {
    ASSIGN_OR_RETURN(const ModelHparams hp, hparams_from_metadata(file.metadata));
    if (!hp.is_moe()) return invalid_argument("an expert share needs a mixture-of-experts model");
    if (in.training || in.stream_all)
      return unimplemented("an expert share streams alone (not with training or --stream-all)");
    const int64_t end = in.expert_end < 0 ? hp.n_expert : in.expert_end;
    if (in.expert_begin < 0 || in.expert_begin >= end || end > hp.n_expert)
      return invalid_argument("expert share [{}, {}) is not inside the model's {} experts", in.expert_begin,
                              in.expert_end, hp.n_expert);
    if (in.experts_only) {
      for (TensorPlacement& t : p.tensors) {
        const TensorSpec* spec = hp.spec->find_tensor(file.tensors[t.index].name);
        t.elsewhere = !(spec && spec->kind == TensorKind::kExperts);
      }
    }
  }
  if (stage) {
    p.total_tensor_bytes = 0;
    for (TensorPlacement& t : p.tensors) {
      // (an expert share alone keeps its other tensors elsewhere too)
      t.elsewhere = t.elsewhere || (t.layer >= 0 ? t.layer < p.layer_begin || t.layer >= p.layer_end : p.layer_begin > 0);
      if (!t.elsewhere) p.total_tensor_bytes += t.n_bytes;
    }
    for (int64_t l = 0; l < p.n_layer; ++l)
      p.layers[static_cast<size_t>(l)].elsewhere = l < p.layer_begin || l >= p.layer_end;
  }
  const int64_t n_own = p.n_stage_layers();
  // Rule 8: the device tier's layers.
  for (int64_t l : in.device_layers) {
    if (l < p.layer_begin || l >= p.layer_end)
      return invalid_argument("device-tier layer {} is not among the layers placed here [{}, {})", l, p.layer_begin,
                              p.layer_end);
    if (p.layers[static_cast<size_t>(l)].device) return invalid_argument("device-tier layer {} named twice", l);
    p.layers[static_cast<size_t>(l)].device = true;
  }
  const int64_t n_device = static_cast<int64_t>(in.device_layers.size());
  if (n_device > 0) {
    if (share) return unimplemented("a device tier with an expert share");
    // A routed layer's experts stay the store's (rule 7's pool, or resident).
    const StatusOr<ModelHparams> hp = hparams_from_metadata(file.metadata);
    for (TensorPlacement& t : p.tensors) {
      const TensorInfo& info = file.tensors[t.index];
      if (t.layer < 0 || t.elsewhere || !p.layers[static_cast<size_t>(t.layer)].device || is_essential_tensor(t, info))
        continue;
      const TensorSpec* spec = hp.ok() && hp->spec ? hp->spec->find_tensor(info.name) : nullptr;
      if (spec && spec->kind == TensorKind::kExperts) continue;
      t.tier = Tier::kDevice;
      p.total_tensor_bytes -= t.n_bytes;
    }
  }
  const int64_t n_host = n_own - n_device;  // the layers rules 2-5 place

  // Essentials: one aligned buffer of everything from the file, plus in-memory tensors.
  std::vector<TensorRange> essential_ranges;
  std::vector<std::vector<TensorRange>> layer_ranges(static_cast<size_t>(p.n_layer));
  uint64_t in_memory_bytes = 0;
  for (const TensorPlacement& t : p.tensors) {
    const TensorInfo& info = file.tensors[t.index];
    if (t.elsewhere || t.tier == Tier::kDevice) continue;
    if (is_essential_tensor(t, info)) {
      if (t.from_file) essential_ranges.push_back({static_cast<uint64_t>(info.file_offset), info.n_bytes});
      else in_memory_bytes += info.n_bytes;
    } else {
      layer_ranges[static_cast<size_t>(t.layer)].push_back({static_cast<uint64_t>(info.file_offset), info.n_bytes});
    }
  }
  p.essentials_bytes = layout_extents(essential_ranges, kDirectAlign, in.max_gap).buffer_bytes + in_memory_bytes;
  uint64_t all_layers_bytes = 0;
  for (int64_t l = p.layer_begin; l < p.layer_end; ++l) {  // (a device layer's: its experts, if any)
    const ExtentLayout lay = layout_extents(layer_ranges[static_cast<size_t>(l)], kDirectAlign, in.max_gap);
    LayerPlacement& lp = p.layers[static_cast<size_t>(l)];
    lp.matrix_bytes = lay.tensor_bytes;
    lp.extent_bytes = lay.buffer_bytes;
    all_layers_bytes += lay.buffer_bytes;
    p.slot_bytes = std::max(p.slot_bytes, lay.buffer_bytes);
  }

  auto finish_resident = [&] {
    p.resident_layer_bytes = all_layers_bytes;
    p.resident_bytes = p.essentials_bytes + all_layers_bytes;
    p.host_bytes = p.resident_bytes;
    p.slot_bytes = 0;
    p.predicted_compute_s = static_cast<double>(n_own) * in.layer_compute_s;
    return p;
  };
  if (!in.stream_all && !share &&
      (in.mem_budget_bytes == 0 || p.essentials_bytes + all_layers_bytes <= in.mem_budget_bytes)) {
    finish_resident();
    if (in.training && in.layer_compute_s > 0) RETURN_IF_ERROR(set_training_figures(p, in));
    return p;
  }
  if (in.training && !(in.train_backward_s > 0))
    return invalid_argument("training needs the compute time of a layer's backward visit (> 0)");
  // A routed model streams expert by expert, not layer by layer.
  if (auto hp = hparams_from_metadata(file.metadata); share || (hp.ok() && hp->is_moe() && !in.stream_all)) {
    return plan_expert_placement(file, in, std::move(p));
  }

  bool any_in_memory_matrix = false;
  for (const TensorPlacement& t : p.tensors)
    if (!t.from_file && t.layer >= 0 && file.tensors[t.index].ne.size() > 1) any_in_memory_matrix = true;
  if (!single_file || any_in_memory_matrix) {
    return resource_exhausted(
        "--mem-budget {} is below the model's {} and this model cannot stream ({}); use --mem-budget {} or more",
        mb(static_cast<double>(in.mem_budget_bytes)), mb(static_cast<double>(p.essentials_bytes + all_layers_bytes)),
        single_file ? "some block matrices were transformed at import" : "only single GGUF files stream",
        p.essentials_bytes + all_layers_bytes);
  }
  if (p.slot_bytes == 0) return invalid_argument("no block tensor of this model can be read from the file by offset");
  if (!(in.disk_gbps > 0) || !(in.layer_compute_s > 0))
    return invalid_argument("streaming needs the disk read rate and the compute time per layer (both > 0)");

  p.transfer_s = static_cast<double>(p.slot_bytes) / (in.disk_gbps * 1e9);
  // plan_stream takes FLOPs and TFLOP/s; a layer of compute_s seconds is
  // compute_s x 1e12 FLOPs at 1 TFLOP/s.
  plan::StreamInputs si{.n_layer = n_own,
                        .layer_bytes = static_cast<double>(p.slot_bytes),
                        .layer_flops = in.layer_compute_s * 1e12,
                        .compute_tflops = 1.0,
                        .link_gbps = 0,
                        .disk_gbps = in.disk_gbps};
  ASSIGN_OR_RETURN(plan::StreamPlan full, plan::plan_stream(si));
  p.n_ring_slots_planned = full.n_ring_slots;
  p.min_budget_bytes = p.essentials_bytes + 2 * p.slot_bytes;
  p.full_ring_budget_bytes = p.essentials_bytes + static_cast<uint64_t>(full.n_ring_slots) * p.slot_bytes;
  const uint64_t budget = !in.stream_all ? in.mem_budget_bytes
                          : in.mem_budget_bytes > 0 ? std::min(p.full_ring_budget_bytes, in.mem_budget_bytes)
                                                    : p.full_ring_budget_bytes;
  p.budget_bytes = budget;
  if (budget < p.min_budget_bytes) {
    return resource_exhausted(
        "--mem-budget {} cannot work: resident essentials {} + a ring of 2 slots x {} = {}; the smallest budget "
        "that works is {} bytes ({}); hiding every transfer needs K={} slots: {} bytes",
        mb(static_cast<double>(in.mem_budget_bytes)), mb(static_cast<double>(p.essentials_bytes)),
        mb(static_cast<double>(p.slot_bytes)), mb(static_cast<double>(p.min_budget_bytes)), p.min_budget_bytes,
        mb(static_cast<double>(p.min_budget_bytes)), full.n_ring_slots, p.full_ring_budget_bytes);
  }
  const int64_t slots_fit = static_cast<int64_t>((budget - p.essentials_bytes) / p.slot_bytes);
  p.n_ring_slots = std::min(full.n_ring_slots, slots_fit);
  if (p.n_ring_slots < full.n_ring_slots) {
    p.note = fmt::format(
        "ring trimmed to {} of the planned {} slots by the budget: a transfer ({}) outlasts a layer's compute "
        "({}), so the step is disk-bound with any ring of 2 or more; {} bytes would hold all {}",
        p.n_ring_slots, full.n_ring_slots, ms(p.transfer_s), ms(in.layer_compute_s), p.full_ring_budget_bytes,
        full.n_ring_slots);
  }

  // Whole layers fill what the ring leaves; at least one layer streams.
  uint64_t left = budget - p.essentials_bytes - static_cast<uint64_t>(p.n_ring_slots) * p.slot_bytes;
  int64_t n_resident = std::min<int64_t>(n_host - 1, static_cast<int64_t>(left / p.slot_bytes));
  const int64_t n_streamed = n_host - n_resident;
  p.n_ring_slots = std::min(p.n_ring_slots, n_streamed);
  // Streamed layers spread evenly (plan::streamed_in_spread); in training
  // order the resident ones keep off the turns. Both count the host's layers
  // alone (h), past the device tier's.
  for (int64_t l = p.layer_begin, h = 0; l < p.layer_end; ++l) {
    LayerPlacement& lp = p.layers[static_cast<size_t>(l)];
    if (lp.device) continue;
    const bool streamed = in.training ? !training_resident(h, n_host, n_resident)
                                      : plan::streamed_in_spread(h, n_host, n_streamed);
    ++h;
    lp.streamed = streamed;
    if (streamed) {
      ++p.n_streamed;
      p.streamed_bytes += lp.matrix_bytes;
    } else {
      p.resident_layer_bytes += lp.extent_bytes;
    }
  }
  for (TensorPlacement& t : p.tensors) {
    if (t.layer >= 0 && !t.elsewhere && p.layers[static_cast<size_t>(t.layer)].streamed &&
        !is_essential_tensor(t, file.tensors[t.index]))
      t.tier = Tier::kDisk;
  }
  p.resident_bytes = p.essentials_bytes + p.resident_layer_bytes;
  p.ring_bytes = static_cast<uint64_t>(p.n_ring_slots) * p.slot_bytes;
  p.host_bytes = p.resident_bytes + p.ring_bytes;

  si.n_layer = p.n_streamed;
  ASSIGN_OR_RETURN(p.stream, plan::plan_stream(si));
  p.predicted_compute_s = static_cast<double>(n_own) * in.layer_compute_s;
  if (in.training) RETURN_IF_ERROR(set_training_figures(p, in));
  set_disk_figures(p, in.disk_gbps);
  return p;
}

double PlacementPlan::predicted_step_s_at(double gbps) const {
  CHECK(gbps > 0);
  return step_with_disk(*this, disk_s_per_step(*this, gbps));
}

double PlacementPlan::predicted_step_s_given(double hit_rate, double gbps) const {
  CHECK(gbps > 0);
  const double experts = experts_per_step * (1.0 - std::clamp(hit_rate, 0.0, 1.0)) * static_cast<double>(expert_bytes);
  const double bytes = !training          ? static_cast<double>(n_streamed) * static_cast<double>(slot_bytes) + experts
                       : n_expert_slots > 0 ? 2 * experts  // both visits
                                           : train.read_bytes;
  return step_with_disk(*this, bytes / (gbps * 1e9));
}

void PlacementPlan::rerate_disk(double gbps, std::string note) {
  CHECK(gbps > 0);
  if (n_streamed == 0 && n_expert_slots == 0) return;
  disk_note = std::move(note);
  set_disk_figures(*this, gbps);
}

std::string placement_map(const PlacementPlan& p) {
  int64_t n_host = 0, n_disk = 0, n_device = 0, n_device_layers = 0;
  uint64_t host_tensor_bytes = 0, disk_tensor_bytes = 0, device_tensor_bytes = 0;
  for (const LayerPlacement& l : p.layers) n_device_layers += l.device ? 1 : 0;
  for (const TensorPlacement& t : p.tensors) {
    if (t.elsewhere) continue;
    if (t.tier == Tier::kDevice) {
      ++n_device;
      device_tensor_bytes += t.n_bytes;
    } else if (t.tier == Tier::kDisk) {
      ++n_disk;
      disk_tensor_bytes += t.n_bytes;
    } else {
      ++n_host;
      host_tensor_bytes += t.n_bytes;
    }
  }
  std::string s;
  const std::string layers = p.n_stage_layers() == p.n_layer
                                 ? fmt::format("{} layers", p.n_layer)
                                 : fmt::format("layers {}-{} of {} (a pipeline stage)", p.layer_begin, p.layer_end - 1,
                                               p.n_layer);
  s += fmt::format("placement map: {}, {} of tensors{}; compute tier = {}, host budget {}\n", layers,
                   mb(static_cast<double>(p.total_tensor_bytes)),
                   n_device ? " outside the device tier" : "",
                   n_device ? "the device (its layers' copies, the rest copied in at each use)" : "host RAM",
                   p.budget_bytes ? mb(static_cast<double>(p.budget_bytes)) : std::string("unlimited"));
  s += fmt::format("  {:<7} {:>10} {:>8}  {}\n", "tier", "bytes", "tensors", "holds");
  s += fmt::format("  {:<7} {:>10} {:>8}  {}\n", "device", mb(static_cast<double>(device_tensor_bytes)), n_device,
                   n_device ? fmt::format("{} layers, copied to the device at load from the file's memory map",
                                          n_device_layers)
                            : std::string("none"));
  s += fmt::format("  {:<7} {:>10} {:>8}  essentials {} + {} resident layers {}", "host",
                   mb(static_cast<double>(p.host_bytes)), n_host, mb(static_cast<double>(p.essentials_bytes)),
                   p.n_stage_layers() - n_device_layers - p.n_streamed, mb(static_cast<double>(p.resident_layer_bytes)));
  if (p.n_ring_slots > 0)
    s += fmt::format(" + ring {} slots x {} = {}", p.n_ring_slots, mb(static_cast<double>(p.slot_bytes)),
                     mb(static_cast<double>(p.ring_bytes)));
  s += "\n";
  if (p.n_expert_slots > 0) {
    const std::string per_layer =
        p.expert_share ? fmt::format("experts {}-{} of {}: an expert share, the others another process's",
                                     p.expert_begin, p.expert_end - 1, p.n_expert)
                       : fmt::format("{}", p.n_expert);
    s += fmt::format("  {:<7} {:>10} {:>8}  {} experts ({} routed layers x {}, {} each), one expert at a time\n",
                     "disk", mb(p.streamed_bytes), n_disk, p.n_experts_total, p.n_layer_moe, per_layer,
                     mb(static_cast<double>(p.expert_bytes)));
    s += fmt::format("  experts: a pool of {} slots x {} = {} in host RAM ({:.1f} per routed layer of {}; shared by "
                     "all layers), filled as {}\n",
                     p.n_expert_slots, mb(static_cast<double>(p.expert_slot_bytes)),
                     mb(static_cast<double>(p.n_expert_slots) * static_cast<double>(p.expert_slot_bytes)),
                     static_cast<double>(p.n_expert_slots) / static_cast<double>(p.n_layer_moe),
                     p.expert_share ? p.n_share() : p.n_expert,
                     p.experts_only ? "another process's prediction and rows ask" : "routing and prediction ask");
    s += p.experts_only ? "  resident: nothing else (the rest of the model is another process's); experts resident "
                          "per layer start at 0 and follow use\n"
                        : "  resident: embeddings, output, and every layer's attention, norms, routers and shared "
                          "experts; experts resident per layer start at 0 and follow use (the run's summary prints "
                          "them)\n";
    if (!p.disk_note.empty()) s += fmt::format("  disk: {:.2f} GB/s, {}\n", p.disk_gbps, p.disk_note);
    if (p.training) {
      const double per_layer = p.n_layer_moe > 0 ? p.experts_per_step / static_cast<double>(p.n_layer_moe) : 0.0;
      s += fmt::format(
          "  order: training; a micro-batch of {} tokens routes each layer twice, forward then in the backward's "
          "recompute, and reads what it misses: hit rate {:.0f}%, {} of experts a visit; the forward's guessed "
          "from the rows below, the backward's (the forward's routing again) one routed layer ahead{}\n"
          "  predicted per micro-batch: compute {}, disk {}, stall {}; smallest workable budget {} bytes\n",
          p.tokens_per_step, 100 * p.expected_hit_rate, mb(p.expert_disk_bytes_per_step),
          static_cast<double>(p.n_expert_slots) >= 2 * per_layer
              ? ""
              : fmt::format(" (when the pool has room: {} slots, {:.1f} experts a layer)", p.n_expert_slots, per_layer),
          ms(p.predicted_compute_s), ms(p.predicted_disk_s), ms(p.predicted_stall_s), p.min_budget_bytes);
    } else {
      s += fmt::format("  predicted per step ({} token(s)): hit rate {:.0f}% ({}), {} of experts read, compute {}, "
                       "disk {} + {} at the step boundary, stall {}; smallest workable budget {} bytes\n",
                       p.tokens_per_step, 100 * p.expected_hit_rate,
                       "slots less one layer's read-ahead, over the other experts", mb(p.expert_disk_bytes_per_step),
                       ms(p.predicted_compute_s), ms(p.predicted_disk_s), ms(p.predicted_boundary_s),
                       ms(p.predicted_stall_s), p.min_budget_bytes);
    }
  } else {
    s += fmt::format("  {:<7} {:>10} {:>8}  {} streamed layers\n", "disk", mb(static_cast<double>(disk_tensor_bytes)),
                     n_disk, p.n_streamed);
  }
  if (p.n_streamed > 0) {
    std::string row;
    for (const LayerPlacement& l : p.layers) row += l.elsewhere ? '-' : l.device ? 'G' : l.streamed ? 'S' : 'R';
    s += fmt::format("  layers: {}   ({}R resident, S streamed{})\n", row, n_device_layers ? "G device tier, " : "",
                     p.n_stage_layers() < p.n_layer ? ", - another process's" : "");
    s += fmt::format("  ring: K = {} (plan_stream: transfer {}/layer at {:.2f} GB/s, compute {}/layer at {} "
                     "tokens/step -> K = {})\n",
                     p.n_ring_slots, ms(static_cast<double>(p.slot_bytes) / (p.sized_disk_gbps * 1e9)),
                     p.sized_disk_gbps, ms(p.layer_compute_s), p.tokens_per_step, p.n_ring_slots_planned);
    if (!p.note.empty()) s += "  note: " + p.note + "\n";
    if (!p.disk_note.empty())
      s += fmt::format("  disk: {:.2f} GB/s, {}; the predictions use it (transfer {}/layer)\n", p.disk_gbps,
                       p.disk_note, ms(p.transfer_s));
    if (p.training) {
      const int64_t reads = plan::training_layer_reads(p.n_streamed, p.n_ring_slots);
      s += fmt::format("  order: training, forward 0..{} then backward {}..0; the ring keeps the {} streamed layers "
                       "nearest each turn for both passes: {} layer reads ({}) per micro-batch\n",
                       p.n_layer - 1, p.n_layer - 1, std::min(p.n_ring_slots, p.n_streamed), reads,
                       mb(p.train.read_bytes));
      s += fmt::format("  predicted per micro-batch ({} tokens): compute {} (a layer forward {}, backward {}; head {}), "
                       "disk {} + {} at the turns, stall {} ({}); smallest workable budget {} bytes\n",
                       p.tokens_per_step, ms(p.predicted_compute_s), ms(p.layer_compute_s), ms(p.train_backward_s),
                       ms(p.train_head_s), ms(p.predicted_disk_s), ms(p.predicted_boundary_s),
                       ms(p.predicted_stall_s), p.predicted_stall_s > 0 ? "disk-bound" : "transfers hidden",
                       p.min_budget_bytes);
    } else {
      s += fmt::format("  predicted per step: compute {}, disk {}, stall {} ({}); smallest workable budget {} bytes\n",
                       ms(p.predicted_compute_s), ms(p.predicted_disk_s), ms(p.predicted_stall_s),
                       p.predicted_stall_s > 0 ? "disk-bound" : "transfers hidden", p.min_budget_bytes);
    }
  } else if (p.n_expert_slots == 0) {
    s += p.training ? fmt::format("  everything resident: no ring, no stall; predicted per micro-batch ({} tokens): "
                                  "compute {}\n", p.tokens_per_step, ms(p.predicted_compute_s))
                    : std::string("  everything resident: no ring, no stall\n");
  }
  s += fmt::format("  resident fraction {:.1f}%\n",
                   100.0 * static_cast<double>(host_tensor_bytes) /
                       static_cast<double>(std::max<uint64_t>(1, p.total_tensor_bytes)));
  if (!p.io_note.empty()) s += "  io: " + p.io_note + "\n";
  return s;
}

}  // namespace sluice::weights
