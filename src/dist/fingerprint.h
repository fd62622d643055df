// Fingerprints that every process of a job must share before it starts: the
// model (its file's header bytes and size) and the binary (its version and a
// hash of the executable), so a job whose machines hold different files or
// builds is refused with the reason instead of computing garbage.
//
// Not for the per-token path: read once at start.
#pragma once

#include <cstdint>
#include <string>

#include "sluice/status.h"

namespace sluice::dist {

struct Fingerprint {
  std::string version;       // "sluice 0.1.0"
  uint64_t binary_hash = 0;  // XXH3 of /proc/self/exe (0 where it cannot be read)
  uint64_t model_hash = 0;   // XXH3 of the model's first header bytes (a folder: its config and file sizes)
  uint64_t model_bytes = 0;  // the model's size (a folder: all its files)
};

// Bytes of a model file hashed: a GGUF header with its metadata and tensor
// table fits in this for the models sluice runs (the rest is tensor data,
// whose size the fingerprint also holds).
inline constexpr uint64_t kModelHashBytes = 4u << 20;

// Errors: the model path cannot be read.
StatusOr<Fingerprint> fingerprint(const std::string& model_path);

// "" when equal, else what differs ("model file ... differs: ...").
std::string fingerprint_mismatch(const Fingerprint& rank0, const Fingerprint& other);

}  // namespace sluice::dist
