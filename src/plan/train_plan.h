// Training over streamed frozen weights (essay 002, "CPU->GPU weight
// streaming for QLoRA training") as this trainer runs it: the FLOPs of a
// TrainStep micro-batch, the layer reads of its order through a ring of K
// slots, and the step time, overhead and crossover that follow.
//
// FLOPs of one micro-batch of T tokens in sequences of s tokens, per layer
// (train/train_step.h): P = the layer's frozen matrices (q, k, v, o, gate, up,
// down), P_down = ffn_down's, P_lora = its adapters' factors (r (n_in + n_out)
// per adapted matrix), E_q = n_head x head_dim; a causal query attends to
// (s + 1) / 2 keys on average.
//
//   forward visit (layer_forward)                        per token
//     frozen matmuls                                     2 P
//     adapters: A x, then B (A x)                        2 P_lora
//     attention: q k^T and p v                           2 E_q (s + 1)
//   backward visit (the same acquire: recompute, then the gradients)
//     recompute, frozen matmuls up to h (not Wdown)      2 (P - P_down)
//     recompute, adapters                                2 P_lora
//     recompute, attention                               2 E_q (s + 1)
//     dX through every frozen matrix (matmul_t; no dW)   2 P
//     adapters: B^T dy, dB, dA, A^T du                   4 P_lora
//     attention backward: scores again from the kept
//       log-sum-exp, dp, dq, dk, dv                      5 E_q (s + 1)
//   loss head, once between the passes: logits and dX
//     through W_out [n_vocab, n_embd]                    4 n_vocab n_embd
//
// With the activations kept (finetune --recompute off, and auto where it keeps
// them), a dense layer's backward visit skips the recompute: 2 P + 4 P_lora +
// 5 E_q (s + 1), so a layer takes T (4 P + 6 P_lora + 7 E_q (s + 1)), a factor
// of 4 where essay 002 counts 6 (no dW of the frozen matrices). A routed layer
// reruns its forward either way (its routing is held for one layer at a time).
//
// In a routed layer P is P_active: the attention, the router, any shared
// expert and n_expert_used of the stacked experts (a token runs those), and
// P_down is 0: the recompute runs the chosen experts' down projections too
// (the routing weights' gradient needs their outputs; routed_ffn_train.h).
//
// so a layer takes T (6 P - 2 P_down + 8 P_lora + 9 E_q (s + 1)). Essay 002
// counts 3 x 2 P_active: a forward of 2P and a backward of twice that (dX and
// the frozen weights' dW). This trainer takes no dW of the frozen matrices but
// recomputes the forward in the backward, so its factor is 6 - 2 P_down / P,
// 5.48 on a llama layer at n_ff = 2.75 n_embd, plus the adapters and attention.
//
// The pipeline per micro-batch, S of the L layers streamed through K ring
// slots (weights/placement.h places them; the store walks training_schedule:
// forward 0..L-1, then backward L-1..0, then the next micro-batch):
//   reads     2 max(0, S - K) layer reads: the K streamed layers nearest a
//             turn (the last ones of the forward, the first of the backward)
//             stay in their slots for both passes; the others are read twice
//   compute   L (forward + backward visit) + head             (all resident)
//   boundary  2 (forward + backward visit) + head: at each turn the slots
//             hold layers wanted again, so no read starts from the landing of
//             the turn's layer until it has been computed both ways
//   step      max(compute, reads x transfer + boundary)       (as placement.h)
//   overhead  step / compute - 1
// K itself comes from plan_stream (stream_plan.h) sized on a forward visit,
// the shorter one. Compute scales with T (at a fixed s) and the reads do not,
// so overhead falls as 1/T: tokens_for_overhead() solves for the crossover.
// Pure functions over plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "arch/arch_spec.h"
#include "format/model_file.h"
#include "plan/stream_plan.h"
#include "sluice/status.h"

namespace sluice::plan {

// One layer as the trainer multiplies it.
struct TrainLayerShape {
  double params = 0;       // frozen matrices of the layer
  double down_params = 0;  // of those, ffn_down's
  double lora_params = 0;  // the adapters' factors on the layer
  int64_t n_embd_q = 0;    // n_head x head_dim
  bool routed = false;     // stacked experts (params counts the n_expert_used a token runs)
};

// Layer 0 of `file` with an adapter of `lora_rank` on `lora_targets` (roles
// the layer lacks add nothing). Errors: metadata the ArchSpec cannot read, a
// file without blk.0 matrices.
StatusOr<TrainLayerShape> train_layer_shape(const ModelFile& file, int64_t lora_rank,
                                            std::span<const TensorRole> lora_targets);

struct TrainVisitFlops {
  double forward = 0;   // one layer's forward visit
  double backward = 0;  // its backward visit: recompute + gradients
};
// Per micro-batch of n_tokens tokens in sequences of seq_len (see above);
// keep_activations: the backward of a dense layer does not recompute.
TrainVisitFlops train_visit_flops(const TrainLayerShape& layer, int64_t n_tokens, int64_t seq_len,
                                  bool keep_activations = false);
// The loss head: logits and their dX through [n_vocab, n_embd] (4 n_vocab n_embd per token).
double train_head_flops(double head_params, int64_t n_tokens);

// What a fine-tuning run multiplies besides the base: its sequences and adapter.
struct TrainWorkload {
  int64_t seq_len = 0;                   // tokens per sequence (--seq)
  int64_t lora_rank = 0;
  std::vector<TensorRole> lora_targets;  // the adapted matrices' roles
  bool keep_activations = false;         // --recompute off: no rerun in a dense layer's backward
};

// A micro-batch's compute on `file` at `compute_tflops`: a layer's forward
// and backward visits and the loss head (the output matrix, else the tied
// embedding). Errors: as train_layer_shape, a rate that is not positive.
struct TrainVisitTimes {
  double forward_s = 0;
  double backward_s = 0;
  double head_s = 0;
};
StatusOr<TrainVisitTimes> train_visit_times(const ModelFile& file, const TrainWorkload& w, int64_t n_tokens,
                                            double compute_tflops);

// Layer reads per micro-batch in the steady state, training order: 2 max(0, S - K).
int64_t training_layer_reads(int64_t n_streamed, int64_t n_ring_slots);
// Of those, the reads of the i-th streamed layer (ascending): 2, less one for
// each turn it is among the K streamed layers nearest to (i < K, i >= S - K);
// 0 when S <= K (the ring holds every streamed layer).
int64_t training_reads_of(int64_t i, int64_t n_streamed, int64_t n_ring_slots);

struct TrainStreamInputs {
  int64_t n_layer = 0;
  int64_t n_streamed = 0;    // S
  int64_t n_ring_slots = 0;  // K
  double slot_bytes = 0;     // one streamed layer's read
  double read_bytes = 0;     // the reads' bytes if known exactly (0: layer reads x slot_bytes)
  double forward_s = 0;      // one forward visit
  double backward_s = 0;     // one backward visit
  double head_s = 0;         // the loss head
  double disk_gbps = 0;      // > 0 when anything streams
};

struct TrainStreamPlan {
  int64_t layer_reads = 0;  // per micro-batch
  double read_bytes = 0;
  double compute_s = 0;     // every layer resident
  double disk_s = 0;        // the reads at disk_gbps
  double boundary_s = 0;    // 0 when nothing is read
  double step_s = 0;
  double stall_s = 0;       // step - compute
  double overhead = 0;      // step / compute - 1
  StreamBound bound = StreamBound::kCompute;
};

// Errors: a layer count or times that are not positive, S or K out of range,
// reads without a disk rate.
StatusOr<TrainStreamPlan> plan_train_stream(const TrainStreamInputs& in);

// Tokens per micro-batch from which the step is within `max_overhead` of the
// resident step (0: every transfer hidden), for the plan `p` made at `n_tokens`:
// compute and boundary scale with the tokens, the reads do not. None when the
// boundary alone exceeds that share of the compute. 0 when nothing is read.
std::optional<double> tokens_for_overhead(const TrainStreamPlan& p, int64_t n_tokens, double max_overhead);

}  // namespace sluice::plan
