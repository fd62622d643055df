// RoutedFfnTrain: a training step through a routed (mixture-of-experts) FFN.
//
// The experts and the router stay frozen (an adapter targets the attention
// and any dense FFN layers; the experts are stacked 3-D tensors, not
// adaptable matrices), but the gradient must reach the layers below, so the
// backward runs through every chosen expert and through the router's
// weights. Per routed layer, on n tokens of the normed FFN input xn:
//
//   logits = W_router xn             p = softmax(logits) over the experts
//   ids[t] = the k largest p         w[t][j] = p[ids[t][j]] (/ their sum when renormalized)
//   y[t][j] = down_e(act(gate_e xn[t]) * up_e xn[t]),  e = ids[t][j]
//   out[t] = sum_j w[t][j] y[t][j]  (+ g[t] * shared(xn[t]), g = sigmoid(gate_s . xn[t]) or 1)
//
// and back, from dout:
//   dw[t][j]  = dout[t] . y[t][j]               the routing weights' gradient
//   dlogits   = softmax backward of dw (over the k chosen when renormalized, else over all)
//   dxn[t]    = sum_j W_e^T (w[t][j] dout[t] through act) + W_router^T dlogits[t] (+ the shared expert's)
//
// The tokens are grouped by expert (each chosen expert's rows multiplied in
// one call, as the forward's expert_ffn reads each expert once), and the
// choices are discrete: their gradient is that of the weights, not of which
// experts were picked (as PyTorch's top-k gives it).
//
// The routing (Backend::route: ids and weights in host memory), the grouping
// and the routing weights' softmax backward are worked on the host; the rows
// move on the backend (TrainOps' gather_rows, slot_sum, gated_add and their
// backwards), so any backend with TrainOps runs it. On a device that is a
// wait per routed layer each way (the routing read back going forward, dw
// coming back): n_tok x k numbers, not rows. Buffers are planned at
// construction for max_tokens; forward() and backward() allocate nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/train_ops.h"
#include "model/hparams.h"
#include "model/model_weights.h"
#include "sluice/status.h"

namespace sluice {

class Model;

class RoutedFfnTrain {
 public:
  // A host vector's copy in a buffer of the backend (TrainStep::vec).
  using VecFn = std::function<const float*(const float* host, int64_t n)>;
  // be, ops and hp outlive this.
  RoutedFfnTrain(Backend& be, TrainOps& ops, const ModelHparams& hp, int64_t max_tokens, VecFn vec);
  ~RoutedFfnTrain();
  RoutedFfnTrain(const RoutedFfnTrain&) = delete;
  RoutedFfnTrain& operator=(const RoutedFfnTrain&) = delete;

  // Routed layer l (acquired from model, w its weights): xn = norm(m), out =
  // the routed FFN of xn, keeping what backward() needs; the chosen experts
  // come from model.landed_experts (read if they stream). Once they are in
  // hand, routed layer `then` (>= 0) is prefetched as prefetch() does, or
  // routed layer `guess_layer` (>= 0) guessed as guess() does. The routing is kept
  // per layer for prefetch().
  //   m: [n, n_embd]  xn, out: [n, n_embd] (written)
  // Errors: the weight source's.
  Status forward(Model& model, int64_t l, const LayerWeights& w, const float* m, float* xn, float* out, int64_t n,
                 int64_t then = -1, int64_t guess_layer = -1);
  // The backward visits the layers in reverse, and each recomputed forward
  // routes as the forward pass did: its experts are known exactly. Asks the
  // model to read ahead routed layer l's experts of the last forward() of l
  // (Model::predict_experts; nothing when they do not stream), once per
  // new_pass(); -1 or a layer not routed since: nothing.
  void prefetch(Model& model, int64_t l);
  // A micro-batch begins: prefetch() may ask for every layer again.
  void new_pass();
  // The forward pass cannot know a routed layer's experts before the rows
  // reach it. With experts streamed, routed layer l's are guessed from m,
  // the rows of the layer below before its FFN is added (inference's early
  // guess, ExpertFeed): l's own norm and router over them, the top k a token
  // read ahead (Model::predict_experts) while the layer below computes its
  // experts and l its attention. Nothing when the experts do not stream.
  //   m: [n, n_embd]
  void guess(Model& model, int64_t l, const float* m, int64_t n);
  // After forward() on the same layer and rows: dxn = the gradient at xn
  // from dout, the gradient at out.  dout, dxn: [n, n_embd]
  void backward(const LayerWeights& w, const float* dout, float* dxn, int64_t n);

 private:
  // Groups the (token, slot) pairs of ids by expert, ascending tokens within one.
  void group(int64_t n);
  // The shared expert (with its gate) over xn, added to out.
  void shared_forward(const LayerWeights& w, const float* xn, float* out, int64_t n);
  void shared_backward(const LayerWeights& w, const float* dout, float* dxn, int64_t n);
  // dlogits from dw: the routing weights' softmax backward (on the host).
  void routing_backward(int64_t n);

  Backend& be_;
  TrainOps& ops_;
  const ModelHparams& hp_;
  const int64_t max_tokens_;
  VecFn vec_;
  std::span<const ExpertWeights> experts_;  // forward()'s, valid until the layer is released

  std::unique_ptr<Buffer> logits_, dlogits_;  // [T, n_expert]
  std::unique_ptr<Buffer> xg_, yg_, dyg_;     // [T * k, n_embd] rows grouped by expert (dyg_ also the dxn rows)
  std::unique_ptr<Buffer> g_, u_, h_;         // [T * k, n_ff_expert]
  std::unique_ptr<Buffer> dg_, du_, dh_;      // [T * k, n_ff_expert]
  std::unique_ptr<Buffer> gs_, us_, hs_;      // [T, n_ff_shared] (the shared expert, if any)
  std::unique_ptr<Buffer> dgs_, dus_, dhs_;   // [T, n_ff_shared]
  std::unique_ptr<Buffer> ys_, dys_;          // [T, n_embd]
  std::unique_ptr<Buffer> sg_;                // [T] the shared expert's gate
  int64_t stride_ = 0;                        // T * k: a layer's routing in layer_ids_
  int32_t* ids_ = nullptr;                    // [T, k] the last forward()'s routing, in layer_ids_
  std::vector<float> w_, dw_;                 // [T, k] (dw_ also guess()'s routing weights)
  std::vector<int32_t> guess_ids_;            // [T, k] guess()'s routing
  std::vector<float> host_logits_, host_dlogits_;  // [T, n_expert] where the backend's buffers are not host memory
  std::vector<int64_t> start_;                // [n_expert + 1] each expert's first grouped row
  std::vector<int64_t> fill_;                 // [n_expert] scratch of group()
  std::vector<int32_t> row_;                  // [T * k] the grouped row of (t, j)
  std::vector<int32_t> token_;                // [T * k] the token of a grouped row
  std::vector<int32_t> layer_ids_;            // [n_layer, T * k] each layer's routing, as forward() left it
  std::vector<int64_t> layer_n_;              // [n_layer] its tokens (0: not routed since new_pass())
  std::vector<uint8_t> prefetched_;           // [n_layer] asked for since new_pass()
};

}  // namespace sluice
