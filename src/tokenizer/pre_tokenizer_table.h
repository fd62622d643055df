// The pre-tokenizers of byte-level BPE vocabularies, by tokenizer.ggml.pre name.
//
// One place for the data: every name llama.cpp accepts in tokenizer.ggml.pre maps
// to a PreType (the ordered list of split regexes, applied as PreTokenizer
// describes) and to the flags that name sets in the BPE tokenizer. The regexes
// are the ones llama.cpp uses for each type (its adaptations of the HF
// tokenizer.json patterns). Immutable static data; thread-safe.
#pragma once

#include <array>
#include <span>
#include <string>
#include <string_view>

namespace sluice {

inline constexpr int kMaxPreRegexes = 6;

struct PreType {
  std::string_view name;                                // "gpt2", "llama3", ...
  std::array<std::string_view, kMaxPreRegexes> regexes;  // in order; unused slots empty
  int n_regexes() const;
};

struct PreName {
  std::string_view name;  // the tokenizer.ggml.pre value
  int type;               // index into pre_types()
  // BPE: a pre-tokenized word that is itself a token is emitted as is, unmerged.
  bool ignore_merges = false;
  // Default of tokenizer.ggml.add_bos_token when the key is absent.
  bool add_bos = false;
  // HF clean_up_tokenization_spaces as llama.cpp sets it (" ." -> "." when
  // detokenizing; Vocab::clean_spaces, applied by Tokenizer::decode and
  // StreamDecoder).
  bool clean_spaces = true;
  // The "<mask>" token swallows the whitespace before it (jina-v2-*).
  bool mask_lstrip = false;
};

std::span<const PreType> pre_types();
std::span<const PreName> pre_names();

// The entry for a tokenizer.ggml.pre value ("" means "default"), or nullptr.
const PreName* find_pre_name(std::string_view pre);
// Every accepted name, comma-separated, for error messages.
std::string supported_pre_names();

}  // namespace sluice
