#include "format/gguf_reader.h"

#include <gtest/gtest.h>

#include <cstring>

#include "base/test_data.h"
#include "format/gguf_test_util.h"

namespace sluice {
namespace {

using testing::model_path;
using testing::shipped_model_path;
using testing::GgufBuilder;

const std::string kStories = shipped_model_path("stories260K.gguf");
const std::string kGpt2Vocab = model_path("vocab/ggml-vocab-gpt-2.gguf");

TEST(GgufReader, ReadsStories260K) {
  auto mf = read_gguf(kStories);
  ASSERT_TRUE(mf.ok()) << mf.status().to_string();
  EXPECT_EQ(mf->format, "gguf");
  EXPECT_EQ(mf->gguf_version, 3u);
  EXPECT_EQ(mf->alignment, 32u);
  EXPECT_EQ(mf->metadata.size(), 19u);
  EXPECT_EQ(mf->tensors.size(), 48u);
  EXPECT_EQ(mf->metadata.get_string("general.architecture"), "llama");
  EXPECT_EQ(mf->metadata.get_int("llama.embedding_length"), 64);
  EXPECT_EQ(mf->metadata.find("llama.embedding_length")->type, GgufType::kUint32);
  EXPECT_EQ(mf->metadata.get_int("llama.block_count"), 5);
  EXPECT_EQ(mf->metadata.get_int("tokenizer.ggml.padding_token_id"), 4294967295LL);
  EXPECT_FLOAT_EQ(*mf->metadata.get_float("llama.attention.layer_norm_rms_epsilon"), 1e-5f);
  const MetaArray* tokens = mf->metadata.get_array("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  ASSERT_EQ(tokens->strings.size(), 512u);
  EXPECT_EQ(tokens->strings[0], "<unk>");
  EXPECT_EQ(tokens->strings[3], "<0x00>");
  const MetaArray* types = mf->metadata.get_array("tokenizer.ggml.token_type");
  ASSERT_NE(types, nullptr);
  EXPECT_EQ(types->elem_type, GgufType::kInt32);
  EXPECT_EQ(types->ints[0], 2);
  EXPECT_EQ(types->ints[1], 3);

  const TensorInfo* emb = mf->find("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->ne, (std::vector<int64_t>{64, 512}));
  EXPECT_EQ(emb->n_bytes, 64u * 512 * 4);
  EXPECT_EQ(emb->file_offset, 14176);  // header ends at 14152, aligned up to 32
  const TensorInfo* q = mf->find("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->file_offset, 14176 + 262400);
  // data points into the mapping at file_offset: compare with a plain read.
  FILE* f = std::fopen(kStories.c_str(), "rb");
  ASSERT_NE(f, nullptr);
  std::vector<uint8_t> bytes(q->n_bytes);
  std::fseek(f, q->file_offset, SEEK_SET);
  ASSERT_EQ(std::fread(bytes.data(), 1, bytes.size(), f), bytes.size());
  std::fclose(f);
  EXPECT_EQ(std::memcmp(bytes.data(), q->data, bytes.size()), 0);
  // The last tensor ends exactly at the end of the file.
  const TensorInfo& last = mf->tensors.back();
  EXPECT_EQ(last.file_offset + static_cast<int64_t>(last.n_bytes), 1185376);
}

TEST(GgufReader, ReadsVocabOnlyGguf) {
  SKIP_UNLESS_EXISTS(kGpt2Vocab);
  auto mf = read_gguf(kGpt2Vocab);
  ASSERT_TRUE(mf.ok()) << mf.status().to_string();
  EXPECT_TRUE(mf->tensors.empty());
  const MetaArray* tokens = mf->metadata.get_array("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(tokens->strings.size(), 50257u);
  const MetaArray* merges = mf->metadata.get_array("tokenizer.ggml.merges");
  ASSERT_NE(merges, nullptr);
  EXPECT_EQ(merges->strings.size(), 50000u);
}

TEST(GgufReader, MissingFileIsNotFound) {
  auto mf = read_gguf("/nonexistent/model.gguf");
  EXPECT_EQ(mf.status().code(), StatusCode::kNotFound);
}

TEST(GgufReader, AllValueTypesAndNestedArrays) {
  GgufBuilder b;
  b.kv_u8("a.u8", 200).kv_i8("a.i8", -5).kv_u16("a.u16", 60000).kv_i16("a.i16", -30000);
  b.kv_u32("a.u32", 4000000000u).kv_i32("a.i32", -7).kv_f32("a.f32", 1.5f);
  b.kv_bool("a.bool", true).kv_str("a.str", "hello").kv_u64("a.u64", ~uint64_t{0});
  b.kv_i64("a.i64", -9).kv_f64("a.f64", 2.25);
  // [[1, 2], [3]] as an array of u16 arrays.
  b.key("a.nested").u32(9).u32(9).u64(2);
  b.u32(2).u64(2).u16(1).u16(2);
  b.u32(2).u64(1).u16(3);
  b.key("a.strs").u32(9).u32(8).u64(2).str("x").str("");
  auto mf = b.parse();
  ASSERT_TRUE(mf.ok()) << mf.status().to_string();
  const Metadata& md = mf->metadata;
  EXPECT_EQ(md.get_int("a.u8"), 200);
  EXPECT_EQ(md.get_int("a.i8"), -5);
  EXPECT_EQ(md.get_int("a.u16"), 60000);
  EXPECT_EQ(md.get_int("a.i16"), -30000);
  EXPECT_EQ(md.get_int("a.u32"), 4000000000LL);
  EXPECT_EQ(md.get_int("a.i32"), -7);
  EXPECT_EQ(md.get_float("a.f32"), 1.5);
  EXPECT_EQ(md.get_bool("a.bool"), true);
  EXPECT_EQ(md.get_string("a.str"), "hello");
  EXPECT_EQ(std::get<uint64_t>(md.find("a.u64")->value), ~uint64_t{0});
  EXPECT_EQ(md.get_int("a.i64"), -9);
  EXPECT_EQ(md.get_float("a.f64"), 2.25);
  const MetaArray* nested = md.get_array("a.nested");
  ASSERT_NE(nested, nullptr);
  ASSERT_EQ(nested->elem_type, GgufType::kArray);
  ASSERT_EQ(nested->arrays.size(), 2u);
  const auto& inner0 = std::get<MetaArray>(nested->arrays[0].value);
  EXPECT_EQ(inner0.elem_type, GgufType::kUint16);
  EXPECT_EQ(inner0.ints, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(std::get<MetaArray>(nested->arrays[1].value).ints, (std::vector<int64_t>{3}));
  EXPECT_EQ(md.get_array("a.strs")->strings, (std::vector<std::string>{"x", ""}));
  std::vector<std::string> want_order = {"a.u8",  "a.i8",   "a.u16", "a.i16",  "a.u32",
                                         "a.i32", "a.f32",  "a.bool", "a.str", "a.u64",
                                         "a.i64", "a.f64", "a.nested", "a.strs"};
  EXPECT_EQ(md.keys(), want_order);
}

TEST(GgufReader, TensorDirectoryAndAlignment) {
  GgufBuilder b;
  b.kv_u32("general.alignment", 64);
  b.tensor("a", {4, 2}, 0, 0).tensor("b", {32}, 8, 64);  // f32 32 bytes; q8_0 34 bytes
  b.data_bytes(64 + 34);
  auto mf = b.parse();
  ASSERT_TRUE(mf.ok()) << mf.status().to_string();
  EXPECT_EQ(mf->alignment, 64u);
  ASSERT_EQ(mf->tensors.size(), 2u);
  EXPECT_EQ(mf->tensors[0].n_bytes, 32u);
  EXPECT_EQ(mf->tensors[1].type, DType::kQ8_0);
  EXPECT_EQ(mf->tensors[1].n_bytes, 34u);
  EXPECT_EQ(mf->tensors[0].file_offset % 64, 0);
  EXPECT_EQ(mf->tensors[1].file_offset, mf->tensors[0].file_offset + 64);
  EXPECT_EQ(mf->tensors[1].data, b.bytes().data() + mf->tensors[1].file_offset);
}

TEST(GgufReader, Version2Accepted) {
  GgufBuilder b(2);
  b.kv_str("general.architecture", "llama");
  auto mf = b.parse();
  ASSERT_TRUE(mf.ok()) << mf.status().to_string();
  EXPECT_EQ(mf->gguf_version, 2u);
}

void expect_error(const StatusOr<ModelFile>& r, StatusCode code,
                  std::initializer_list<const char*> words) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  for (const char* w : words) {
    EXPECT_NE(r.status().message().find(w), std::string::npos)
        << "'" << w << "' missing from: " << r.status().message();
  }
}

TEST(GgufReader, RefusesBadMagicAndVersions) {
  std::vector<uint8_t> junk = {'G', 'G', 'M', 'L', 3, 0, 0, 0};
  expect_error(parse_gguf(junk.data(), junk.size(), "junk.gguf"), StatusCode::kDataLoss,
               {"junk.gguf", "not a GGUF"});
  expect_error(GgufBuilder(1).parse(), StatusCode::kUnimplemented, {"version 1"});
  expect_error(GgufBuilder(0x03000000).parse(), StatusCode::kUnimplemented,
               {"big-endian GGUF not supported"});
  expect_error(GgufBuilder(7).parse(), StatusCode::kUnimplemented, {"version 7"});
}

TEST(GgufReader, RefusesAlignment) {
  GgufBuilder b;
  b.kv_u32("general.alignment", 48);
  expect_error(b.parse(), StatusCode::kDataLoss, {"general.alignment", "48"});
  GgufBuilder z;
  z.kv_u32("general.alignment", 0);
  expect_error(z.parse(), StatusCode::kDataLoss, {"general.alignment", "0"});
  GgufBuilder s;
  s.kv_str("general.alignment", "32");
  expect_error(s.parse(), StatusCode::kDataLoss, {"general.alignment", "str"});
}

TEST(GgufReader, RefusesDuplicates) {
  GgufBuilder b;
  b.kv_u32("k", 1).kv_u32("k", 2);
  expect_error(b.parse(), StatusCode::kDataLoss, {"duplicate", "'k'"});
  GgufBuilder t;
  t.tensor("w", {8}, 0, 0).tensor("w", {8}, 0, 32).data_bytes(64);
  expect_error(t.parse(), StatusCode::kDataLoss, {"duplicate tensor", "'w'"});
}

TEST(GgufReader, RefusesBadTensorInfos) {
  {
    GgufBuilder b;
    b.tensor("w", {}, 0, 0).data_bytes(32);
    expect_error(b.parse(), StatusCode::kDataLoss, {"'w'", "0 dimensions"});
  }
  {
    GgufBuilder b;
    b.tensor("w", {1, 1, 1, 1, 1}, 0, 0).data_bytes(32);
    expect_error(b.parse(), StatusCode::kDataLoss, {"'w'", "5 dimensions"});
  }
  {
    GgufBuilder b;
    b.tensor("w", {4, static_cast<uint64_t>(-3)}, 0, 0).data_bytes(32);
    expect_error(b.parse(), StatusCode::kDataLoss, {"'w'", "negative"});
  }
  {
    GgufBuilder b;
    b.tensor("w", {uint64_t{1} << 32, uint64_t{1} << 32}, 0, 0).data_bytes(32);
    expect_error(b.parse(), StatusCode::kDataLoss, {"'w'", "overflow"});
  }
  {
    GgufBuilder b;
    b.tensor("w", {48, 1}, 8, 0).data_bytes(64);  // q8_0 needs multiples of 32
    expect_error(b.parse(), StatusCode::kDataLoss, {"'w'", "48", "block size 32"});
  }
  {
    GgufBuilder b;
    b.tensor("blk.0.ffn_up.weight", {256}, 16, 0).data_bytes(256);  // iq2_xxs: not supported
    expect_error(b.parse(), StatusCode::kUnimplemented, {"blk.0.ffn_up.weight", "iq2_xxs"});
  }
  {
    GgufBuilder b;
    b.tensor("w", {8}, 0, 16).data_bytes(64);
    expect_error(b.parse(), StatusCode::kDataLoss, {"'w'", "16", "alignment 32"});
  }
  {
    GgufBuilder b;
    b.tensor("w", {8}, 0, 0).tensor("v", {16}, 0, 0).data_bytes(64);  // overlap
    expect_error(b.parse(), StatusCode::kDataLoss, {"overlaps"});
  }
  {
    GgufBuilder b;
    b.tensor("w", {8}, 0, 0).tensor("v", {16}, 0, 32).data_bytes(64);  // v ends at 96
    expect_error(b.parse(), StatusCode::kDataLoss, {"'v'", "past the end"});
  }
}

TEST(GgufReader, RefusesLyingCountsAndLengths) {
  {
    GgufBuilder b(3, /*n_tensors=*/1000000, /*n_kv=*/0);
    expect_error(b.parse(), StatusCode::kDataLoss, {"1000000 tensors"});
  }
  {
    GgufBuilder b(3, 0, /*n_kv=*/uint64_t{1} << 60);
    expect_error(b.parse(), StatusCode::kDataLoss, {"1152921504606846976 metadata"});
  }
  {
    GgufBuilder b;
    b.key("s").u32(8).u64(uint64_t{1} << 40);  // string length past EOF
    expect_error(b.parse(), StatusCode::kDataLoss, {"'s'", "1099511627776"});
  }
  {
    GgufBuilder b;
    b.key("arr").u32(9).u32(4).u64(uint64_t{1} << 62);
    expect_error(b.parse(), StatusCode::kDataLoss, {"'arr'", "4611686018427387904"});
  }
  {
    GgufBuilder b;
    b.key("bad").u32(13).u32(0);
    expect_error(b.parse(), StatusCode::kDataLoss, {"'bad'", "unknown value type 13"});
  }
  {
    GgufBuilder b;
    b.key("b").u32(7).u8(2);
    expect_error(b.parse(), StatusCode::kDataLoss, {"'b'", "byte value 2"});
  }
  {
    // Arrays nested 100 deep are refused without deep recursion.
    GgufBuilder b;
    b.key("deep").u32(9);
    for (int i = 0; i < 100; ++i) b.u32(9).u64(1);
    b.u32(4).u64(0);
    expect_error(b.parse(), StatusCode::kDataLoss, {"'deep'", "nested"});
  }
}

}  // namespace
}  // namespace sluice
