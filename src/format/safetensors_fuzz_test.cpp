// Robustness of the safetensors header parser against mutated real headers.
#include <gtest/gtest.h>

#include <cctype>
#include <cstring>
#include <fstream>

#include "base/test_data.h"
#include "format/fuzz_test_util.h"
#include "format/safetensors_header.h"

namespace sluice::testing {
namespace {

// Parses size bytes: a refusal is never an internal error, and an accepted
// header's entries all lie inside the bytes.
void parse_and_check(const uint8_t* data, size_t size, int iteration) {
  auto r = parse_safetensors_header(data, size, "fuzz.safetensors");
  if (!r.ok()) {
    ASSERT_NE(r.status().code(), StatusCode::kInternal) << r.status().to_string();
    return;
  }
  for (const SafetensorsEntry& e : *r) {
    ASSERT_LE(e.n_bytes, size) << "#" << iteration << " " << e.name;
    ASSERT_LE(e.offset, size - e.n_bytes) << "#" << iteration << " " << e.name;
  }
}

class SafetensorsFuzz : public RealFileTest {
 protected:
  void SetUp() override {
    load(model_path("stories260K/hf/model.safetensors"));
    if (IsSkipped()) return;
    std::memcpy(&header_len_, file_.data(), 8);
    ASSERT_LT(header_len_, file_.size());
  }
  // Parses the file with its JSON header replaced by `json` (length field updated).
  // The data region stays put at the end of `scratch_`; the new header is written
  // right before it, so no iteration copies the megabyte of tensor data.
  void parse_with_json(const std::string& json, int iteration) {
    const size_t data_size = file_.size() - 8 - header_len_;
    if (scratch_.empty()) {
      scratch_.resize(kSlack + data_size);
      std::memcpy(scratch_.data() + kSlack, file_.data() + 8 + header_len_, data_size);
    }
    ASSERT_LE(json.size() + 8, kSlack);
    uint8_t* start = scratch_.data() + kSlack - json.size() - 8;
    const uint64_t n = json.size();
    std::memcpy(start, &n, 8);
    std::memcpy(start + 8, json.data(), json.size());
    parse_and_check(start, 8 + json.size() + data_size, iteration);
  }
  static constexpr size_t kSlack = 64 * 1024;
  std::vector<uint8_t> scratch_;
  uint64_t header_len_ = 0;
};

TEST_F(SafetensorsFuzz, ByteMutations) {
  ASSERT_TRUE(parse_safetensors_header(file_.data(), file_.size(), "x").ok());
  FuzzRng rng(0x5afe0001);
  std::vector<std::pair<size_t, uint8_t>> undo;
  testing::reset_max_allocation();
  for (int it = 0; it < 3000; ++it) {
    const uint64_t n = 1 + rng.below(3);
    for (uint64_t k = 0; k < n; ++k) {
      testing::mutate_bytes(&rng, &file_, 0, 8 + header_len_, &undo);
    }
    parse_and_check(file_.data(), file_.size(), it);
    if (HasFatalFailure()) return;
    testing::undo_mutations(&file_, &undo);
  }
  EXPECT_LT(testing::max_allocation(), kMaxAllocation);
}

TEST_F(SafetensorsFuzz, NumberMutations) {
  // Replace one number of the JSON with a hostile one and fix the length field,
  // so the JSON stays valid and the semantic checks are exercised.
  const std::string json(file_.begin() + 8, file_.begin() + 8 + static_cast<ptrdiff_t>(header_len_));
  std::vector<std::pair<size_t, size_t>> numbers;  // [begin, end) of digit runs
  for (size_t i = 0; i < json.size();) {
    if (std::isdigit(static_cast<unsigned char>(json[i]))) {
      size_t j = i;
      while (j < json.size() && std::isdigit(static_cast<unsigned char>(json[j]))) ++j;
      numbers.emplace_back(i, j);
      i = j;
    } else {
      ++i;
    }
  }
  ASSERT_GT(numbers.size(), 100u);
  const char* kNumbers[] = {"0",  "-1", "1", "18446744073709551615", "18446744073709551616",
                            "9223372036854775807", "4294967296", "1e30", "1.5", "-0",
                            "1044992", "null", "[]", "\"7\""};
  FuzzRng rng(0x5afe0002);
  testing::reset_max_allocation();
  for (int it = 0; it < 1500; ++it) {
    std::string mutated = json;
    const auto [b, e] = numbers[rng.below(numbers.size())];
    const std::string repl = rng.below(4) == 0
                                 ? std::to_string(rng.next() % 2000000)
                                 : kNumbers[rng.below(std::size(kNumbers))];
    mutated.replace(b, e - b, repl);
    parse_with_json(mutated, it);
    if (HasFatalFailure()) return;
  }
  EXPECT_LT(testing::max_allocation(), kMaxAllocation);
}

TEST_F(SafetensorsFuzz, Truncations) {
  for (size_t len = 0; len < 8 + header_len_ + 64; ++len) {
    std::vector<uint8_t> cut(file_.begin(), file_.begin() + static_cast<ptrdiff_t>(len));
    auto r = parse_safetensors_header(cut.data(), cut.size(), "cut.safetensors");
    ASSERT_FALSE(r.ok()) << "truncated at " << len << " parsed OK";
    ASSERT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().to_string();
  }
}

TEST_F(SafetensorsFuzz, HeaderLengthPastEof) {
  const uint64_t huge = 0xffffffffffffff00ull;
  std::memcpy(file_.data(), &huge, 8);
  auto r = parse_safetensors_header(file_.data(), file_.size(), "x.safetensors");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("18446744073709551360"), std::string::npos);
  const uint64_t past = file_.size();
  std::memcpy(file_.data(), &past, 8);
  r = parse_safetensors_header(file_.data(), file_.size(), "x.safetensors");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("exceeds the file size"), std::string::npos);
}

}  // namespace
}  // namespace sluice::testing
