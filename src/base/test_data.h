// Where tests find real-model data and the built CLI.
// The models shipped in the repository (models/: stories260K, stories-moe in f16)
// and their golden files (tests/data/) are always there; the larger fixtures in
// ../shared are not: tests that need them skip (GTEST_SKIP) with a clear message.
#pragma once

#include <string>
#include <string_view>
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

// dir + sub + rel. Not inlined: gcc 12, inlining string concatenation with
// the callers' literals, warns wrongly of -Warray-bounds.
[[gnu::noinline]] inline std::string joined(std::string dir, std::string_view sub, std::string_view rel) {
  dir.append(sub).append(rel);
  return dir;
}

// Path of a file under shared/models, e.g. model_path("stories260K/hf").
inline std::string model_path(const std::string& rel) { return joined(shared_dir(), "/models/", rel); }

inline std::string source_dir() {
#ifdef SLUICE_SOURCE_DIR
  return SLUICE_SOURCE_DIR;
#else
  return ".";
#endif
}

// Path of a model shipped in the repository, e.g. shipped_model_path("stories260K.gguf")
// (the same bytes as shared's stories260K/stories260K.gguf) or "stories-moe-f16.gguf"
// (shared's stories-moe.gguf with its matrices and experts in f16: its greedy
// tokens are the reference's, its logits are not the f32 ones to 1e-4).
inline std::string shipped_model_path(const std::string& file) { return joined(source_dir(), "/models/", file); }

// stories260K's golden outputs (a copy of shared's stories260K/reference.json).
inline std::string stories260k_reference_path() { return joined(source_dir(), "/tests/data/stories260K_reference.json", ""); }

}  // namespace sluice::testing

// Skips the current test unless `path` exists, naming what is missing.
#define SKIP_UNLESS_EXISTS(path)                                                        \
  do {                                                                                  \
    if (!::sluice::testing::path_exists(path))                                          \
      GTEST_SKIP() << "real-model data not found at " << (path) << " (shared/ absent)"; \
  } while (0)
