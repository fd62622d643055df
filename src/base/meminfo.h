// What the kernel says about host memory (/proc/meminfo), for the checks that
// refuse a placement before it allocates more than the machine can give: an
// allocation past that point does not fail, the process is killed later.
//
//   MemAvailable  the kernel's estimate of what new allocations can take
//                 without swapping: free pages plus reclaimable page cache
//   Cached        the page cache
//
// Values are bytes (meminfo prints kB = 1024 bytes).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace sluice {

// The value of `key` (e.g. "MemAvailable") in the text of /proc/meminfo, in
// bytes; nullopt when the key is absent or its line is malformed.
std::optional<uint64_t> parse_meminfo_bytes(std::string_view text, std::string_view key);

// The same read from /proc/meminfo now; nullopt where it cannot be read.
std::optional<uint64_t> meminfo_bytes(std::string_view key);

}  // namespace sluice
