#include "train/base_matmul.h"

namespace sluice {
namespace {

bool all_forward(const TrainOps& ops, std::span<const MatmulOut> outs) {
  for (const MatmulOut& o : outs)
    if (!ops.supports_forward_matmul(o.w.type, o.w.layout)) return false;
  return true;
}

}  // namespace

void base_matmul(Backend& be, TrainOps& ops, std::span<const MatmulOut> outs, const float* x, int64_t n_in,
                 int64_t n_tok) {
  if (!all_forward(ops, outs)) {
    be.matmul(outs, x, n_in, n_tok);
    return;
  }
  for (const MatmulOut& o : outs) ops.forward_matmul({.w = o.w, .x = x, .y = o.y, .n_tok = n_tok});
}

void base_norm_matmul(Backend& be, TrainOps& ops, const NormMatmulArgs& a) {
  if (!all_forward(ops, a.outs)) {
    be.norm_matmul(a);
    return;
  }
  be.rmsnorm(a.x, a.norm, a.eps, a.xn, a.n_tok, a.n_embd);
  for (const MatmulOut& o : a.outs) ops.forward_matmul({.w = o.w, .x = a.xn, .y = o.y, .n_tok = a.n_tok});
}

}  // namespace sluice
