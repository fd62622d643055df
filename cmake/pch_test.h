// The headers the test sources parse most, precompiled once for every test
// binary (SLUICE_PCH, CMakeLists.txt). Sources still include what they use;
// this file only makes a clean build cheaper and changes no meaning.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
