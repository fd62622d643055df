#include "plan/train_plan.h"

#include <algorithm>
#include <string>

#include "model/hparams.h"

namespace sluice::plan {

StatusOr<TrainLayerShape> train_layer_shape(const ModelFile& file, int64_t lora_rank,
                                            std::span<const TensorRole> lora_targets) {
  ASSIGN_OR_RETURN(const ModelHparams hp, hparams_from_metadata(file.metadata));
  TrainLayerShape s{.n_embd_q = hp.n_embd_q()};
  for (const TensorInfo& t : file.tensors) {
    if (split_layer_name(t.name).first == 0 && t.ne.size() == 2) s.params += static_cast<double>(t.n_elements());
  }
  if (!(s.params > 0)) return invalid_argument("{}: no matrices in layer 0 to train through", file.source_path);
  // A routed layer's stacked experts: the n_expert_used a token runs (P_active).
  for (const TensorInfo& t : file.tensors) {
    if (split_layer_name(t.name).first != 0 || t.ne.size() != 3 || hp.n_expert <= 0 || t.ne[2] != hp.n_expert) continue;
    s.routed = true;
    s.params += static_cast<double>(t.n_elements()) / static_cast<double>(hp.n_expert) *
                static_cast<double>(hp.n_expert_used);
  }
  for (const TensorSpec& spec : hp.spec->tensors) {
    if (!spec.per_layer || spec.kind != TensorKind::kMatrix) continue;
    const TensorInfo* t = file.find(std::string("blk.0.") + spec.gguf);
    if (t == nullptr || t->ne.size() != 2) continue;
    if (spec.role == TensorRole::kFfnDown) s.down_params = static_cast<double>(t->n_elements());
    if (std::find(lora_targets.begin(), lora_targets.end(), spec.role) != lora_targets.end()) {
      s.lora_params += static_cast<double>(lora_rank) * static_cast<double>(t->ne[0] + t->ne[1]);
    }
  }
  return s;
}

TrainVisitFlops train_visit_flops(const TrainLayerShape& l, int64_t n_tokens, int64_t seq_len,
                                  bool keep_activations) {
  const auto t = static_cast<double>(n_tokens);
  const double attention = static_cast<double>(l.n_embd_q) * static_cast<double>(seq_len + 1);  // per token, one q k^T or p v
  const bool rerun = !keep_activations || l.routed;
  TrainVisitFlops f;
  f.forward = t * (2 * l.params + 2 * l.lora_params + 2 * attention);
  f.backward = t * ((rerun ? 2 * (l.params - l.down_params) + 2 * l.lora_params + 2 * attention : 0.0)  // recompute
                    + 2 * l.params + 4 * l.lora_params + 5 * attention);                                // gradients
  return f;
}

double train_head_flops(double head_params, int64_t n_tokens) { return 4 * head_params * static_cast<double>(n_tokens); }

StatusOr<TrainVisitTimes> train_visit_times(const ModelFile& file, const TrainWorkload& w, int64_t n_tokens,
                                            double compute_tflops) {
  if (!(compute_tflops > 0)) return invalid_argument("the compute rate must be positive");
  if (n_tokens < 1 || w.seq_len < 1) return invalid_argument("a micro-batch needs tokens and a sequence length");
  ASSIGN_OR_RETURN(const TrainLayerShape shape, train_layer_shape(file, w.lora_rank, w.lora_targets));
  const TrainVisitFlops f = train_visit_flops(shape, n_tokens, std::min(w.seq_len, n_tokens), w.keep_activations);
  const TensorInfo* head = file.find(TensorRole::kOutput);
  if (head == nullptr) head = file.find(TensorRole::kTokenEmbd);
  const double rate = compute_tflops * 1e12;
  return TrainVisitTimes{
      .forward_s = f.forward / rate,
      .backward_s = f.backward / rate,
      .head_s = head ? train_head_flops(static_cast<double>(head->n_elements()), n_tokens) / rate : 0.0};
}

int64_t training_layer_reads(int64_t n_streamed, int64_t n_ring_slots) {
  return 2 * std::max<int64_t>(0, n_streamed - n_ring_slots);
}

int64_t training_reads_of(int64_t i, int64_t n_streamed, int64_t n_ring_slots) {
  if (n_streamed <= n_ring_slots) return 0;
  return 2 - (i < n_ring_slots ? 1 : 0) - (i >= n_streamed - n_ring_slots ? 1 : 0);
}

StatusOr<TrainStreamPlan> plan_train_stream(const TrainStreamInputs& in) {
  if (in.n_layer <= 0) return invalid_argument("training needs at least one layer");
  if (in.n_streamed < 0 || in.n_streamed > in.n_layer || in.n_ring_slots < 0)
    return invalid_argument("{} streamed layers through {} slots of a {}-layer model", in.n_streamed,
                            in.n_ring_slots, in.n_layer);
  if (!(in.forward_s > 0) || !(in.backward_s > 0) || in.head_s < 0)
    return invalid_argument("a layer's forward and backward visits must take time");
  TrainStreamPlan p;
  p.layer_reads = training_layer_reads(in.n_streamed, in.n_ring_slots);
  if (p.layer_reads > 0 && (!(in.disk_gbps > 0) || !(in.slot_bytes > 0)))
    return invalid_argument("streaming layers needs the disk's rate and the layer's bytes");
  p.read_bytes = in.read_bytes > 0 ? in.read_bytes : static_cast<double>(p.layer_reads) * in.slot_bytes;
  p.compute_s = static_cast<double>(in.n_layer) * (in.forward_s + in.backward_s) + in.head_s;
  p.disk_s = p.layer_reads > 0 ? p.read_bytes / (in.disk_gbps * 1e9) : 0.0;
  p.boundary_s = p.layer_reads > 0 ? 2 * (in.forward_s + in.backward_s) + in.head_s : 0.0;
  p.step_s = std::max(p.compute_s, p.disk_s + p.boundary_s);
  p.stall_s = p.step_s - p.compute_s;
  p.overhead = p.step_s / p.compute_s - 1.0;
  p.bound = p.stall_s > 0 ? StreamBound::kDisk : StreamBound::kCompute;
  return p;
}

std::optional<double> tokens_for_overhead(const TrainStreamPlan& p, int64_t n_tokens, double max_overhead) {
  if (p.layer_reads == 0) return 0.0;
  // disk + b T <= (1 + x) c T, with c and b the compute and boundary per token.
  const double c = p.compute_s / static_cast<double>(n_tokens);
  const double b = p.boundary_s / static_cast<double>(n_tokens);
  const double margin = (1.0 + max_overhead) * c - b;
  if (!(margin > 0)) return std::nullopt;
  return p.disk_s / margin;
}

}  // namespace sluice::plan
