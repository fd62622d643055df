// Robustness of parse_gguf against mutated real headers: every input must give an
// OK ModelFile that stays inside the buffer, or an error Status; never a crash,
// a hang, or a huge allocation. Run under ASan/UBSan to catch out-of-bounds reads.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <new>

#include "base/test_data.h"
#include "format/fuzz_test_util.h"
#include "format/gguf_reader.h"

// The test binary's global operator new records the largest single request.
namespace {
std::atomic<size_t> g_max_allocation{0};

void* tracked_alloc(size_t n) {
  size_t prev = g_max_allocation.load(std::memory_order_relaxed);
  while (n > prev && !g_max_allocation.compare_exchange_weak(prev, n)) {
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(size_t n) { return tracked_alloc(n); }
void* operator new[](size_t n) { return tracked_alloc(n); }
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  try {
    return tracked_alloc(n);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](size_t n, const std::nothrow_t& tag) noexcept { return operator new(n, tag); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }

namespace sluice::testing {
size_t max_allocation() { return g_max_allocation.load(); }
void reset_max_allocation() { g_max_allocation.store(0); }
}  // namespace sluice::testing

namespace sluice::testing {
namespace {

// Parses `b`; an OK result must describe tensors inside the buffer.
void parse_and_check(const std::vector<uint8_t>& b, const char* what, uint64_t iteration) {
  auto r = parse_gguf(b.data(), b.size(), "fuzz.gguf");
  if (r.ok()) {
    for (const TensorInfo& t : r->tensors) {
      ASSERT_GE(t.ne.size(), 1u);
      ASSERT_LE(t.ne.size(), 4u);
      ASSERT_GE(t.data, b.data());
      ASSERT_LE(t.n_bytes, b.size());
      ASSERT_LE(static_cast<size_t>(t.data - b.data()), b.size() - t.n_bytes)
          << what << " #" << iteration << ": tensor " << t.name << " escapes the buffer";
    }
  } else {
    ASSERT_FALSE(r.status().message().empty());
    ASSERT_NE(r.status().code(), StatusCode::kInternal) << r.status().to_string();
  }
}

// Thousands of random mutations, concentrated on the header.
void fuzz_mutations(std::vector<uint8_t> file, uint64_t seed, int n_iterations,
                    int max_mutations) {
  const testing::GgufFieldMap fields = testing::map_gguf_fields(file);
  FuzzRng rng(seed);
  std::vector<std::pair<size_t, uint8_t>> undo;
  testing::reset_max_allocation();
  for (int it = 0; it < n_iterations; ++it) {
    const uint64_t n = 1 + rng.below(max_mutations);
    for (uint64_t k = 0; k < n; ++k) {
      if (rng.below(3) == 0 && !fields.u64_fields.empty()) {
        // Overwrite a real u64 field (a count, length, dim or offset).
        const size_t at = fields.u64_fields[rng.below(fields.u64_fields.size())];
        const uint64_t v = testing::nasty_u64(&rng, file.size());
        for (size_t j = 0; j < 8; ++j) {
          undo.emplace_back(at + j, file[at + j]);
          file[at + j] = static_cast<uint8_t>(v >> (8 * j));
        }
      } else {
        testing::mutate_bytes(&rng, &file, 0, fields.header_end + 32, &undo);
      }
    }
    parse_and_check(file, "mutation", it);
    if (::testing::Test::HasFatalFailure()) return;
    testing::undo_mutations(&file, &undo);
  }
  EXPECT_LT(testing::max_allocation(), kMaxAllocation);
}

// Parses exactly sized heap copies of each prefix in `lens`, so ASan flags any
// read past the cut. A cut file must never parse.
void fuzz_truncations(const std::vector<uint8_t>& file, const std::vector<size_t>& lens) {
  testing::reset_max_allocation();
  for (size_t len : lens) {
    std::vector<uint8_t> cut(file.begin(), file.begin() + static_cast<ptrdiff_t>(len));
    auto r = parse_gguf(cut.data(), cut.size(), "cut.gguf");
    ASSERT_FALSE(r.ok()) << "truncated at " << len << " parsed OK";
    ASSERT_NE(r.status().code(), StatusCode::kInternal);
  }
  EXPECT_LT(testing::max_allocation(), kMaxAllocation);
}

TEST(GgufFuzz, Stories260KMutations) {
  const std::string path = shipped_model_path("stories260K.gguf");
  fuzz_mutations(slurp(path), 0x5eed0001, 4000, 4);
}

TEST(GgufFuzz, Stories260KTruncations) {
  const std::string path = shipped_model_path("stories260K.gguf");
  const std::vector<uint8_t> file = slurp(path);
  const size_t header_end = testing::map_gguf_fields(file).header_end;
  // Every offset through the first 4 KB, every 7th through the header, then a
  // sample of cuts inside the tensor data.
  std::vector<size_t> lens;
  for (size_t len = 0; len < 4096; ++len) lens.push_back(len);
  for (size_t len = 4096; len < header_end + 64; len += 7) lens.push_back(len);
  FuzzRng rng(11);
  for (int k = 0; k < 40; ++k) lens.push_back(header_end + rng.below(file.size() - header_end));
  lens.push_back(file.size() - 1);
  fuzz_truncations(file, lens);
}

TEST(GgufFuzz, Gpt2VocabMutations) {
  const std::string path = model_path("vocab/ggml-vocab-gpt-2.gguf");
  SKIP_UNLESS_EXISTS(path);
  std::vector<uint8_t> file = slurp(path);
  // The full file parses in milliseconds; fewer, denser rounds keep this quick.
  fuzz_mutations(file, 0x5eed0002, 60, 8);
  // Truncations through the first 4 KB (the metadata keys and the token array
  // start) plus a sample of later offsets.
  testing::reset_max_allocation();
  FuzzRng rng(7);
  std::vector<size_t> lens;
  for (size_t len = 0; len < 4096; ++len) lens.push_back(len);
  for (int k = 0; k < 20; ++k) lens.push_back(rng.below(file.size()));
  for (size_t len : lens) {
    auto r = parse_gguf(file.data(), len, "cut.gguf");  // the parser must stop at len
    ASSERT_FALSE(r.ok()) << "truncated at " << len << " parsed OK";
  }
  EXPECT_LT(testing::max_allocation(), kMaxAllocation);
}

// Explicit, named corruptions of the real header.
class GgufCorruption : public RealFileTest {
 protected:
  void SetUp() override {
    load(shipped_model_path("stories260K.gguf"));
    if (IsSkipped()) return;
    fields_ = testing::map_gguf_fields(file_);
  }
  void put_u64(size_t at, uint64_t v) { std::memcpy(file_.data() + at, &v, 8); }
  void put_u32(size_t at, uint32_t v) { std::memcpy(file_.data() + at, &v, 4); }
  void expect(StatusCode code, std::initializer_list<std::string> words) {
    auto r = parse_gguf(file_.data(), file_.size(), "stories.gguf");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), code) << r.status().to_string();
    for (const std::string& w : words) {
      EXPECT_NE(r.status().message().find(w), std::string::npos)
          << "'" << w << "' missing from: " << r.status().message();
    }
  }
  testing::GgufFieldMap fields_;
};

TEST_F(GgufCorruption, TruncatedFile) {
  file_.resize(file_.size() - 1);
  expect(StatusCode::kDataLoss, {"stories.gguf", "'blk.4.ffn_norm.weight'", "past the end"});
  file_.resize(fields_.header_end - 3);
  expect(StatusCode::kDataLoss, {"truncated", "offset of tensor 'blk.4.ffn_norm.weight'"});
}

TEST_F(GgufCorruption, LyingTensorCount) {
  put_u64(8, 49);  // one more tensor than listed: reads data bytes as a tensor info
  auto r = parse_gguf(file_.data(), file_.size(), "stories.gguf");
  EXPECT_FALSE(r.ok());
  put_u64(8, 1000000);
  expect(StatusCode::kDataLoss, {"1000000 tensors"});
  put_u64(8, 48);
  put_u64(16, 0xffffffffffffffffull);
  expect(StatusCode::kDataLoss, {"18446744073709551615 metadata"});
}

TEST_F(GgufCorruption, HugeStringLength) {
  put_u64(24, uint64_t{1} << 40);  // the first key's length
  expect(StatusCode::kDataLoss, {"1099511627776", "byte 24"});
  put_u64(24, 21);
  put_u64(61, uint64_t{1} << 61);  // tokenizer.ggml.tokens element count
  expect(StatusCode::kDataLoss, {"tokenizer.ggml.tokens", "2305843009213693952"});
}

TEST_F(GgufCorruption, OffsetPastEof) {
  put_u64(fields_.tensor_offsets.back(), 0x7fffffffffffffe0ull);
  expect(StatusCode::kDataLoss, {"'blk.4.ffn_norm.weight'", "9223372036854775776"});
  put_u64(fields_.tensor_offsets.back(), 1170944 + 32);
  expect(StatusCode::kDataLoss, {"'blk.4.ffn_norm.weight'", "past the end"});
  put_u64(fields_.tensor_offsets.back(), 1170944 - 32);  // overlaps blk.4.ffn_up.weight
  expect(StatusCode::kDataLoss, {"overlaps", "blk.4.ffn_up.weight"});
}

TEST_F(GgufCorruption, UnsupportedTypeIsNamed) {
  put_u32(fields_.tensor_types[0], 15);  // q8_K: an activation format, never a weight
  expect(StatusCode::kUnimplemented, {"token_embd.weight", "q8_K"});
  put_u32(fields_.tensor_types[0], 16);
  expect(StatusCode::kUnimplemented, {"token_embd.weight", "iq2_xxs"});
  put_u32(fields_.tensor_types[0], 1000);
  expect(StatusCode::kUnimplemented, {"token_embd.weight", "type#1000"});
}

TEST_F(GgufCorruption, BadDimension) {
  put_u64(fields_.tensor_dims[0], 0x8000000000000000ull);
  expect(StatusCode::kDataLoss, {"token_embd.weight", "9223372036854775808"});
}

}  // namespace
}  // namespace sluice::testing
