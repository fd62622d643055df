#include "backend/backend.h"

#include "backend/cpu/cpu_backend.h"
#include "backend/reference_backend.h"

namespace sluice {

const char* op_name(Op op) {
  switch (op) {
    case Op::kMatmul: return "matmul";
    case Op::kNormMatmul: return "norm + matmul";
    case Op::kGluMatmul: return "activation + matmul";
    case Op::kQkvStore: return "bias + RoPE + KV store";
    case Op::kAttention: return "paged attention";
    case Op::kExpertFfn: return "expert FFN";
    case Op::kLogits: return "logits";
    case Op::kEmbed: return "embedding";
  }
  return "?";
}

StatusOr<std::shared_ptr<Backend>> create_backend(const BackendOptions& o) {
  if (o.name == "cpu") return std::shared_ptr<Backend>(std::make_shared<cpu::CpuBackend>(cpu::CpuBackendOptions{.n_threads = o.n_threads}));
  if (o.name == "reference") return std::shared_ptr<Backend>(std::make_shared<ReferenceBackend>());
  return invalid_argument("unknown backend '{}' (cpu, reference)", o.name);
}

}  // namespace sluice
