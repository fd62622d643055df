// ModelFile: a model as read from disk, independent of its container format.
//
// Every reader (GGUF, safetensors + HF config.json, llama2.c) produces a ModelFile:
// GGUF-convention metadata plus a tensor directory using GGUF tensor names
// ("token_embd.weight", "blk.0.attn_q.weight", ...) and GGUF dimension order
// (ne[0] is the contiguous, innermost dimension: a [n_out, n_in] matrix has
// ne = {n_in, n_out}). Tensor bytes are either borrowed from a memory map of the
// source file (no copy: `file_offset` says where they live, for later O_DIRECT
// streaming) or owned by the ModelFile (when an importer had to transform them,
// e.g. undo the HF q/k row permutation). Either way data() stays valid for the
// ModelFile's lifetime. Immutable after construction; safe to share for reading.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "arch/arch_spec.h"
#include "base/mapped_file.h"
#include "format/metadata.h"
#include "quant/dtype.h"
#include "sluice/status.h"

namespace sluice {

struct TensorInfo {
  std::string name;
  DType type = DType::kF32;
  std::vector<int64_t> ne;     // dims, innermost first (GGUF order); 1..4 entries
  uint64_t n_bytes = 0;        // bytes of data, = row_bytes(type, ne[0]) * rows
  const uint8_t* data = nullptr;  // valid for the ModelFile's lifetime
  // Where the bytes live in `source_path` (-1 if they were transformed in memory).
  int64_t file_offset = -1;

  int64_t n_elements() const;
  int64_t n_rows() const { return ne.empty() || ne[0] == 0 ? 0 : n_elements() / ne[0]; }
  std::string shape_string() const;  // "[64, 512]" in GGUF order
};

class ModelFile {
 public:
  Metadata metadata;
  std::vector<TensorInfo> tensors;
  std::string source_path;  // file (GGUF, .bin) or folder (HF) it came from
  std::string format;       // "gguf", "safetensors", "llama2c"
  uint32_t gguf_version = 3;
  uint64_t alignment = 32;  // general.alignment, or the default 32

  // Tensor by name, or nullptr.
  const TensorInfo* find(const std::string& name) const;
  // The tensor of a role outside the blocks (kTokenEmbd, kOutput, ...) under
  // the file's architecture (arch/tensor_class.h find_tensor_spec), or nullptr
  // if the file has none.
  const TensorInfo* find(TensorRole role) const;

  // Keeps a mapping alive for borrowed tensor data.
  void hold(std::shared_ptr<MappedFile> mapping) { mappings_.push_back(std::move(mapping)); }
  // Takes ownership of a buffer and returns a pointer to its bytes (for
  // transformed tensors). The pointer stays valid for the ModelFile's lifetime.
  const uint8_t* own(std::vector<uint8_t> bytes);

  // Total tensor bytes.
  uint64_t total_tensor_bytes() const;

 private:
  std::vector<std::shared_ptr<MappedFile>> mappings_;
  std::vector<std::unique_ptr<std::vector<uint8_t>>> owned_;
};

// Opens any supported model: a .gguf file, an HF folder (config.json +
// *.safetensors [+ tokenizer.json]), or a llama2.c checkpoint (.bin; needs a
// tokenizer path, so it is reached through import_llama2c in format/llama2c.h).
StatusOr<ModelFile> open_model_file(const std::string& path);

}  // namespace sluice
