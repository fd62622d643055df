// HF tokenizer.json -> tokenizer.ggml.* metadata; an accepted file is then loaded
// as a Tokenizer (vocabulary, merges, added tokens, pre-tokenizer from the fuzzed
// metadata) that encodes and decodes a fixed text.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "format/hf_tokenizer.h"
#include "harnesses.h"
#include "tokenizer/tokenizer.h"

namespace sluice::fuzz {
namespace {

// import_hf_tokenizer reads <dir>/tokenizer.json: the folder is made once on
// tmpfs (/dev/shm) so that each input costs a write to memory, not to disk.
const std::string& scratch_dir() {
  // Never destroyed: the atexit cleanup runs after static destructors would.
  static const std::string* dir = [] {
    auto* d = new std::string((access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") +
                              std::string("/sluice-fuzz-XXXXXX"));
    if (mkdtemp(d->data()) == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    return d;
  }();
  static const bool cleanup = std::atexit([] {
    std::remove((*dir + "/tokenizer.json").c_str());
    rmdir(dir->c_str());
  }) == 0;
  (void)cleanup;
  return *dir;
}

}  // namespace

void fuzz_hf_tokenizer(const uint8_t* data, size_t size) {
  const std::string& dir = scratch_dir();
  {
    std::ofstream f(dir + "/tokenizer.json", std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  Metadata md;
  Status st = import_hf_tokenizer(dir, &md);
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
