#include "tokenizer/clean_spaces.h"

namespace sluice {

namespace {

bool is_clean_punct(char c) { return c == '?' || c == '!' || c == '.' || c == ','; }

}  // namespace

void SpaceCleaner::push(std::string_view text, std::string* out) {
  for (const char c : text) punct_stage(c, out);
}

void SpaceCleaner::finish(std::string* out) {
  if (punct_space_) {
    punct_space_ = false;
    quote_stage(' ', out);
  }
  flush_quote(out);
  flush_contraction(out);
}

// Rewrite 1: a held space is dropped when the next byte is one of ?!.,
void SpaceCleaner::punct_stage(char c, std::string* out) {
  if (punct_space_) {
    punct_space_ = false;
    if (!is_clean_punct(c)) quote_stage(' ', out);
  }
  if (c == ' ') {
    punct_space_ = true;
  } else {
    quote_stage(c, out);
  }
}

// Rewrite 2: " ' " -> "'". The space after the quote is consumed, so it never
// starts another match.
void SpaceCleaner::quote_stage(char c, std::string* out) {
  switch (quote_state_) {
    case 0:
      if (c == ' ') {
        quote_state_ = 1;
      } else {
        contraction_stage(c, out);
      }
      return;
    case 1:
      if (c == '\'') {
        quote_state_ = 2;
      } else if (c == ' ') {
        contraction_stage(' ', out);  // the older space can no longer match
      } else {
        quote_state_ = 0;
        contraction_stage(' ', out);
        contraction_stage(c, out);
      }
      return;
    default:  // " '"
      quote_state_ = 0;
      if (c == ' ') {
        contraction_stage('\'', out);
      } else {
        contraction_stage(' ', out);
        contraction_stage('\'', out);
        contraction_stage(c, out);  // not a space: it cannot begin a match
      }
      return;
  }
}

void SpaceCleaner::flush_quote(std::string* out) {
  if (quote_state_ >= 1) contraction_stage(' ', out);
  if (quote_state_ == 2) contraction_stage('\'', out);
  quote_state_ = 0;
}

// Rewrite 3: the space of " 's", " 'm", " 're", " 've" is dropped.
void SpaceCleaner::contraction_stage(char c, std::string* out) {
  switch (contraction_state_) {
    case 0:
      if (c == ' ') {
        contraction_state_ = 1;
      } else {
        out->push_back(c);
      }
      return;
    case 1:
      if (c == '\'') {
        contraction_state_ = 2;
      } else if (c == ' ') {
        out->push_back(' ');
      } else {
        contraction_state_ = 0;
        out->push_back(' ');
        out->push_back(c);
      }
      return;
    case 2:  // " '"
      if (c == 's' || c == 'm') {
        contraction_state_ = 0;
        out->push_back('\'');
        out->push_back(c);
      } else if (c == 'r' || c == 'v') {
        contraction_state_ = c == 'r' ? 3 : 4;
      } else {
        contraction_state_ = 0;
        out->append(" '");
        contraction_stage(c, out);  // c may start a new match (a space)
      }
      return;
    default: {  // " 'r" or " 'v"
      const char held = contraction_state_ == 3 ? 'r' : 'v';
      contraction_state_ = 0;
      if (c == 'e') {
        out->push_back('\'');
        out->push_back(held);
        out->push_back('e');
      } else {
        out->append(" '");
        out->push_back(held);
        contraction_stage(c, out);
      }
      return;
    }
  }
}

void SpaceCleaner::flush_contraction(std::string* out) {
  switch (contraction_state_) {
    case 0: break;
    case 1: out->push_back(' '); break;
    case 2: out->append(" '"); break;
    default:
      out->append(" '");
      out->push_back(contraction_state_ == 3 ? 'r' : 'v');
      break;
  }
  contraction_state_ = 0;
}

std::string clean_spaces(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  SpaceCleaner cleaner;
  cleaner.push(text, &out);
  cleaner.finish(&out);
  return out;
}

}  // namespace sluice
