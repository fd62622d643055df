// GGUF writer: ModelFile or a streamed tensor list -> GGUF v3 file.
//
// GgufWriter collects metadata and tensor descriptions, then write() lays the file
// out as gguf_reader.h describes and writes it tensor by tensor, so models far
// larger than memory can be produced: a tensor's bytes come either from a pointer
// the caller keeps valid until write() returns, or from a fill callback invoked
// once, during write(), with a buffer of exactly that tensor's size (the only tensor
// buffer ever held). Data offsets honor `general.alignment` (default 32) and every
// tensor is zero-padded to it:
//
//   header | kv | tensor infos | 0-pad | t0 | 0-pad | t1 | 0-pad | ... | tN | 0-pad
//                                      ^ data_start, a multiple of the alignment
//
// The file is written to "<path>.partial" and renamed onto `path` only when
// complete, so a failed write never leaves a truncated model behind.
// Not thread-safe; one writer per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "format/metadata.h"
#include "format/model_file.h"
#include "quant/dtype.h"
#include "sluice/status.h"

namespace sluice {

class GgufWriter {
 public:
  using FillFn = std::function<void(uint8_t* dst, size_t n_bytes)>;
  using ProgressFn = std::function<void(uint64_t done, uint64_t total)>;

  // The metadata to write, in key order. general.alignment, if set, must be a
  // power of two.
  Metadata& metadata() { return metadata_; }
  void set_metadata(const Metadata& md) { metadata_ = md; }

  // Adds a tensor whose bytes are read from `data` (row_bytes(type, ne[0]) * rows
  // bytes, valid until write() returns; may be null only if that size is 0).
  // Errors: empty or duplicate name, 0 or more than 4 dims, negative dims, ne[0]
  // not a multiple of the block size, size overflow.
  Status add_tensor(const std::string& name, DType type, std::vector<int64_t> ne,
                    const uint8_t* data);
  // Adds a tensor whose bytes `fill` writes into the buffer it is given.
  Status add_tensor(const std::string& name, DType type, std::vector<int64_t> ne, FillFn fill);

  size_t n_tensors() const { return tensors_.size(); }
  // Sum of the tensors' bytes (without padding).
  uint64_t total_tensor_bytes() const;

  // Writes the file; `progress` (if set) is called with tensor bytes written so
  // far and the total, once before the first tensor and after each one.
  Status write(const std::string& path, const ProgressFn& progress = {}) const;

 private:
  struct Entry {
    std::string name;
    DType type;
    std::vector<int64_t> ne;
    uint64_t n_bytes;
    const uint8_t* data;
    FillFn fill;
  };
  Status add_entry(Entry entry);

  Metadata metadata_;
  std::vector<Entry> tensors_;
};

// Writes `mf` (its metadata in key order and its tensors in order) as GGUF v3.
Status write_gguf(const ModelFile& mf, const std::string& path);

}  // namespace sluice
