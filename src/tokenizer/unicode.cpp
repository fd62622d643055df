#include "tokenizer/unicode.h"

#include <algorithm>
#include <array>

namespace sluice {

size_t utf8_seq_len(uint8_t lead) {
  // Indexed by the high nibble: 0xxx -> 1, 10xx -> 1 (stray), 110x -> 2, 1110 -> 3, 1111 -> 4.
  static constexpr std::array<uint8_t, 16> kLen = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

namespace {

// Allowed range of the second byte for a lead byte (Unicode Table 3-7).
bool second_byte_ok(uint8_t lead, uint8_t b) {
  if (lead == 0xE0) return b >= 0xA0 && b <= 0xBF;
  if (lead == 0xED) return b >= 0x80 && b <= 0x9F;
  if (lead == 0xF0) return b >= 0x90 && b <= 0xBF;
  if (lead == 0xF4) return b >= 0x80 && b <= 0x8F;
  return (b & 0xC0) == 0x80;
}

// Sequence length for a valid lead byte, or 0 if the byte cannot start a character.
size_t lead_len(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// Number of leading bytes of `s` (at most `len`) that are consistent with a valid
// sequence started by s[0].
size_t valid_prefix(std::string_view s, size_t len) {
  size_t n = 1;
  for (; n < len && n < s.size(); ++n) {
    const uint8_t b = static_cast<uint8_t>(s[n]);
    const bool ok = n == 1 ? second_byte_ok(static_cast<uint8_t>(s[0]), b) : (b & 0xC0) == 0x80;
    if (!ok) break;
  }
  return n;
}

}  // namespace

size_t utf8_valid_char_len(std::string_view s) {
  if (s.empty()) return 0;
  const size_t len = lead_len(static_cast<uint8_t>(s[0]));
  if (len == 0 || s.size() < len) return 0;
  return valid_prefix(s, len) == len ? len : 0;
}

bool utf8_is_incomplete_prefix(std::string_view s) {
  if (s.empty()) return false;
  const size_t len = lead_len(static_cast<uint8_t>(s[0]));
  if (len <= 1 || s.size() >= len) return false;
  return valid_prefix(s, len) == s.size();
}

void utf8_append(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

uint32_t utf8_decode(std::string_view s, size_t len) {
  const auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(s[i])); };
  switch (len) {
    case 1: return b(0);
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

namespace {

// The GPT-2 table: bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF keep their value;
// the other 68 bytes, in increasing order, get U+0100, U+0101, ...
struct ByteLevelTable {
  std::array<uint32_t, 256> to_cp{};
  std::array<int16_t, 324> from_cp{};  // code points < 0x100 + 68

  ByteLevelTable() {
    from_cp.fill(-1);
    uint32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      to_cp[b] = keep ? static_cast<uint32_t>(b) : next++;
      from_cp[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteLevelTable& byte_level_table() {
  static const ByteLevelTable kTable;
  return kTable;
}

}  // namespace

uint32_t byte_to_unicode(uint8_t b) { return byte_level_table().to_cp[b]; }

int byte_from_unicode(uint32_t cp) {
  const auto& t = byte_level_table();
  return cp < t.from_cp.size() ? t.from_cp[cp] : -1;
}

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) utf8_append(byte_to_unicode(static_cast<uint8_t>(c)), &out);
  return out;
}

std::string byte_level_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const size_t len = utf8_valid_char_len(text.substr(i));
    if (len == 0) {  // not valid UTF-8: keep the byte as it is
      out.push_back(text[i]);
      ++i;
      continue;
    }
    const int b = byte_from_unicode(utf8_decode(text.substr(i), len));
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
    } else {
      out.append(text.substr(i, len));
    }
    i += len;
  }
  return out;
}

void split_merge_symbols(std::string_view text, std::vector<MergeSymbol>* out) {
  out->clear();
  for (size_t off = 0; off < text.size();) {
    const size_t n = std::min(utf8_seq_len(static_cast<uint8_t>(text[off])), text.size() - off);
    MergeSymbol s;
    s.offset = off;
    s.n = n;
    s.prev = static_cast<int>(out->size()) - 1;
    s.next = off + n < text.size() ? static_cast<int>(out->size()) + 1 : -1;
    out->push_back(s);
    off += n;
  }
}

}  // namespace sluice
