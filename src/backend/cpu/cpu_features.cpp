#include "backend/cpu/cpu_features.h"

#include <cpuid.h>

#include <cstdlib>
#include <cstring>

#include "base/enum_names.h"

namespace sluice::cpu {
namespace {

uint64_t xgetbv0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & (1u << 27);
  const bool avx = c & (1u << 28);
  f.fma = c & (1u << 12);
  f.f16c = c & (1u << 29);
  const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  const bool os_avx = (xcr0 & 0x6) == 0x6;         // XMM and YMM state
  const bool os_avx512 = (xcr0 & 0xe6) == 0xe6;    // + opmask, ZMM
  if (!avx || !os_avx) {
    f.fma = f.f16c = false;
    return f;
  }
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  f.avx2 = b & (1u << 5);
  if (os_avx512) {
    f.avx512f = b & (1u << 16);
    f.avx512dq = b & (1u << 17);
    f.avx512bw = b & (1u << 30);
    f.avx512vl = b & (1u << 31);
    f.avx512_vnni = c & (1u << 11);
    __cpuid_count(7, 1, a, b, c, d);
    f.avx512_bf16 = a & (1u << 5);
  }
  return f;
}

Isa compute_max() {
  const CpuFeatures& f = cpu_features();
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512_vnni && f.fma && f.f16c) return Isa::kAvx512;
  if (f.avx2 && f.fma && f.f16c) return Isa::kAvx2;
  return Isa::kScalar;
}

Isa compute_active() {
  Isa isa = compute_max();
  if (const char* env = std::getenv("SLUICE_ISA")) {
    Isa cap = isa;
    if (std::strcmp(env, "scalar") == 0) cap = Isa::kScalar;
    else if (std::strcmp(env, "avx2") == 0) cap = Isa::kAvx2;
    else if (std::strcmp(env, "avx512") == 0) cap = Isa::kAvx512;
    if (static_cast<int>(cap) < static_cast<int>(isa)) isa = cap;
  }
  return isa;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

Isa max_supported_isa() {
  static const Isa isa = compute_max();
  return isa;
}

Isa active_isa() {
  static const Isa isa = compute_active();
  return isa;
}

constexpr EnumName<Isa> kIsaNames[] = {{Isa::kScalar, "scalar"}, {Isa::kAvx2, "avx2"}, {Isa::kAvx512, "avx512"}};

const char* isa_name(Isa isa) { return enum_name(isa, kIsaNames); }

std::string cpu_features_string() {
  const CpuFeatures& f = cpu_features();
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (on) s += s.empty() ? name : std::string(" ") + name;
  };
  add(f.avx2, "avx2");
  add(f.fma, "fma");
  add(f.f16c, "f16c");
  add(f.avx512f, "avx512f");
  add(f.avx512bw, "avx512bw");
  add(f.avx512vl, "avx512vl");
  add(f.avx512dq, "avx512dq");
  add(f.avx512_vnni, "avx512_vnni");
  add(f.avx512_bf16, "avx512_bf16");
  return s;
}

}  // namespace sluice::cpu
