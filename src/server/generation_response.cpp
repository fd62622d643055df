#include "server/generation_response.h"

#include <httplib.h>

#include "server/sse.h"

namespace sluice::server {
namespace {

// A generation error's status: 503 when another process of the job failed
// (the engine's "unavailable: ..." errors), else 500.
ApiError generation_error(const std::string& message) {
  const bool unavailable = message.rfind("unavailable: ", 0) == 0;
  return api_error(unavailable ? 503 : 500, "server_error", unavailable ? "service_unavailable" : "generation_failed",
                   message);
}

}  // namespace

using Clock = std::chrono::steady_clock;

std::variant<std::string, ApiError> collect_response(const GenerationOutput& g) {
  while (!g.acc->all_finished())
    for (const TokenEvent& e : g.queue->take(std::chrono::milliseconds(500))) g.acc->apply(e);
  if (g.acc->error()) return generation_error(*g.acc->error());
  return dump_json(response_json(g.info, g.acc->totals(), usage_json(g.n_prompt, g.acc->completion_tokens())));
}

void stream_response(httplib::Response& res, GenerationOutput g, std::chrono::milliseconds keepalive,
                     std::function<void()> cancel, std::function<void(const std::string&)> done) {
  struct StreamState {
    std::vector<bool> sent_first;
    bool completed = false;
    Clock::time_point last_write = Clock::now();
  };
  auto st = std::make_shared<StreamState>();
  st->sent_first.assign(g.acc->totals().size(), false);
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [g, st, keepalive](size_t, httplib::DataSink& sink) {
        std::string out;
        for (const TokenEvent& e : g.queue->take(std::chrono::milliseconds(200))) {
          const ChoiceOutput d = g.acc->apply(e);
          if (d.finish_reason == "error") {
            out += sse_json(generation_error(g.acc->error().value_or("")).body());
            continue;
          }
          if (d.index < 0 || d.index >= static_cast<int32_t>(st->sent_first.size())) continue;
          auto first = [&] {
            const bool f = !st->sent_first[static_cast<size_t>(d.index)];
            st->sent_first[static_cast<size_t>(d.index)] = true;
            return f;
          };
          // Content first, then each tool call (name, then arguments), then the finish reason.
          const bool has_calls = !d.tool_calls.empty();
          const bool has_news = !d.text.empty() || (!d.finish_reason.empty() && !has_calls) ||
                                (g.info.logprobs && !d.logprobs.empty()) || (g.info.token_ids && !d.token_ids.empty());
          if (has_news) {
            if (!has_calls) {
              out += sse_json(chunk_json(g.info, d, first(), g.acc->text_before_last(d.index)));
            } else {
              ChoiceOutput head = d;  // rare: the piece that completes a call
              head.finish_reason.clear();
              out += sse_json(chunk_json(g.info, head, first(), g.acc->text_before_last(d.index)));
            }
          }
          if (!has_calls) continue;
          for (size_t i = 0; i < d.tool_calls.size(); ++i) {
            const int32_t call_index = d.first_call_index + static_cast<int32_t>(i);
            out += sse_json(tool_call_chunk_json(g.info, d.index, call_index, d.tool_calls[i], false, first()));
            out += sse_json(tool_call_chunk_json(g.info, d.index, call_index, d.tool_calls[i], true, false));
          }
          if (!d.finish_reason.empty())
            out += sse_json(chunk_json(g.info, ChoiceOutput{.index = d.index, .finish_reason = d.finish_reason}, false, 0));
        }
        const bool finished = g.acc->all_finished();
        if (finished) {
          if (g.include_usage)
            out += sse_json(usage_chunk_json(g.info, usage_json(g.n_prompt, g.acc->completion_tokens())));
          out += kSseDone;
        }
        if (out.empty() && Clock::now() - st->last_write >= keepalive) out = sse_comment("keep-alive");
        if (!out.empty()) {
          if (!sink.write(out.data(), out.size())) return false;
          st->last_write = Clock::now();
        }
        if (finished) {
          st->completed = true;
          sink.done();
        }
        return true;
      },
      [g, st, cancel = std::move(cancel), done = std::move(done)](bool success) {
        if (!st->completed) cancel();
        done(!st->completed || !success ? "cancelled" : g.acc->error() ? "error" : "ok");
      });
}

}  // namespace sluice::server
