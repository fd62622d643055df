// Test helpers: load a tokenizer from a GGUF or HF folder, read golden .inp/.out files.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "base/test_data.h"
#include "format/gguf_reader.h"
#include "format/hf_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace sluice::testing {

inline StatusOr<std::unique_ptr<Tokenizer>> load_gguf_tokenizer(const std::string& path) {
  ASSIGN_OR_RETURN(ModelFile mf, read_gguf(path));
  return Tokenizer::from_metadata(mf.metadata);
}

inline StatusOr<std::unique_ptr<Tokenizer>> load_hf_tokenizer(const std::string& dir) {
  Metadata md;
  RETURN_IF_ERROR(import_hf_tokenizer(dir, &md));
  return Tokenizer::from_metadata(md);
}

// tests/data/<name> parsed as JSON: a discarded value (not an object) when the
// file is missing or malformed, for the test to assert on.
inline nlohmann::json read_test_data_json(const std::string& name) {
  StatusOr<std::string> text = read_text_file(joined(source_dir(), "/tests/data/", name));
  if (!text.ok()) return nlohmann::json(nlohmann::json::value_t::discarded);
  return nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
}

struct GoldenCase {
  std::string text;
  std::vector<int32_t> ids;
};

// Reads llama.cpp's tokenizer test files the way its test-tokenizer-0 does: inputs
// are separated by "\n__ggml_vocab_test__\n"; output line i holds the ids of input i.
inline std::vector<GoldenCase> read_golden(const std::string& inp_path, const std::string& out_path) {
  std::vector<GoldenCase> cases;
  StatusOr<std::string> inp = read_text_file(inp_path);
  StatusOr<std::string> out = read_text_file(out_path);
  if (!inp.ok() || !out.ok()) {
    ADD_FAILURE() << "cannot read " << inp_path << " / " << out_path;
    return cases;
  }
  const std::string sep = "\n__ggml_vocab_test__\n";
  for (size_t pos = 0; pos < inp->size();) {
    const size_t next = inp->find(sep, pos);
    if (next == std::string::npos) {
      cases.push_back({inp->substr(pos), {}});
      break;
    }
    cases.push_back({inp->substr(pos, next - pos), {}});
    pos = next + sep.size();
  }
  std::istringstream lines(*out);
  std::string line;
  size_t i = 0;
  for (; std::getline(lines, line) && i < cases.size(); ++i) {
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) cases[i].ids.push_back(id);
  }
  if (i != cases.size()) ADD_FAILURE() << out_path << " has " << i << " lines for " << cases.size() << " inputs";
  return cases;
}

inline std::string ids_string(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) {
    s += ' ';
    s += std::to_string(id);
  }
  return s;
}

}  // namespace sluice::testing
