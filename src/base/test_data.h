// Where tests find shared real-model data and the built CLI.
// Tests that need ../shared data skip (GTEST_SKIP) with a clear message if absent.
#pragma once

#include <string>
#include <sys/stat.h>

namespace sluice::testing {

inline std::string shared_dir() {
#ifdef SLUICE_SHARED_DIR
  return SLUICE_SHARED_DIR;
#else
  return "../shared";
#endif
}

inline bool path_exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

// Path of a file under shared/models, e.g. model_path("stories260K/stories260K.gguf").
inline std::string model_path(const std::string& rel) { return shared_dir() + "/models/" + rel; }

}  // namespace sluice::testing

// Skips the current test unless `path` exists, naming what is missing.
#define SKIP_UNLESS_EXISTS(path)                                                        \
  do {                                                                                  \
    if (!::sluice::testing::path_exists(path))                                          \
      GTEST_SKIP() << "real-model data not found at " << (path) << " (shared/ absent)"; \
  } while (0)
