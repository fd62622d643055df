#include "fuzz_vocab.h"

#include <sys/stat.h>

#include <cstdio>

#include "format/gguf_reader.h"
#include "tokenizer/unicode.h"

namespace sluice::fuzz {
namespace {

std::string shared_models_dir() {
#ifdef SLUICE_SHARED_DIR
  return std::string(SLUICE_SHARED_DIR) + "/models";
#else
  return "../shared/models";
#endif
}

// The tokenizer keys of a GGUF vocabulary file, or nothing if it is absent.
bool load_shared(const std::string& rel, Metadata* out) {
  const std::string path = shared_models_dir() + "/" + rel;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  StatusOr<ModelFile> mf = read_gguf(path);
  if (!mf.ok()) {
    std::fprintf(stderr, "fuzz: %s: %s; using a built-in vocabulary\n", path.c_str(),
                 mf.status().to_string().c_str());
    return false;
  }
  for (const std::string& key : mf->metadata.keys()) {
    if (key.rfind("tokenizer.", 0) == 0) out->set(key, *mf->metadata.find(key));
  }
  return true;
}

MetaArray strings(std::vector<std::string> v) {
  MetaArray a;
  a.elem_type = GgufType::kString;
  a.strings = std::move(v);
  return a;
}

MetaArray ints(std::vector<int64_t> v) {
  MetaArray a;
  a.elem_type = GgufType::kInt32;
  a.ints = std::move(v);
  return a;
}

}  // namespace

Metadata spm_vocab_metadata() {
  Metadata md;
  if (load_shared("vocab/ggml-vocab-llama-spm.gguf", &md)) return md;
  // <unk> <s> </s>, the 256 byte pieces, then a few scored words.
  std::vector<std::string> toks = {"<unk>", "<s>", "</s>"};
  std::vector<int64_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    toks.push_back(hex);
    types.push_back(6);
  }
  const char* words[] = {"\xe2\x96\x81", "\xe2\x96\x81t", "he", "\xe2\x96\x81the", "\u2581a", "a", "b",
                         "c", "e", "h", "t", "o", "n", "\xe2\x96\x81on", "ce", "\xe2\x96\x81once", "<|user|>"};
  for (const char* w : words) {
    toks.push_back(w);
    types.push_back(std::string(w) == "<|user|>" ? 4 : 1);
  }
  MetaArray scores;
  scores.elem_type = GgufType::kFloat32;
  for (size_t i = 0; i < toks.size(); ++i) scores.floats.push_back(-static_cast<double>(i));
  md.set("tokenizer.ggml.model", MetaValue::str("llama"));
  md.set("tokenizer.ggml.tokens", MetaValue::array(strings(toks)));
  md.set("tokenizer.ggml.scores", MetaValue::array(scores));
  md.set("tokenizer.ggml.token_type", MetaValue::array(ints(types)));
  return md;
}

Metadata bpe_vocab_metadata(const std::string& pre) {
  Metadata md;
  if (!load_shared("vocab/ggml-vocab-gpt-2.gguf", &md)) {
    // The byte-level alphabet, a few merges and their results, one control token.
    std::vector<std::string> toks;
    std::vector<int64_t> types;
    for (int b = 0; b < 256; ++b) {
      toks.push_back(byte_level_encode(std::string(1, static_cast<char>(b))));
      types.push_back(1);
    }
    const std::vector<std::string> merges = {"\xc4\xa0 t", "h e", "\xc4\xa0t he", "i n", "\xc4\xa0 a", "o n"};
    for (const std::string& m : merges) {
      const size_t space = m.find(' ');
      toks.push_back(m.substr(0, space) + m.substr(space + 1));
      types.push_back(1);
    }
    toks.push_back("<|endoftext|>");
    types.push_back(3);
    md.set("tokenizer.ggml.model", MetaValue::str("gpt2"));
    md.set("tokenizer.ggml.tokens", MetaValue::array(strings(toks)));
    md.set("tokenizer.ggml.token_type", MetaValue::array(ints(types)));
    md.set("tokenizer.ggml.merges", MetaValue::array(strings(merges)));
    md.set("tokenizer.ggml.eos_token_id", MetaValue::u32(static_cast<uint32_t>(toks.size() - 1)));
  }
  md.set("tokenizer.ggml.pre", MetaValue::str(pre));
  return md;
}

Metadata wpm_vocab_metadata() {
  const std::string sp = "\xe2\x96\x81";
  std::vector<std::string> toks = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  std::vector<int64_t> types = {3, 2, 3, 3, 3};
  for (const char* w : {"the", "once", "on", "a", "b", "c", ",", "!", "\xe4\xbd\xa0", "1"}) {
    toks.push_back(sp + w);
    types.push_back(1);
  }
  for (const char* w : {"ce", "he", "n", "e", "t", "2", "3"}) {
    toks.push_back(w);
    types.push_back(1);
  }
  Metadata md;
  md.set("tokenizer.ggml.model", MetaValue::str("bert"));
  md.set("tokenizer.ggml.tokens", MetaValue::array(strings(toks)));
  md.set("tokenizer.ggml.token_type", MetaValue::array(ints(types)));
  md.set("tokenizer.ggml.unknown_token_id", MetaValue::u32(1));
  md.set("tokenizer.ggml.cls_token_id", MetaValue::u32(2));
  md.set("tokenizer.ggml.seperator_token_id", MetaValue::u32(3));
  return md;
}

Metadata ugm_vocab_metadata() {
  const std::string sp = "\xe2\x96\x81";
  std::vector<std::string> toks = {"<pad>", "</s>", "<unk>", "<extra_id_0>", "<0x41>"};
  std::vector<int64_t> types = {3, 3, 2, 4, 6};
  for (const std::string& w : {sp, sp + "the", sp + "a", std::string("a"), std::string("b"), std::string("he"),
                               std::string("t"), std::string("e"), std::string("\xe4\xbd\xa0"), std::string("fi")}) {
    toks.push_back(w);
    types.push_back(1);
  }
  MetaArray scores;
  scores.elem_type = GgufType::kFloat32;
  for (size_t i = 0; i < toks.size(); ++i) scores.floats.push_back(-1.0 - static_cast<double>(i % 7));
  // A double array mapping "\t" to " " and U+FB01 to "fi" (darts-clone layout,
  // one block of 256 units), then the replacement strings.
  std::vector<uint32_t> units(512, 0);
  units[0] = 1u << 10;                                   // root: offset 1
  units[1 ^ '\t'] = (('\t' ^ 1u ^ 300u) << 10) | (1u << 8) | '\t';  // leaf, offset to unit 300
  units[300] = (1u << 31) | 0;                          // "\t" -> replacement at 0
  units[1 ^ 0xEF] = ((0xEF ^ 1u ^ 256u) << 10) | 0xEF;    // EF: children at 256 ^ c
  units[256 ^ 0xAC] = ((256u ^ 0xAC ^ 400u) << 10) | 0xAC;
  units[400 ^ 0x81] = ((400u ^ 0x81 ^ 402u) << 10) | (1u << 8) | 0x81;
  units[402] = (1u << 31) | 2;                           // U+FB01 -> replacement at 2
  std::vector<int64_t> blob;
  const uint32_t n_bytes = static_cast<uint32_t>(units.size() * 4);
  for (int k = 0; k < 4; ++k) blob.push_back((n_bytes >> (8 * k)) & 0xFF);
  for (const uint32_t u : units) {
    for (int k = 0; k < 4; ++k) blob.push_back((u >> (8 * k)) & 0xFF);
  }
  for (const char c : std::string(" \0fi\0", 5)) blob.push_back(static_cast<uint8_t>(c));
  MetaArray charsmap;
  charsmap.elem_type = GgufType::kUint8;
  charsmap.ints = std::move(blob);
  Metadata md;
  md.set("tokenizer.ggml.model", MetaValue::str("t5"));
  md.set("tokenizer.ggml.tokens", MetaValue::array(strings(toks)));
  md.set("tokenizer.ggml.scores", MetaValue::array(scores));
  md.set("tokenizer.ggml.token_type", MetaValue::array(ints(types)));
  md.set("tokenizer.ggml.add_space_prefix", MetaValue::boolean(true));
  md.set("tokenizer.ggml.remove_extra_whitespaces", MetaValue::boolean(true));
  md.set("tokenizer.ggml.precompiled_charsmap", MetaValue::array(charsmap));
  return md;
}

Metadata rwkv_vocab_metadata() {
  // Every byte (escaped as the converter writes them), then a few longer pieces.
  std::vector<std::string> toks;
  for (int b = 0; b < 256; ++b) {
    char esc[8];
    if (b == '\\') {
      std::snprintf(esc, sizeof esc, "\\\\");
    } else if (b >= 0x20 && b < 0x7F) {
      std::snprintf(esc, sizeof esc, "%c", b);
    } else {
      std::snprintf(esc, sizeof esc, "\\x%02x", b);
    }
    toks.push_back(esc);
  }
  for (const char* w : {"the", " the", "on", "once", "\\n\\n", "\\xe4\\xbd\\xa0", "  "}) toks.push_back(w);
  std::vector<int64_t> types(toks.size(), 1);
  Metadata md;
  md.set("tokenizer.ggml.model", MetaValue::str("rwkv"));
  md.set("tokenizer.ggml.tokens", MetaValue::array(strings(toks)));
  md.set("tokenizer.ggml.token_type", MetaValue::array(ints(types)));
  return md;
}

}  // namespace sluice::fuzz
