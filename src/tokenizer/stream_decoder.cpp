#include "tokenizer/stream_decoder.h"

#include "tokenizer/unicode.h"

namespace sluice {

namespace {

constexpr const char* kReplacement = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace

StreamDecoder::StreamDecoder(const Tokenizer& tok, bool render_special)
    : tok_(tok), render_special_(render_special), clean_(tok.clean_spaces()) {}

std::string StreamDecoder::push(int32_t id) {
  const std::string_view piece = tok_.piece_after(prev_id_, id, render_special_);
  if (clean_) {
    cleaner_.push(piece, &pending_);
  } else {
    pending_.append(piece);
  }
  prev_id_ = id;
  std::string out;
  drain(&out);
  return out;
}

void StreamDecoder::drain(std::string* out) {
  const std::string_view bytes(pending_);
  size_t i = 0;
  while (i < bytes.size()) {
    const std::string_view rest = bytes.substr(i);
    const size_t n = utf8_valid_char_len(rest);
    if (n > 0) {
      out->append(rest.substr(0, n));
      i += n;
    } else if (utf8_is_incomplete_prefix(rest)) {
      break;  // wait for the bytes that complete this character
    } else {
      *out += kReplacement;  // a byte that cannot start or continue a valid character
      ++i;
    }
  }
  pending_.erase(0, i);
}

std::string StreamDecoder::finish() {
  std::string out;
  if (clean_) {
    cleaner_.finish(&pending_);
    drain(&out);
  }
  if (!pending_.empty()) out += kReplacement;
  pending_.clear();
  prev_id_ = -1;
  return out;
}

}  // namespace sluice
