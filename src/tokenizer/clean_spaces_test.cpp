// clean_spaces: the detokenizer rewrites on hand-checked texts, against a
// three-pass statement of the rule on every short text over the bytes that
// matter, streamed in every split, and against llama.cpp's llama_detokenize on
// the real GPT-2 vocabulary (tests/data/clean_spaces_gpt2_llamacpp.json).
#include "tokenizer/clean_spaces.h"

#include <gtest/gtest.h>


#include <nlohmann/json.hpp>

#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer_test_util.h"

namespace sluice {
namespace {

using nlohmann::json;

// The rule as three whole-text passes, each over the result of the one before.
std::string three_passes(std::string s) {
  auto punct = [](char c) { return c == '?' || c == '!' || c == '.' || c == ','; };
  std::string a;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == ' ' && i + 1 < s.size() && punct(s[i + 1])) continue;
    a += s[i];
  }
  std::string b;
  for (size_t i = 0; i < a.size();) {
    if (i + 2 < a.size() && a[i] == ' ' && a[i + 1] == '\'' && a[i + 2] == ' ') {
      b += '\'';
      i += 3;
    } else {
      b += a[i++];
    }
  }
  std::string c;
  for (size_t i = 0; i < b.size(); ++i) {
    if (b[i] == ' ' && i + 2 < b.size() && b[i + 1] == '\'') {
      const char x1 = b[i + 2];
      const char x2 = i + 3 < b.size() ? b[i + 3] : '\0';
      if (x1 == 's' || x1 == 'm' || ((x1 == 'r' || x1 == 'v') && x2 == 'e')) continue;
    }
    c += b[i];
  }
  return c;
}

std::string streamed(std::string_view text, const std::vector<size_t>& cuts) {
  SpaceCleaner cleaner;
  std::string out;
  size_t at = 0;
  for (size_t cut : cuts) {
    cleaner.push(text.substr(at, cut - at), &out);
    at = cut;
  }
  cleaner.push(text.substr(at), &out);
  cleaner.finish(&out);
  return out;
}

TEST(CleanSpaces, HandCheckedTexts) {
  const std::pair<const char*, const char*> cases[] = {
      {"Hello , world !", "Hello, world!"},
      {"Is it ? Yes . No", "Is it? Yes. No"},
      {" .", "."},
      {"x  .", "x ."},          // one space per punctuation mark
      {"it 's I 'm", "it's I'm"},
      {"they 're we 've", "they're we've"},
      {"you 'll I 'd don 't", "you 'll I 'd don 't"},  // left alone
      {"do n't", "do n't"},     // left alone (HF would give "don't")
      {"a ' b", "a'b"},
      {" ' ' ", "'' "},         // the first match takes the middle space
      {"  ' s", "'s"},          // " ' " first, then " 's"
      {"end 'r", "end 'r"},
      {"end '", "end '"},
      {"they 'ree", "they'ree"},
      {"tab\t. new\n.", "tab\t. new\n."},  // only ' ' counts
      {"日本 。 🚀 !", "日本 。 🚀!"},
      {"", ""},
  };
  for (const auto& [in, want] : cases) {
    EXPECT_EQ(clean_spaces(in), want) << "'" << in << "'";
    EXPECT_EQ(three_passes(in), want) << "'" << in << "'";
  }
}

// Every text of up to 6 bytes over the bytes the rules read (and one they do
// not): the streaming cleaner equals the three passes, fed at once and byte by byte.
TEST(CleanSpaces, EveryShortTextMatchesThreePassesAndStreamsTheSame) {
  const std::string alphabet = " '.smrvex";
  int n = 0;
  for (size_t len = 0; len <= 6; ++len) {
    std::vector<size_t> digit(len, 0);
    for (;;) {
      std::string text;
      for (size_t d : digit) text += alphabet[d];
      const std::string want = three_passes(text);
      ASSERT_EQ(clean_spaces(text), want) << "'" << text << "'";
      std::vector<size_t> every;
      for (size_t i = 1; i < len; ++i) every.push_back(i);
      ASSERT_EQ(streamed(text, every), want) << "'" << text << "' byte by byte";
      ++n;
      size_t k = 0;
      while (k < len && ++digit[k] == alphabet.size()) digit[k++] = 0;
      if (k == len) break;
    }
  }
  EXPECT_EQ(n, 1 + 9 + 81 + 729 + 6561 + 59049 + 531441);
}

TEST(CleanSpaces, EverySplitOfALongerTextStreamsTheSame) {
  const std::string text = "He said , ' hi ' . They 're here ; it 's  ' s  ' re , ok ?";
  const std::string want = clean_spaces(text);
  EXPECT_EQ(want, three_passes(text));
  for (size_t i = 0; i <= text.size(); ++i) {
    for (size_t j = i; j <= text.size(); ++j) ASSERT_EQ(streamed(text, {i, j}), want) << i << " " << j;
  }
}

TEST(CleanSpaces, FinishResetsForTheNextText) {
  SpaceCleaner cleaner;
  std::string out;
  cleaner.push("a '", &out);
  cleaner.finish(&out);
  cleaner.push("s", &out);
  cleaner.finish(&out);
  EXPECT_EQ(out, "a 's");  // no rewrite across finish()
}

json read_clean_spaces_golden() { return testing::read_test_data_json("clean_spaces_gpt2_llamacpp.json"); }

// decode() and StreamDecoder of llama.cpp's ids give llama_detokenize's text.
TEST(CleanSpaces, Gpt2VocabDecodesAsLlamaCppDetokenizes) {
  const json golden = read_clean_spaces_golden();
  ASSERT_TRUE(golden.is_object()) << "tests/data/clean_spaces_gpt2_llamacpp.json is missing or invalid";
  for (const json& c : golden["cases"]) EXPECT_EQ(clean_spaces(c["raw"].get<std::string>()), c["detok"]) << c["text"];
  const std::string gguf = testing::model_path("vocab/ggml-vocab-gpt-2.gguf");
  SKIP_UNLESS_EXISTS(gguf);
  auto tok = testing::load_gguf_tokenizer(gguf);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  ASSERT_TRUE((*tok)->clean_spaces());
  int n_changed = 0;
  for (const json& c : golden["cases"]) {
    const std::string text = c["text"];
    const std::vector<int32_t> ids = c["ids"];
    EXPECT_EQ((*tok)->encode(text, false), ids) << text;
    EXPECT_EQ((*tok)->decode(ids), c["detok"]) << text;
    StreamDecoder stream(**tok);
    std::string s;
    for (int32_t id : ids) s += stream.push(id);
    s += stream.finish();
    EXPECT_EQ(s, c["detok"]) << text;
    n_changed += c["detok"] != c["raw"];
  }
  EXPECT_GE(n_changed, 25);
}

// Names whose flag is off, and SentencePiece vocabularies, decode the plain pieces.
TEST(CleanSpaces, OffForNamesThatClearItAndForSpm) {
  const std::string gguf = testing::model_path("vocab/ggml-vocab-gpt-2.gguf");
  SKIP_UNLESS_EXISTS(gguf);
  auto mf = read_gguf(gguf);
  ASSERT_TRUE(mf.ok()) << mf.status().to_string();
  for (const char* pre : {"qwen2", "deepseek-v3", "tekken", "command-r"}) {
    Metadata md = mf->metadata;
    md.set("tokenizer.ggml.pre", MetaValue::str(pre));
    auto tok = Tokenizer::from_metadata(md);
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    EXPECT_FALSE((*tok)->clean_spaces()) << pre;
    const std::vector<int32_t> ids = (*tok)->encode("it 's here , ok", false);
    EXPECT_EQ((*tok)->decode(ids), "it 's here , ok") << pre;
  }
  const std::string spm = testing::model_path("vocab/ggml-vocab-llama-spm.gguf");
  SKIP_UNLESS_EXISTS(spm);
  auto tok = testing::load_gguf_tokenizer(spm);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_FALSE((*tok)->clean_spaces());
  EXPECT_EQ((*tok)->decode((*tok)->encode("it 's here , ok", false)), " it 's here , ok");
}

}  // namespace
}  // namespace sluice
