// Robustness of the llama2.c importer against mutated checkpoints and tokenizers
// (written to a temp dir, since the importer maps files).
#include <gtest/gtest.h>
#include <unistd.h>

#include <climits>
#include <filesystem>
#include <fstream>

#include "base/test_data.h"
#include "format/fuzz_test_util.h"
#include "format/llama2c.h"

namespace sluice::testing {
namespace {

namespace fs = std::filesystem;

void write_file(const std::string& path, const std::vector<uint8_t>& b, size_t n) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(n));
}

class Llama2cFuzz : public ::testing::Test {
 protected:
  void SetUp() override {
    bin_path_ = model_path("stories260K/stories260K.bin");
    tok_path_ = model_path("stories260K/tok512.bin");
    if (!testing::path_exists(bin_path_) || !testing::path_exists(tok_path_)) {
      GTEST_SKIP() << "real-model data not found at " << bin_path_;
    }
    dir_ = (fs::temp_directory_path() / ("sluice_l2c_fuzz_" + std::to_string(::getpid()))).string();
    fs::create_directories(dir_);
    bin_ = slurp(bin_path_);
    tok_ = slurp(tok_path_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  // Imports; an OK result must have all tensors inside the mapped file.
  void import_and_check(const std::string& bin, const std::string& tok, size_t bin_size, int it) {
    auto r = import_llama2c(bin, tok);
    if (!r.ok()) {
      ASSERT_NE(r.status().code(), StatusCode::kInternal) << r.status().to_string();
      return;
    }
    for (const TensorInfo& t : r->tensors) {
      ASSERT_GE(t.file_offset, 0);
      ASSERT_LE(static_cast<uint64_t>(t.file_offset) + t.n_bytes, bin_size)
          << "#" << it << " " << t.name;
    }
  }
  std::string bin_path_, tok_path_, dir_;
  std::vector<uint8_t> bin_, tok_;
};

TEST_F(Llama2cFuzz, HeaderMutations) {
  const std::string path = dir_ + "/m.bin";
  FuzzRng rng(0x11a2c001);
  const int32_t kInts[] = {0, -1, 1, 2, 3, INT_MIN, INT_MAX, 1 << 20, 1 << 30, -512, 63, 65, 7};
  testing::reset_max_allocation();
  for (int it = 0; it < 300; ++it) {
    std::vector<uint8_t> b(bin_.begin(), bin_.begin() + 64);
    const uint64_t n = 1 + rng.below(3);
    for (uint64_t k = 0; k < n; ++k) {
      const size_t field = rng.below(7);
      int32_t v;
      if (rng.below(3) == 0) {
        std::memcpy(&v, b.data() + 4 * field, 4);
        v = static_cast<int32_t>(static_cast<uint32_t>(v) + static_cast<uint32_t>(rng.below(5)) - 2u);
      } else {
        v = kInts[rng.below(std::size(kInts))];
      }
      std::memcpy(b.data() + 4 * field, &v, 4);
    }
    std::vector<uint8_t> full = bin_;
    std::copy(b.begin(), b.end(), full.begin());
    // Also vary the size: exact, short, long, or cut at a random point.
    size_t size = full.size();
    switch (rng.below(4)) {
      case 0: size -= 4 * rng.below(64); break;
      case 1: size = rng.below(full.size()); break;
      default: break;
    }
    write_file(path, full, size);
    import_and_check(path, tok_path_, size, it);
    if (HasFatalFailure()) return;
  }
  EXPECT_LT(testing::max_allocation(), kMaxAllocation);
}

TEST_F(Llama2cFuzz, CheckpointTruncations) {
  const std::string path = dir_ + "/t.bin";
  FuzzRng rng(0x11a2c002);
  std::vector<size_t> sizes;
  for (size_t s = 0; s < 300; ++s) sizes.push_back(s);
  for (int k = 0; k < 50; ++k) sizes.push_back(rng.below(bin_.size()));
  for (size_t s : sizes) {
    write_file(path, bin_, s);
    auto r = import_llama2c(path, tok_path_);
    // Only the cut that drops exactly the optional freq_cis block may parse.
    if (s != bin_.size() - 2 * 512 * 4 * 4) {
      ASSERT_FALSE(r.ok()) << "cut at " << s << " parsed OK";
      ASSERT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().to_string();
    }
  }
}

TEST_F(Llama2cFuzz, TokenizerMutations) {
  FuzzRng rng(0x11a2c003);
  std::vector<std::pair<size_t, uint8_t>> undo;
  testing::reset_max_allocation();
  for (int it = 0; it < 3000; ++it) {
    const uint64_t n = 1 + rng.below(3);
    for (uint64_t k = 0; k < n; ++k) testing::mutate_bytes(&rng, &tok_, 0, tok_.size(), &undo);
    // An exactly sized copy (ASan catches over-reads), sometimes truncated.
    size_t size = tok_.size();
    if (rng.below(4) == 0) size = rng.below(tok_.size());
    std::vector<uint8_t> copy(tok_.begin(), tok_.begin() + static_cast<ptrdiff_t>(size));
    Metadata md;
    Status st = import_llama2c_tokenizer(copy.data(), copy.size(), "tok.bin", 512, &md);
    if (st.ok()) {
      ASSERT_EQ(md.get_array("tokenizer.ggml.tokens")->strings.size(), 512u);
    } else {
      ASSERT_EQ(st.code(), StatusCode::kDataLoss) << st.to_string();
    }
    testing::undo_mutations(&tok_, &undo);
  }
  EXPECT_LT(testing::max_allocation(), kMaxAllocation);
  // A few through the file-level importer as well.
  const std::string path = dir_ + "/tok.bin";
  for (int it = 0; it < 50; ++it) {
    for (int k = 0; k < 2; ++k) testing::mutate_bytes(&rng, &tok_, 0, tok_.size(), &undo);
    write_file(path, tok_, tok_.size());
    import_and_check(bin_path_, path, bin_.size(), it);
    if (HasFatalFailure()) return;
    testing::undo_mutations(&tok_, &undo);
  }
}

}  // namespace
}  // namespace sluice::testing
