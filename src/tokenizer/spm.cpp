#include "tokenizer/spm.h"

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "tokenizer/unicode.h"

namespace sluice {

namespace {

// One piece of the text in a doubly linked list; n == 0 marks a piece merged away.
using Symbol = MergeSymbol;

class SpmSession {
 public:
  SpmSession(const Vocab& vocab, std::string_view text) : vocab_(vocab), text_(text) {}

  void encode(std::vector<int32_t>* out) {
    merge_pairwise(
        text_, symbols_, queue_, [this](int l, int r) { try_add_bigram(l, r); },
        [&](std::string_view piece) { resegment(piece, out); });
  }

 private:
  void try_add_bigram(int left, int right) {
    if (left < 0 || right < 0) return;
    const size_t size = symbols_[left].n + symbols_[right].n;
    const std::string_view piece = text_.substr(symbols_[left].offset, size);
    const int32_t id = vocab_.find(piece);
    if (id < 0) return;
    queue_.push(MergeBigram{left, right, vocab_.score(id), size});  // highest score first
    rev_merge_.emplace(piece, std::make_pair(left, right));
  }

  // Emits `piece` as one token if it is one; otherwise undoes the merge that made
  // it, or falls back to bytes for a single character.
  void resegment(std::string_view piece, std::vector<int32_t>* out) {
    const int32_t id = vocab_.find(piece);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
    const auto it = rev_merge_.find(piece);
    if (it == rev_merge_.end()) {
      // An unknown character: its bytes as byte tokens, or one unknown token.
      const bool all_bytes = std::all_of(piece.begin(), piece.end(), [&](char c) {
        return vocab_.byte_token(static_cast<uint8_t>(c)) >= 0;
      });
      if (all_bytes) {
        for (char c : piece) out->push_back(vocab_.byte_token(static_cast<uint8_t>(c)));
      } else if (vocab_.unk_id() >= 0) {
        out->push_back(vocab_.unk_id());
      }
      return;
    }
    const Symbol& l = symbols_[it->second.first];
    const Symbol& r = symbols_[it->second.second];
    // The pieces as they were when merged: left starts the piece, right follows it.
    const size_t left_n = r.offset - l.offset;
    resegment(piece.substr(0, left_n), out);
    resegment(piece.substr(left_n), out);
  }

  const Vocab& vocab_;
  std::string_view text_;
  std::vector<Symbol> symbols_;
  MergeQueue queue_;
  std::unordered_map<std::string_view, std::pair<int, int>> rev_merge_;
};

}  // namespace

void spm_encode(const Vocab& vocab, std::string_view text, std::vector<int32_t>* out) {
  if (text.empty()) return;
  SpmSession(vocab, text).encode(out);
}

std::string spm_escape_spaces(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 8);
  for (char c : text) {
    if (c == ' ') {
      out += "\xE2\x96\x81";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace sluice
