// Encoding and decoding arbitrary bytes with each tokenizer sluice supports.
//
// Input: | flags byte | text ... |
//   flags bits 0-1 and 5-7 (kind = bits 0-1 | bits 5-7 << 2): 0 SPM; 29 WordPiece,
//   30 unigram, 31 RWKV; k in 1..28 BPE with pre-tokenizer type (k - 1) mod n of the
//   table (pre_tokenizer_table.h), in the order gpt2, llama3, qwen2, then the
//   others, so every type is reachable.
//   bit 2: add_special, bit 3: parse_special, bit 4: render_special
// The text is encoded and the ids decoded (whole and through a StreamDecoder);
// the text's bytes are also read as int32 ids, in or out of range, and decoded.
// Invariants: ids are in range; byte-level BPE and RWKV round-trip any bytes
// when specials are not parsed (through the clean_spaces rewrites when the
// pre-tokenizer sets them); a stream decodes to the same text as decode() when
// that text is valid UTF-8.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_vocab.h"
#include "harnesses.h"
#include "tokenizer/clean_spaces.h"
#include "tokenizer/pre_tokenizer_table.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace sluice::fuzz {
namespace {

struct Tokenizers {
  std::unique_ptr<Tokenizer> spm;
  std::vector<std::unique_ptr<Tokenizer>> bpe;  // one per pre-tokenizer type
  std::unique_ptr<Tokenizer> wpm, ugm, rwkv;
};

std::unique_ptr<Tokenizer> must_load(const Metadata& md) {
  StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::from_metadata(md);
  if (!tok.ok()) {
    std::fprintf(stderr, "fuzz_tokenizer: %s\n", tok.status().to_string().c_str());
    std::abort();
  }
  return std::move(*tok);
}

const Tokenizers& tokenizers() {
  static const Tokenizers* t = [] {
    auto* t = new Tokenizers;
    t->spm = must_load(spm_vocab_metadata());
    t->wpm = must_load(wpm_vocab_metadata());
    t->ugm = must_load(ugm_vocab_metadata());
    t->rwkv = must_load(rwkv_vocab_metadata());
    // A name of each type; the three long-standing ones first.
    std::vector<int> types;
    for (const char* pre : {"gpt-2", "llama-bpe", "qwen2"}) types.push_back(find_pre_name(pre)->type);
    for (int i = 0; i < static_cast<int>(pre_types().size()); ++i) {
      if (std::find(types.begin(), types.end(), i) == types.end()) types.push_back(i);
    }
    for (int type : types) {
      for (const PreName& n : pre_names()) {
        if (n.type != type) continue;
        t->bpe.push_back(must_load(bpe_vocab_metadata(std::string(n.name))));
        break;
      }
    }
    return t;
  }();
  return *t;
}

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_valid_char_len(s.substr(i));
    if (n == 0) return false;
    i += n;
  }
  return true;
}

void check_decoders(const Tokenizer& tok, const std::vector<int32_t>& ids, bool render_special) {
  const std::string text = tok.decode(ids, render_special);
  StreamDecoder stream(tok, render_special);
  std::string streamed;
  for (int32_t id : ids) streamed += stream.push(id);
  streamed += stream.finish();
  if (valid_utf8(text)) FUZZ_CHECK(streamed == text);
  FUZZ_CHECK(valid_utf8(streamed));
}

}  // namespace

void fuzz_tokenizer(const uint8_t* data, size_t size) {
  if (size == 0) {
    (void)tokenizers();
    return;
  }
  const uint8_t flags = data[0];
  const int kind = (flags & 3) | ((flags >> 5) << 2);
  const bool add_special = flags & 4, parse_special = flags & 8, render_special = flags & 16;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const Tokenizers& all = tokenizers();
  const bool bpe = kind >= 1 && kind <= 28;
  const Tokenizer& tok = kind == 0    ? *all.spm
                         : kind == 29 ? *all.wpm
                         : kind == 30 ? *all.ugm
                         : kind == 31 ? *all.rwkv
                                      : *all.bpe[(kind - 1) % all.bpe.size()];

  const std::vector<int32_t> ids = tok.encode(text, add_special, parse_special);
  for (int32_t id : ids) FUZZ_CHECK(id >= 0 && id < tok.n_vocab());
  if ((bpe || kind == 31) && !parse_special)
    FUZZ_CHECK(tok.decode(ids, false) == (tok.clean_spaces() ? clean_spaces(text) : std::string(text)));
  check_decoders(tok, ids, render_special);

  // The same bytes as raw ids: out-of-range and negative ids must decode to "".
  std::vector<int32_t> raw(text.size() / 4);
  if (!raw.empty()) std::memcpy(raw.data(), text.data(), raw.size() * 4);
  check_decoders(tok, raw, render_special);
  for (int32_t id : raw) {
    (void)tok.token_to_piece(id, render_special);
    (void)tok.token_text(id);
    (void)tok.is_eog(id);
    (void)tok.is_control(id);
  }
}

}  // namespace sluice::fuzz
