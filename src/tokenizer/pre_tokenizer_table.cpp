#include "tokenizer/pre_tokenizer_table.h"

namespace sluice {

namespace {

// The split regexes of each pre-tokenizer type, as llama.cpp's BPE tokenizer
// lists them (src/llama-vocab.cpp, llm_tokenizer_bpe). Several llama.cpp types
// with identical lists share one entry here (dbrx, smaug and chatglm4 are
// llama3; mpt, olmo and jais are gpt2; stablelm2 is qwen2; refact, command-r,
// smollm, codeshell, exaone and minerva are starcoder; bloom and gpt3-finnish
// are poro).
constexpr PreType kTypes[] = {
    {"default",
     {R"re([\p{P}\$\+<=>\^~\|]+)re",
      R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))re",
      R"re(\p{N}+)re",
      R"re([0-9][0-9][0-9])re"}},
    {"gpt2",
     {R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))re"}},
    {"llama3",
     {R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"}},
    {"qwen2",
     {R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"}},
    {"starcoder",
     {R"re(\p{N})re",
      R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))re"}},
    {"falcon",
     {R"re([\p{P}\$\+<=>\^~\|`]+)re",
      R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))re",
      R"re([0-9][0-9][0-9])re"}},
    {"deepseek-llm",
     {R"re([\r\n])re",
      R"re(\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+)re",
      R"re(\s?[!-/:-~！-／：-～‘-‟　-。]+)re",
      R"re(\s+$)re",
      R"re([一-龥ࠀ-一가-퟿]+)re",
      R"re(\p{N}+)re"}},
    {"deepseek-coder",
     {R"re([\r\n])re",
      R"re(\s?\p{L}+)re",
      R"re(\s?\p{P}+)re",
      R"re([一-龥ࠀ-一가-퟿]+)re",
      R"re(\p{N})re"}},
    {"deepseek-v3",
     {R"re(\p{N}{1,3})re",
      R"re([一-龥぀-ゟ゠-ヿ]+)re",
      // llama.cpp's \p{S} leaves out '~' (U+007E, Sm): its ASCII stand-in for the
      // category lists only $+<=>^`|. Written out here so PCRE2 agrees.
      R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|(?:~|[^\r\n\p{L}\p{P}\p{S}])?[\p{L}\p{M}]+| ?(?:(?!~)[\p{P}\p{S}])+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"}},
    {"poro",
     {R"re( ?[^(\s|.,!?…。，、।۔،)]+)re"}},
    {"viking",
     {R"re( ?[^(\s|.,!?…。，、।۔،)]+)re",
      R"re(\p{N})re"}},
    {"tekken",
     {R"re([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"}},
    {"chameleon",
     {R"re(<sentinel:[0-9]+>)re",
      R"re((IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z)re",
      R"re(([\t\n]|    |  ))re",
      R"re(\p{N})re",
      R"re([\p{P}!-/:-@\[-`{-~])re",
      R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))re"}},
};

enum : int {
  kDefault, kGpt2, kLlama3, kQwen2, kStarcoder, kFalcon, kDeepseekLlm, kDeepseekCoder,
  kDeepseekV3, kPoro, kViking, kTekken, kChameleon,
};

// Every tokenizer.ggml.pre value llama.cpp accepts, with the flags it sets.
//  name, type, ignore_merges, add_bos, clean_spaces, mask_lstrip
constexpr PreName kNames[] = {
    {"default", kDefault},
    {"llama3", kLlama3, true, true},
    {"llama-v3", kLlama3, true, true},
    {"llama-bpe", kLlama3, true, true},
    {"falcon3", kLlama3, true, true},
    {"deepseek-llm", kDeepseekLlm, false, false, false},
    {"deepseek-coder", kDeepseekCoder, false, false, false},
    {"deepseek-v3", kDeepseekV3, false, false, false},
    {"falcon", kFalcon},
    {"mpt", kGpt2},
    {"starcoder", kStarcoder},
    {"gpt-2", kGpt2},
    {"phi-2", kGpt2},
    {"jina-es", kGpt2},
    {"jina-de", kGpt2},
    {"gigachat", kGpt2},
    {"jina-v1-en", kGpt2},
    {"jina-v2-es", kGpt2, false, false, true, true},
    {"jina-v2-de", kGpt2, false, false, true, true},
    {"jina-v2-code", kGpt2, false, false, true, true},
    {"roberta-bpe", kGpt2},
    {"refact", kStarcoder},
    {"command-r", kStarcoder, false, false, false},
    {"qwen2", kQwen2, false, false, false},
    {"deepseek-r1-qwen", kQwen2, false, false, false},
    {"stablelm2", kQwen2},
    {"olmo", kGpt2},
    {"dbrx", kLlama3},
    {"smaug-bpe", kLlama3},
    {"poro-chat", kPoro, false, false, false},
    {"chatglm-bpe", kLlama3},
    {"viking", kViking, false, false, false},
    {"jais", kGpt2},
    {"tekken", kTekken, true, true, false},
    {"smollm", kStarcoder, false, false, false},
    {"codeshell", kStarcoder},
    {"bloom", kPoro},
    {"gpt3-finnish", kPoro},
    {"exaone", kStarcoder},
    {"chameleon", kChameleon, false, true, false},
    {"minerva-7b", kStarcoder},
    {"megrez", kQwen2},
};

}  // namespace

int PreType::n_regexes() const {
  int n = 0;
  while (n < kMaxPreRegexes && !regexes[n].empty()) ++n;
  return n;
}

std::span<const PreType> pre_types() { return kTypes; }
std::span<const PreName> pre_names() { return kNames; }

const PreName* find_pre_name(std::string_view pre) {
  if (pre.empty()) pre = "default";
  for (const PreName& n : kNames) {
    if (n.name == pre) return &n;
  }
  return nullptr;
}

std::string supported_pre_names() {
  std::string out;
  for (const PreName& n : kNames) {
    if (!out.empty()) out += ", ";
    out += n.name;
  }
  return out;
}

}  // namespace sluice
