// StreamDecoder: multibyte characters arriving as byte tokens one at a time are
// never emitted half-way, and the streamed text equals decode().
#include "tokenizer/stream_decoder.h"

#include <gtest/gtest.h>

#include "tokenizer/tokenizer_test_util.h"
#include "tokenizer/unicode.h"

namespace sluice {
namespace {

using testing::model_path;
using testing::shipped_model_path;

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_valid_char_len(s.substr(i));
    if (n == 0) return false;
    i += n;
  }
  return true;
}

// Streams `ids` one at a time; checks every chunk is whole UTF-8 and returns the
// concatenation. `n_held` counts pushes that returned nothing while bytes were held.
std::string stream_all(const Tokenizer& tok, const std::vector<int32_t>& ids, int* n_held) {
  StreamDecoder stream(tok);
  std::string out;
  *n_held = 0;
  for (int32_t id : ids) {
    const std::string chunk = stream.push(id);
    EXPECT_TRUE(is_valid_utf8(chunk)) << "partial UTF-8 emitted after id " << id;
    if (chunk.empty() && !tok.token_to_piece(id).empty()) ++*n_held;
    out += chunk;
  }
  out += stream.finish();
  return out;
}

TEST(StreamDecoder, SpmByteFallbackCharactersStayWhole) {
  const std::string gguf = shipped_model_path("stories260K.gguf");
  auto tok = testing::load_gguf_tokenizer(gguf);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const std::string text = "Lily saw 日本語 and a 🚀! Ünïcödé\nend";
  const std::vector<int32_t> ids = (*tok)->encode(text, true);
  int n_byte_tokens = 0;
  for (int32_t id : ids) n_byte_tokens += (*tok)->vocab().type(id) == TokenType::kByte;
  EXPECT_GE(n_byte_tokens, 13);  // the CJK and the emoji are not in the 512-token vocab
  int n_held = 0;
  const std::string streamed = stream_all(**tok, ids, &n_held);
  EXPECT_EQ(streamed, (*tok)->decode(ids));
  EXPECT_EQ(streamed, text);
  EXPECT_GE(n_held, 9);  // 3 CJK chars x 2 held bytes + the emoji's 3 held bytes
}

TEST(StreamDecoder, Gpt2BytePiecesStayWhole) {
  const std::string gguf = model_path("vocab/ggml-vocab-gpt-2.gguf");
  SKIP_UNLESS_EXISTS(gguf);
  auto tok = testing::load_gguf_tokenizer(gguf);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const std::string text = "🚀 (normal) 😶‍🌫️ 我想在apple工作1314151天～ Führer";
  const std::vector<int32_t> ids = (*tok)->encode(text, false);
  int n_held = 0;
  const std::string streamed = stream_all(**tok, ids, &n_held);
  EXPECT_EQ(streamed, (*tok)->decode(ids));
  EXPECT_EQ(streamed, text);
  EXPECT_GT(n_held, 0);
}

TEST(StreamDecoder, InvalidBytesBecomeReplacementCharacters) {
  const std::string gguf = shipped_model_path("stories260K.gguf");
  auto tok = testing::load_gguf_tokenizer(gguf);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const auto byte = [](int b) { return 3 + b; };  // <0xHH> ids in this vocab
  const std::string kFffd = "\xEF\xBF\xBD";
  const int32_t a = *(*tok)->token_id("\xE2\x96\x81" "a");

  StreamDecoder s(**tok);
  EXPECT_EQ(s.push(byte(0xE6)), "");       // lead byte of a 3-byte character: held
  EXPECT_EQ(s.push(byte(0x97)), "");       // still incomplete
  EXPECT_EQ(s.finish(), kFffd);            // never completed
  EXPECT_EQ(s.push(byte(0x80)), kFffd);    // a stray continuation byte: replaced at once
  EXPECT_EQ(s.push(byte(0xE6)), "");
  EXPECT_EQ(s.push(a), kFffd + " a");      // the held lead byte cannot be completed by ' '
  EXPECT_EQ(s.finish(), "");
  // After finish() a new stream starts: the space after BOS is dropped again.
  EXPECT_EQ(s.push(1), "");
  EXPECT_EQ(s.push(a), "a");
}

}  // namespace
}  // namespace sluice
