// import_hf_tokenizer on hand-written tokenizer.json / tokenizer_config.json files:
// byte-level BPE (merge formats, pre-tokenizer regex recognition), SentencePiece-
// style BPE, config special tokens and chat templates, and clear errors for
// unsupported or malformed input. (stories260k_test.cpp covers a real file.)
#include "format/hf_tokenizer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace sluice {
namespace {

using nlohmann::json;

const std::string kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const std::string kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

class HfTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice_hf_tok_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ + "/" + name) << text;
  }

  // A tiny GPT-2-style byte-level BPE ("Ġ" is the byte-level space).
  static json byte_level(json pre_tokenizer, json merges) {
    return json{{"model",
                 {{"type", "BPE"},
                  {"vocab", {{"a", 0}, {"b", 1}, {"\xC4\xA0", 2}, {"ab", 3}, {"\xC4\xA0" "a", 4}}},
                  {"merges", merges}}},
                {"added_tokens",
                 json::array({{{"id", 5}, {"content", "<|endoftext|>"}, {"special", true}},
                              {{"id", 6}, {"content", "<tool>"}, {"special", false}}})},
                {"pre_tokenizer", pre_tokenizer},
                {"decoder", {{"type", "ByteLevel"}}}};
  }

  Status import(Metadata* md) { return import_hf_tokenizer(dir_, md); }

  std::string dir_;
};

TEST_F(HfTokenizerTest, ByteLevelWithArrayMerges) {
  write("tokenizer.json",
        byte_level({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}},
                   json::array({json::array({"a", "b"}), json::array({"\xC4\xA0", "a"})}))
            .dump());
  write("tokenizer_config.json",
        json{{"bos_token", {{"content", "<|endoftext|>"}, {"lstrip", false}}},
             {"eos_token", "<|endoftext|>"},
             {"chat_template", "{{ messages }}"}}
            .dump());
  Metadata md;
  ASSERT_TRUE(import(&md).ok());
  EXPECT_EQ(md.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(md.get_string("tokenizer.ggml.pre"), "gpt-2");
  EXPECT_EQ(md.get_array("tokenizer.ggml.merges")->strings,
            (std::vector<std::string>{"a b", "\xC4\xA0 a"}));
  EXPECT_EQ(md.get_array("tokenizer.ggml.token_type")->ints,
            (std::vector<int64_t>{1, 1, 1, 1, 1, 3, 4}));
  EXPECT_EQ(md.get_int("tokenizer.ggml.bos_token_id"), 5);
  EXPECT_EQ(md.get_int("tokenizer.ggml.eos_token_id"), 5);
  EXPECT_EQ(md.get_bool("tokenizer.ggml.add_bos_token"), false);
  EXPECT_EQ(md.get_string("tokenizer.chat_template"), "{{ messages }}");

  auto tok = Tokenizer::from_metadata(md);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ((*tok)->encode("ab ab<|endoftext|>", false, true), (std::vector<int32_t>{3, 2, 3, 5}));
  EXPECT_EQ((*tok)->encode("a<tool>", false, false), (std::vector<int32_t>{0, 6}));
  EXPECT_TRUE((*tok)->is_eog(5));
}

TEST_F(HfTokenizerTest, RecognizesSplitRegexes) {
  const auto pre_for = [&](const std::string& regex) -> StatusOr<std::string> {
    json pre = {{"type", "Sequence"},
                {"pretokenizers",
                 json::array({{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}},
                              {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
    write("tokenizer.json", byte_level(pre, json::array({"a b"})).dump());
    Metadata md;
    RETURN_IF_ERROR(import(&md));
    return md.get_string("tokenizer.ggml.pre").value_or("");
  };
  auto llama3 = pre_for(kLlama3Regex);
  ASSERT_TRUE(llama3.ok()) << llama3.status().to_string();
  EXPECT_EQ(*llama3, "llama-bpe");
  auto qwen2 = pre_for(kQwen2Regex);
  ASSERT_TRUE(qwen2.ok()) << qwen2.status().to_string();
  EXPECT_EQ(*qwen2, "qwen2");
  // Any other regex is kept as a split step instead of a name.
  auto other = pre_for(R"(\p{N}{1,5}|\s+)");
  ASSERT_TRUE(other.ok()) << other.status().to_string();
  EXPECT_EQ(*other, "");
}

// Split steps the importer stored (kPreSplitKey) for a pre_tokenizer definition.
std::vector<std::string> pre_steps(const Metadata& md) {
  const MetaArray* a = md.get_array(kPreSplitKey);
  return a ? a->strings : std::vector<std::string>{};
}

TEST_F(HfTokenizerTest, PreTokenizerComponentsBecomeSplitSteps) {
  json pre = {{"type", "Sequence"},
              {"pretokenizers",
               json::array({{{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Removed"}},
                            {{"type", "Split"}, {"pattern", {{"String", "a+b"}}}, {"behavior", "Isolated"}},
                            {{"type", "Digits"}, {"individual_digits", true}},
                            {{"type", "Digits"}, {"individual_digits", false}},
                            {{"type", "Punctuation"}},
                            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
  json tj = byte_level(pre, json::array({"a b"}));
  tj["model"]["ignore_merges"] = true;
  write("tokenizer.json", tj.dump());
  Metadata md;
  ASSERT_TRUE(import(&md).ok());
  EXPECT_EQ(pre_steps(md), (std::vector<std::string>{"removed: ", R"(isolated:a\+b)", R"(isolated:\p{N})",
                                                     R"(isolated:\p{N}+)", R"(isolated:[\p{P}!-/:-@\[-`{-~])"}));
  EXPECT_FALSE(md.get_string("tokenizer.ggml.pre").has_value());
  EXPECT_EQ(md.get_bool(kIgnoreMergesKey), true);
  auto tok = Tokenizer::from_metadata(md);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  // The spaces are removed, so "ab ab" is two words "ab" (id 3), not 3 2 3.
  EXPECT_EQ((*tok)->encode("ab ab", false), (std::vector<int32_t>{3, 3}));
  EXPECT_EQ((*tok)->vocab().ignore_merges(), true);

  // ByteLevel's own regex is GPT-2's: named, no steps stored.
  write("tokenizer.json", byte_level({{"type", "ByteLevel"}, {"use_regex", true}}, json::array({"a b"})).dump());
  Metadata md2;
  ASSERT_TRUE(import(&md2).ok());
  EXPECT_EQ(md2.get_string("tokenizer.ggml.pre"), "gpt-2");
  EXPECT_TRUE(pre_steps(md2).empty());
}

TEST_F(HfTokenizerTest, DeepSeekCoderDefinitionSplitsAsItsPreName) {
  // tokenizer.json's pre_tokenizer of DeepSeek Coder: the same regexes as the
  // "deepseek-coder" name, in HF form.
  json pre = {{"type", "Sequence"},
              {"pretokenizers",
               json::array({{{"type", "Split"}, {"pattern", {{"Regex", "[\r\n]"}}}, {"behavior", "Isolated"}},
                            {{"type", "Split"}, {"pattern", {{"Regex", R"(\s?\p{L}+)"}}}, {"behavior", "Isolated"}},
                            {{"type", "Split"}, {"pattern", {{"Regex", R"(\s?\p{P}+)"}}}, {"behavior", "Isolated"}},
                            {{"type", "Split"}, {"pattern", {{"Regex", "[一-龥ࠀ-一가-퟿]+"}}}, {"behavior", "Isolated"}},
                            {{"type", "Digits"}, {"individual_digits", true}},
                            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
  write("tokenizer.json", byte_level(pre, json::array({"a b"})).dump());
  Metadata md;
  ASSERT_TRUE(import(&md).ok());
  std::vector<PreSplitStep> steps;
  for (const std::string& s : pre_steps(md)) {
    ASSERT_EQ(s.rfind("isolated:", 0), 0u) << s;
    steps.push_back({s.substr(9), false});
  }
  auto from_hf = PreTokenizer::from_steps(steps);
  auto named = PreTokenizer::for_pre("deepseek-coder");
  ASSERT_TRUE(from_hf.ok() && named.ok());
  for (std::string_view text : {"int x = 42;\r\n  return  中文字符 y;", "Héllo, wörld!! 123\n\n", "\t(a)[b]{c}"}) {
    std::vector<std::string_view> a, b;
    (*from_hf)->split(text, &a);
    (*named)->split(text, &b);
    EXPECT_EQ(a, b) << text;
  }
}

TEST_F(HfTokenizerTest, UnsupportedPreTokenizerPartsAreNamed) {
  const auto error_for = [&](const json& component) {
    write("tokenizer.json", byte_level({{"type", "Sequence"},
                                        {"pretokenizers", json::array({component, {{"type", "ByteLevel"}}})}},
                                       json::array({"a b"}))
                                .dump());
    Metadata md;
    return import(&md);
  };
  Status s = error_for({{"type", "Split"}, {"pattern", {{"Regex", "x"}}}, {"behavior", "MergedWithPrevious"}});
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("MergedWithPrevious"), std::string::npos) << s.to_string();
  s = error_for({{"type", "Split"}, {"pattern", {{"Regex", "x"}}}, {"invert", true}});
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("invert"), std::string::npos) << s.to_string();
  s = error_for({{"type", "Whitespace"}});
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("'Whitespace'"), std::string::npos) << s.to_string();
  s = error_for({{"type", "Split"}, {"pattern", {{"Regex", ""}}}});
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  // A regex PCRE2 cannot compile is refused when the tokenizer is built.
  ASSERT_TRUE(error_for({{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}}).ok());
  Metadata md;
  ASSERT_TRUE(import(&md).ok());
  EXPECT_EQ(Tokenizer::from_metadata(md).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(HfTokenizerTest, Llama3PostProcessorAddsBos) {
  json tj = byte_level({{"type", "Sequence"},
                        {"pretokenizers",
                         json::array({{{"type", "Split"}, {"pattern", {{"Regex", kLlama3Regex}}}},
                                      {{"type", "ByteLevel"}, {"use_regex", false}}})}},
                       json::array({"a b"}));
  tj["post_processor"] = {
      {"type", "Sequence"},
      {"processors",
       json::array({{{"type", "ByteLevel"}},
                    {{"type", "TemplateProcessing"},
                     {"single", json::array({{{"SpecialToken", {{"id", "<|endoftext|>"}, {"type_id", 0}}}},
                                             {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})}}})}};
  write("tokenizer.json", tj.dump());
  Metadata md;
  ASSERT_TRUE(import(&md).ok());
  EXPECT_EQ(md.get_bool("tokenizer.ggml.add_bos_token"), true);
  EXPECT_EQ(md.get_int("tokenizer.ggml.bos_token_id"), 5);
  auto tok = Tokenizer::from_metadata(md);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ((*tok)->encode("ab", true), (std::vector<int32_t>{5, 3}));
}

TEST_F(HfTokenizerTest, SentencePieceStyleMetaspace) {
  const std::string sp = "\xE2\x96\x81";
  json tj = {{"model",
              {{"type", "BPE"},
               {"byte_fallback", true},
               {"unk_token", "<unk>"},
               {"vocab", {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}, {"<0x41>", 3}, {sp, 4}, {"a", 5},
                          {"b", 6}, {"ab", 7}, {sp + "ab", 8}, {"ba", 9}}},
               {"merges", json::array({"a b", sp + " ab", "b a"})}}},
             {"added_tokens", json::array({{{"id", 1}, {"content", "<s>"}, {"special", true}},
                                           {{"id", 2}, {"content", "</s>"}, {"special", true}}})},
             {"pre_tokenizer", {{"type", "Metaspace"}, {"replacement", sp}, {"prepend_scheme", "first"}}}};
  write("tokenizer.json", tj.dump());
  write("tokenizer_config.json",
        json{{"add_bos_token", true}, {"bos_token", "<s>"}, {"eos_token", "</s>"},
             {"pad_token", nullptr},
             {"chat_template", json::array({{{"name", "tool_use"}, {"template", "T"}},
                                            {{"name", "default"}, {"template", "D"}}})}}
            .dump());
  Metadata md;
  const Status st = import(&md);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(md.get_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(md.get_bool("tokenizer.ggml.add_space_prefix"), true);
  EXPECT_EQ(md.get_array("tokenizer.ggml.token_type")->ints,
            (std::vector<int64_t>{2, 3, 3, 6, 1, 1, 1, 1, 1, 1}));
  const std::vector<double>& scores = md.get_array("tokenizer.ggml.scores")->floats;
  EXPECT_EQ(scores[7], 0.0);    // "ab": merge rank 0
  EXPECT_EQ(scores[8], -1.0);   // "▁ab": rank 1
  EXPECT_EQ(scores[9], -2.0);   // "ba": rank 2
  EXPECT_EQ(md.get_string("tokenizer.chat_template"), "D");
  EXPECT_EQ(md.get_int("tokenizer.ggml.padding_token_id"), 0xFFFFFFFF);  // none
  auto tok = Tokenizer::from_metadata(md);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  // "▁bab": "a b" (rank 0) beats "b a" (rank 2): ▁ b ab -> no "b ab" merge.
  EXPECT_EQ((*tok)->encode("ab", true), (std::vector<int32_t>{1, 8}));
  EXPECT_EQ((*tok)->encode("bab", false), (std::vector<int32_t>{4, 6, 7}));
  EXPECT_EQ((*tok)->encode("A", false), (std::vector<int32_t>{4, 3}));  // byte fallback
  EXPECT_EQ((*tok)->decode({1, 8}), "ab");
}

TEST_F(HfTokenizerTest, UnsupportedModelTypesByName) {
  write("tokenizer.json", json{{"model", {{"type", "WordPiece"}, {"vocab", json::object()}}}}.dump());
  Metadata md;
  const Status st = import(&md);
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
  EXPECT_NE(st.message().find("WordPiece"), std::string::npos);

  write("tokenizer.json", json{{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", json::array()}}}}.dump());
  EXPECT_EQ(import(&md).code(), StatusCode::kUnimplemented);  // neither byte-level nor SPM
}

TEST_F(HfTokenizerTest, MalformedInputIsAStatus) {
  Metadata md;
  EXPECT_EQ(import(&md).code(), StatusCode::kNotFound);  // no tokenizer.json
  const auto code_for = [&](const std::string& text) {
    write("tokenizer.json", text);
    return import(&md).code();
  };
  EXPECT_EQ(code_for("{not json"), StatusCode::kDataLoss);
  EXPECT_EQ(code_for("[1, 2]"), StatusCode::kDataLoss);
  EXPECT_EQ(code_for(R"({"model": 3})"), StatusCode::kDataLoss);
  const json pre = {{"type", "ByteLevel"}};
  json tj = byte_level(pre, json::array({"a b"}));
  tj["model"]["vocab"]["x"] = "seven";
  EXPECT_EQ(code_for(tj.dump()), StatusCode::kDataLoss);
  tj = byte_level(pre, json::array({"a b"}));
  tj["model"]["vocab"]["x"] = 1000000;  // leaves a hole in the ids
  EXPECT_EQ(code_for(tj.dump()), StatusCode::kDataLoss);
  tj = byte_level(pre, json::array({"a b"}));
  tj["model"]["vocab"]["x"] = 3;  // duplicate id
  EXPECT_EQ(code_for(tj.dump()), StatusCode::kDataLoss);
  EXPECT_EQ(code_for(byte_level(pre, json::array({"ab"})).dump()), StatusCode::kDataLoss);
  EXPECT_EQ(code_for(byte_level(pre, json::array({json::array({"a", 1})})).dump()), StatusCode::kDataLoss);
  EXPECT_EQ(code_for(byte_level(pre, "a b").dump()), StatusCode::kDataLoss);
  tj = byte_level(pre, json::array({"a b"}));
  tj["added_tokens"][0].erase("content");
  EXPECT_EQ(code_for(tj.dump()), StatusCode::kDataLoss);

  write("tokenizer.json", byte_level(pre, json::array({"a b"})).dump());
  write("tokenizer_config.json", R"({"bos_token": "<nope>"})");
  Status st = import(&md);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("<nope>"), std::string::npos);
  write("tokenizer_config.json", R"({"eos_token": 5})");
  EXPECT_EQ(import(&md).code(), StatusCode::kDataLoss);
  write("tokenizer_config.json", R"({"chat_template": 5})");
  EXPECT_EQ(import(&md).code(), StatusCode::kDataLoss);
  write("tokenizer_config.json", "{oops");
  EXPECT_EQ(import(&md).code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace sluice
