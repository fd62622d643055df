// stories260K: reference.json tokenization must come out of the GGUF vocab and of
// the HF tokenizer.json (through import_hf_tokenizer) alike; its generated token
// ids must decode (in one go and streamed) to its generated text.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer_test_util.h"

namespace sluice {
namespace {

using testing::ids_string;
using testing::model_path;
using testing::shipped_model_path;
using testing::stories260k_reference_path;

const std::string kGguf = shipped_model_path("stories260K.gguf");
const std::string kHfDir = model_path("stories260K/hf");
const std::string kReference = stories260k_reference_path();

nlohmann::json load_reference() {
  StatusOr<std::string> text = read_text_file(kReference);
  if (!text.ok()) return nlohmann::json();
  return nlohmann::json::parse(*text, nullptr, false);
}

void check_reference_tokenization(const Tokenizer& tok) {
  const nlohmann::json ref = load_reference();
  ASSERT_TRUE(ref.is_object());
  const nlohmann::json& cases = ref["tokenization"];
  ASSERT_EQ(cases.size(), 13u);
  for (const auto& c : cases) {
    const std::string text = c["text"].get<std::string>();
    const std::vector<int32_t> want = c["ids_no_bos"].get<std::vector<int32_t>>();
    const std::vector<int32_t> got = tok.encode(text, /*add_special=*/false);
    EXPECT_EQ(got, want) << "text '" << text << "'\n got:" << ids_string(got) << "\nwant:" << ids_string(want);
    std::vector<int32_t> with_bos = tok.encode(text, /*add_special=*/true);
    ASSERT_FALSE(with_bos.empty());
    EXPECT_EQ(with_bos.front(), 1);
    EXPECT_EQ(tok.decode(with_bos), text);
  }
}

TEST(Stories260K, ReferenceTokenizationFromGguf) {
  auto tok = testing::load_gguf_tokenizer(kGguf);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ((*tok)->n_vocab(), 512);
  EXPECT_TRUE((*tok)->add_bos());
  check_reference_tokenization(**tok);
}

TEST(Stories260K, ReferenceTokenizationFromHf) {
  SKIP_UNLESS_EXISTS(kHfDir + "/tokenizer.json");
  auto tok = testing::load_hf_tokenizer(kHfDir);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ((*tok)->n_vocab(), 512);
  EXPECT_EQ((*tok)->bos_id(), 1);
  EXPECT_EQ((*tok)->eos_id(), 2);
  EXPECT_TRUE((*tok)->add_bos());
  EXPECT_FALSE((*tok)->add_eos());
  check_reference_tokenization(**tok);
}

TEST(Stories260K, HfImportMatchesGgufVocab) {
  SKIP_UNLESS_EXISTS(kHfDir + "/tokenizer.json");
  auto mf = read_gguf(kGguf);
  ASSERT_TRUE(mf.ok()) << mf.status().to_string();
  Metadata hf;
  ASSERT_TRUE(import_hf_tokenizer(kHfDir, &hf).ok());
  EXPECT_EQ(hf.get_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(hf.get_bool("tokenizer.ggml.add_space_prefix"), true);
  const MetaArray* gguf_tokens = mf->metadata.get_array("tokenizer.ggml.tokens");
  const MetaArray* hf_tokens = hf.get_array("tokenizer.ggml.tokens");
  ASSERT_NE(gguf_tokens, nullptr);
  ASSERT_NE(hf_tokens, nullptr);
  EXPECT_EQ(hf_tokens->strings, gguf_tokens->strings);
  EXPECT_EQ(hf.get_array("tokenizer.ggml.token_type")->ints,
            mf->metadata.get_array("tokenizer.ggml.token_type")->ints);
  EXPECT_EQ(hf.get_int("tokenizer.ggml.unknown_token_id"), 0);
}

// The HF import must tokenize like the GGUF vocab on every golden input, not only
// on the reference strings.
TEST(Stories260K, HfAndGgufAgreeOnGoldenInputs) {
  const std::string inp = model_path("vocab/ggml-vocab-llama-spm.gguf.inp");
  SKIP_UNLESS_EXISTS(kHfDir + "/tokenizer.json");
  SKIP_UNLESS_EXISTS(inp);
  auto gguf = testing::load_gguf_tokenizer(kGguf);
  auto hf = testing::load_hf_tokenizer(kHfDir);
  ASSERT_TRUE(gguf.ok()) << gguf.status().to_string();
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  const auto cases = testing::read_golden(inp, model_path("vocab/ggml-vocab-llama-spm.gguf.out"));
  ASSERT_EQ(cases.size(), 46u);
  for (const auto& c : cases) {
    const std::vector<int32_t> ids = (*gguf)->encode(c.text, true);
    EXPECT_EQ((*hf)->encode(c.text, true), ids) << "text '" << c.text << "'";
    EXPECT_EQ((*hf)->decode(ids), c.text);
  }
}

TEST(Stories260K, GeneratedTokensDecodeToReferenceText) {
  auto tok = testing::load_gguf_tokenizer(kGguf);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const nlohmann::json ref = load_reference();
  ASSERT_TRUE(ref.is_object());
  for (const auto& g : ref["generation"]) {
    const std::vector<int32_t> ids = g["tokens"].get<std::vector<int32_t>>();
    const std::string want = g["generated_text"].get<std::string>();
    EXPECT_EQ((*tok)->decode(ids), want);
    StreamDecoder stream(**tok);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.push(id);
    streamed += stream.finish();
    EXPECT_EQ(streamed, want);
  }
}

}  // namespace
}  // namespace sluice
