#include "server/request_stream.h"

#include "tokenizer/tokenizer.h"

namespace sluice::server {

void EventQueue::push(const TokenEvent& e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(e);
    if (e.timings) finished_ = true;
  }
  cv_.notify_one();
}

std::vector<TokenEvent> EventQueue::take(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [this] { return !events_.empty(); });
  std::vector<TokenEvent> out(std::make_move_iterator(events_.begin()), std::make_move_iterator(events_.end()));
  events_.clear();
  return out;
}

bool EventQueue::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

ChoiceAccumulator::ChoiceAccumulator(const Tokenizer& tokenizer, int32_t n, bool with_logprobs, ToolParsing tools,
                                     uint64_t id_seed)
    : tok_(tokenizer), with_logprobs_(with_logprobs) {
  totals_.resize(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    totals_[static_cast<size_t>(i)].index = i;
    parsers_.emplace_back(tools.format, id_seed + static_cast<uint64_t>(i) * 0x100000001b3ull, tools.max_calls);
  }
  before_.assign(static_cast<size_t>(n), 0);
  finished_.assign(static_cast<size_t>(n), false);
  tool_format_ = tools.format;
  if (tool_format_ != ToolCallFormat::kNone) {
    markers_.resize(static_cast<size_t>(n));
    for (MarkerTrack& m : markers_) m.plain = std::make_unique<StreamDecoder>(tok_);
  }
}

void ChoiceAccumulator::feed(MarkerTrack& track, ToolCallParser& parser, std::string_view text, ParsedOutput* out) {
  while (!track.waiting.empty() && track.waiting.front().first <= track.fed + text.size()) {
    const auto [at, marker] = track.waiting.front();
    track.waiting.pop_front();
    const size_t n = at > track.fed ? at - track.fed : 0;
    parser.push(text.substr(0, n), out);
    text.remove_prefix(n);
    track.fed += n;
    parser.push_marker(marker, out);
  }
  parser.push(text, out);
  track.fed += text.size();
}

ChoiceOutput ChoiceAccumulator::apply(const TokenEvent& e) {
  ChoiceOutput d;
  d.index = e.index;
  if (e.timings) timings_ = e.timings;
  if (e.index < 0 || e.index >= static_cast<int32_t>(totals_.size())) return d;
  ChoiceOutput& total = totals_[static_cast<size_t>(e.index)];
  before_[static_cast<size_t>(e.index)] = total.text.size();
  if (e.token >= 0 && !e.stop_token) {
    d.token_ids.push_back(e.token);
    ++n_tokens_;
    if (with_logprobs_) {
      TokenLogprob lp{.token = tok_.token_to_piece(e.token, /*render_special=*/true), .logprob = e.logprob};
      for (const auto& [id, l] : e.top_logprobs) lp.top.emplace_back(tok_.token_to_piece(id, true), l);
      d.logprobs.push_back(std::move(lp));
    }
  }
  ToolCallParser& parser = parsers_[static_cast<size_t>(e.index)];
  ParsedOutput parsed;
  if (tool_format_ == ToolCallFormat::kNone) {
    parser.push(e.text, &parsed);
  } else {
    MarkerTrack& track = markers_[static_cast<size_t>(e.index)];
    if (e.token >= 0) {
      // A control token adds no text, so the plain text decoded so far ends where it stands.
      if (tok_.is_control(e.token) && is_tool_call_marker(tool_format_, tok_.token_text(e.token)))
        track.waiting.emplace_back(track.decoded, tok_.token_text(e.token));
      track.decoded += track.plain->push(e.token).size();
    }
    feed(track, parser, e.text, &parsed);
  }
  if (e.finished && !finished_[static_cast<size_t>(e.index)]) {
    finished_[static_cast<size_t>(e.index)] = true;
    ++n_finished_;
    if (!markers_.empty()) markers_[static_cast<size_t>(e.index)].waiting.clear();  // past a stop string
    parser.finish(&parsed);
    d.finish_reason = finish_reason_name(e.finish_reason);  // the OpenAI names
    if (e.finish_reason == FinishReason::kError) error_ = e.error.empty() ? "generation failed" : e.error;
    if (parser.n_calls() > 0 && (e.finish_reason == FinishReason::kStop || e.finish_reason == FinishReason::kLength))
      d.finish_reason = "tool_calls";
  }
  d.text = std::move(parsed.content);
  d.first_call_index = static_cast<int32_t>(total.tool_calls.size());
  d.tool_calls = std::move(parsed.tool_calls);
  total.tool_calls.insert(total.tool_calls.end(), d.tool_calls.begin(), d.tool_calls.end());
  total.text += d.text;
  total.token_ids.insert(total.token_ids.end(), d.token_ids.begin(), d.token_ids.end());
  total.logprobs.insert(total.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
  if (!d.finish_reason.empty()) total.finish_reason = d.finish_reason;
  return d;
}

}  // namespace sluice::server
