// Routing on the device (CudaBackend::routed_ffn): the top-k of the router's
// outputs and the step's rows grouped by expert, without the host, so that a
// routed layer of resident experts needs no wait. One launch:
//
//   block t (a token):  logits[t] -> ids[t], weights[t]   (route_topk's rule:
//                       the n_used largest, descending, lower id first among
//                       equals; softmax weights, renormalized if asked);
//                       x[t] quantized to 8 bits when asked (the experts'
//                       8-bit kernels read it)
//   the last block:     ids -> the grouped launches' tables (cuda_matmul.cuh):
//                       one group per chosen expert, ascending ids, its rows
//                       in slot order (what expert_ffn's host grouping gives),
//                       then empty groups up to n_groups
//
// The weights differ from route_topk's in the last bits (the device's expf
// and a tree-ordered sum); the ids are the same.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_matmul.cuh"
#include "backend/cuda/cuda_matmul_q8.cuh"

namespace sluice::cuda {

inline constexpr int64_t kMaxRouteExperts = 1024;  // n_expert the kernel takes
inline constexpr int64_t kMaxRouteUsed = 64;       // n_used

struct RouteDev {
  const float* logits = nullptr;  // [n_tok, n_expert]
  int32_t n_expert = 0, n_used = 0;
  bool renormalize = true;
  int32_t* ids = nullptr;         // [n_tok, n_used] (written)
  float* weights = nullptr;       // [n_tok, n_used] (written)
  // x [n_tok, n_embd] into qx, when qx.q is set.
  const float* x = nullptr;
  int32_t n_embd = 0;
  QuantizedX qx;
  // The grouping: table [n_expert][3] device pointers (gate, up, down) of the
  // layer's experts; gate_up, down: [n_groups] (at least the distinct experts,
  // e.g. min(n_slot, n_expert)); x_rows, y_rows: [n_slot] each row's token
  // and slot. counter: a device int that is 0 (the last block leaves it so).
  const uint8_t* const* table = nullptr;
  int32_t n_groups = 0;
  MatmulGroup* gate_up = nullptr;
  MatmulGroup* down = nullptr;
  int32_t* x_rows = nullptr;
  int32_t* y_rows = nullptr;
  int32_t* counter = nullptr;
};

void launch_route(const RouteDev& r, int64_t n_tok, cudaStream_t s);

}  // namespace sluice::cuda
