// Roofline model of one engine step: bytes moved, FLOPs done, and the time the
// slower of the two takes on a given device.
//
//   step_s = max(bytes / mem_bw, flops / peak)
//   bytes  = weight bytes the step reads (all dense matrices once, touched experts)
//          + KV bytes read (every sequence's context) and written (new tokens)
//   flops  = 2 x active matmul params x new tokens
//          + 4 x n_embd_q x n_layer x keys attended        (QK^T and AV)
// A layer with a sliding window of w (ModelShape::n_layer_swa of them) reads and
// attends to at most w positions per new token, whatever the engine keeps.
//
// Decode is a step of n_batch sequences x 1 new token over n_ctx cached tokens;
// prefill is one sequence x n_prompt new tokens. TTFT is the prefill time (the
// sum of its chunks when prefill is chunked: each chunk rereads the weights);
// TPOT is the decode step time; throughput is n_batch / TPOT.
// Arithmetic intensity is FLOPs per byte; a device's ridge point is peak/bandwidth
// (hardware.h gives it per FLOP and per multiply-accumulate: essay 001 quotes the
// H100's as ~295 FLOP/byte, essay 000 the same chip figures as ~148 per MAC).
// Pure functions over plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "plan/hardware.h"
#include "plan/model_shape.h"
#include "plan/weight_bytes.h"

namespace sluice::plan {

// Everything about a model that the roofline needs, computed once.
struct ModelCost {
  ModelShape shape;
  ParamCount params;
  WeightBytes weights;
  double kv_bytes_per_token = 0;
};
ModelCost model_cost(const ModelShape& shape, const WeightBytes& weights, const WeightFormat& kv);
inline ModelCost model_cost(const ModelShape& shape, const FormatMix& mix, const WeightFormat& kv) {
  return model_cost(shape, weight_bytes(shape, mix), kv);
}

// A model known only by its parameter count, as the essays often put it ("70B
// in FP16"): every parameter is read once per step and does 2 FLOPs per token;
// no attention or KV terms.
ModelCost model_cost_from_params(double n_params, const WeightFormat& format);

struct StepInputs {
  int64_t n_seqs = 1;            // sequences in the step
  int64_t n_tokens_per_seq = 1;  // new tokens per sequence (1 = decode)
  int64_t n_ctx = 0;             // tokens already cached per sequence
};

struct StepEstimate {
  int64_t n_seqs = 0;
  int64_t n_tokens = 0;          // new tokens in the step
  double weight_bytes = 0;
  double kv_bytes = 0;
  double flops = 0;
  double memory_s = 0;
  double compute_s = 0;
  double step_s = 0;             // max(memory_s, compute_s)
  double intensity_flop_per_byte = 0;
  bool compute_bound = false;
  double tokens_per_s = 0;       // n_tokens / step_s
  double compute_utilization = 0;// compute_s / step_s
};

StepEstimate estimate_step(const ModelCost& cost, const Hardware& hw, const StepInputs& in);
inline StepEstimate decode_step(const ModelCost& cost, const Hardware& hw, int64_t n_batch, int64_t n_ctx) {
  return estimate_step(cost, hw, {.n_seqs = n_batch, .n_tokens_per_seq = 1, .n_ctx = n_ctx});
}
inline StepEstimate prefill_step(const ModelCost& cost, const Hardware& hw, int64_t n_prompt) {
  return estimate_step(cost, hw, {.n_seqs = 1, .n_tokens_per_seq = n_prompt, .n_ctx = 0});
}
// Decode steps for each batch size.
std::vector<StepEstimate> decode_sweep(const ModelCost& cost, const Hardware& hw, std::span<const int64_t> batches,
                                       int64_t n_ctx);

// The smallest decode batch whose step is compute-bound, or nullopt when KV
// reads keep the step memory-bound at any batch up to 2^24.
std::optional<int64_t> batch_at_ridge(const ModelCost& cost, const Hardware& hw, int64_t n_ctx);

// Prefill split into chunks of at most chunk_tokens (chunked prefill).
struct ChunkedPrefill {
  int64_t n_chunks = 0;
  int64_t last_chunk_tokens = 0;
  double ttft_s = 0;             // sum of the chunk steps
  double unchunked_ttft_s = 0;   // one step over the whole prompt
};
ChunkedPrefill chunked_prefill(const ModelCost& cost, const Hardware& hw, int64_t n_prompt, int64_t chunk_tokens);

// Memory-bound decode the way the CS336 lecture (essay 001) computes it: the step
// moves all parameter bytes plus every sequence's whole KV cache once, so
//   latency = (param_bytes + B x kv_bytes_per_seq) / bandwidth,  throughput = B / latency.
struct MemoryBoundDecode {
  double memory_bytes = 0;
  double latency_s = 0;
  double tokens_per_s = 0;
  bool fits = false;             // memory_bytes <= device capacity
};
MemoryBoundDecode memory_bound_decode(double param_bytes, double kv_bytes_per_seq, int64_t n_batch, const Hardware& hw);

// Intensity of Y[m,n] = X[m,k] W[k,n] reading X and W and writing Y at
// bytes_per_elem: 2mkn / (bytes (mk + kn + mn)). ~m when m << k, n.
double matmul_intensity(int64_t m, int64_t k, int64_t n, double bytes_per_elem);
// Attention intensity under FlashAttention-style accounting (essay 001):
// S T / (S + T) for T queries over S keys: S/2 in prefill, S/(S+1) < 1 in decode.
double attention_intensity(int64_t n_keys, int64_t n_queries);

}  // namespace sluice::plan
