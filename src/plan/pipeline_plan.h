// The pipeline planner: which process holds which layers, and how long a step
// takes when the layers are spread over processes joined by links.
//
// Each rank (a process, usually a machine) brings what it measured at start:
// the memory it may fill with weights (its --mem-budget, else what the kernel
// says is available), its weight-read rate (the decode roof) and matmul rate
// (prefill's), and the link between it and rank 0 (latency, bandwidth).
// plan_pipeline() cuts the layers into contiguous ranges, rank r holding the
// r-th range and rank 0 also the embeddings and the output head, so that
// every range fits its rank and the slowest stage is as fast as it can be.
//
// A rank whose range does not fit its --mem-budget streams the rest of the
// range from its own disk, as one process does under a budget
// (weights/placement.h): its essentials (rank 0's head, the range's norms)
// and a ring of K slots stay resident, K from plan_stream (stream_plan.h;
// trimmed to what the budget holds, at least 2), whole layers fill the rest,
// and the S layers that do not fit stream, spread by streamed_in_spread().
// Each pass over the stage then reads S slots from disk, plan_stream's
// per-layer read cost (transfer_s with the ring filled from disk):
//
//   disk_r = S_r x slot_r / disk_gbps_r
//
// A routed model's range streams expert by expert instead, as one process
// does (weights/expert_placement.cpp): its layers' dense parts (attention,
// routers, norms) and rank 0's head stay resident, and the rest of the budget
// is a pool of Z_r expert slots, at least one routed layer's E experts, at
// most every expert of the range's R_r routed layers. The stage routes, so it
// predicts each routed layer's experts and reads them ahead; a step of n
// tokens chooses d = distinct(n) experts a routed layer, found in a slot at
// expert_plan.h's hit rate h_r = (Z_r - d) / (R_r E - d), and reads the rest:
//
//   disk_r(n) = R_r x (1 - h_r) x d x expert_bytes / disk_gbps_r
//
// which adds to the stage's time rather than hiding behind it: a layer's
// missed experts are read only once it routes (as expert_parallel_plan.h
// counts a streaming share). Measured: qwen2moe-a2.7b at 4 layers, Q4_0, 2
// ranks under 450M each (docs/BENCHMARKS.md, "Across processes"), decode
// 12.9 ms a token against 7.1 in memory and 3.4 ms of predicted misses a stage.
//
// Only a rank with its own budget (budget_given) and a measured disk rate
// streams; a range whose essentials and 2 slots (a routed range: its dense
// parts and E expert slots) exceed the budget cannot be the rank's, and a
// job with no cut left is refused with each rank's least need.
//
// A step of n tokens over S stages, cut into m micro-batches (stage r starts
// micro-batch i once stage r-1 sent it and stage r finished i-1):
//
//   stage r, n/m tokens:  t_r = max(bytes_r / read_r, flops_r x n/m / rate_r, disk_r)
//                         (a routed range streaming experts: max(...) + disk_r(n/m))
//   hop into stage r:     h_r = latency_r + (n/m) x n_embd x 4 B / gbps_r
//   back to rank 0:       h_0 = latency + logit rows x n_embd x 4 B / gbps
//   step = sum_r (t_r + h_r) + h_0 + sum over micro-batches i >= 1 of max_r max(t_r(i), h_r)
//   (t_r(i): one prompt's micro-batch i also attends over the i x n/m keys
//   before it, at the rank's measured attention cost per query and key)
//
// rate_r is the rank's rate at n/m rows: its forward_curve (the engine's own
// forward over a few of the model's layers, timed at a few row counts;
// dist/forward_probe.h), else its tflops_curve (the matmuls alone), read by
// rate_curve.h, not one figure at the probe's size: on Zen 5 a 110m Q8_0
// layer's forward runs at 0.48 TFLOP/s over 16 rows against 0.57 over 64, and
// a 128-token prefill cut into 8 micro-batches multiplies 16 rows at a time.
// A rank's streamed layers run in the file's row order, not repacked, at
// their own rate (forward_curve_streamed: on Zen 5 a 110m Q8_0 prefill ran at
// 2105 tokens/s so against 3106 repacked); the head multiplies only the rows
// that ask for logits (a prompt's last). With m > 1 the stages compute at the same time, so rate_r is then the
// forward timed with every rank at once (forward_curve_shared): two ranks on
// one machine share its caches and memory bus (10% slower at 16 rows, 4% at
// 128, two one-thread processes on Zen 5), and streaming ranks of one host
// share its disk: each reads at disk_gbps / (streaming ranks on the host)
// then (two ranks' rings on Zen 5 read at 1.86 GB/s each against 3.71 alone).
//
// In decode every micro-batch reads the stage's weights again, so m = 1 is
// best there; prefill and large batches are compute-bound and gain from
// micro-batches (best_micro_batches()), less so where the rate falls at fewer
// rows. Pure functions: no measuring here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/rate_curve.h"
#include "sluice/status.h"

namespace sluice::plan {

// Bytes in MiB, for the planners' messages.
inline double mib(uint64_t b) { return static_cast<double>(b) / (1ull << 20); }

struct RankResources {
  std::string host;
  uint64_t mem_cap_bytes = 0;  // weights it may hold (its budget, else available memory)
  bool budget_given = false;   // mem_cap_bytes is its --mem-budget
  double read_gbps = 0;        // weight-read rate (decode roof), > 0
  double tflops = 0;           // matmul rate at prefill shapes, > 0
  RateCurve tflops_curve;      // the matmul rate by rows multiplied at once (empty: tflops at any)
  RateCurve forward_curve;     // the engine's forward of the model's layers by rows, in the plan's
                               // FLOPs per second (dist/forward_probe.h); empty: tflops_curve
  RateCurve forward_curve_shared;  // the same timed with every rank at once (empty: forward_curve)
  double attention_pair_s = 0;  // a layer's attention per query and per earlier key (the probe's; 0: none)
  RateCurve forward_curve_streamed;  // the forward with the layers in the file's row order, as a streamed
                                     // layer runs (not repacked), alone; empty: forward_curve
  int n_threads = 0;
  double disk_gbps = 0;        // the model file read as the weight store reads it; 0: not measured
                               // (the rank holds its range in memory or refuses it)
};

struct LinkFigures {
  double latency_s = 0;  // one small message, one way
  double gbps = 0;       // large messages, one way
};

struct PipelineInputs {
  std::vector<uint64_t> layer_bytes;         // [n_layer] weight bytes each layer reads per step
  std::vector<double> layer_flops_per_token; // [n_layer] (2 x the parameters one token multiplies)
  uint64_t head_bytes = 0;                   // rank 0's beside its layers: embeddings, output head, norms
  uint64_t head_read_bytes = 0;              // of them, read every step (the output head; the
                                             // embedding only a row per token)
  double head_flops_per_token = 0;           // the output head's
  int64_t n_embd = 0;
  std::vector<RankResources> ranks;          // [n_ranks]
  std::vector<LinkFigures> links;            // [n_ranks] links[r]: rank 0 <-> rank r (links[0] unused)
  // Streaming a range (above): a layer's matrices as a ring slot holds them
  // (aligned extents), and what stays resident of it when it streams (norms,
  // biases). Empty: the model's layers do not stream per rank.
  std::vector<uint64_t> layer_slot_bytes;    // [n_layer]
  std::vector<uint64_t> layer_pinned_bytes;  // [n_layer]
  // A routed model's experts streaming a range (above): the experts a rank
  // holds of each routed layer (E; a pp,ep lead its share), the chance a
  // token chooses a given one (k / E of the model's), one expert's aligned
  // slot (0: they do not stream per rank) and its own bytes, and what stays
  // resident of each layer (its dense tensors, aligned; [n_layer]) and which
  // layers route ([n_layer], 1: routed).
  int64_t n_expert = 0;
  double expert_pick = 0;
  uint64_t expert_slot_bytes = 0;
  uint64_t expert_bytes = 0;
  std::vector<uint64_t> layer_dense_bytes;
  std::vector<char> layer_routed;
  // The bytes one decode token reads of each layer, where they are fewer than
  // layer_bytes (a routed layer reads its chosen experts); empty: layer_bytes.
  std::vector<uint64_t> layer_read_bytes;    // [n_layer]
};

struct LayerRange {
  int64_t begin = 0;
  int64_t end = 0;  // exclusive
};

struct PipelinePlan {
  std::vector<LayerRange> ranges;       // [n_ranks] rank r's layers
  std::vector<uint64_t> stage_bytes;    // [n_ranks] weights held in memory (rank 0 with the head; a
                                        // streaming rank: resident layers, essentials and its ring)
  std::vector<uint64_t> range_bytes;    // [n_ranks] the range's weights (rank 0 with the head)
  std::vector<double> stage_read_s;     // [n_ranks] the stage's weights read once from memory
  std::vector<int64_t> stage_streamed;  // [n_ranks] layers streamed from the rank's disk (0: all in memory)
  std::vector<int64_t> stage_ring_slots;// [n_ranks] its ring (0 when nothing streams)
  std::vector<double> stage_disk_s;     // [n_ranks] the streamed layers read from disk once
  std::vector<double> disk_gbps;        // [n_ranks] the rates disk_s is at, each rank alone
  std::vector<int64_t> stage_disk_sharers;  // [n_ranks] streaming ranks on its host (its disk), itself included
  std::vector<int64_t> stage_expert_slots;   // [n_ranks] a routed range's pool of expert slots (0: none)
  std::vector<int64_t> stage_routed_layers;  // [n_ranks] routed layers in the range
  int64_t n_expert = 0;
  double expert_pick = 0;
  uint64_t expert_bytes = 0;
  std::vector<double> stage_flops;      // [n_ranks] per token
  std::vector<double> stage_tflops;     // [n_ranks] the rank's matmul rate as probed
  std::vector<RateCurve> stage_tflops_curve;  // [n_ranks] the forward's (else the matmul's) rate by rows
                                              // (empty: stage_tflops at any)
  std::vector<RateCurve> stage_tflops_curve_shared;  // [n_ranks] the forward's with every rank at once
                                                     // (empty: stage_tflops_curve)
  std::vector<RateCurve> stage_streamed_curve;  // [n_ranks] its streamed layers' (empty: as its resident ones)
  std::vector<double> stage_attention_s;  // [n_ranks] its layers' attention per query per earlier key
  double head_flops = 0;                // per logit row, in stage 0's stage_flops (the output head's)
  std::vector<LinkFigures> links;       // as the inputs'
  int64_t n_embd = 0;

  int64_t n_stages() const { return static_cast<int64_t>(ranges.size()); }
  bool streams(int64_t r) const { return stage_streamed[static_cast<size_t>(r)] > 0 || streams_experts(r); }
  // Whether rank r streams its range's experts (a pool of expert slots).
  bool streams_experts(int64_t r) const { return stage_expert_slots[static_cast<size_t>(r)] > 0; }
  // Whether layer l of rank r's range streams (the placement's spread).
  bool layer_streamed(int64_t r, int64_t l) const;
  // The share of the experts a step of n tokens chooses that rank r finds in
  // a slot (h_r; 1 when it does not stream experts).
  double expert_hit_rate(int64_t r, double n_tokens) const;
  // Stage r's seconds reading from its disk in a pass of n tokens (disk_r(n)).
  double disk_s(int64_t r, double n_tokens) const;
  // Stage r's seconds for n tokens without its disk: the larger of reading its
  // weights from memory and its compute (arguments as stage_s's).
  double in_memory_s(int64_t r, double n_tokens, bool together = false, double n_logits = -1,
                     double keys_before = 0) const;
  // Stage r's seconds for n tokens (one micro-batch); `together`: while the
  // other stages compute too (a step in more than one micro-batch).
  // n_logits: of the n rows, those the output head multiplies (< 0: all);
  // keys_before: keys each row attends to before its micro-batch (a prompt's
  // later micro-batches), beyond what the rate curve's passes saw.
  double stage_s(int64_t r, double n_tokens, bool together = false, double n_logits = -1,
                 double keys_before = 0) const;
  // Seconds to move n tokens' hidden rows into stage r (r = 0: the last stage's
  // rows back to rank 0).
  double hop_s(int64_t r, double n_tokens) const;
  // Predicted seconds of a step of n_tokens tokens (n_logits of them asking for
  // logits) cut into m micro-batches (the formula above); one_prompt: the
  // step is one sequence's tokens from its start, so micro-batch i attends
  // over the i x n/m keys before it as well.
  double step_s(int64_t n_tokens, int64_t n_logits, int64_t m, bool one_prompt = false) const;
  // The m in [1, max_m] that step_s() says is fastest.
  int64_t best_micro_batches(int64_t n_tokens, int64_t n_logits, int64_t max_m, bool one_prompt = false) const;
  // Bytes sent per step: into stage r (r >= 1) and back to rank 0 (r = 0), the
  // hidden rows only (the step's description adds ~4 bytes per token and per
  // block-table entry).
  uint64_t hop_bytes(int64_t r, int64_t n_tokens, int64_t n_logits) const;
};

// Errors: no ranks, more ranks than layers, a rank without rates, or no cut
// whose every range fits its rank, resident or streaming (naming the memory
// each rank would need at least).
StatusOr<PipelinePlan> plan_pipeline(const PipelineInputs& in);

}  // namespace sluice::plan
