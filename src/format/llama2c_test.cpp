#include "format/llama2c.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/test_data.h"
#include "format/gguf_reader.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using testing::model_path;
using testing::shipped_model_path;

const std::string kBin = model_path("stories260K/stories260K.bin");
const std::string kTok = model_path("stories260K/tok512.bin");
const std::string kGguf = shipped_model_path("stories260K.gguf");

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}
void write_file(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}
void append(std::vector<uint8_t>* out, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  out->insert(out->end(), b, b + n);
}

class Llama2cTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("sluice_l2c_" + std::to_string(::getpid()))).string();
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

// Every tensor of `a` equals the same-named tensor of `b` byte for byte.
void expect_same_tensors(const ModelFile& a, const ModelFile& b) {
  for (const TensorInfo& t : a.tensors) {
    const TensorInfo* g = b.find(t.name);
    ASSERT_NE(g, nullptr) << t.name;
    EXPECT_EQ(t.ne, g->ne) << t.name;
    ASSERT_EQ(t.n_bytes, g->n_bytes) << t.name;
    EXPECT_EQ(std::memcmp(t.data, g->data, t.n_bytes), 0) << t.name;
  }
}

TEST_F(Llama2cTest, Stories260KMatchesGguf) {
  SKIP_UNLESS_EXISTS(kBin);
  auto mf = import_llama2c(kBin, kTok);
  ASSERT_TRUE(mf.ok()) << mf.status().to_string();
  auto g = read_gguf(kGguf);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(mf->format, "llama2c");
  EXPECT_EQ(mf->tensors.size(), 47u);  // shared classifier: no output.weight
  EXPECT_EQ(mf->find("output.weight"), nullptr);
  expect_same_tensors(*mf, *g);
  // Borrowed from the file: the first weight follows the 28-byte header.
  EXPECT_EQ(mf->find("token_embd.weight")->file_offset, 28);
  for (size_t i = 0; i < mf->tensors.size(); ++i) {
    EXPECT_EQ(mf->tensors[i].name, g->tensors[i < 2 ? i : i + 1].name);  // GGUF order
  }

  const Metadata& a = mf->metadata;
  const Metadata& b = g->metadata;
  for (const char* key : {"tokenizer.ggml.tokens", "tokenizer.ggml.scores",
                          "tokenizer.ggml.token_type"}) {
    const MetaArray* x = a.get_array(key);
    const MetaArray* y = b.get_array(key);
    ASSERT_NE(x, nullptr) << key;
    ASSERT_NE(y, nullptr) << key;
    EXPECT_EQ(x->elem_type, y->elem_type) << key;
    EXPECT_EQ(x->strings, y->strings) << key;
    EXPECT_EQ(x->floats, y->floats) << key;
    EXPECT_EQ(x->ints, y->ints) << key;
  }
  for (const char* key : {"llama.embedding_length", "llama.feed_forward_length",
                          "llama.attention.head_count", "llama.attention.head_count_kv",
                          "llama.block_count", "llama.rope.dimension_count",
                          "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                          "tokenizer.ggml.unknown_token_id"}) {
    ASSERT_TRUE(a.has(key)) << key;
    EXPECT_EQ(a.get_int(key), b.get_int(key)) << key;
    EXPECT_EQ(a.find(key)->type, b.find(key)->type) << key;
  }
  EXPECT_EQ(a.get_float("llama.attention.layer_norm_rms_epsilon"),
            b.get_float("llama.attention.layer_norm_rms_epsilon"));
  EXPECT_EQ(a.get_int("llama.context_length"), 512);
  EXPECT_EQ(a.get_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(a.get_bool("tokenizer.ggml.add_bos_token"), true);
  EXPECT_EQ(a.get_bool("tokenizer.ggml.add_eos_token"), false);
  EXPECT_EQ(a.get_string("general.name"), "stories260K");
}

TEST_F(Llama2cTest, WithoutFreqCisAndWithSeparateClassifier) {
  SKIP_UNLESS_EXISTS(kBin);
  std::vector<uint8_t> bin = read_bytes(kBin);
  const size_t freq_bytes = 2 * 512 * 4 * 4;  // 2 x [seq_len, head_dim / 2] floats
  std::vector<uint8_t> no_freq(bin.begin(), bin.end() - freq_bytes);
  write_file(dir_ + "/nofreq.bin", no_freq);
  auto a = import_llama2c(dir_ + "/nofreq.bin", kTok);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  auto ref = import_llama2c(kBin, kTok);
  ASSERT_TRUE(ref.ok());
  expect_same_tensors(*a, *ref);

  // Negative vocab_size: a classifier [vocab, dim] follows freq_cis.
  std::vector<uint8_t> sep = bin;
  const int32_t neg_vocab = -512;
  std::memcpy(sep.data() + 20, &neg_vocab, 4);
  std::vector<float> wcls(512 * 64);
  for (size_t i = 0; i < wcls.size(); ++i) wcls[i] = static_cast<float>(i) * 0.5f;
  append(&sep, wcls.data(), wcls.size() * 4);
  write_file(dir_ + "/sep.bin", sep);
  auto b = import_llama2c(dir_ + "/sep.bin", kTok);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  const TensorInfo* out = b->find("output.weight");
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(out->ne, (std::vector<int64_t>{64, 512}));
  EXPECT_EQ(std::memcmp(out->data, wcls.data(), out->n_bytes), 0);
  EXPECT_EQ(b->metadata.get_int("llama.vocab_size"), 512);
  expect_same_tensors(*ref, *b);
}

TEST_F(Llama2cTest, Version1Export) {
  SKIP_UNLESS_EXISTS(kBin);
  auto ref = import_llama2c(kBin, kTok);
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  // Re-serialize the legacy tensors in version-1 order.
  std::vector<uint8_t> v1;
  const uint32_t magic = 0x616b3432;
  const int32_t version = 1;
  const int32_t header[7] = {64, 172, 5, 8, 4, 512, 512};
  append(&v1, &magic, 4);
  append(&v1, &version, 4);
  append(&v1, header, sizeof(header));
  v1.push_back(1);  // shared classifier
  v1.resize(256, 0);
  auto put = [&](const std::string& name) {
    const TensorInfo* t = ref->find(name);
    ASSERT_NE(t, nullptr) << name;
    append(&v1, t->data, t->n_bytes);
  };
  auto put_layers = [&](const std::string& suffix) {
    for (int l = 0; l < 5; ++l) put("blk." + std::to_string(l) + "." + suffix);
  };
  put_layers("attn_norm.weight");
  put_layers("ffn_norm.weight");
  put("output_norm.weight");
  put("token_embd.weight");
  for (const char* s : {"attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
                        "ffn_gate.weight", "ffn_down.weight", "ffn_up.weight"}) {
    put_layers(s);
  }
  write_file(dir_ + "/v1.bin", v1);
  auto mf = import_llama2c(dir_ + "/v1.bin", kTok);
  ASSERT_TRUE(mf.ok()) << mf.status().to_string();
  EXPECT_EQ(mf->tensors.size(), ref->tensors.size());
  expect_same_tensors(*mf, *ref);
  EXPECT_EQ(mf->find("token_embd.weight")->file_offset, 256 + 4 * (5 * 64 * 2 + 64));

  v1.push_back(0);  // one stray byte
  write_file(dir_ + "/v1.bin", v1);
  EXPECT_EQ(import_llama2c(dir_ + "/v1.bin", kTok).status().code(), StatusCode::kDataLoss);
  v1.pop_back();
  const int32_t v2 = 2;
  std::memcpy(v1.data() + 4, &v2, 4);
  write_file(dir_ + "/v1.bin", v1);
  auto q = import_llama2c(dir_ + "/v1.bin", kTok);
  EXPECT_EQ(q.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(q.status().message().find("version 2"), std::string::npos);
}

TEST_F(Llama2cTest, RefusesBadCheckpoints) {
  SKIP_UNLESS_EXISTS(kBin);
  std::vector<uint8_t> bin = read_bytes(kBin);
  std::vector<uint8_t> cut(bin.begin(), bin.end() - 4);
  write_file(dir_ + "/cut.bin", cut);
  auto r = import_llama2c(dir_ + "/cut.bin", kTok);
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find(std::to_string(cut.size())), std::string::npos)
      << r.status().message();

  std::vector<uint8_t> bad = bin;
  const int32_t zero_heads = 0;
  std::memcpy(bad.data() + 12, &zero_heads, 4);
  write_file(dir_ + "/bad.bin", bad);
  r = import_llama2c(dir_ + "/bad.bin", kTok);
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("n_heads"), std::string::npos) << r.status().message();

  // A vocabulary size the tokenizer does not match.
  bad = bin;
  const int32_t vocab = 511;
  std::memcpy(bad.data() + 20, &vocab, 4);
  write_file(dir_ + "/bad.bin", bad);
  EXPECT_EQ(import_llama2c(dir_ + "/bad.bin", kTok).status().code(), StatusCode::kDataLoss);

  EXPECT_EQ(import_llama2c(dir_ + "/missing.bin", kTok).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(import_llama2c(kBin, dir_ + "/missing_tok.bin").status().code(),
            StatusCode::kNotFound);
}

TEST(Llama2cTokenizer, ValidatesRecords) {
  std::vector<uint8_t> t;
  const int32_t max_len = 5;
  append(&t, &max_len, 4);
  auto rec = [&](float score, const std::string& s) {
    const int32_t len = static_cast<int32_t>(s.size());
    append(&t, &score, 4);
    append(&t, &len, 4);
    append(&t, s.data(), s.size());
  };
  rec(0, "<unk>");
  rec(-1, " a b");
  rec(-2, "<0x0A>");  // 6 bytes > max_token_length 5
  Metadata md;
  Status st = import_llama2c_tokenizer(t.data(), t.size(), "tok.bin", 3, &md);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("token 2 has length 6"), std::string::npos) << st.message();

  t.resize(t.size() - 6 - 8);
  st = import_llama2c_tokenizer(t.data(), t.size(), "tok.bin", 2, &md);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(md.get_array("tokenizer.ggml.tokens")->strings[1], "\xe2\x96\x81" "a\xe2\x96\x81" "b");
  EXPECT_EQ(md.get_array("tokenizer.ggml.token_type")->ints, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(md.get_array("tokenizer.ggml.scores")->floats, (std::vector<double>{0, -1}));

  EXPECT_EQ(import_llama2c_tokenizer(t.data(), t.size(), "tok.bin", 3, &md).code(),
            StatusCode::kDataLoss);  // lying vocabulary size
  EXPECT_EQ(import_llama2c_tokenizer(t.data(), t.size(), "tok.bin", 1, &md).code(),
            StatusCode::kDataLoss);  // trailing bytes
}

TEST(Llama2cTokenizer, Llama2Vocabulary) {
  const std::string path = model_path("llama2c-tokenizer/tokenizer.bin");
  SKIP_UNLESS_EXISTS(path);
  std::vector<uint8_t> b = read_bytes(path);
  Metadata md;
  Status st = import_llama2c_tokenizer(b.data(), b.size(), path, 32000, &md);
  ASSERT_TRUE(st.ok()) << st.to_string();
  const MetaArray* tokens = md.get_array("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens->strings.size(), 32000u);
  EXPECT_EQ(tokens->strings[1], "<s>");
  EXPECT_EQ(tokens->strings[2], "</s>");
  EXPECT_EQ(tokens->strings[259], "\xe2\x96\x81\xe2\x96\x81");
  EXPECT_EQ(md.get_array("tokenizer.ggml.scores")->floats[259], -1e9f);
  const auto& types = md.get_array("tokenizer.ggml.token_type")->ints;
  EXPECT_EQ(types[0], 2);
  EXPECT_EQ(types[1], 3);
  EXPECT_EQ(types[3], 6);
  EXPECT_EQ(types[258], 6);
  EXPECT_EQ(types[259], 1);
}

}  // namespace
}  // namespace sluice
