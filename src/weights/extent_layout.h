// Extent layout: how a group of tensors (one layer's streamed matrices, or the
// resident set) is read from the model file into one aligned host buffer.
//
// Tensor byte ranges are rounded out to kDirectAlign and sorted by file offset;
// ranges that overlap, touch or lie within `max_gap` bytes of each other merge
// into one extent, so a GGUF layer (its tensors stored back to back) is one
// large read. Extents are packed in the buffer in file order:
//
//   file    ..[t0 t1 t2]......gap.......[t3]..
//              extent 0                 extent 1
//   buffer  [ extent 0 bytes  ][ extent 1 ]      every extent starts aligned
//   tensor i lives at  extent.dst_offset + (tensor offset - extent.file_offset)
//
// Pure function; the result is plain data.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace sluice::weights {

struct TensorRange {
  uint64_t file_offset = 0;
  uint64_t n_bytes = 0;
};

struct IoExtent {
  uint64_t file_offset = 0;  // aligned
  uint64_t length = 0;       // aligned
  uint64_t dst_offset = 0;   // aligned, within the buffer
};

struct ExtentLayout {
  std::vector<IoExtent> extents;          // file order
  std::vector<uint64_t> tensor_offsets;   // per input tensor (input order): its first byte in the buffer
  uint64_t buffer_bytes = 0;              // sum of extent lengths (aligned)
  uint64_t tensor_bytes = 0;              // sum of the tensors' own bytes
};

inline constexpr uint64_t kDefaultMaxGap = 64u << 10;

ExtentLayout layout_extents(std::span<const TensorRange> tensors, uint64_t align, uint64_t max_gap = kDefaultMaxGap);

}  // namespace sluice::weights
