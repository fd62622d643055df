// llama.cpp's per-model tokenizer test files, wherever they are: every
// VOCAB.gguf with VOCAB.gguf.inp and VOCAB.gguf.out in the folder named by
// SLUICE_VOCAB_DIR must give exactly the .out ids for each .inp text (encoded
// as llama.cpp's test-tokenizer-0 does: no BOS/EOS, specials not parsed).
// Vocabularies of a model type sluice does not support are listed and skipped.
// Skipped as a whole when SLUICE_VOCAB_DIR is unset.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "tokenizer/tokenizer_test_util.h"

namespace sluice {
namespace {

TEST(VocabDir, EveryVocabMatchesItsOutFile) {
  const char* dir = std::getenv("SLUICE_VOCAB_DIR");
  if (!dir || !*dir) {
    GTEST_SKIP() << "SLUICE_VOCAB_DIR is not set (a folder of llama.cpp ggml-vocab-*.gguf files "
                    "with their .inp/.out test files)";
  }
  namespace fs = std::filesystem;
  std::vector<fs::path> vocabs;
  for (const auto& e : fs::directory_iterator(dir)) {
    const fs::path p = e.path();
    if (p.extension() == ".gguf" && fs::exists(p.string() + ".inp") && fs::exists(p.string() + ".out")) {
      vocabs.push_back(p);
    }
  }
  std::sort(vocabs.begin(), vocabs.end());
  ASSERT_FALSE(vocabs.empty()) << "no VOCAB.gguf with .inp and .out in " << dir;
  int n_files = 0;
  for (const fs::path& p : vocabs) {
    auto tok = testing::load_gguf_tokenizer(p.string());
    if (!tok.ok() && tok.status().code() == StatusCode::kUnimplemented) {
      std::cout << "[ SKIPPED  ] " << p.filename().string() << ": " << tok.status().message() << "\n";
      continue;
    }
    ASSERT_TRUE(tok.ok()) << p << ": " << tok.status().to_string();
    const std::vector<testing::GoldenCase> cases =
        testing::read_golden(p.string() + ".inp", p.string() + ".out");
    int n_pass = 0;
    for (const testing::GoldenCase& c : cases) {
      const std::vector<int32_t> ids = (*tok)->encode(c.text, /*add_special=*/false, /*parse_special=*/false);
      EXPECT_EQ(ids, c.ids) << p.filename() << " input '" << c.text << "'\n got:" << testing::ids_string(ids)
                            << "\nwant:" << testing::ids_string(c.ids);
      n_pass += ids == c.ids;
    }
    std::cout << "[   INFO   ] " << p.filename().string() << " (pre '" << (*tok)->vocab().pre()
              << "'): " << n_pass << "/" << cases.size() << " inputs match\n";
    ++n_files;
  }
  EXPECT_GT(n_files, 0);
}

}  // namespace
}  // namespace sluice
