#include "base/meminfo.h"

#include <cctype>
#include <fstream>
#include <sstream>
#include <string>

namespace sluice {

std::optional<uint64_t> parse_meminfo_bytes(std::string_view text, std::string_view key) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    // "MemAvailable:   12345678 kB"
    if (line.size() <= key.size() || line.substr(0, key.size()) != key || line[key.size()] != ':') continue;
    size_t i = key.size() + 1;
    while (i < line.size() && line[i] == ' ') ++i;
    uint64_t v = 0;
    size_t digits = 0;
    for (; i < line.size() && std::isdigit(static_cast<unsigned char>(line[i])); ++i, ++digits) {
      if (v > (UINT64_MAX - 9) / 10) return std::nullopt;
      v = v * 10 + static_cast<uint64_t>(line[i] - '0');
    }
    if (digits == 0) return std::nullopt;
    while (i < line.size() && line[i] == ' ') ++i;
    const std::string_view unit = line.substr(i);
    if (unit.empty()) return v;  // counts (HugePages_Total) carry no unit
    if (unit != "kB" || v > UINT64_MAX / 1024) return std::nullopt;
    return v * 1024;
  }
  return std::nullopt;
}

std::optional<uint64_t> meminfo_bytes(std::string_view key) {
  std::ifstream in("/proc/meminfo");
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_meminfo_bytes(ss.str(), key);
}

}  // namespace sluice
