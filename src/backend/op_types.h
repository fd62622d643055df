// Plain types the forward pass and every backend share: how a weight matrix is
// seen (WeightView), how its blocks are ordered (WeightLayout), and the
// variants of the operators an architecture chooses (RopeLayout, Activation:
// arch/arch_spec.h). No behaviour here; backend.h has the operators.
#pragma once

#include <cstdint>

#include "arch/arch_spec.h"  // RopeLayout, Activation
#include "quant/dtype.h"

namespace sluice {

// How a weight matrix's blocks are ordered in memory. kRows is GGUF order; the
// others are interleaved layouts a backend may copy a matrix into when it
// prepares the weights (Backend::prepare_weights; backend/cpu/repack.h draws
// them). The model never chooses one: it only passes views through.
enum class WeightLayout {
  kRows,    // GGUF order: row after row
  kQ4_0x4,  // Q4_0, rows interleaved in groups of 4; same byte count
  kQ8_0x8,  // Q8_0, rows side by side in groups of 8; same byte count
  kQ8_0x16, // Q8_0, 16 rows side by side in 4-byte lanes; same byte count
  kQ4_0x8,  // Q4_0, rows side by side in groups of 8; same byte count
  kSplitScales,  // Q4_0 / Q8_0: every block's quants, row after row, then every
                 // block's f16 scale (quant/split_scales.h); same byte count
};

// A weight matrix: n_out rows of n_in elements of `type`, in GGUF row order
// unless `layout` says a backend reordered its blocks.
struct WeightView {
  DType type = DType::kF32;
  const uint8_t* data = nullptr;  // [n_out, n_in] in `type` blocks, ordered by `layout`
  int64_t n_in = 0;
  int64_t n_out = 0;
  WeightLayout layout = WeightLayout::kRows;
};

// One matmul of a dispatch: y = W x for each token.  y: [n_tok, w.n_out]
struct MatmulOut {
  WeightView w;
  float* y = nullptr;
};

}  // namespace sluice
