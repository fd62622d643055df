// Every tokenizer.ggml.pre name against llama.cpp, on a real vocabulary: the GPT-2
// vocabulary (../shared/models/vocab) tokenizes llama.cpp's test texts with each
// name's pre-tokenizer, and the ids must equal llama.cpp's for that name
// (tests/data/pretok_gpt2_llamacpp.json; how it was produced is written in it).
// The jina-v2-* names need a "<mask>" token: they run on the same vocabulary with
// token 50256 renamed, also with special tokens parsed (the mask's lstrip).
#include <gtest/gtest.h>

#include <set>

#include <nlohmann/json.hpp>

#include "tokenizer/clean_spaces.h"
#include "tokenizer/pre_tokenizer_table.h"
#include "tokenizer/tokenizer_test_util.h"

namespace sluice {
namespace {

using nlohmann::json;

json read_pretok_golden() { return testing::read_test_data_json("pretok_gpt2_llamacpp.json"); }

TEST(PreTokenizerGolden, EveryNameHasLlamaCppIds) {
  const json golden = read_pretok_golden();
  ASSERT_TRUE(golden.is_object()) << "tests/data/pretok_gpt2_llamacpp.json is missing or invalid";
  std::set<std::string> covered;
  for (const json& g : golden["groups"]) {
    for (const json& n : g["names"]) covered.insert(n.get<std::string>());
  }
  for (const json& n : golden["mask_vocab"]["same_ids_as_gpt2_on_texts"]) covered.insert(n.get<std::string>());
  for (const PreName& n : pre_names()) {
    EXPECT_TRUE(covered.count(std::string(n.name))) << n.name << " has no golden ids";
  }
  // ... and every name in the file is one the table knows.
  for (const std::string& name : covered) EXPECT_NE(find_pre_name(name), nullptr) << name;
}

TEST(PreTokenizerGolden, Gpt2VocabEveryNameMatchesLlamaCpp) {
  const std::string gguf = testing::model_path("vocab/ggml-vocab-gpt-2.gguf");
  SKIP_UNLESS_EXISTS(gguf);
  const json golden = read_pretok_golden();
  ASSERT_TRUE(golden.is_object());
  auto mf = read_gguf(gguf);
  ASSERT_TRUE(mf.ok()) << mf.status().to_string();
  const json& texts = golden["texts"];
  ASSERT_EQ(texts.size(), 60u);

  const auto check_name = [&](const Metadata& vocab_md, const std::string& name, const json& text_list,
                              const json& want_ids, bool parse_special) -> int {
    Metadata md = vocab_md;
    md.set("tokenizer.ggml.pre", MetaValue::str(name));
    auto tok = Tokenizer::from_metadata(md);
    EXPECT_TRUE(tok.ok()) << name << ": " << tok.status().to_string();
    if (!tok.ok()) return 0;
    int n_match = 0;
    for (size_t i = 0; i < text_list.size(); ++i) {
      const std::string text = text_list[i].get<std::string>();
      const std::vector<int32_t> want = want_ids[i].get<std::vector<int32_t>>();
      const std::vector<int32_t> got = (*tok)->encode(text, /*add_special=*/false, parse_special);
      EXPECT_EQ(got, want) << "pre '" << name << "', text " << i << " '" << text << "'\n got:"
                           << testing::ids_string(got) << "\nwant:" << testing::ids_string(want);
      n_match += got == want;
      // Byte-level BPE with isolating steps loses nothing (decode() then applies
      // the clean_spaces rewrites if the name sets them).
      if (!parse_special) {
        EXPECT_EQ((*tok)->decode(got), (*tok)->clean_spaces() ? clean_spaces(text) : text)
            << "pre '" << name << "' round trip of text " << i;
      }
    }
    return n_match;
  };

  int n_names = 0;
  const json* gpt2_ids = nullptr;
  for (const json& g : golden["groups"]) {
    for (const json& n : g["names"]) {
      const std::string name = n.get<std::string>();
      if (name == "gpt-2") gpt2_ids = &g["ids"];
      EXPECT_EQ(check_name(mf->metadata, name, texts, g["ids"], false), 60) << name;
      ++n_names;
    }
  }

  // The jina-v2-* names, on the vocabulary with token 50256 renamed "<mask>".
  Metadata mask_md = mf->metadata;
  MetaArray tokens = *mask_md.get_array("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.strings.at(50256), "<|endoftext|>");
  tokens.strings[50256] = "<mask>";
  mask_md.set("tokenizer.ggml.tokens", MetaValue::array(std::move(tokens)));
  const json& mask = golden["mask_vocab"];
  ASSERT_NE(gpt2_ids, nullptr);
  for (const json& n : mask["same_ids_as_gpt2_on_texts"]) {
    EXPECT_EQ(check_name(mask_md, n.get<std::string>(), texts, *gpt2_ids, false), 60) << n;
    ++n_names;
  }
  const json& special_texts = mask["parse_special_texts"];
  ASSERT_EQ(special_texts.size(), 6u);
  int n_special_names = 0;
  for (const json& g : mask["parse_special_groups"]) {
    for (const json& n : g["names"]) {
      EXPECT_EQ(check_name(mask_md, n.get<std::string>(), special_texts, g["ids"], true), 6) << n;
      ++n_special_names;
    }
  }
  EXPECT_EQ(n_special_names, 5);
  EXPECT_EQ(n_names, static_cast<int>(pre_names().size()));
}

}  // namespace
}  // namespace sluice
