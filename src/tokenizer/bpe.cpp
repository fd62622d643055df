#include "tokenizer/bpe.h"

#include <string>

#include "tokenizer/unicode.h"

namespace sluice {

namespace {

using Symbol = MergeSymbol;

class BpeSession {
 public:
  BpeSession(const Vocab& vocab, std::string text) : vocab_(vocab), text_(std::move(text)) {}

  void encode(std::vector<int32_t>* out) {
    const std::string_view text(text_);
    if (vocab_.ignore_merges()) {
      const int32_t id = vocab_.find(text);
      if (id >= 0) {
        out->push_back(id);
        return;
      }
    }
    merge_pairwise(
        text, symbols_, queue_, [this](int l, int r) { try_add_bigram(l, r); },
        [&](std::string_view piece) { emit(piece, out); });
  }

 private:
  void try_add_bigram(int left, int right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols_[left];
    const Symbol& r = symbols_[right];
    const std::string_view text(text_);
    const int32_t rank = vocab_.merge_rank(text.substr(l.offset, l.n), text.substr(r.offset, r.n));
    if (rank < 0) return;
    queue_.push(MergeBigram{left, right, -static_cast<double>(rank), l.n + r.n});  // lowest rank first
  }

  void emit(std::string_view piece, std::vector<int32_t>* out) const {
    const int32_t id = vocab_.find(piece);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
    for (size_t off = 0; off < piece.size();) {
      const size_t n = std::min(utf8_seq_len(static_cast<uint8_t>(piece[off])), piece.size() - off);
      const int32_t c = vocab_.find(piece.substr(off, n));
      if (c >= 0) {
        out->push_back(c);
      } else if (vocab_.unk_id() >= 0) {
        out->push_back(vocab_.unk_id());
      }
      off += n;
    }
  }

  const Vocab& vocab_;
  std::string text_;  // the word in the byte-level alphabet
  std::vector<Symbol> symbols_;
  MergeQueue queue_;
};

}  // namespace

void bpe_encode_word(const Vocab& vocab, std::string_view word, std::vector<int32_t>* out) {
  if (word.empty()) return;
  BpeSession(vocab, byte_level_encode(word)).encode(out);
}

}  // namespace sluice
