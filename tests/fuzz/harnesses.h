// Fuzz harnesses: one function per input sluice parses, each a pure function of
// the bytes it is given. They must never crash, hang, leak or allocate without
// bound on any input; an error Status is the expected answer to garbage. When a
// parser accepts an input, the harness also checks what came out (tensors inside
// the buffer, sizes that add up) and aborts if it is inconsistent.
//
// fuzz_main.cpp wraps one of them as a libFuzzer target; fuzz_regressions_test.cpp
// replays saved findings through the same functions. Harnesses that need a fixed
// vocabulary or template build it once, on first use, from ../shared when present
// and from a small built-in one otherwise. Not thread-safe (libFuzzer runs one
// input at a time).
#pragma once

#include <cstddef>
#include <cstdint>

namespace sluice::fuzz {

// GGUF: header, metadata, tensor directory and data region (parse_gguf).
void fuzz_gguf(const uint8_t* data, size_t size);
// safetensors header (parse_safetensors_header) and HF config.json (parse_hf_config).
void fuzz_safetensors(const uint8_t* data, size_t size);
// llama2.c checkpoint + tokenizer.bin; layout in fuzz_llama2c.cpp.
void fuzz_llama2c(const uint8_t* data, size_t size);
// HF tokenizer.json -> tokenizer.ggml.* metadata -> a Tokenizer that encodes text.
void fuzz_hf_tokenizer(const uint8_t* data, size_t size);
// encode/decode of arbitrary bytes with SPM and each BPE pre-tokenizer.
void fuzz_tokenizer(const uint8_t* data, size_t size);
// Jinja: parse a template, render it with a fixed conversation.
void fuzz_jinja(const uint8_t* data, size_t size);
// OpenAI request body -> engine request or ApiError (build_generation_request).
void fuzz_openai_request(const uint8_t* data, size_t size);

struct Harness {
  const char* name;  // "gguf": fuzz_gguf, corpus/gguf, regressions/gguf
  void (*run)(const uint8_t* data, size_t size);
};
inline constexpr Harness kHarnesses[] = {
    {"gguf", fuzz_gguf},
    {"safetensors", fuzz_safetensors},
    {"llama2c", fuzz_llama2c},
    {"hf_tokenizer", fuzz_hf_tokenizer},
    {"tokenizer", fuzz_tokenizer},
    {"jinja", fuzz_jinja},
    {"openai_request", fuzz_openai_request},
};

}  // namespace sluice::fuzz

// Aborts with a message when a harness invariant fails (libFuzzer saves the input).
#define FUZZ_CHECK(cond)                                                                   \
  do {                                                                                     \
    if (!(cond)) ::sluice::fuzz::check_failed(#cond, __FILE__, __LINE__);                  \
  } while (0)

namespace sluice::fuzz {
[[noreturn]] void check_failed(const char* what, const char* file, int line);
}  // namespace sluice::fuzz
