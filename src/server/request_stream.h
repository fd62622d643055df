// The bridge between one HTTP request and its engine request.
//
//   engine thread                      HTTP worker thread
//   on_event(TokenEvent) --push-->  EventQueue  --take(timeout)--> ChoiceAccumulator
//                                                                    (tool calls split from content)
//                                                                    -> per-choice deltas (stream chunks)
//                                                                    -> totals (the whole response)
//
// The engine callback only copies the event into the queue and notifies, so it
// never blocks the engine; token texts and logprob pieces are looked up on the
// HTTP thread. EventQueue is shared (shared_ptr) by the callback and the handler,
// so either may outlive the other. EventQueue is thread-safe; ChoiceAccumulator
// belongs to the HTTP thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/openai_response.h"
#include "server/tool_calls.h"
#include "sluice/engine.h"
#include "tokenizer/stream_decoder.h"

namespace sluice::server {

class EventQueue {
 public:
  // Engine side: queue a copy and wake the reader. The event that carries
  // timings (the request's last) marks the queue finished.
  void push(const TokenEvent& e);
  // Reader side: waits up to `timeout` for events, then takes all queued ones.
  std::vector<TokenEvent> take(std::chrono::milliseconds timeout);
  // True once the last event was pushed (it may not have been taken yet).
  bool finished() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<TokenEvent> events_;
  bool finished_ = false;
};

// Turns engine events into OpenAI choices.
class ChoiceAccumulator {
 public:
  // with_logprobs: collect logprobs. A stop token (TokenEvent::stop_token: the
  // engine's StopCondition decided it, from the request's stop tokens and, unless
  // ignore_eos, end-of-generation tokens) ends a choice without appearing in it:
  // not in its token ids, logprobs or completion_tokens.
  // tools: how each output is read for tool calls (a ToolCallParser per
  // choice; call ids from id_seed and the choice index). A choice that ends
  // (stop or length) with a parsed call finishes with "tool_calls".
  // Tool-call markers that the vocabulary holds as control tokens (no text in
  // the event) reach the parser through push_marker, placed where the token
  // stands in the text: a StreamDecoder per choice, decoding the ids as the
  // engine does, counts the text before each marker, and the marker goes in
  // when the event text reaches that point (text the engine holds back for
  // stop strings or an unfinished character comes out after it; a marker past
  // a stop string is dropped). Their text never reaches content.
  ChoiceAccumulator(const Tokenizer& tokenizer, int32_t n, bool with_logprobs, ToolParsing tools = {},
                    uint64_t id_seed = 0);

  // Applies one event; returns what it added to its choice (index set).
  ChoiceOutput apply(const TokenEvent& e);

  const std::vector<ChoiceOutput>& totals() const { return totals_; }
  // Length of choice i's text before the last apply() to it (for text_offset).
  size_t text_before_last(int32_t i) const { return before_[static_cast<size_t>(i)]; }
  int64_t completion_tokens() const { return n_tokens_; }
  bool all_finished() const { return n_finished_ == static_cast<int32_t>(totals_.size()); }
  // The engine's error text if an output finished with kError.
  const std::optional<std::string>& error() const { return error_; }
  const std::optional<RequestTimings>& timings() const { return timings_; }

 private:
  const Tokenizer& tok_;
  bool with_logprobs_;
  std::vector<ChoiceOutput> totals_;
  std::vector<ToolCallParser> parsers_;  // [n]
  // Control-token markers of one choice, while tools are parsed.
  struct MarkerTrack {
    std::unique_ptr<StreamDecoder> plain;  // the choice's ids, decoded as the engine decodes them
    size_t decoded = 0;                    // bytes plain has released
    size_t fed = 0;                        // bytes of event text given to the parser
    std::deque<std::pair<size_t, std::string_view>> waiting;  // (text offset, marker) in order
  };
  // Gives the parser `text`, with the waiting markers at their offsets.
  void feed(MarkerTrack& track, ToolCallParser& parser, std::string_view text, ParsedOutput* out);
  ToolCallFormat tool_format_ = ToolCallFormat::kNone;
  std::vector<MarkerTrack> markers_;  // [n] when tool_format_ is not kNone
  std::vector<size_t> before_;
  std::vector<bool> finished_;
  int32_t n_finished_ = 0;
  int64_t n_tokens_ = 0;
  std::optional<std::string> error_;
  std::optional<RequestTimings> timings_;
};

}  // namespace sluice::server
