// Golden tests: every input of llama.cpp's vocab test files must give exactly the
// expected ids (tokenized as its test-tokenizer-0 does: add_special = false,
// parse_special = false), and decode must give the input back.
#include <gtest/gtest.h>

#include "tokenizer/clean_spaces.h"
#include "tokenizer/tokenizer_test_util.h"

namespace sluice {
namespace {

using testing::GoldenCase;
using testing::ids_string;
using testing::model_path;

// The tokenizer of vocab/<vocab>; null when the file is absent (the test is
// skipped) or does not load (the failure is reported).
std::unique_ptr<Tokenizer> load_vocab(const std::string& vocab) {
  std::unique_ptr<Tokenizer> out;
  [&] {
    const std::string gguf = model_path("vocab/" + vocab);
    SKIP_UNLESS_EXISTS(gguf);
    auto tok = testing::load_gguf_tokenizer(gguf);
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    out = std::move(*tok);
  }();
  return out;
}

void check_golden(const std::string& vocab, bool decode_with_bos) {
  const std::unique_ptr<Tokenizer> tok = load_vocab(vocab);
  if (!tok) return;  // skipped or failed
  const std::string gguf = model_path("vocab/" + vocab);
  const std::vector<GoldenCase> cases = testing::read_golden(gguf + ".inp", gguf + ".out");
  ASSERT_EQ(cases.size(), 46u);
  int n_checked = 0;
  for (const GoldenCase& c : cases) {
    const std::vector<int32_t> ids = tok->encode(c.text, /*add_special=*/false, /*parse_special=*/false);
    EXPECT_EQ(ids, c.ids) << "input '" << c.text << "'\n got:" << ids_string(ids)
                          << "\nwant:" << ids_string(c.ids);
    // Round trip. SPM drops the space prefix after BOS, so encode with BOS there.
    const std::vector<int32_t> with_special = tok->encode(c.text, decode_with_bos);
    // decode() applies the clean_spaces rewrites when the vocabulary sets them.
    const std::string want = tok->clean_spaces() ? clean_spaces(c.text) : c.text;
    EXPECT_EQ(tok->decode(with_special), want) << "round trip of '" << c.text << "'";
    ++n_checked;
  }
  EXPECT_EQ(n_checked, 46);
}

TEST(Golden, LlamaSpmEveryLine) { check_golden("ggml-vocab-llama-spm.gguf", true); }

TEST(Golden, Gpt2EveryLine) { check_golden("ggml-vocab-gpt-2.gguf", false); }

TEST(Golden, LlamaSpmSpecialFlags) {
  const std::unique_ptr<Tokenizer> tok = load_vocab("ggml-vocab-llama-spm.gguf");
  if (!tok) return;  // skipped or failed
  const Tokenizer& t = *tok;
  EXPECT_EQ(t.n_vocab(), 32000);
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_id(), 2);
  EXPECT_TRUE(t.add_bos());
  EXPECT_FALSE(t.add_eos());
  EXPECT_EQ(t.encode("", true), (std::vector<int32_t>{1}));
  EXPECT_EQ(t.encode("Hello world", true), (std::vector<int32_t>{1, 15043, 3186}));
  // "<s>" is plain text unless parse_special.
  EXPECT_NE(t.encode("<s>Hello", false, false).front(), 1);
  EXPECT_EQ(t.encode("<s>Hello", false, true), (std::vector<int32_t>{1, 15043}));
  EXPECT_EQ(t.decode({1, 15043, 3186, 2}), "Hello world");
  EXPECT_EQ(t.decode({1, 15043, 3186, 2}, /*render_special=*/true), "<s>Hello world</s>");
  EXPECT_TRUE(t.is_eog(2));
  EXPECT_FALSE(t.is_eog(1));
  EXPECT_TRUE(t.is_control(1));
  EXPECT_EQ(t.token_to_piece(15043), " Hello");
  EXPECT_EQ(t.token_to_piece(13), "\n");  // <0x0A>
  EXPECT_EQ(t.token_text(13), "<0x0A>");
  EXPECT_EQ(t.token_id("\xE2\x96\x81Hello"), 15043);
  EXPECT_FALSE(t.token_id("no such token").has_value());
}

TEST(Golden, Gpt2SpecialFlags) {
  const std::unique_ptr<Tokenizer> tok = load_vocab("ggml-vocab-gpt-2.gguf");
  if (!tok) return;  // skipped or failed
  const Tokenizer& t = *tok;
  EXPECT_EQ(t.n_vocab(), 50257);
  EXPECT_FALSE(t.add_bos());
  EXPECT_EQ(t.encode("Hello world<|endoftext|>", false, true),
            (std::vector<int32_t>{15496, 995, 50256}));
  EXPECT_NE(t.encode("Hello world<|endoftext|>", false, false).back(), 50256);
  EXPECT_TRUE(t.is_eog(50256));
  EXPECT_EQ(t.token_to_piece(18435), " Hello");
  EXPECT_EQ(t.token_to_piece(50256), "");
  EXPECT_EQ(t.token_to_piece(50256, true), "<|endoftext|>");
  EXPECT_EQ(t.decode({15496, 995, 50256}), "Hello world");
}

}  // namespace
}  // namespace sluice
