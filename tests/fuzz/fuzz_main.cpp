// libFuzzer entry point of one harness; SLUICE_FUZZ_ENTRY names its function
// (set per binary by tests/fuzz/CMakeLists.txt).
#include "harnesses.h"

// One-time setup before the first timed input: harnesses that build a
// vocabulary or template on first use do it for an empty input.
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  SLUICE_FUZZ_ENTRY(nullptr, 0);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  SLUICE_FUZZ_ENTRY(data, size);
  return 0;
}
