#include "engine/output_text.h"

#include <algorithm>

namespace sluice {

OutputText::OutputText(const Tokenizer& tok, std::vector<std::string> stop_strings)
    : dec_(std::make_unique<StreamDecoder>(tok)), stops_(std::move(stop_strings)) {
  for (const std::string& s : stops_) max_stop_ = std::max(max_stop_, s.size());
}

bool OutputText::push(int32_t token, std::string* out) {
  if (stopped_) return true;
  text_ += dec_->push(token);
  // Earliest stop string that ends in the new text.
  size_t cut = std::string::npos;
  for (const std::string& s : stops_) {
    const size_t from = emitted_ >= s.size() - 1 ? emitted_ - (s.size() - 1) : 0;
    const size_t pos = text_.find(s, from);
    if (pos != std::string::npos) cut = std::min(cut, pos);
  }
  if (cut != std::string::npos) {
    if (cut > emitted_) out->append(text_, emitted_, cut - emitted_);
    text_.resize(std::max(cut, emitted_));
    emitted_ = text_.size();
    stopped_ = true;
    return true;
  }
  size_t safe = max_stop_ > 0 && text_.size() >= max_stop_ - 1 ? text_.size() - (max_stop_ - 1) : text_.size();
  if (max_stop_ > 0 && text_.size() < max_stop_ - 1) safe = 0;
  // Never split a UTF-8 character.
  while (safe > emitted_ && safe < text_.size() && (static_cast<unsigned char>(text_[safe]) & 0xC0) == 0x80) --safe;
  if (safe > emitted_) {
    out->append(text_, emitted_, safe - emitted_);
    emitted_ = safe;
  }
  return false;
}

std::string OutputText::finish(bool release) {
  if (!dec_) return "";
  if (!stopped_) text_ += dec_->finish();
  if (stopped_ || !release) return "";
  std::string rest = text_.substr(emitted_);
  emitted_ = text_.size();
  return rest;
}

}  // namespace sluice
