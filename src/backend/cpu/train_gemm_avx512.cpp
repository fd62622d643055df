// The AVX-512 level of the training kernels (train_gemm.h): the kernels of
// train_gemm_simd.h on 16-lane vectors (tile(): 6 rows x 32 columns), with the
// shared 256-bit dequantization of train_panel_simd.h (it is not where the
// time goes); compiled for AVX-512 only and called only when the CPU has it.
#include <immintrin.h>

#include "backend/cpu/vec_math_avx512.h"
#include "backend/cpu/train_gemm.h"
#include "backend/cpu/train_gemm_simd.h"

namespace sluice::cpu {

TrainKernels train_kernels_avx512() { return train_kernels_simd<avx512::Vec>("avx512"); }

}  // namespace sluice::cpu
