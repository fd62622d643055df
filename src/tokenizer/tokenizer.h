// Tokenizer: text <-> token ids for the model and the CLI.
//
// Built from GGUF-convention metadata ("tokenizer.ggml.*", also what the HF importer
// produces). Every vocabulary type GGUF defines is supported:
//   "llama" - SentencePiece-style scored merges with byte fallback (spm.h)
//   "gpt2"  - byte-level BPE with ranked merges and a regex pre-tokenizer chosen by
//             tokenizer.ggml.pre (bpe.h, pre_tokenizer.h)
//   "bert"  - WordPiece after BERT normalization (wpm.h)
//   "t5"    - SentencePiece unigram with the precompiled charsmap (ugm.h)
//   "rwkv"  - RWKV World greedy byte matching (rwkv.h)
// Others are refused by name. Encoding follows llama.cpp so ids match its golden
// test files. Immutable after creation: every method is
// const and safe to call from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "format/metadata.h"
#include "sluice/status.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/vocab.h"

namespace sluice {

class WpmEncoder;
class UgmEncoder;
class RwkvEncoder;

class Tokenizer {
 public:
  // Loads tokenizer.ggml.{model, pre, tokens, scores, token_type, merges, *_token_id,
  // add_bos_token, add_eos_token, add_space_prefix}. Unsupported models and
  // pre-tokenizers are kUnimplemented naming them; malformed arrays are kDataLoss.
  static StatusOr<std::unique_ptr<Tokenizer>> from_metadata(const Metadata& md);

  // Text -> ids. add_special: BOS first / EOS last as add_bos()/add_eos() say;
  // "bert" also ends with [SEP] (BERT's [CLS] text [SEP]).
  // parse_special: control-token texts ("<s>", "<|im_start|>") in the text become
  // their single id; user-defined tokens are always split out (as in HF/llama.cpp).
  // SPM: a space is prepended to the text and after every special token when the
  // model has add_space_prefix. Empty text gives no ids besides BOS/EOS.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special = false) const;

  // The bytes one token contributes to text: SPM/WPM/UGM U+2581 -> ' ', <0xHH> -> that
  // byte, GPT-2 byte-level characters -> their bytes, RWKV escapes -> their bytes,
  // user-defined tokens verbatim. Control
  // and unused tokens give "" and the unknown token U+2585, unless render_special
  // (then their text). Out-of-range ids give "".
  std::string token_to_piece(int32_t id, bool render_special = false) const;

  // Like token_to_piece, but as decode() renders `id` right after `prev_id` (-1 at
  // the start): for SPM with add_space_prefix, the piece following BOS loses its
  // leading space; for "t5" with add_space_prefix, the first piece does (as
  // llama.cpp's detokenizer). The view stays valid for the Tokenizer's lifetime.
  std::string_view piece_after(int32_t prev_id, int32_t id, bool render_special = false) const;

  // Ids -> bytes: the concatenated piece_after, then, if clean_spaces(), the
  // clean_spaces rewrites (" ." -> ".", "it 's" -> "it's"; clean_spaces.h), as
  // llama.cpp's llama_detokenize. May end inside a UTF-8 character.
  std::string decode(const std::vector<int32_t>& ids, bool render_special = false) const;
  // Whether decode() and StreamDecoder apply the clean_spaces rewrites.
  bool clean_spaces() const { return vocab_.clean_spaces(); }

  int32_t n_vocab() const { return vocab_.n_vocab(); }
  int32_t bos_id() const { return vocab_.bos_id(); }  // -1 if none
  int32_t eos_id() const { return vocab_.eos_id(); }  // -1 if none
  bool add_bos() const { return vocab_.add_bos(); }
  bool add_eos() const { return vocab_.add_eos(); }
  // End of generation: eos, eot, eom and known end-of-turn tokens (<|eot_id|>, ...).
  bool is_eog(int32_t id) const;
  // Every end-of-generation id (what StopCondition::for_request takes as eog).
  const std::vector<int32_t>& eog_ids() const { return vocab_.eog_ids(); }
  bool is_control(int32_t id) const;
  // Raw vocab string ("" for out-of-range ids).
  const std::string& token_text(int32_t id) const;
  // Id of the token spelled exactly `text`.
  std::optional<int32_t> token_id(std::string_view text) const;
  const Vocab& vocab() const { return vocab_; }
  // "gpt2 (byte-level BPE), pre-tokenizer 'llama-bpe', 128256 tokens" (or "llama
  // (SentencePiece)", "bert (WordPiece)", "t5 (unigram)", "rwkv (RWKV World)", or
  // "split steps from tokenizer.json"), for `sluice info` and the server's start-up line.
  std::string summary() const;

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

 private:
  explicit Tokenizer(Vocab vocab);
  void build_pieces();
  void encode_text(std::string_view text, bool after_special, std::vector<int32_t>* out) const;

  Vocab vocab_;
  std::unique_ptr<PreTokenizer> pre_;  // gpt2 only
  std::unique_ptr<WpmEncoder> wpm_;    // bert only
  std::unique_ptr<UgmEncoder> ugm_;    // t5 only
  std::unique_ptr<RwkvEncoder> rwkv_;  // rwkv only
  std::string pre_desc_;               // gpt2: which pre-tokenizer, for summary()
  std::vector<std::string> pieces_;    // [n_vocab] token_to_piece(id, false)
};

}  // namespace sluice
