#include "tokenizer/rwkv.h"

namespace sluice {

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string rwkv_unescape(std::string_view escaped) {
  std::string out;
  out.reserve(escaped.size());
  for (size_t i = 0; i < escaped.size(); ++i) {
    const char c = escaped[i];
    if (c != '\\' || i + 1 == escaped.size()) {
      out.push_back(c);
      continue;
    }
    const char e = escaped[++i];
    switch (e) {
      case 't': out.push_back('\t'); break;
      case 'n': out.push_back('\n'); break;
      case 'r': out.push_back('\r'); break;
      case 'x': {
        const int hi = i + 1 < escaped.size() ? hex_value(escaped[i + 1]) : -1;
        const int lo = i + 2 < escaped.size() ? hex_value(escaped[i + 2]) : -1;
        if (hi < 0 || lo < 0) {
          out.push_back('x');
        } else {
          out.push_back(static_cast<char>(hi * 16 + lo));
          i += 2;
        }
        break;
      }
      default: out.push_back(e); break;
    }
  }
  return out;
}

RwkvEncoder::RwkvEncoder(const Vocab& vocab) : vocab_(vocab) {
  for (int32_t id = 0; id < vocab.n_vocab(); ++id) {
    const std::string bytes = rwkv_unescape(vocab.text(id));
    if (!bytes.empty()) tokens_.insert(bytes, id);
  }
}

void RwkvEncoder::encode(std::string_view text, std::vector<int32_t>* out) const {
  for (size_t pos = 0; pos < text.size();) {
    int32_t match = -1;
    size_t match_end = pos + 1;
    int32_t node = ByteTrie::root();
    for (size_t p = pos; p < text.size(); ++p) {
      node = tokens_.child(node, static_cast<uint8_t>(text[p]));
      if (node < 0) break;
      if (tokens_.value(node) >= 0) {
        match = tokens_.value(node);
        match_end = p + 1;
      }
    }
    if (match >= 0) {
      out->push_back(match);
    } else if (vocab_.unk_id() >= 0) {
      out->push_back(vocab_.unk_id());
    }
    pos = match_end;
  }
}

}  // namespace sluice
