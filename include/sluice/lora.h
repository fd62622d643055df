// LoraSpec: a LoRA adapter to load beside a model (public API): a llama.cpp
// adapter GGUF or a PEFT folder, and the scale its delta is applied at
// (`--lora FILE[:SCALE]`; 1: the file's alpha / rank).
#pragma once

#include <string>

namespace sluice {

struct LoraSpec {
  std::string path;
  float scale = 1.0f;
};

}  // namespace sluice
