// ExpertDispatch: who computes a routed layer's experts, when not this
// process alone (expert parallelism across processes, dist/expert_parallel.h).
//
// A Model with a dispatch (Model::set_expert_dispatch) still routes every
// routed layer itself (router, top-k, counters, prediction); the experts'
// FFNs and the residual add are handed to the dispatch:
//
//   ExpertFeed::ffn_block(s) = moe_route(s, m) -> count
//                              -> dispatch.predict(l + 1, ids)  (with prediction)
//                              -> dispatch.experts(s, m): x += the FFN
//
// Called on the model's forward thread only.
#pragma once

#include <cstdint>
#include <span>

#include "model/decoder_blocks.h"
#include "sluice/status.h"

namespace sluice {

class ExpertDispatch {
 public:
  virtual ~ExpertDispatch() = default;
  // s.x += the routed FFN of s's layer: the experts m.ids chose, weighted by
  // m.weights, from s.xn (normed by moe_route), plus the shared expert where
  // the layer has one; the same arithmetic as moe_experts().
  // Errors: a process holding some of the experts failed or did not answer
  // in time (the step fails).
  virtual Status experts(const LayerStep& s, const MoeStep& m) = 0;
  // The experts this process predicts routed layer `layer` will choose
  // (ids, [n_tok x candidates], -1: none), before it runs: a dispatch whose
  // other processes stream their experts passes them on, so that those read
  // theirs ahead. Failures surface at the next experts().
  virtual void predict(int64_t layer, std::span<const int32_t> ids) {}
};

}  // namespace sluice
