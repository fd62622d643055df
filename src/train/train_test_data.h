// What the fine-tuning tests train on: the shipped base model and a small
// plain-text corpus of stories.
#pragma once

#include <string>

#include "base/test_data.h"

namespace sluice::testing {

inline const std::string kFinetuneBase = shipped_model_path("stories260K.gguf");
inline const std::string kFinetuneStories = std::string(SLUICE_SOURCE_DIR) + "/tests/data/finetune/stories.txt";

}  // namespace sluice::testing
