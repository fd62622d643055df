#include "tokenizer/unicode_class.h"

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/utf16.h>

namespace sluice {

namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

const UNormalizer2* nfd() {
  static const UNormalizer2* n = [] {
    UErrorCode err = U_ZERO_ERROR;
    const UNormalizer2* p = unorm2_getNFDInstance(&err);
    return U_SUCCESS(err) ? p : nullptr;
  }();
  return n;
}

}  // namespace

UnicodeClass unicode_class(uint32_t cp) {
  if (cp > kMaxCodePoint) return UnicodeClass::kUnassigned;
  switch (u_charType(static_cast<UChar32>(cp))) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      return UnicodeClass::kLetter;
    case U_NON_SPACING_MARK:
    case U_ENCLOSING_MARK:
    case U_COMBINING_SPACING_MARK:
      return UnicodeClass::kMark;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER:
      return UnicodeClass::kNumber;
    case U_DASH_PUNCTUATION:
    case U_START_PUNCTUATION:
    case U_END_PUNCTUATION:
    case U_CONNECTOR_PUNCTUATION:
    case U_OTHER_PUNCTUATION:
    case U_INITIAL_PUNCTUATION:
    case U_FINAL_PUNCTUATION:
      return UnicodeClass::kPunctuation;
    case U_MATH_SYMBOL:
    case U_CURRENCY_SYMBOL:
    case U_MODIFIER_SYMBOL:
    case U_OTHER_SYMBOL:
      return UnicodeClass::kSymbol;
    case U_SPACE_SEPARATOR:
    case U_LINE_SEPARATOR:
    case U_PARAGRAPH_SEPARATOR:
      return UnicodeClass::kSeparator;
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_PRIVATE_USE_CHAR:
    case U_SURROGATE:
      return UnicodeClass::kControl;
    default:
      return UnicodeClass::kUnassigned;
  }
}

bool unicode_is_whitespace(uint32_t cp) {
  return cp <= kMaxCodePoint && u_isUWhiteSpace(static_cast<UChar32>(cp));
}

uint32_t unicode_to_lower(uint32_t cp) {
  if (cp > kMaxCodePoint) return cp;
  return static_cast<uint32_t>(u_tolower(static_cast<UChar32>(cp)));
}

uint32_t unicode_nfd_base(uint32_t cp) {
  const UNormalizer2* n = nfd();
  if (!n || cp > kMaxCodePoint) return cp;
  UChar buf[32];
  UErrorCode err = U_ZERO_ERROR;
  const int32_t len = unorm2_getDecomposition(n, static_cast<UChar32>(cp), buf, 32, &err);
  if (U_FAILURE(err) || len <= 0) return cp;
  UChar32 first = 0;
  int32_t i = 0;
  U16_NEXT(buf, i, len, first);
  return static_cast<uint32_t>(first);
}

}  // namespace sluice
