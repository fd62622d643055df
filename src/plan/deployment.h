// Deployment arithmetic: what splitting a model over devices costs in memory and
// communication, and what a token costs in money.
//
//   weights per device     = total weight bytes / (tp x pp)
//   ring all-reduce time   = 2 (N - 1) / N x message bytes / link bandwidth
//   all-reduces per step   = 2 per transformer block (after attention, after FFN)
//   cost per 1M tokens     = hourly price / (tokens/s x 3600) x 1e6
// Pure functions.
#pragma once

#include <cstdint>

#include "sluice/status.h"

namespace sluice::plan {

// Weight bytes each device holds under tensor x pipeline parallelism.
double weight_bytes_per_device(double weight_bytes, int64_t tp, int64_t pp);

struct AllReduceInputs {
  int64_t n_embd = 0;         // hidden size: one activation row per token
  int64_t n_tokens = 1;       // tokens in the step
  double bytes_per_elem = 2;  // activations in f16/bf16
  int64_t tp = 1;             // devices in the ring
  double link_gbps = 0;       // per-device interconnect bandwidth
};

struct AllReduceCost {
  double message_bytes = 0;
  double per_all_reduce_s = 0;
  double per_layer_s = 0;      // two all-reduces per block
};
// Errors: tp < 1, non-positive sizes or bandwidth.
StatusOr<AllReduceCost> tp_all_reduce(const AllReduceInputs& in);

// Seconds to move `bytes` over a link of `gbps` (e.g. a KV handoff between a
// prefill and a decode worker).
double transfer_s(double bytes, double gbps);

// Dollars per million tokens at a sustained throughput. Errors: non-positive throughput.
StatusOr<double> cost_per_million_tokens(double price_per_hour, double tokens_per_s);

}  // namespace sluice::plan
