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
// A step of n tokens over S stages, cut into m micro-batches (stage r starts
// micro-batch i once stage r-1 sent it and stage r finished i-1):
//
//   stage r, n/m tokens:  t_r = max(bytes_r / read_r, flops_r x n/m / rate_r)
//   hop into stage r:     h_r = latency_r + (n/m) x n_embd x 4 B / gbps_r
//   back to rank 0:       h_0 = latency + logit rows x n_embd x 4 B / gbps
//   step = sum_r (t_r + h_r) + h_0 + (m - 1) x max_r max(t_r, h_r)
//
// In decode every micro-batch reads the stage's weights again, so m = 1 is
// best there; prefill and large batches are compute-bound and gain from
// micro-batches (best_micro_batches()). Pure functions: no measuring here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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
  int n_threads = 0;
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
};

struct LayerRange {
  int64_t begin = 0;
  int64_t end = 0;  // exclusive
};

struct PipelinePlan {
  std::vector<LayerRange> ranges;       // [n_ranks] rank r's layers
  std::vector<uint64_t> stage_bytes;    // [n_ranks] weights held (rank 0 with the head)
  std::vector<double> stage_read_s;     // [n_ranks] the stage's weights read once
  std::vector<double> stage_flops;      // [n_ranks] per token
  std::vector<double> stage_tflops;     // [n_ranks]
  std::vector<LinkFigures> links;       // as the inputs'
  int64_t n_embd = 0;

  int64_t n_stages() const { return static_cast<int64_t>(ranges.size()); }
  // Stage r's seconds for n tokens (one micro-batch).
  double stage_s(int64_t r, double n_tokens) const;
  // Seconds to move n tokens' hidden rows into stage r (r = 0: the last stage's
  // rows back to rank 0).
  double hop_s(int64_t r, double n_tokens) const;
  // Predicted seconds of a step of n_tokens tokens (n_logits of them asking for
  // logits) cut into m micro-batches (the formula above).
  double step_s(int64_t n_tokens, int64_t n_logits, int64_t m) const;
  // The m in [1, max_m] that step_s() says is fastest.
  int64_t best_micro_batches(int64_t n_tokens, int64_t n_logits, int64_t max_m) const;
  // Bytes sent per step: into stage r (r >= 1) and back to rank 0 (r = 0), the
  // hidden rows only (the step's description adds ~4 bytes per token and per
  // block-table entry).
  uint64_t hop_bytes(int64_t r, int64_t n_tokens, int64_t n_logits) const;
};

// Errors: no ranks, more ranks than layers, a rank without rates, or no cut
// whose every range fits its rank (naming the memory that would be needed).
StatusOr<PipelinePlan> plan_pipeline(const PipelineInputs& in);

}  // namespace sluice::plan
