// Unicode character properties the WordPiece ("bert") tokenizer normalizes with:
// general category, White_Space, simple lowercase and the first code point of the
// canonical (NFD) decomposition. Backed by ICU's character database.
//
// Pure functions of a code point; thread-safe. Code points above U+10FFFF are
// treated as unassigned.
#pragma once

#include <cstdint>

namespace sluice {

// The general category's major class (\p{L}, \p{N}, ...), with unassigned (Cn)
// kept apart from the other C* categories as Unicode's regex classes do not.
enum class UnicodeClass : uint8_t {
  kUnassigned,   // Cn
  kLetter,       // L*
  kMark,         // M*
  kNumber,       // N*
  kPunctuation,  // P*
  kSymbol,       // S*
  kSeparator,    // Z*
  kControl,      // Cc, Cf, Co, Cs
};

UnicodeClass unicode_class(uint32_t cp);

// The White_Space property: \t..\r, space, U+0085, U+00A0, U+1680, U+2000..U+200A,
// U+2028, U+2029, U+202F, U+205F, U+3000.
bool unicode_is_whitespace(uint32_t cp);

// Simple (one code point to one) lowercase mapping; `cp` itself if it has none.
uint32_t unicode_to_lower(uint32_t cp);

// First code point of the canonical decomposition ("é" -> "e", "Å" -> "A"); `cp`
// itself if it does not decompose. This drops accents the way llama.cpp's WPM
// normalization does.
uint32_t unicode_nfd_base(uint32_t cp);

}  // namespace sluice
