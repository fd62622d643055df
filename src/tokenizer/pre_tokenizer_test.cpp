// Splits of the pre-tokenizers (single regexes and sequences) on hand-written
// strings. Expected words follow from the patterns' alternatives, tried in order
// at each position (see the comments next to the less obvious cases).
#include "tokenizer/pre_tokenizer.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

using Words = std::vector<std::string>;

Words split(std::string_view pre, std::string_view text) {
  auto pt = PreTokenizer::for_pre(pre);
  EXPECT_TRUE(pt.ok()) << pt.status().to_string();
  if (!pt.ok()) return {};
  std::vector<std::string_view> views;
  (*pt)->split(text, &views);
  Words words(views.begin(), views.end());
  std::string joined;
  for (const auto& w : words) {
    EXPECT_FALSE(w.empty());
    joined += w;
  }
  EXPECT_EQ(joined, text) << "words must concatenate back to the input";
  return words;
}

TEST(PreTokenizer, Gpt2) {
  EXPECT_EQ(split("gpt-2", "Hello world"), (Words{"Hello", " world"}));
  EXPECT_EQ(split("gpt-2", "I'm 12345 ok"), (Words{"I", "'m", " 12345", " ok"}));
  // Contractions are case-sensitive: "'T" is punctuation then a letter run.
  EXPECT_EQ(split("gpt-2", "don't DON'T"), (Words{"don", "'t", " DON", "'", "T"}));
  // \s+(?!\S) leaves the last space to join the next word.
  EXPECT_EQ(split("gpt-2", "Hello   world"), (Words{"Hello", "  ", " world"}));
  EXPECT_EQ(split("gpt-2", "a\n\nb"), (Words{"a", "\n", "\n", "b"}));
  EXPECT_EQ(split("gpt-2", "end\n\n"), (Words{"end", "\n\n"}));
  EXPECT_EQ(split("gpt-2", " ...!? x"), (Words{" ...!?", " x"}));
  // \p{L} is Unicode-aware.
  EXPECT_EQ(split("gpt-2", "naïve 日本語 text"), (Words{"naïve", " 日本語", " text"}));
}

TEST(PreTokenizer, Llama3) {
  EXPECT_EQ(split("llama-bpe", "Hello world"), (Words{"Hello", " world"}));
  // Case-insensitive contractions.
  EXPECT_EQ(split("llama3", "DON'T we'LL"), (Words{"DON", "'T", " we", "'LL"}));
  // Digits in groups of at most three, never with a leading space.
  EXPECT_EQ(split("llama-bpe", "1234567"), (Words{"123", "456", "7"}));
  EXPECT_EQ(split("llama-bpe", "x 12"), (Words{"x", " ", "12"}));
  // One non-letter, non-digit character may lead a letter run; with a space
  // before it, it is two such characters, so the punctuation stands alone.
  EXPECT_EQ(split("llama-bpe", "$hello (world"), (Words{"$hello", " (", "world"}));
  EXPECT_EQ(split("llama-bpe", "a(world"), (Words{"a", "(world"}));
  // Newlines stay together, and punctuation keeps its trailing newlines.
  EXPECT_EQ(split("llama-bpe", "a\n\nb"), (Words{"a", "\n\n", "b"}));
  EXPECT_EQ(split("llama-bpe", "hi!\n\nyou"), (Words{"hi", "!\n\n", "you"}));
  EXPECT_EQ(split("llama-bpe", "  hi"), (Words{" ", " hi"}));
  EXPECT_EQ(split("llama-bpe", "a  \n b"), (Words{"a", "  \n", " b"}));
}

TEST(PreTokenizer, Qwen2) {
  // Every digit is its own word.
  EXPECT_EQ(split("qwen2", "1234"), (Words{"1", "2", "3", "4"}));
  EXPECT_EQ(split("qwen2", "abc123 x"), (Words{"abc", "1", "2", "3", " x"}));
  EXPECT_EQ(split("qwen2", "I'M here\n\n"), (Words{"I", "'M", " here", "\n\n"}));
  EXPECT_EQ(split("qwen2", "你好，世界"), (Words{"你好", "，世界"}));
}

// Names with several regexes: each one splits every word the earlier ones made.
TEST(PreTokenizer, RegexSequences) {
  EXPECT_EQ(split("deepseek-coder", "a\nb x12"), (Words{"a", "\n", "b", " x", "1", "2"}));
  // Falcon: GPT-2's words, then digit runs cut into threes.
  EXPECT_EQ(split("falcon", "n=1234567"), (Words{"n", "=", "123", "456", "7"}));
  // Tekken: a letter run breaks where lower case turns upper.
  EXPECT_EQ(split("tekken", "camelCaseWord HTTPServer"), (Words{"camel", "Case", "Word", " HTTPServer"}));
  // The default: punctuation runs first, then GPT-2's words, then digits.
  EXPECT_EQ(split("default", "a1, b..."), (Words{"a", "1", ",", " b", "..."}));
  EXPECT_EQ(split("", "a1"), split("default", "a1"));
  // Poro/BLOOM: words end at whitespace and the listed punctuation.
  EXPECT_EQ(split("bloom", "Hi, you. 你好。"), (Words{"Hi", ",", " you", ".", " 你好", "。"}));
}

TEST(PreTokenizer, StepSemantics) {
  const auto words = [](std::vector<PreSplitStep> steps, std::string_view text) {
    auto pt = PreTokenizer::from_steps(std::move(steps));
    EXPECT_TRUE(pt.ok()) << pt.status().to_string();
    std::vector<std::string_view> w;
    if (pt.ok()) (*pt)->split(text, &w);
    return Words(w.begin(), w.end());
  };
  // `$` is the end of the word only, not before a final newline.
  EXPECT_EQ(words({{"x$"}}, "x\n"), (Words{"x\n"}));
  EXPECT_EQ(words({{"x$"}}, "ax"), (Words{"a", "x"}));
  // Removed steps drop their matches.
  EXPECT_EQ(words({{" ", true}}, "a b  c "), (Words{"a", "b", "c"}));
  // Empty matches are not words.
  EXPECT_EQ(words({{"x*"}}, "axxb"), (Words{"a", "xx", "b"}));
  // A lookahead sees only the current word: "(?!\S)" holds at its end.
  EXPECT_EQ(words({{"[\n]"}, {R"(a(?!\S))"}}, "ba\nb"), (Words{"b", "a", "\n", "b"}));
  // No steps: the text is one word.
  EXPECT_EQ(words({}, "a b"), (Words{"a b"}));
}

TEST(PreTokenizer, InvalidUtf8BytesStandAlone) {
  EXPECT_EQ(split("gpt-2", "ab\xFF" "cd"), (Words{"ab", "\xFF", "cd"}));
  EXPECT_EQ(split("llama-bpe", "\xE6\x97 x"), (Words{"\xE6", "\x97", " x"}));
}

TEST(PreTokenizer, UnknownNamesAndBadPatterns) {
  auto pt = PreTokenizer::for_pre("no-such-pre");
  ASSERT_FALSE(pt.ok());
  EXPECT_EQ(pt.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(pt.status().message().find("no-such-pre"), std::string::npos);
  // The message lists what is supported.
  EXPECT_NE(pt.status().message().find("deepseek-coder"), std::string::npos);
  EXPECT_NE(pt.status().message().find("megrez"), std::string::npos);
  auto bad = PreTokenizer::from_pattern("(unclosed");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice
