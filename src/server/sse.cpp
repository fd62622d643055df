#include "server/sse.h"

#include <nlohmann/json.hpp>

namespace sluice::server {

std::string sse_data(std::string_view payload) {
  std::string out;
  size_t start = 0;
  while (true) {
    const size_t nl = payload.find('\n', start);
    std::string_view line = payload.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    out += "data: ";
    out += line;
    out += '\n';
    if (nl == std::string_view::npos) break;
    start = nl + 1;
  }
  out += '\n';
  return out;
}

std::string dump_json(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string sse_json(const nlohmann::json& j) { return sse_data(dump_json(j)); }

std::string sse_comment(std::string_view text) { return ": " + std::string(text) + "\n\n"; }

void SseParser::feed(std::string_view bytes) {
  buffer_.append(bytes);
  while (true) {
    // An event ends at a blank line ("\n\n" or "\r\n\r\n").
    size_t end = buffer_.find("\n\n");
    size_t sep = 2;
    const size_t crlf = buffer_.find("\r\n\r\n");
    if (crlf != std::string::npos && (end == std::string::npos || crlf < end)) {
      end = crlf;
      sep = 4;
    }
    if (end == std::string::npos) return;
    const std::string block = buffer_.substr(0, end);
    buffer_.erase(0, end + sep);
    std::string data;
    bool has_data = false;
    size_t start = 0;
    while (start <= block.size()) {
      size_t nl = block.find('\n', start);
      if (nl == std::string::npos) nl = block.size();
      std::string line = block.substr(start, nl - start);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      start = nl + 1;
      if (line.empty() || line[0] == ':') continue;
      const size_t colon = line.find(':');
      const std::string name = line.substr(0, colon);
      if (name != "data") continue;
      std::string value = colon == std::string::npos ? "" : line.substr(colon + 1);
      if (!value.empty() && value[0] == ' ') value.erase(0, 1);
      if (has_data) data += '\n';
      data += value;
      has_data = true;
    }
    if (has_data) events_.push_back(std::move(data));
  }
}

std::vector<std::string> SseParser::take_events() {
  std::vector<std::string> out;
  out.swap(events_);
  return out;
}

}  // namespace sluice::server
