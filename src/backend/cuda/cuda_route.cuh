// Routing on the device (CudaBackend::routed_ffn): the top-k of the router's
// outputs and the step's rows grouped by expert, without the host, so that a
// routed layer of resident experts needs no wait.
//
//   route_topk:  logits [n_tok, n_expert] -> ids, weights [n_tok, n_used]
//                (route_topk's rule: the n_used largest, descending, lower id
//                first among equals; softmax weights, renormalized if asked)
//   group_rows:  ids -> the grouped launches' tables (cuda_matmul.cuh): one
//                group per chosen expert, ascending ids, its rows in slot
//                order (what expert_ffn's host grouping gives), then empty
//                groups up to n_groups
//
// The weights differ from route_topk's in the last bits (the device's expf
// and a tree-ordered sum); the ids are the same.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_matmul.cuh"

namespace sluice::cuda {

inline constexpr int64_t kMaxRouteExperts = 1024;  // n_expert the kernels take
inline constexpr int64_t kMaxRouteUsed = 64;       // n_used

void launch_route_topk(const float* logits, int64_t n_tok, int64_t n_expert, int64_t n_used, bool renormalize,
                       int32_t* ids, float* weights, cudaStream_t s);

// table: [n_expert][3] device pointers (gate, up, down) of the layer's experts.
// gate_up, down: [n_groups] (n_groups >= the distinct experts, e.g.
// min(n_slot, n_expert)); x_rows, y_rows: [n_slot] each row's token and slot.
void launch_group_rows(const int32_t* ids, int64_t n_slot, int64_t n_used, int64_t n_expert,
                       const uint8_t* const* table, int64_t n_groups, MatmulGroup* gate_up, MatmulGroup* down,
                       int32_t* x_rows, int32_t* y_rows, cudaStream_t s);

}  // namespace sluice::cuda
