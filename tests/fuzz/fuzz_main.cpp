// libFuzzer entry point of one harness; SLUICE_FUZZ_ENTRY names its function
// (set per binary by tests/fuzz/CMakeLists.txt).
#include "harnesses.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  SLUICE_FUZZ_ENTRY(data, size);
  return 0;
}
