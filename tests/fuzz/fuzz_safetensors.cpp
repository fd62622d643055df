// safetensors header and HF config.json, the two files of an HF model folder
// that sluice parses itself. The same bytes go to both parsers: an input that is
// a safetensors header is rarely valid JSON from byte 0 and the reverse, so each
// input effectively exercises one of them, and one corpus serves both.
#include <string>

#include "format/hf_config.h"
#include "format/safetensors_header.h"
#include "harnesses.h"

namespace sluice::fuzz {

void fuzz_safetensors(const uint8_t* data, size_t size) {
  StatusOr<std::vector<SafetensorsEntry>> entries = parse_safetensors_header(data, size, "fuzz.safetensors");
  if (entries.ok()) {
    uint64_t prev_end = 0;
    for (const SafetensorsEntry& e : *entries) {
      // Inside the file, in offset order, not overlapping, sized by dtype x shape.
      FUZZ_CHECK(e.offset <= size && e.n_bytes <= size - e.offset);
      FUZZ_CHECK(e.offset >= prev_end);
      prev_end = e.offset + e.n_bytes;
      const uint64_t elem = safetensors_dtype_bytes(e.dtype);
      FUZZ_CHECK(elem > 0);
      uint64_t n = 1;
      for (int64_t d : e.shape) {
        FUZZ_CHECK(d >= 0);
        FUZZ_CHECK(!__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n));
      }
      FUZZ_CHECK(!__builtin_mul_overflow(n, elem, &n) && e.n_bytes == n);
    }
  } else {
    FUZZ_CHECK(!entries.status().message().empty());
  }

  const std::string text(reinterpret_cast<const char*>(data), size);
  StatusOr<HfConfig> config = parse_hf_config(text, "config.json", "fuzz");
  if (config.ok()) {
    FUZZ_CHECK(config->spec != nullptr);
    FUZZ_CHECK(config->metadata.get_string("general.architecture") == config->arch);
    for (const std::string& key : config->metadata.keys()) (void)meta_value_summary(*config->metadata.find(key));
  } else {
    FUZZ_CHECK(!config.status().message().empty());
  }
}

}  // namespace sluice::fuzz
