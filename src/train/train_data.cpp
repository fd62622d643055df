#include "train/train_data.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "server/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace sluice {
namespace {

using json = nlohmann::ordered_json;

bool is_jsonl(const std::string& path, const std::string& text) {
  if (path.size() >= 6 && path.compare(path.size() - 6, 6, ".jsonl") == 0) return true;
  const size_t p = text.find_first_not_of(" \t\r\n");
  return p != std::string::npos && text[p] == '{';
}

// FNV-1a over the example's ids.
void mix(uint64_t& h, int32_t v) {
  for (int i = 0; i < 4; ++i) {
    h ^= static_cast<uint8_t>(static_cast<uint32_t>(v) >> (8 * i));
    h *= 1099511628211ull;
  }
}

void add_example(TrainData& d, TrainExample ex) {
  d.n_tokens += static_cast<int64_t>(ex.tokens.size());
  for (size_t i = 0; i < ex.tokens.size(); ++i) {
    mix(d.hash, ex.tokens[i]);
    mix(d.hash, ex.targets[i]);
    d.n_counted += ex.targets[i] >= 0;
  }
  d.examples.push_back(std::move(ex));
}

// The example of a token sequence in which tokens at [counted_from[i]] count:
// inputs ids[0 .. n-2], targets ids[1 .. n-1] where they count.
TrainExample example_of(const std::vector<int32_t>& ids, const std::vector<uint8_t>& counts) {
  TrainExample ex;
  for (size_t i = 0; i + 1 < ids.size(); ++i) {
    ex.tokens.push_back(ids[i]);
    ex.targets.push_back(counts[i + 1] ? ids[i + 1] : -1);
  }
  return ex;
}

void load_text(TrainData& d, const std::string& text, const TrainDataOptions& o) {
  const std::vector<int32_t> ids = o.tokenizer->encode(text, /*add_special=*/true);
  const auto n = static_cast<int64_t>(ids.size());
  for (int64_t start = 0; start + 1 < n; start += o.seq) {
    const int64_t end = std::min(n, start + o.seq + 1);
    std::vector<int32_t> w(ids.begin() + start, ids.begin() + end);
    add_example(d, example_of(w, std::vector<uint8_t>(w.size(), 1)));
  }
}

// Ids of a rendered conversation: the template's text already holds BOS when
// it writes one, so the tokenizer adds it only when the text lacks it.
std::vector<int32_t> encode_rendered(const Tokenizer& tok, const std::string& text) {
  const bool has_bos = tok.bos_id() >= 0 && text.rfind(tok.token_text(tok.bos_id()), 0) == 0;
  std::vector<int32_t> ids = tok.encode(text, /*add_special=*/false, /*parse_special=*/true);
  if (!has_bos && tok.add_bos() && tok.bos_id() >= 0) ids.insert(ids.begin(), tok.bos_id());
  return ids;
}

StatusOr<std::vector<server::ChatMessage>> messages_of(const json& j, int64_t line) {
  if (!j.is_array() || j.empty()) return invalid_argument("line {}: \"messages\" must be a non-empty array", line);
  std::vector<server::ChatMessage> out;
  for (const json& m : j) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string()) {
      return invalid_argument("line {}: each message needs a string \"role\" and \"content\"", line);
    }
    out.push_back({.role = m["role"].get<std::string>(), .content = m["content"].get<std::string>()});
  }
  return out;
}

// One chat: tokens of the whole conversation, counting the tokens each
// assistant message adds to the rendering of the messages before it.
Status load_chat(TrainData& d, const json& messages, int64_t line, const TrainDataOptions& o) {
  if (o.chat == nullptr) {
    return invalid_argument("line {}: a chat example, but the model has no chat template (give one with "
                            "--chat-template)", line);
  }
  ASSIGN_OR_RETURN(std::vector<server::ChatMessage> msgs, messages_of(messages, line));
  auto render = [&](size_t n, bool gen) -> StatusOr<std::vector<int32_t>> {
    const std::vector<server::ChatMessage> head(msgs.begin(), msgs.begin() + static_cast<std::ptrdiff_t>(n));
    auto text = o.chat->apply(head, gen);
    if (!text.ok()) return text.status().with_context(fmt::format("line {}", line));
    return encode_rendered(*o.tokenizer, *text);
  };
  ASSIGN_OR_RETURN(std::vector<int32_t> ids, render(msgs.size(), false));
  std::vector<uint8_t> counts(ids.size(), 0);
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (msgs[i].role != "assistant") continue;
    ASSIGN_OR_RETURN(std::vector<int32_t> before, render(i, true));
    ASSIGN_OR_RETURN(std::vector<int32_t> through, render(i + 1, false));
    // The reply's tokens: past the prompt with its generation header, up to the
    // end of the rendering through this message (its end-of-turn included).
    for (size_t t = before.size(); t < through.size() && t < ids.size(); ++t) counts[t] = 1;
  }
  if (static_cast<int64_t>(ids.size()) > o.seq + 1) {
    ids.resize(static_cast<size_t>(o.seq + 1));
    counts.resize(ids.size());
    ++d.n_truncated;
  }
  TrainExample ex = example_of(ids, counts);
  if (std::none_of(ex.targets.begin(), ex.targets.end(), [](int32_t t) { return t >= 0; })) {
    ++d.n_dropped;
    return Status();
  }
  add_example(d, std::move(ex));
  return Status();
}

Status load_jsonl(TrainData& d, const std::string& text, const TrainDataOptions& o) {
  std::istringstream in(text);
  std::string s;
  int64_t line = 0;
  bool chat = false, plain = false;
  while (std::getline(in, s)) {
    ++line;
    if (s.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j = json::parse(s, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return invalid_argument("line {}: not a JSON object", line);
    if (j.contains("messages")) {
      chat = true;
      RETURN_IF_ERROR(load_chat(d, j["messages"], line, o));
    } else if (j.contains("text") && j["text"].is_string()) {
      plain = true;
      std::vector<int32_t> ids = o.tokenizer->encode(j["text"].get<std::string>(), /*add_special=*/true);
      if (static_cast<int64_t>(ids.size()) > o.seq + 1) {
        ids.resize(static_cast<size_t>(o.seq + 1));
        ++d.n_truncated;
      }
      if (ids.size() < 2) {
        ++d.n_dropped;
        continue;
      }
      add_example(d, example_of(ids, std::vector<uint8_t>(ids.size(), 1)));
    } else {
      return invalid_argument("line {}: expected {{\"messages\": [...]}} or {{\"text\": \"...\"}}", line);
    }
  }
  d.kind = chat && plain ? "chat and text" : chat ? "chat" : "jsonl text";
  return Status();
}

}  // namespace

StatusOr<TrainData> load_train_data(const std::string& path, const TrainDataOptions& o) {
  if (o.tokenizer == nullptr) return invalid_argument("training data needs the model's tokenizer");
  if (o.seq < 1) return invalid_argument("--seq must be at least 1, got {}", o.seq);
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found("cannot read training data {}", path);
  std::stringstream buf;
  buf << f.rdbuf();
  const std::string text = buf.str();
  TrainData d;
  d.hash = 14695981039346656037ull;
  if (is_jsonl(path, text)) {
    RETURN_IF_ERROR(load_jsonl(d, text, o).with_context(path));
  } else {
    d.kind = "text";
    load_text(d, text, o);
  }
  if (d.n_counted == 0) {
    return invalid_argument("{} tokenizes to nothing to learn from ({} examples, no position in the loss)", path,
                            d.examples.size());
  }
  return d;
}

StatusOr<TrainData> split_heldout(TrainData& data, double fraction) {
  TrainData held;
  held.kind = data.kind;
  held.hash = 14695981039346656037ull;
  if (fraction == 0.0) return held;
  if (!(fraction > 0.0 && fraction <= 0.5)) return invalid_argument("a held-out fraction in (0, 0.5], got {}", fraction);
  const auto k = static_cast<size_t>(std::max(2.0, std::round(1.0 / fraction)));
  if (data.examples.size() < 2) {
    return invalid_argument("{} training example(s): too few to hold some out (use --val-data or --val-split 0)",
                            data.examples.size());
  }
  TrainData train;
  train.kind = data.kind;
  train.hash = 14695981039346656037ull;
  train.n_truncated = data.n_truncated;
  train.n_dropped = data.n_dropped;
  for (size_t i = 0; i < data.examples.size(); ++i) {
    add_example(i % k == k - 1 ? held : train, std::move(data.examples[i]));
  }
  data = std::move(train);
  return held;
}

}  // namespace sluice
