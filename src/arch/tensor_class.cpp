#include "arch/tensor_class.h"

namespace sluice {

TensorClass tensor_class(TensorRole role) {
  using R = TensorRole;
  using C = TensorClass;
  switch (role) {
    case R::kTokenEmbd: return C::kEmbedding;
    case R::kOutput: return C::kOutput;
    case R::kAttnQ:
    case R::kAttnK:
    case R::kAttnV:
    case R::kAttnOutput:
    case R::kAttnQBias:
    case R::kAttnKBias:
    case R::kAttnVBias:
    case R::kAttnQkv: return C::kAttention;
    case R::kFfnGate:
    case R::kFfnUp:
    case R::kFfnDown:
    case R::kFfnGateUp:
    case R::kFfnGateShexp:
    case R::kFfnUpShexp:
    case R::kFfnDownShexp: return C::kFfn;
    case R::kFfnGateExps:
    case R::kFfnUpExps:
    case R::kFfnDownExps: return C::kExperts;
    case R::kFfnRouter:
    case R::kFfnSharedGate: return C::kRouter;
    case R::kOutputNorm:
    case R::kRopeFreqs:
    case R::kRopeFactorsLong:
    case R::kRopeFactorsShort:
    case R::kAttnNorm:
    case R::kAttnQNorm:
    case R::kAttnKNorm:
    case R::kAttnPostNorm:
    case R::kFfnNorm:
    case R::kFfnPostNorm:
    case R::kCount: break;
  }
  return C::kNorm;
}

const char* tensor_class_name(TensorClass c) {
  switch (c) {
    case TensorClass::kEmbedding: return "embedding";
    case TensorClass::kOutput: return "output";
    case TensorClass::kAttention: return "attention";
    case TensorClass::kFfn: return "ffn";
    case TensorClass::kExperts: return "experts";
    case TensorClass::kRouter: return "router";
    case TensorClass::kNorm: return "norm";
  }
  return "?";
}

const TensorSpec* find_tensor_spec(const ArchSpec* arch, std::string_view gguf_name) {
  if (arch != nullptr)
    if (const TensorSpec* t = arch->find_tensor(gguf_name)) return t;
  for (const ArchSpec* a : supported_archs())
    if (const TensorSpec* t = a->find_tensor(gguf_name)) return t;
  return nullptr;
}

TensorClass tensor_class_of(const ArchSpec* arch, std::string_view gguf_name) {
  const TensorSpec* t = find_tensor_spec(arch, gguf_name);
  return t != nullptr ? tensor_class(t->role) : TensorClass::kNorm;
}

}  // namespace sluice
