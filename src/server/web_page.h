// The live page `sluice serve` answers GET / with: src/server/web/index.html
// (HTML, CSS and JS in one file, written by hand), compiled into the binary at
// build time (CMakeLists.txt generates its definition), so it works offline.
#pragma once

#include <string_view>

namespace sluice::server {

// The page's bytes (UTF-8 HTML).
std::string_view web_page();

}  // namespace sluice::server
