// The files the LoRA end-to-end tests read: the shipped base model, and the
// adapters and PyTorch reference of shared/models/stories260K-lora.
#pragma once

#include <string>

#include "base/test_data.h"

namespace sluice::testing {

inline const std::string kLoraBase = shipped_model_path("stories260K.gguf");
inline const std::string kLoraTrained = model_path("stories260K-lora/lora-trained.gguf");
inline const std::string kLoraInit = model_path("stories260K-lora/lora-init.gguf");
inline const std::string kLoraReference = model_path("stories260K-lora/reference.json");

}  // namespace sluice::testing
