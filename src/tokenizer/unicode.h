// UTF-8 helpers and the GPT-2 byte-level alphabet, shared by the tokenizers.
//
// Pure functions over bytes; no state, thread-safe. Nothing here allocates except
// functions that return a std::string.
#pragma once

#include <cstddef>
#include <cstdint>
#include <queue>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

// Byte length of the UTF-8 sequence that `lead` starts, judged by its high bits
// alone (1 for ASCII and for stray continuation bytes, 2..4 otherwise). Used to cut
// text into characters the way SentencePiece-style tokenizers do, even if invalid.
size_t utf8_seq_len(uint8_t lead);

// One character of a text being merged pairwise (SPM and BPE): a doubly linked
// list over the text's UTF-8 characters; merging grows a symbol and unlinks its
// right neighbour.
struct MergeSymbol {
  int prev = -1;
  int next = -1;
  size_t offset = 0;  // into the text
  size_t n = 0;       // bytes; 0 once merged into its left neighbour
};

// A mergeable pair queued by merge_pairwise's caller: `size` is the merged
// bytes when queued; the highest priority merges first (BPE: minus the merge
// rank; SPM: the merged piece's score), the leftmost on ties.
struct MergeBigram {
  int left = 0;
  int right = 0;
  double priority = 0;
  size_t size = 0;
};
struct MergeBigramOrder {
  bool operator()(const MergeBigram& a, const MergeBigram& b) const {
    return a.priority < b.priority || (a.priority == b.priority && a.left > b.left);
  }
};
using MergeQueue = std::priority_queue<MergeBigram, std::vector<MergeBigram>, MergeBigramOrder>;

// Appends one linked symbol per UTF-8 character of `text` to *out (cleared first).
void split_merge_symbols(std::string_view text, std::vector<MergeSymbol>* out);

// Pairwise merging of `text`, SPM's and BPE's loop: splits it into
// `symbols` (split_merge_symbols), offers every adjacent pair to
// try_add(left, right) (which queues it if mergeable and ignores negative
// indices), then pops the best queued bigram until `queue` is empty: skipped if
// either side changed since, else right merges into left and the new
// neighbours are offered. Last, emit(piece) for each remaining symbol in order.
template <typename TryAdd, typename Emit>
void merge_pairwise(std::string_view text, std::vector<MergeSymbol>& symbols, MergeQueue& queue, TryAdd&& try_add,
                    Emit&& emit) {
  split_merge_symbols(text, &symbols);
  for (size_t i = 1; i < symbols.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));
  while (!queue.empty()) {
    const auto b = queue.top();
    queue.pop();
    MergeSymbol& left = symbols[b.left];
    MergeSymbol& right = symbols[b.right];
    if (left.n == 0 || right.n == 0 || left.n + right.n != b.size) continue;  // stale
    left.n += right.n;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = b.left;
    try_add(left.prev, b.left);
    try_add(b.left, left.next);
  }
  for (int i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) emit(text.substr(symbols[i].offset, symbols[i].n));
}

// Length of the valid UTF-8 character at the start of `s` (1..4), or 0 if `s` does
// not start with a complete, valid one (overlong forms, surrogates and code points
// above U+10FFFF are invalid).
size_t utf8_valid_char_len(std::string_view s);

// True if the bytes of `s` are a proper prefix of some valid UTF-8 character, i.e.
// more bytes could still complete it.
bool utf8_is_incomplete_prefix(std::string_view s);

// Appends the UTF-8 encoding of code point `cp` (must be <= U+10FFFF).
void utf8_append(uint32_t cp, std::string* out);

// Decodes the valid character at the start of `s` (see utf8_valid_char_len).
uint32_t utf8_decode(std::string_view s, size_t len);

// GPT-2 byte-level alphabet: every byte maps to one printable code point
// (printable Latin-1 bytes map to themselves, the rest to U+0100 + n).
uint32_t byte_to_unicode(uint8_t b);
// Inverse of byte_to_unicode; -1 if `cp` is not in the alphabet.
int byte_from_unicode(uint32_t cp);

// Bytes -> their byte-level spelling (each byte becomes one code point, UTF-8 encoded).
std::string byte_level_encode(std::string_view bytes);
// Byte-level spelling -> bytes. Characters outside the alphabet are copied unchanged.
std::string byte_level_decode(std::string_view text);

}  // namespace sluice
