// llama2.c checkpoint + tokenizer.bin.
//
// Input layout (so one input carries both files):
//
//   | u32 k (LE) | checkpoint: min(k, rest) bytes | tokenizer.bin: the rest |
//
// The pair goes through parse_llama2c; the tokenizer part is also
// parsed alone with the vocabulary size the checkpoint header claims (clamped to
// the importer's own cap), since a checkpoint that fails its size check never
// reaches the tokenizer. An accepted tokenizer is loaded as a Tokenizer and
// encodes and decodes a fixed text.
#include <algorithm>
#include <cstring>
#include <string>

#include "format/llama2c.h"
#include "harnesses.h"
#include "tokenizer/tokenizer.h"

namespace sluice::fuzz {
namespace {

void exercise_tokenizer(const Metadata& md) {
  StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::from_metadata(md);
  if (!tok.ok()) return;
  const std::vector<int32_t> ids = (*tok)->encode("Once upon a time, <s> 42 \xe2\x96\x81 caf\xc3\xa9\n", true, true);
  for (int32_t id : ids) FUZZ_CHECK(id >= 0 && id < (*tok)->n_vocab());
  (void)(*tok)->decode(ids, true);
}

}  // namespace

void fuzz_llama2c(const uint8_t* data, size_t size) {
  if (size < 4) return;
  uint32_t k;
  std::memcpy(&k, data, 4);
  const uint8_t* ckpt = data + 4;
  const size_t ckpt_size = std::min<size_t>(k, size - 4);
  const uint8_t* tok = ckpt + ckpt_size;
  const size_t tok_size = size - 4 - ckpt_size;

  StatusOr<ModelFile> mf = parse_llama2c(ckpt, ckpt_size, "ckpt.bin", tok, tok_size, "tokenizer.bin");
  if (mf.ok()) {
    for (const TensorInfo& t : mf->tensors) {
      FUZZ_CHECK(t.file_offset >= 0 && static_cast<uint64_t>(t.file_offset) <= ckpt_size);
      FUZZ_CHECK(t.n_bytes <= ckpt_size - static_cast<uint64_t>(t.file_offset));
      FUZZ_CHECK(t.n_bytes == static_cast<uint64_t>(t.n_elements()) * 4);
      FUZZ_CHECK(t.data == ckpt + t.file_offset);
    }
    exercise_tokenizer(mf->metadata);
  } else {
    FUZZ_CHECK(!mf.status().message().empty());
  }

  // The tokenizer alone, with the vocabulary size of the header (legacy or v1).
  int32_t vocab = 0;
  const bool v1 = ckpt_size >= 8 && std::memcmp(ckpt, "24ka", 4) == 0;
  const size_t vocab_at = (v1 ? 8 : 0) + 5 * 4;
  if (ckpt_size >= vocab_at + 4) std::memcpy(&vocab, ckpt + vocab_at, 4);
  const int64_t n_vocab = std::clamp<int64_t>(vocab < 0 ? -int64_t{vocab} : vocab, 1, 1 << 21);
  Metadata md;
  Status st = import_llama2c_tokenizer(tok, tok_size, "tokenizer.bin", n_vocab, &md);
  if (st.ok()) exercise_tokenizer(md);
}

}  // namespace sluice::fuzz
