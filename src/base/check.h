// CHECK: abort on a broken internal invariant (a bug), never on bad input.
// Anything a user or a file can cause must be a Status instead.
#pragma once

#include <cstdio>
#include <cstdlib>

#define CHECK(cond)                                                                   \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                   \
    }                                                                                 \
  } while (0)
