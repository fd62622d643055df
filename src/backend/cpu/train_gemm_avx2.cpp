// The AVX2 + FMA level of the training kernels (train_gemm.h): the kernels of
// train_gemm_simd.h on 8-lane vectors; compiled for AVX2 only and called only
// when the CPU has it.
#include <immintrin.h>

#include "backend/cpu/train_gemm.h"
#include "backend/cpu/train_gemm_simd.h"
#include "backend/cpu/vec_math_avx2.h"

namespace sluice::cpu {

TrainKernels train_kernels_avx2() { return train_kernels_simd<avx2::Vec>("avx2"); }

}  // namespace sluice::cpu
