// How benchmark reports write times and sizes.
#pragma once

#include <cstdint>
#include <string>

namespace sluice::bench {

// "12.34 ms" from seconds.
std::string format_ms(double s);
// "1.23 GiB", "512 KiB", "17 B" (powers of 1024).
std::string human_bytes(uint64_t n);

}  // namespace sluice::bench
