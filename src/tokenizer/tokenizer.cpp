#include "tokenizer/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>

#include "tokenizer/bpe.h"
#include "tokenizer/clean_spaces.h"
#include "tokenizer/rwkv.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/spm.h"
#include "tokenizer/ugm.h"
#include "tokenizer/unicode.h"
#include "tokenizer/wpm.h"

namespace sluice {

namespace {

constexpr const char* kUnknownPiece = "\xE2\x96\x85";  // U+2585, as llama.cpp renders <unk>

std::string unescape_spm(std::string_view text) {
  static constexpr std::string_view kSpace = "\xE2\x96\x81";
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (text.substr(i, kSpace.size()) == kSpace) {
      out.push_back(' ');
      i += kSpace.size();
    } else {
      out.push_back(text[i++]);
    }
  }
  return out;
}

const std::string& empty_string() {
  static const std::string kEmpty;
  return kEmpty;
}

// The steps an importer stored under kPreSplitKey.
StatusOr<std::vector<PreSplitStep>> pre_split_steps(const Metadata& md) {
  const MetaArray* arr = md.get_array(kPreSplitKey);
  if (arr->elem_type != GgufType::kString) return data_loss("{} is not an array of strings", kPreSplitKey);
  std::vector<PreSplitStep> steps;
  for (const std::string& s : arr->strings) {
    const std::string_view v(s);
    if (v.starts_with("isolated:")) {
      steps.push_back({std::string(v.substr(9)), false});
    } else if (v.starts_with("removed:")) {
      steps.push_back({std::string(v.substr(8)), true});
    } else {
      return data_loss("{}: step '{}' is neither 'isolated:<regex>' nor 'removed:<regex>'", kPreSplitKey, s);
    }
  }
  return steps;
}

}  // namespace

Tokenizer::Tokenizer(Vocab vocab) : vocab_(std::move(vocab)) {}
Tokenizer::~Tokenizer() = default;

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::from_metadata(const Metadata& md) {
  ASSIGN_OR_RETURN(Vocab vocab, Vocab::load(md));
  std::unique_ptr<Tokenizer> tok(new Tokenizer(std::move(vocab)));
  // The encoders keep a reference to tok->vocab_, which never moves again.
  switch (tok->vocab_.model()) {
    case VocabModel::kWpm:
      tok->wpm_ = std::make_unique<WpmEncoder>(tok->vocab_);
      break;
    case VocabModel::kUgm: {
      ASSIGN_OR_RETURN(tok->ugm_, UgmEncoder::create(tok->vocab_));
      break;
    }
    case VocabModel::kRwkv:
      tok->rwkv_ = std::make_unique<RwkvEncoder>(tok->vocab_);
      break;
    case VocabModel::kSpm:
    case VocabModel::kBpe:
      break;
  }
  if (tok->vocab_.model() == VocabModel::kBpe) {
    if (md.get_array(kPreSplitKey)) {
      ASSIGN_OR_RETURN(std::vector<PreSplitStep> steps, pre_split_steps(md));
      tok->pre_desc_ = fmt::format("pre-tokenizer of {} split steps from tokenizer.json", steps.size());
      ASSIGN_OR_RETURN(tok->pre_, PreTokenizer::from_steps(std::move(steps)));
    } else {
      ASSIGN_OR_RETURN(tok->pre_, PreTokenizer::for_pre(tok->vocab_.pre()));
      tok->pre_desc_ = fmt::format("pre-tokenizer '{}'", tok->vocab_.pre().empty() ? "default" : tok->vocab_.pre());
    }
  }
  tok->build_pieces();
  return tok;
}

std::string Tokenizer::summary() const {
  switch (vocab_.model()) {
    case VocabModel::kSpm:
      return fmt::format("llama (SentencePiece), {} tokens", vocab_.n_vocab());
    case VocabModel::kBpe:
      return fmt::format("gpt2 (byte-level BPE), {}, {} tokens", pre_desc_, vocab_.n_vocab());
    case VocabModel::kWpm:
      return fmt::format("bert (WordPiece), {} tokens", vocab_.n_vocab());
    case VocabModel::kUgm:
      return fmt::format("t5 (unigram{}), {} tokens",
                         vocab_.precompiled_charsmap().empty() ? "" : ", precompiled charsmap", vocab_.n_vocab());
    case VocabModel::kRwkv:
      return fmt::format("rwkv (RWKV World), {} tokens", vocab_.n_vocab());
  }
  return {};
}

void Tokenizer::build_pieces() {
  const bool bpe = vocab_.model() == VocabModel::kBpe;
  const bool rwkv = vocab_.model() == VocabModel::kRwkv;
  pieces_.resize(vocab_.n_vocab());
  for (int32_t id = 0; id < vocab_.n_vocab(); ++id) {
    const std::string& text = vocab_.text(id);
    const TokenType type = vocab_.type(id);
    if (rwkv && type != TokenType::kControl && type != TokenType::kUnknown) {
      pieces_[id] = rwkv_unescape(text);  // every token is a byte string
      continue;
    }
    switch (type) {
      case TokenType::kNormal:
        pieces_[id] = bpe ? byte_level_decode(text) : unescape_spm(text);
        break;
      case TokenType::kUserDefined:
        pieces_[id] = text;
        break;
      case TokenType::kByte: {
        const int b = vocab_.byte_value(id);
        pieces_[id] = b >= 0 ? std::string(1, static_cast<char>(b)) : byte_level_decode(text);
        break;
      }
      case TokenType::kUnknown:
        pieces_[id] = kUnknownPiece;
        break;
      case TokenType::kControl:
      case TokenType::kUnused:
      case TokenType::kUndefined:
        break;  // nothing, unless rendered as special
    }
  }
}

void Tokenizer::encode_text(std::string_view text, bool after_special, std::vector<int32_t>* out) const {
  if (wpm_) return wpm_->encode(text, out);
  if (ugm_) return ugm_->encode(text, out);
  if (rwkv_) return rwkv_->encode(text, out);
  if (vocab_.model() == VocabModel::kSpm) {
    std::string escaped;
    if (vocab_.add_space_prefix() && after_special) {
      escaped = spm_escape_spaces(std::string(" ").append(text));
    } else {
      escaped = spm_escape_spaces(text);
    }
    spm_encode(vocab_, escaped, out);
    return;
  }
  std::vector<std::string_view> words;
  pre_->split(text, &words);
  for (std::string_view w : words) bpe_encode_word(vocab_, w, out);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  std::vector<int32_t> out;
  if (add_special && vocab_.add_bos()) out.push_back(vocab_.bos_id());
  bool after_special = true;  // the start of the text counts as following a special token
  for (const TextFragment& f : split_special_tokens(vocab_, text, parse_special)) {
    if (f.id >= 0) {
      out.push_back(f.id);
      after_special = true;
    } else {
      encode_text(f.text, after_special, &out);
      after_special = false;
    }
  }
  if (add_special && vocab_.add_eos()) out.push_back(vocab_.eos_id());
  if (add_special && vocab_.model() == VocabModel::kWpm && vocab_.sep_id() >= 0) out.push_back(vocab_.sep_id());
  return out;
}

std::string_view Tokenizer::piece_after(int32_t prev_id, int32_t id, bool render_special) const {
  if (!vocab_.valid(id)) return {};
  std::string_view piece = pieces_[id];
  if (render_special) {
    const TokenType t = vocab_.type(id);
    if (t == TokenType::kControl || t == TokenType::kUnknown || t == TokenType::kUnused ||
        t == TokenType::kUndefined) {
      piece = vocab_.text(id);
    }
  }
  if (vocab_.add_space_prefix() && !piece.empty() && piece[0] == ' ') {
    const bool after_bos = prev_id >= 0 && prev_id == vocab_.bos_id();
    if ((vocab_.model() == VocabModel::kSpm && after_bos) || (vocab_.model() == VocabModel::kUgm && prev_id < 0)) {
      piece.remove_prefix(1);
    }
  }
  return piece;
}

std::string Tokenizer::token_to_piece(int32_t id, bool render_special) const {
  // A piece on its own keeps its space: use an id that is no token and not -1 as
  // the predecessor so that no leading-space rule applies.
  return std::string(piece_after(vocab_.n_vocab(), id, render_special));
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool render_special) const {
  std::string out;
  int32_t prev = -1;
  for (const int32_t id : ids) {
    out.append(piece_after(prev, id, render_special));
    prev = id;
  }
  return vocab_.clean_spaces() ? sluice::clean_spaces(out) : out;
}

bool Tokenizer::is_eog(int32_t id) const {
  const auto& eog = vocab_.eog_ids();
  return id >= 0 && std::find(eog.begin(), eog.end(), id) != eog.end();
}

bool Tokenizer::is_control(int32_t id) const {
  return vocab_.valid(id) && vocab_.type(id) == TokenType::kControl;
}

const std::string& Tokenizer::token_text(int32_t id) const {
  return vocab_.valid(id) ? vocab_.text(id) : empty_string();
}

std::optional<int32_t> Tokenizer::token_id(std::string_view text) const {
  const int32_t id = vocab_.find(text);
  if (id < 0) return std::nullopt;
  return id;
}

}  // namespace sluice
