// The two response writers of a generation request. Both read the request's
// engine events from its EventQueue through a ChoiceAccumulator:
//
//   collect_response   waits for every output, then one JSON body
//   stream_response    Server-Sent Events as tokens arrive: a chunk per choice
//                      with news, a keep-alive comment after a quiet spell,
//                      the usage chunk when asked, then [DONE]
//
// A streaming client that disconnects is noticed on the next write; the
// writer then calls `cancel` (the caller aborts the engine request, so its KV
// blocks return to the pool). Runs on the HTTP worker threads.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <variant>

#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/request_stream.h"

namespace httplib {
struct Response;
}

namespace sluice::server {

struct GenerationOutput {
  std::shared_ptr<EventQueue> queue;
  std::shared_ptr<ChoiceAccumulator> acc;
  ResponseInfo info;
  int64_t n_prompt = 0;
  bool include_usage = false;
};

// Blocks until every output finished; the whole response body, or the error
// an output ended with (500).
std::variant<std::string, ApiError> collect_response(const GenerationOutput& g);

// Installs the event stream as `res`'s chunked content. `cancel` runs when the
// client leaves before the end; `done(outcome)` runs exactly once at the end:
// "ok", "error" (an output failed) or "cancelled".
void stream_response(httplib::Response& res, GenerationOutput g, std::chrono::milliseconds keepalive,
                     std::function<void()> cancel, std::function<void(const std::string&)> done);

}  // namespace sluice::server
