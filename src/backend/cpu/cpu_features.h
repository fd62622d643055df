// CPU feature detection and the instruction-set level the kernels run at.
//
// Detected once (cpuid + xgetbv), so one binary runs on any x86-64: kernels
// compiled for AVX2 or AVX-512 are only called when the CPU and OS support them.
// SLUICE_ISA=scalar|avx2|avx512 in the environment caps the level (for tests and
// for measuring each path); it can only lower the level, never raise it.
#pragma once

#include <string>

namespace sluice::cpu {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512_vnni = false;
  bool avx512_bf16 = false;
};

// What this CPU and OS support (ignores SLUICE_ISA).
const CpuFeatures& cpu_features();

enum class Isa {
  kScalar = 0,  // portable C++, any x86-64
  kAvx2 = 1,    // AVX2 + FMA + F16C
  kAvx512 = 2,  // AVX-512 F/BW/VL/DQ + VNNI (+ BF16 where present)
};

// The highest level supported, capped by SLUICE_ISA. Fixed for the process.
Isa active_isa();
// Highest level the hardware supports (for tests that loop over levels).
Isa max_supported_isa();
const char* isa_name(Isa isa);
// "avx2 fma f16c avx512f ... " for summaries.
std::string cpu_features_string();

}  // namespace sluice::cpu
