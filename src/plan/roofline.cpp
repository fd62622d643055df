#include "plan/roofline.h"

#include <algorithm>

#include "base/check.h"

namespace sluice::plan {

ModelCost model_cost(const ModelShape& shape, const WeightBytes& weights, const WeightFormat& kv) {
  ModelCost c{.shape = shape, .params = count_params(shape), .weights = weights};
  const int64_t row = shape.n_embd_kv();
  c.kv_bytes_per_token = 2.0 * static_cast<double>(shape.n_layer) * static_cast<double>(kv.bytes(row));
  return c;
}

ModelCost model_cost_from_params(double n_params, const WeightFormat& format) {
  CHECK(n_params > 0);
  ModelCost c;
  c.shape.name = "params-only";
  c.params.attention = static_cast<int64_t>(n_params);
  c.weights.stored[static_cast<int>(TensorClass::kAttention)] = format.bytes(c.params.attention);
  c.weights.n_layer = 1;
  return c;
}

StepEstimate estimate_step(const ModelCost& c, const Hardware& hw, const StepInputs& in) {
  CHECK(in.n_seqs >= 0 && in.n_tokens_per_seq >= 0 && in.n_ctx >= 0);
  CHECK(hw.mem_gbps > 0 && hw.peak_tflops > 0);
  StepEstimate e;
  e.n_seqs = in.n_seqs;
  e.n_tokens = in.n_seqs * in.n_tokens_per_seq;
  const double t = static_cast<double>(in.n_tokens_per_seq);
  const double ctx = static_cast<double>(in.n_ctx);
  e.weight_bytes = c.weights.matrix_read_bytes(e.n_tokens) + static_cast<double>(c.weights.of(TensorClass::kNorm));
  // Share of the layers that attend over a window only: they read at most the
  // window's positions, whatever the engine keeps.
  const double n_layer = static_cast<double>(std::max<int64_t>(1, c.shape.n_layer));
  const double swa = c.shape.n_swa > 0 ? static_cast<double>(c.shape.n_layer_swa) / n_layer : 0.0;
  const double w = static_cast<double>(c.shape.n_swa);
  // Each sequence reads its cached context (a windowed layer: the window's,
  // w - 1 before the new tokens) and writes its new tokens.
  const double read_swa = std::min(ctx, std::max(0.0, w - 1.0)) + t;
  e.kv_bytes = static_cast<double>(in.n_seqs) * ((1.0 - swa) * (ctx + t) + swa * read_swa) * c.kv_bytes_per_token;
  // Active matmul params per token: shared matrices + the experts one token uses.
  const double matmul_params = static_cast<double>(c.params.active_matmul());
  // Keys attended by the new tokens of one sequence: ctx + 1, ctx + 2, ..., ctx + t,
  // and by a windowed layer min(ctx + i, w).
  const double keys = t * ctx + t * (t + 1.0) / 2.0;
  double keys_swa = keys;
  if (swa > 0) {
    const double a = std::clamp(w - ctx, 0.0, t);  // new tokens whose window still starts at 0
    keys_swa = a * ctx + a * (a + 1.0) / 2.0 + (t - a) * w;
  }
  const double attn_flops = 4.0 * static_cast<double>(c.shape.n_embd_q()) * n_layer * ((1.0 - swa) * keys + swa * keys_swa);
  e.flops = static_cast<double>(in.n_seqs) * (2.0 * matmul_params * t + attn_flops);
  const double bytes = e.weight_bytes + e.kv_bytes;
  e.memory_s = bytes / (hw.mem_gbps * 1e9);
  e.compute_s = e.flops / (hw.peak_tflops * 1e12);
  e.step_s = std::max(e.memory_s, e.compute_s);
  e.compute_bound = e.compute_s > e.memory_s;
  e.intensity_flop_per_byte = bytes > 0 ? e.flops / bytes : 0;
  e.tokens_per_s = e.step_s > 0 ? static_cast<double>(e.n_tokens) / e.step_s : 0;
  e.compute_utilization = e.step_s > 0 ? e.compute_s / e.step_s : 0;
  return e;
}

std::vector<StepEstimate> decode_sweep(const ModelCost& cost, const Hardware& hw, std::span<const int64_t> batches,
                                       int64_t n_ctx) {
  std::vector<StepEstimate> out;
  out.reserve(batches.size());
  for (int64_t b : batches) out.push_back(decode_step(cost, hw, b, n_ctx));
  return out;
}

std::optional<int64_t> batch_at_ridge(const ModelCost& cost, const Hardware& hw, int64_t n_ctx) {
  constexpr int64_t kMaxBatch = int64_t{1} << 24;
  if (!decode_step(cost, hw, kMaxBatch, n_ctx).compute_bound) return std::nullopt;
  // Intensity grows with the batch, so bisect for the first compute-bound batch.
  int64_t lo = 1, hi = kMaxBatch;
  if (decode_step(cost, hw, lo, n_ctx).compute_bound) return lo;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (decode_step(cost, hw, mid, n_ctx).compute_bound ? hi : lo) = mid;
  }
  return hi;
}

ChunkedPrefill chunked_prefill(const ModelCost& cost, const Hardware& hw, int64_t n_prompt, int64_t chunk_tokens) {
  CHECK(n_prompt > 0 && chunk_tokens > 0);
  ChunkedPrefill p;
  p.n_chunks = (n_prompt + chunk_tokens - 1) / chunk_tokens;
  p.last_chunk_tokens = n_prompt - chunk_tokens * (p.n_chunks - 1);
  for (int64_t i = 0; i < p.n_chunks; ++i) {
    const int64_t n = i + 1 < p.n_chunks ? chunk_tokens : p.last_chunk_tokens;
    p.ttft_s += estimate_step(cost, hw, {.n_seqs = 1, .n_tokens_per_seq = n, .n_ctx = i * chunk_tokens}).step_s;
  }
  p.unchunked_ttft_s = prefill_step(cost, hw, n_prompt).step_s;
  return p;
}

MemoryBoundDecode memory_bound_decode(double param_bytes, double kv_bytes_per_seq, int64_t n_batch, const Hardware& hw) {
  CHECK(hw.mem_gbps > 0 && n_batch > 0);
  MemoryBoundDecode d;
  d.memory_bytes = param_bytes + static_cast<double>(n_batch) * kv_bytes_per_seq;
  d.latency_s = d.memory_bytes / (hw.mem_gbps * 1e9);
  d.tokens_per_s = static_cast<double>(n_batch) / d.latency_s;
  d.fits = hw.mem_capacity_gb <= 0 || d.memory_bytes <= hw.mem_capacity_gb * 1e9;
  return d;
}

double matmul_intensity(int64_t m, int64_t k, int64_t n, double bytes_per_elem) {
  const double dm = static_cast<double>(m), dk = static_cast<double>(k), dn = static_cast<double>(n);
  return 2.0 * dm * dk * dn / (bytes_per_elem * (dm * dk + dk * dn + dm * dn));
}

double attention_intensity(int64_t n_keys, int64_t n_queries) {
  const double s = static_cast<double>(n_keys), t = static_cast<double>(n_queries);
  return s * t / (s + t);
}

}  // namespace sluice::plan
