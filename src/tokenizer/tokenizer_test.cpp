// Tokenizer behaviour on small hand-built vocabularies: merge order, byte and
// unknown fallback, special-token splitting, pieces, end-of-generation ids, and the
// refusal of unsupported or malformed tokenizer metadata.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include "tokenizer/stream_decoder.h"

namespace sluice {
namespace {

struct Tok {
  std::string text;
  float score = 0.0f;
  TokenType type = TokenType::kNormal;
};

const std::string kSp = "\xE2\x96\x81";  // U+2581

Metadata make_metadata(const std::string& model, const std::vector<Tok>& toks,
                       const std::vector<std::string>& merges = {}) {
  Metadata md;
  md.set("tokenizer.ggml.model", MetaValue::str(model));
  MetaArray texts, scores, types;
  texts.elem_type = GgufType::kString;
  scores.elem_type = GgufType::kFloat32;
  types.elem_type = GgufType::kInt32;
  for (const Tok& t : toks) {
    texts.strings.push_back(t.text);
    scores.floats.push_back(t.score);
    types.ints.push_back(static_cast<int64_t>(t.type));
  }
  md.set("tokenizer.ggml.tokens", MetaValue::array(texts));
  md.set("tokenizer.ggml.scores", MetaValue::array(scores));
  md.set("tokenizer.ggml.token_type", MetaValue::array(types));
  if (!merges.empty()) {
    MetaArray m;
    m.elem_type = GgufType::kString;
    m.strings = merges;
    md.set("tokenizer.ggml.merges", MetaValue::array(m));
  }
  return md;
}

// SPM vocab: 0 <unk>, 1 <s>, 2 </s>, [3..258 <0x00>..<0xFF>], then the pieces below.
std::vector<Tok> spm_tokens(bool with_bytes, float ab_score, float bc_score) {
  std::vector<Tok> t = {{"<unk>", 0, TokenType::kUnknown}, {"<s>", 0, TokenType::kControl},
                        {"</s>", 0, TokenType::kControl}};
  if (with_bytes) {
    static const char* kHex = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
      t.push_back({std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">", 0, TokenType::kByte});
    }
  }
  const std::vector<Tok> rest = {
      {kSp, -10}, {"a", -10}, {"b", -10}, {"c", -10}, {"ab", ab_score}, {"bc", bc_score},
      {kSp + "a", -5}, {kSp + "ab", -4}, {"<|im_start|>", 0, TokenType::kControl},
      {"<|im_end|>", 0, TokenType::kControl}, {"<tool>", 0, TokenType::kUserDefined},
      {"<|x|>", 0, TokenType::kControl}, {"<|x|>b", 0, TokenType::kControl},
      {"unused", 0, TokenType::kUnused}};
  t.insert(t.end(), rest.begin(), rest.end());
  return t;
}

std::unique_ptr<Tokenizer> make(const Metadata& md) {
  auto tok = Tokenizer::from_metadata(md);
  EXPECT_TRUE(tok.ok()) << tok.status().to_string();
  return tok.ok() ? std::move(tok).value() : nullptr;
}

int32_t id_of(const Tokenizer& t, const std::string& text) {
  const std::optional<int32_t> id = t.token_id(text);
  EXPECT_TRUE(id.has_value()) << text;
  return id.value_or(-1);
}

TEST(Spm, MergesHighestScoreFirstTiesLeftmost) {
  Metadata md = make_metadata("llama", spm_tokens(true, -1, -2));
  md.set("tokenizer.ggml.add_space_prefix", MetaValue::boolean(false));
  auto t = make(md);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("abc", false), (std::vector<int32_t>{id_of(*t, "ab"), id_of(*t, "c")}));

  md = make_metadata("llama", spm_tokens(true, -2, -1));
  md.set("tokenizer.ggml.add_space_prefix", MetaValue::boolean(false));
  t = make(md);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("abc", false), (std::vector<int32_t>{id_of(*t, "a"), id_of(*t, "bc")}));

  md = make_metadata("llama", spm_tokens(true, -1, -1));  // equal scores: leftmost pair
  md.set("tokenizer.ggml.add_space_prefix", MetaValue::boolean(false));
  t = make(md);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("abc", false), (std::vector<int32_t>{id_of(*t, "ab"), id_of(*t, "c")}));
}

TEST(Spm, SpacePrefixAndSpaces) {
  auto t = make(make_metadata("llama", spm_tokens(true, -1, -2)));
  ASSERT_TRUE(t);
  // "▁a"+"b" (-4) beats "a"+"b" (-1)? No: ab (-1) is higher, so "▁" "ab" -> "▁ab" (-4).
  EXPECT_EQ(t->encode("ab", false), (std::vector<int32_t>{id_of(*t, kSp + "ab")}));
  EXPECT_EQ(t->encode("ab ab", true),
            (std::vector<int32_t>{1, id_of(*t, kSp + "ab"), id_of(*t, kSp + "ab")}));
  EXPECT_EQ(t->decode(t->encode("ab ab", true)), "ab ab");
  EXPECT_EQ(t->encode("", true), (std::vector<int32_t>{1}));
  EXPECT_TRUE(t->encode("", false).empty());
}

TEST(Spm, ByteFallbackAndUnknown) {
  auto t = make(make_metadata("llama", spm_tokens(true, -1, -2)));
  ASSERT_TRUE(t);
  // "é" = C3 A9 is not a piece: two byte tokens (ids 3 + byte).
  EXPECT_EQ(t->encode("\xC3\xA9", false),
            (std::vector<int32_t>{id_of(*t, kSp), 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(t->token_to_piece(3 + 0xC3), "\xC3");
  EXPECT_EQ(t->decode(t->encode("a\xC3\xA9", true)), "a\xC3\xA9");

  Metadata no_bytes = make_metadata("llama", spm_tokens(false, -1, -2));
  t = make(no_bytes);
  ASSERT_TRUE(t);
  // Without byte tokens an unknown character becomes one <unk>.
  EXPECT_EQ(t->encode("\xC3\xA9" "a", false),
            (std::vector<int32_t>{id_of(*t, kSp), 0, id_of(*t, "a")}));
  EXPECT_EQ(t->token_to_piece(0), "\xE2\x96\x85");
  EXPECT_EQ(t->token_to_piece(0, true), "<unk>");
}

TEST(SpecialTokens, ParseSpecialSplitsControlTokens) {
  auto t = make(make_metadata("llama", spm_tokens(true, -1, -2)));
  ASSERT_TRUE(t);
  const int32_t start = id_of(*t, "<|im_start|>"), end = id_of(*t, "<|im_end|>");
  // A space prefix follows each special token.
  EXPECT_EQ(t->encode("<|im_start|>ab<|im_end|>", false, true),
            (std::vector<int32_t>{start, id_of(*t, kSp + "ab"), end}));
  // Without parse_special the control text is plain text: no control id appears.
  for (int32_t id : t->encode("<|im_start|>ab<|im_end|>", false, false)) {
    EXPECT_FALSE(t->is_control(id)) << id;
  }
  // User-defined tokens are split out either way.
  EXPECT_EQ(t->encode("ab<tool>a", false, false),
            (std::vector<int32_t>{id_of(*t, kSp + "ab"), id_of(*t, "<tool>"), id_of(*t, kSp + "a")}));
  // Longest token first.
  EXPECT_EQ(t->encode("<|x|>b<|x|>", false, true),
            (std::vector<int32_t>{id_of(*t, "<|x|>b"), id_of(*t, "<|x|>")}));
  EXPECT_EQ(t->encode("<s>ab</s>", true, true),
            (std::vector<int32_t>{1, 1, id_of(*t, kSp + "ab"), 2}));
}

TEST(Pieces, ControlUnusedAndRenderSpecial) {
  auto t = make(make_metadata("llama", spm_tokens(true, -1, -2)));
  ASSERT_TRUE(t);
  const int32_t start = id_of(*t, "<|im_start|>");
  EXPECT_EQ(t->token_to_piece(start), "");
  EXPECT_EQ(t->token_to_piece(start, true), "<|im_start|>");
  EXPECT_EQ(t->token_to_piece(id_of(*t, "<tool>")), "<tool>");
  EXPECT_EQ(t->token_to_piece(id_of(*t, "unused")), "");
  EXPECT_EQ(t->token_to_piece(id_of(*t, kSp + "ab")), " ab");
  EXPECT_EQ(t->token_to_piece(-1), "");
  EXPECT_EQ(t->token_to_piece(t->n_vocab()), "");
  EXPECT_EQ(t->token_text(t->n_vocab()), "");
  // The space after BOS goes; elsewhere it stays.
  const int32_t ab = id_of(*t, kSp + "ab");
  EXPECT_EQ(t->decode({1, ab, ab}), "ab ab");
  EXPECT_EQ(t->decode({ab, ab}), " ab ab");
  EXPECT_EQ(t->decode({1, ab, 2}, true), "<s>ab</s>");
}

TEST(Eog, EosEotAndKnownEndTokens) {
  std::vector<Tok> toks = spm_tokens(false, -1, -2);
  toks.push_back({"<|eot_id|>", 0, TokenType::kControl});
  toks.push_back({"<end_of_turn>", 0, TokenType::kControl});
  Metadata md = make_metadata("llama", toks);
  md.set("tokenizer.ggml.eot_token_id", MetaValue::u32(static_cast<uint32_t>(toks.size() - 1)));
  md.set("tokenizer.ggml.add_eos_token", MetaValue::boolean(true));
  auto t = make(md);
  ASSERT_TRUE(t);
  EXPECT_TRUE(t->is_eog(2));
  EXPECT_TRUE(t->is_eog(id_of(*t, "<|im_end|>")));
  EXPECT_TRUE(t->is_eog(id_of(*t, "<|eot_id|>")));
  EXPECT_TRUE(t->is_eog(id_of(*t, "<end_of_turn>")));
  EXPECT_FALSE(t->is_eog(1));
  EXPECT_FALSE(t->is_eog(id_of(*t, "<|im_start|>")));
  EXPECT_FALSE(t->is_eog(-1));
  EXPECT_TRUE(t->add_eos());
  EXPECT_EQ(t->encode("a", true).back(), 2);
}

TEST(Bpe, RankedMergesOnSmallVocab) {
  // Byte-level spelling: ' ' is "Ġ" (U+0120).
  const std::string g = "\xC4\xA0";
  std::vector<Tok> toks = {{"a"}, {"b"}, {g}, {"ab"}, {g + "a"}, {g + "ab"},
                           {"<|endoftext|>", 0, TokenType::kControl}};
  Metadata md = make_metadata("gpt2", toks, {"a b", g + " a", g + "a b"});
  md.set("tokenizer.ggml.pre", MetaValue::str("gpt-2"));
  auto t = make(md);
  ASSERT_TRUE(t);
  // " ab": "a b" (rank 0) merges before "Ġ a" (rank 1), leaving Ġ + ab (no merge).
  EXPECT_EQ(t->encode("ab ab", false), (std::vector<int32_t>{3, 2, 3}));
  EXPECT_EQ(t->decode({3, 2, 3}), "ab ab");
  EXPECT_EQ(t->token_to_piece(2), " ");
  EXPECT_EQ(t->encode("ab<|endoftext|>", false, true), (std::vector<int32_t>{3, 6}));
  EXPECT_FALSE(t->add_bos());

  // Reordered merges change the result: "Ġ a" first, then "Ġa b".
  md = make_metadata("gpt2", toks, {g + " a", "a b", g + "a b"});
  t = make(md);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("ab ab", false), (std::vector<int32_t>{3, 5}));
}

// The pre-tokenizer name decides whether decode() and StreamDecoder apply the
// clean_spaces rewrites (gpt-2 does, qwen2 does not), split pieces included.
TEST(Bpe, CleanSpacesFollowsTheNameInDecodeAndStreams) {
  const std::string g = "\xC4\xA0";  // ' '
  std::vector<Tok> toks = {{"it"}, {g}, {"'"}, {"s"}, {"."}, {g + "'"}, {"<|x|>", 0, TokenType::kControl}, {"i"}, {"t"}};
  Metadata md = make_metadata("gpt2", toks, {"i t"});
  const std::vector<int32_t> ids = {0, 1, 2, 3, 1, 4, 1, 0, 5, 6, 3, 1, 6, 4};  // "it 's . it 's ." around a control token
  for (const char* pre : {"gpt-2", "qwen2"}) {
    md.set("tokenizer.ggml.pre", MetaValue::str(pre));
    auto t = make(md);
    ASSERT_TRUE(t);
    const bool clean = std::string(pre) == "gpt-2";
    EXPECT_EQ(t->clean_spaces(), clean);
    const std::string want = clean ? "it's. it's." : "it 's . it 's .";
    EXPECT_EQ(t->decode(ids), want) << pre;
    StreamDecoder stream(*t);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.push(id);
    streamed += stream.finish();
    EXPECT_EQ(streamed, want) << pre;
    // A control token rendered as text is text to the rewrites too.
    EXPECT_EQ(t->decode({0, 6, 1, 4}, /*render_special=*/true), clean ? "it<|x|>." : "it<|x|> .") << pre;
  }
}

TEST(Bpe, Llama3IgnoresMergesForWholeWords) {
  std::vector<Tok> toks = {{"a"}, {"b"}, {"c"}, {"ab"}, {"abc"}};
  Metadata md = make_metadata("gpt2", toks, {"a b"});
  md.set("tokenizer.ggml.pre", MetaValue::str("llama-bpe"));
  auto t = make(md);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("abc", false), (std::vector<int32_t>{4}));  // a whole-word token
  md.set("tokenizer.ggml.pre", MetaValue::str("gpt-2"));
  t = make(md);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("abc", false), (std::vector<int32_t>{3, 2}));  // merges only
}

TEST(Bpe, PreNameFlags) {
  std::vector<Tok> toks = {{"a"}, {"b"}, {"c"}, {"ab"}, {"abc"}, {"<s>", 0, TokenType::kControl}};
  Metadata md = make_metadata("gpt2", toks, {"a b"});
  md.set("tokenizer.ggml.bos_token_id", MetaValue::u32(5));
  // Tekken ignores merges and adds BOS by default, like Llama 3; dbrx has Llama 3's
  // regex but neither flag.
  md.set("tokenizer.ggml.pre", MetaValue::str("tekken"));
  auto t = make(md);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("abc", true), (std::vector<int32_t>{5, 4}));
  md.set("tokenizer.ggml.pre", MetaValue::str("dbrx"));
  t = make(md);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("abc", true), (std::vector<int32_t>{3, 2}));
  // The file's add_bos_token wins over the name's default.
  md.set("tokenizer.ggml.pre", MetaValue::str("chameleon"));
  md.set("tokenizer.ggml.add_bos_token", MetaValue::boolean(false));
  t = make(md);
  ASSERT_TRUE(t);
  EXPECT_FALSE(t->add_bos());
}

TEST(Bpe, JinaV2MaskTakesTheSpaceBeforeIt) {
  const std::string g = "\xC4\xA0";
  std::vector<Tok> toks = {{"a"}, {g}, {"<mask>", 0, TokenType::kControl}};
  Metadata md = make_metadata("gpt2", toks, {"a a"});
  md.set("tokenizer.ggml.pre", MetaValue::str("jina-v2-de"));
  auto t = make(md);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("a \t <mask> a", false, true), (std::vector<int32_t>{0, 2, 1, 0}));
  md.set("tokenizer.ggml.pre", MetaValue::str("jina-v1-en"));
  t = make(md);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("a <mask> a", false, true), (std::vector<int32_t>{0, 1, 2, 1, 0}));
}

TEST(Refusal, UnsupportedModelsByName) {
  for (const char* model : {"no_vocab", "none", "plamo2"}) {
    auto t = Tokenizer::from_metadata(make_metadata(model, {{"a"}}));
    ASSERT_FALSE(t.ok()) << model;
    EXPECT_EQ(t.status().code(), StatusCode::kUnimplemented);
    EXPECT_NE(t.status().message().find(model), std::string::npos) << t.status().to_string();
  }
  Metadata md = make_metadata("gpt2", {{"a"}}, {"a a"});
  md.set("tokenizer.ggml.pre", MetaValue::str("no-such-pre"));
  auto t = Tokenizer::from_metadata(md);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(t.status().message().find("no-such-pre"), std::string::npos);
}

TEST(Refusal, MalformedMetadata) {
  Metadata none;
  EXPECT_EQ(Tokenizer::from_metadata(none).status().code(), StatusCode::kNotFound);

  Metadata no_tokens;
  no_tokens.set("tokenizer.ggml.model", MetaValue::str("llama"));
  EXPECT_EQ(Tokenizer::from_metadata(no_tokens).status().code(), StatusCode::kDataLoss);

  Metadata short_scores = make_metadata("llama", {{"a"}, {"b"}});
  MetaArray scores;
  scores.elem_type = GgufType::kFloat32;
  scores.floats = {0.0};
  short_scores.set("tokenizer.ggml.scores", MetaValue::array(scores));
  EXPECT_EQ(Tokenizer::from_metadata(short_scores).status().code(), StatusCode::kDataLoss);

  Metadata bad_type = make_metadata("llama", {{"a"}, {"b"}});
  MetaArray types;
  types.elem_type = GgufType::kInt32;
  types.ints = {1, 42};
  bad_type.set("tokenizer.ggml.token_type", MetaValue::array(types));
  EXPECT_EQ(Tokenizer::from_metadata(bad_type).status().code(), StatusCode::kDataLoss);

  EXPECT_EQ(Tokenizer::from_metadata(make_metadata("gpt2", {{"a"}})).status().code(),
            StatusCode::kDataLoss);  // no merges
  EXPECT_EQ(Tokenizer::from_metadata(make_metadata("gpt2", {{"a"}}, {"nospace"})).status().code(),
            StatusCode::kDataLoss);

  // Out-of-range special ids mean "none" rather than a crash later.
  Metadata md = make_metadata("llama", {{"a"}, {"b"}});
  md.set("tokenizer.ggml.bos_token_id", MetaValue::u32(0xFFFFFFFFu));
  auto t = Tokenizer::from_metadata(md);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->bos_id(), -1);
  EXPECT_FALSE((*t)->add_bos());
}

}  // namespace
}  // namespace sluice
