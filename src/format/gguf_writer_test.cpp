#include "format/gguf_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "base/mapped_file.h"
#include "base/test_data.h"
#include "format/gguf_reader.h"

namespace sluice {
namespace {

using testing::model_path;
using testing::shipped_model_path;

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("sluice_writer_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

std::vector<uint8_t> slurp(const std::string& path) {
  auto m = MappedFile::open(path);
  if (!m.ok()) return {};
  return std::vector<uint8_t>(m->data(), m->data() + m->size());
}

TEST(GgufWriter, RoundTripStories260KIsByteIdentical) {
  const std::string src = shipped_model_path("stories260K.gguf");
  auto mf = read_gguf(src);
  ASSERT_TRUE(mf.ok()) << mf.status().to_string();
  const std::string out = temp_path("stories.gguf");
  ASSERT_TRUE(write_gguf(*mf, out).ok());
  const std::vector<uint8_t> a = slurp(src), b = slurp(out);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_TRUE(a == b) << "first difference at byte "
                      << (std::mismatch(a.begin(), a.end(), b.begin()).first - a.begin());
  EXPECT_FALSE(testing::path_exists(out + ".partial"));
  std::filesystem::remove(out);
}

TEST(GgufWriter, RoundTripVocabOnlyIsByteIdentical) {
  const std::string src = model_path("vocab/ggml-vocab-llama-spm.gguf");
  SKIP_UNLESS_EXISTS(src);
  auto mf = read_gguf(src);
  ASSERT_TRUE(mf.ok()) << mf.status().to_string();
  const std::string out = temp_path("vocab.gguf");
  ASSERT_TRUE(write_gguf(*mf, out).ok());
  EXPECT_TRUE(slurp(src) == slurp(out));
  std::filesystem::remove(out);
}

TEST(GgufWriter, StreamsFilledTensorsWithAlignment) {
  GgufWriter w;
  w.metadata().set("general.architecture", MetaValue::str("llama"));
  w.metadata().set("general.alignment", MetaValue::u32(64));
  w.metadata().set("x.f32", MetaValue::f32(0.25f));
  MetaArray nested;
  nested.elem_type = GgufType::kArray;
  MetaArray inner;
  inner.elem_type = GgufType::kInt16;
  inner.ints = {-1, 2, 3};
  nested.arrays.push_back(MetaValue::array(inner));
  w.metadata().set("x.nested", MetaValue::array(nested));

  std::vector<float> a = {1, 2, 3};
  ASSERT_TRUE(w.add_tensor("a", DType::kF32, {3}, reinterpret_cast<const uint8_t*>(a.data())).ok());
  int fill_calls = 0;
  ASSERT_TRUE(w.add_tensor("b", DType::kQ8_0, {64, 2},
                           [&](uint8_t* dst, size_t n) {
                             ++fill_calls;
                             for (size_t i = 0; i < n; ++i) dst[i] = static_cast<uint8_t>(i);
                           })
                  .ok());
  EXPECT_EQ(w.total_tensor_bytes(), 12u + 4 * 34);
  std::vector<std::pair<uint64_t, uint64_t>> progress;
  const std::string out = temp_path("stream.gguf");
  ASSERT_TRUE(w.write(out, [&](uint64_t d, uint64_t t) { progress.emplace_back(d, t); }).ok());
  EXPECT_EQ(fill_calls, 1);
  ASSERT_EQ(progress.size(), 3u);
  EXPECT_EQ(progress[0], std::make_pair(uint64_t{0}, uint64_t{148}));
  EXPECT_EQ(progress[2], std::make_pair(uint64_t{148}, uint64_t{148}));

  auto mf = read_gguf(out);
  ASSERT_TRUE(mf.ok()) << mf.status().to_string();
  EXPECT_EQ(mf->alignment, 64u);
  EXPECT_EQ(mf->metadata.get_float("x.f32"), 0.25);
  const MetaArray* rn = mf->metadata.get_array("x.nested");
  ASSERT_NE(rn, nullptr);
  ASSERT_EQ(rn->arrays.size(), 1u);
  EXPECT_EQ(std::get<MetaArray>(rn->arrays[0].value).ints, inner.ints);
  ASSERT_EQ(mf->tensors.size(), 2u);
  EXPECT_EQ(mf->tensors[0].file_offset % 64, 0);
  EXPECT_EQ(mf->tensors[1].file_offset, mf->tensors[0].file_offset + 64);
  EXPECT_EQ(std::memcmp(mf->tensors[0].data, a.data(), 12), 0);
  for (size_t i = 0; i < mf->tensors[1].n_bytes; ++i) {
    ASSERT_EQ(mf->tensors[1].data[i], static_cast<uint8_t>(i));
  }
  std::filesystem::remove(out);
}

TEST(GgufWriter, RefusesBadTensorsAndValues) {
  GgufWriter w;
  uint8_t byte = 0;
  EXPECT_EQ(w.add_tensor("", DType::kF32, {1}, &byte).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.add_tensor("q", DType::kQ4_0, {16}, &byte).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.add_tensor("n", DType::kF32, {-1}, &byte).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.add_tensor("d", DType::kF32, {1, 1, 1, 1, 1}, &byte).code(),
            StatusCode::kInvalidArgument);
  ASSERT_TRUE(w.add_tensor("t", DType::kF32, {0}, nullptr).ok());
  EXPECT_EQ(w.add_tensor("t", DType::kF32, {0}, nullptr).code(), StatusCode::kInvalidArgument);

  GgufWriter bad_value;
  bad_value.metadata().set("k", MetaValue{GgufType::kUint8, int64_t{300}});
  const std::string out = temp_path("bad.gguf");
  Status st = bad_value.write(out);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("'k'"), std::string::npos) << st.message();
  EXPECT_FALSE(testing::path_exists(out));
  EXPECT_FALSE(testing::path_exists(out + ".partial"));

  GgufWriter bad_type;
  bad_type.metadata().set("s", MetaValue{GgufType::kString, int64_t{1}});
  EXPECT_EQ(bad_type.write(out).code(), StatusCode::kInvalidArgument);

  GgufWriter bad_align;
  bad_align.metadata().set("general.alignment", MetaValue::u32(24));
  EXPECT_EQ(bad_align.write(out).code(), StatusCode::kInvalidArgument);

  GgufWriter unwritable;
  EXPECT_EQ(unwritable.write("/nonexistent-dir/x.gguf").code(), StatusCode::kIoError);
}

}  // namespace
}  // namespace sluice
