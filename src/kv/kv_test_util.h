// What the KV tests share: EXPECT_INVARIANTS(m) for anything with a
// check_invariants() returning Status (BlockManager, PrefixCache), failing
// with the broken invariant's message.
#pragma once

#include <gtest/gtest.h>

#include "sluice/status.h"

#define EXPECT_INVARIANTS(m)                   \
  do {                                         \
    const Status _st = (m).check_invariants(); \
    EXPECT_TRUE(_st.ok()) << _st.to_string();  \
  } while (0)
