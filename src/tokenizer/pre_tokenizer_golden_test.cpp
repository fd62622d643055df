// Every tokenizer.ggml.pre name against llama.cpp, on a real vocabulary: the GPT-2
// vocabulary (../shared/models/vocab) tokenizes llama.cpp's test texts with each
// name's pre-tokenizer, and the ids must equal llama.cpp's for that name
// (tests/data/pretok_gpt2_llamacpp.json; how it was produced is written in it).
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tokenizer/pre_tokenizer_table.h"
#include "tokenizer/tokenizer_test_util.h"

namespace sluice {
namespace {

using nlohmann::json;

json read_golden_json() {
  std::ifstream in(std::string(SLUICE_SOURCE_DIR) + "/tests/data/pretok_gpt2_llamacpp.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
}

TEST(PreTokenizerGolden, EveryNameHasLlamaCppIds) {
  const json golden = read_golden_json();
  ASSERT_TRUE(golden.is_object()) << "tests/data/pretok_gpt2_llamacpp.json is missing or invalid";
  std::set<std::string> covered;
  for (const json& g : golden["groups"]) {
    for (const json& n : g["names"]) covered.insert(n.get<std::string>());
  }
  for (const auto& [name, why] : golden["refused_by_llama_cpp"].items()) covered.insert(name);
  for (const PreName& n : pre_names()) {
    EXPECT_TRUE(covered.count(std::string(n.name))) << n.name << " has no golden ids";
  }
  // ... and every name in the file is one the table knows.
  for (const std::string& name : covered) EXPECT_NE(find_pre_name(name), nullptr) << name;
}

TEST(PreTokenizerGolden, Gpt2VocabEveryNameMatchesLlamaCpp) {
  const std::string gguf = testing::model_path("vocab/ggml-vocab-gpt-2.gguf");
  SKIP_UNLESS_EXISTS(gguf);
  const json golden = read_golden_json();
  ASSERT_TRUE(golden.is_object());
  auto mf = read_gguf(gguf);
  ASSERT_TRUE(mf.ok()) << mf.status().to_string();
  const json& texts = golden["texts"];
  ASSERT_EQ(texts.size(), 60u);

  const auto check_name = [&](const std::string& name, const json& want_ids) -> int {
    Metadata md = mf->metadata;
    md.set("tokenizer.ggml.pre", MetaValue::str(name));
    auto tok = Tokenizer::from_metadata(md);
    EXPECT_TRUE(tok.ok()) << name << ": " << tok.status().to_string();
    if (!tok.ok()) return 0;
    int n_match = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      const std::string text = texts[i].get<std::string>();
      const std::vector<int32_t> want = want_ids[i].get<std::vector<int32_t>>();
      const std::vector<int32_t> got = (*tok)->encode(text, /*add_special=*/false, /*parse_special=*/false);
      EXPECT_EQ(got, want) << "pre '" << name << "', text " << i << " '" << text << "'\n got:"
                           << testing::ids_string(got) << "\nwant:" << testing::ids_string(want);
      n_match += got == want;
      // Byte-level BPE with isolating steps loses nothing.
      EXPECT_EQ((*tok)->decode(got), text) << "pre '" << name << "' round trip of text " << i;
    }
    return n_match;
  };

  int n_names = 0;
  const json* gpt2_ids = nullptr;
  for (const json& g : golden["groups"]) {
    for (const json& n : g["names"]) {
      const std::string name = n.get<std::string>();
      if (name == "gpt-2") gpt2_ids = &g["ids"];
      EXPECT_EQ(check_name(name, g["ids"]), 60) << name;
      ++n_names;
    }
  }
  // llama.cpp refuses these names with this vocabulary (no "<mask>" token to mark);
  // their split is GPT-2's, so their ids must be the gpt-2 name's.
  ASSERT_NE(gpt2_ids, nullptr);
  for (const auto& [name, why] : golden["refused_by_llama_cpp"].items()) {
    EXPECT_EQ(check_name(name, *gpt2_ids), 60) << name;
    ++n_names;
  }
  EXPECT_EQ(n_names, static_cast<int>(pre_names().size()));
}

}  // namespace
}  // namespace sluice
