// The headers every command of the CLI (tools/) parses, precompiled once
// (SLUICE_PCH, CMakeLists.txt). Sources still include what they use; this
// file only makes a clean build cheaper and changes no meaning.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
