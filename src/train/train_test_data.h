// What the fine-tuning tests train on: the shipped base model and a small
// plain-text corpus of stories.
#pragma once

#include <fstream>
#include <iterator>
#include <string>

#include "base/test_data.h"

namespace sluice::testing {

inline const std::string kFinetuneBase = shipped_model_path("stories260K.gguf");
inline const std::string kFinetuneStories = std::string(SLUICE_SOURCE_DIR) + "/tests/data/finetune/stories.txt";
inline const std::string kFinetuneHeldout =
    std::string(SLUICE_SOURCE_DIR) + "/tests/data/finetune/stories-heldout.txt";

// A file's bytes ("" when it cannot be read): adapters compared byte for byte.
inline std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace sluice::testing
