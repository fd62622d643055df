#include <cstdio>
#include <cstdlib>

#include "harnesses.h"

namespace sluice::fuzz {

void check_failed(const char* what, const char* file, int line) {
  std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", file, line, what);
  std::abort();
}

}  // namespace sluice::fuzz
