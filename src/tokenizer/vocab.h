// Vocab: the token table of a tokenizer, loaded from GGUF-convention metadata.
//
// Holds token texts, scores, token types, BPE merge ranks, special ids and the
// add-BOS/EOS/space-prefix flags of "tokenizer.ggml.*". Immutable after load();
// safe to share between threads for reading. Ids are int32 in [0, n_vocab()).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "format/hf_tokenizer.h"
#include "format/metadata.h"
#include "sluice/status.h"

namespace sluice {

// tokenizer.ggml.token_type values.
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

enum class VocabModel {
  kSpm,   // "llama": SentencePiece-style scored merges over characters
  kBpe,   // "gpt2": byte-level BPE with ranked merges
  kWpm,   // "bert": WordPiece, greedy longest match after BERT normalization
  kUgm,   // "t5": SentencePiece unigram, best-scoring segmentation (Viterbi)
  kRwkv,  // "rwkv": RWKV World, greedy longest match over escaped byte strings
};

// The tokenizer.ggml.model name of `model` ("llama", "gpt2", "bert", "t5", "rwkv").
const char* vocab_model_name(VocabModel model);

// Hash and equality that let unordered_map<std::string, V> be queried with a
// std::string_view without building a std::string.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class Vocab {
 public:
  // Reads tokenizer.ggml.*; refuses unsupported models by name (kUnimplemented) and
  // malformed arrays or values of the wrong type (kDataLoss). Special ids and the
  // add-* flags default per model as llama.cpp's loader does (e.g. "bert": [CLS]
  // 101 as BOS, [UNK] 100, [SEP] 102; "t5": EOS 1, UNK 2, add_eos).
  static StatusOr<Vocab> load(const Metadata& md);

  VocabModel model() const { return model_; }
  const std::string& pre() const { return pre_; }  // tokenizer.ggml.pre ("" if absent)
  int32_t n_vocab() const { return static_cast<int32_t>(texts_.size()); }
  bool valid(int32_t id) const { return id >= 0 && id < n_vocab(); }

  const std::string& text(int32_t id) const { return texts_[id]; }
  float score(int32_t id) const { return scores_[id]; }
  TokenType type(int32_t id) const { return types_[id]; }
  // Id of the token spelled exactly `text`, or -1.
  int32_t find(std::string_view text) const;
  // Rank of the BPE merge (left, right), or -1 if there is none.
  int32_t merge_rank(std::string_view left, std::string_view right) const;
  // Token for a raw byte: SPM "<0xHH>" (or the one-byte token), BPE the byte-level
  // character; -1 if the vocab has none.
  int32_t byte_token(uint8_t b) const { return byte_tokens_[b]; }
  // The raw byte of a byte-type token "<0xHH>", or -1.
  int byte_value(int32_t id) const;

  // Special ids; -1 when the model has none.
  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  int32_t unk_id() const { return unk_id_; }
  int32_t pad_id() const { return pad_id_; }
  int32_t sep_id() const { return sep_id_; }  // "bert": [SEP], appended after the text
  int32_t eot_id() const { return eot_id_; }
  int32_t eom_id() const { return eom_id_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool add_space_prefix() const { return add_space_prefix_; }
  // "t5": collapse whitespace runs and trim the ends (tokenizer.ggml.remove_extra_whitespaces).
  bool remove_extra_whitespaces() const { return remove_extra_whitespaces_; }
  // "t5": SentencePiece's normalization table (tokenizer.ggml.precompiled_charsmap;
  // empty if absent). Its structure is checked by the UgmEncoder.
  const std::vector<uint8_t>& precompiled_charsmap() const { return precompiled_charsmap_; }
  // BPE: a pre-tokenized word that is itself a token is not merged (Llama 3).
  bool ignore_merges() const { return ignore_merges_; }
  // Detokenized text gets the clean_spaces rewrites (clean_spaces.h): BPE by the
  // pre-tokenizer name's flag (pre_tokenizer_table.cpp; true for "default"),
  // WordPiece always, never SPM, unigram or RWKV, as llama.cpp decides it.
  bool clean_spaces() const { return clean_spaces_; }
  // Control, user-defined and unknown tokens, longest text first (for splitting).
  const std::vector<int32_t>& special_tokens() const { return special_tokens_; }
  // End-of-generation ids: eos, eot, eom and known end-of-turn texts.
  const std::vector<int32_t>& eog_ids() const { return eog_ids_; }

 private:
  Status load_arrays(const Metadata& md);
  Status load_merges(const Metadata& md);
  Status load_charsmap(const Metadata& md);
  Status load_specials(const Metadata& md);
  void build_byte_tokens();

  VocabModel model_ = VocabModel::kSpm;
  std::string pre_;
  std::vector<std::string> texts_;     // [n_vocab]
  std::vector<float> scores_;          // [n_vocab]
  std::vector<TokenType> types_;       // [n_vocab]
  TokenMap ids_;                       // text -> id (first id wins on duplicates)
  TokenMap merge_ranks_;               // left + '\0' + right -> rank
  std::array<int32_t, 256> byte_tokens_{};
  std::vector<int32_t> special_tokens_;
  std::vector<int32_t> eog_ids_;
  std::vector<uint8_t> precompiled_charsmap_;
  int32_t bos_id_ = -1, eos_id_ = -1, unk_id_ = -1, pad_id_ = -1, eot_id_ = -1, eom_id_ = -1, sep_id_ = -1;
  bool add_bos_ = false, add_eos_ = false, add_space_prefix_ = false, ignore_merges_ = false;
  bool clean_spaces_ = false;
  bool remove_extra_whitespaces_ = false;
};

}  // namespace sluice
