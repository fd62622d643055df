// The signature every CPU matmul kernel's rows() has (MatmulKernel::rows,
// backend/cpu/matmul.h), in a header of its own so the kernel files, built
// for one instruction-set level each, declare their kernels without
// including anything else:
//   w:  [n_out rows of w_row_bytes]    (only rows r0..r1 are read)
//   xa: [n_tok, xa_stride bytes]       converted activations
//   y:  [n_tok, y_stride floats]       writes y[t * y_stride + r] for r in [r0, r1)
#pragma once

#include <cstddef>
#include <cstdint>

namespace sluice::cpu {

using RowsFn = void(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa, size_t xa_stride,
                    int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);

}  // namespace sluice::cpu
