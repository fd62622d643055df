// HF tokenizer.json -> tokenizer.ggml.* metadata; an accepted file is then loaded
// as a Tokenizer (vocabulary, merges, added tokens, pre-tokenizer from the fuzzed
// metadata) that encodes and decodes a fixed text.
#include <string_view>

#include "format/hf_tokenizer.h"
#include "harnesses.h"
#include "tokenizer/tokenizer.h"

namespace sluice::fuzz {

void fuzz_hf_tokenizer(const uint8_t* data, size_t size) {
  // The folder does not exist, so no tokenizer_config.json is read: no disk I/O.
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Metadata md;
  Status st = import_hf_tokenizer_json(text, "/nonexistent/fuzz", &md);
  if (!st.ok()) {
    FUZZ_CHECK(!st.message().empty());
    return;
  }
  StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::from_metadata(md);
  if (!tok.ok()) return;
  const std::vector<int32_t> ids =
      (*tok)->encode("Hello world! <|im_start|>user 123 caf\xc3\xa9 \xf0\x9f\x98\x80\n\n  x", true, true);
  for (int32_t id : ids) FUZZ_CHECK(id >= 0 && id < (*tok)->n_vocab());
  (void)(*tok)->decode(ids, true);
  (void)(*tok)->decode(ids, false);
}

}  // namespace sluice::fuzz
