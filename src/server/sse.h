// Server-Sent Events framing (the wire format of `stream: true`).
//
//   data: {"id":"cmpl-1",...}\n
//   \n
//   ...
//   data: [DONE]\n
//   \n
//
// A payload with newlines becomes one "data:" line per line (the SSE rule, so
// a client joins them back with "\n"); lines starting with ':' are comments
// (used as keep-alives). JSON payloads are dumped on one line, with invalid
// UTF-8 replaced by U+FFFD so a token that splits a character cannot break the
// stream. SseParser is the client side, for tests. All of it is plain values.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace sluice::server {

inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// One event carrying `payload`.
std::string sse_data(std::string_view payload);
// One event carrying `j` as single-line JSON.
std::string sse_json(const nlohmann::json& j);
// A comment line (ignored by clients), e.g. a keep-alive.
std::string sse_comment(std::string_view text);
// JSON on one line; invalid UTF-8 in strings becomes U+FFFD.
std::string dump_json(const nlohmann::json& j);

// Incremental parser: feed bytes as they arrive, take complete events' data.
class SseParser {
 public:
  void feed(std::string_view bytes);
  // Data of the events completed so far (multi-line data joined with "\n"),
  // removed from the parser. Comment-only events are not reported.
  std::vector<std::string> take_events();
  // Bytes of an unfinished event.
  size_t pending_bytes() const { return buffer_.size(); }

 private:
  std::string buffer_;
  std::vector<std::string> events_;
};

}  // namespace sluice::server
