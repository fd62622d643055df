#include "weights/extent_layout.h"

#include <algorithm>
#include <numeric>

namespace sluice::weights {

ExtentLayout layout_extents(std::span<const TensorRange> tensors, uint64_t align, uint64_t max_gap) {
  ExtentLayout out;
  out.tensor_offsets.assign(tensors.size(), 0);
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return tensors[a].file_offset < tensors[b].file_offset; });
  std::vector<size_t> extent_of(tensors.size(), 0);
  for (size_t i : order) {
    const TensorRange& t = tensors[i];
    out.tensor_bytes += t.n_bytes;
    if (t.n_bytes == 0) continue;
    const uint64_t a = t.file_offset / align * align;
    const uint64_t b = (t.file_offset + t.n_bytes + align - 1) / align * align;
    if (!out.extents.empty()) {
      IoExtent& last = out.extents.back();
      if (a <= last.file_offset + last.length + max_gap) {
        const uint64_t end = std::max(last.file_offset + last.length, b);
        out.buffer_bytes += end - (last.file_offset + last.length);
        last.length = end - last.file_offset;
        extent_of[i] = out.extents.size() - 1;
        continue;
      }
    }
    out.extents.push_back({.file_offset = a, .length = b - a, .dst_offset = out.buffer_bytes});
    out.buffer_bytes += b - a;
    extent_of[i] = out.extents.size() - 1;
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].n_bytes == 0) continue;
    const IoExtent& e = out.extents[extent_of[i]];
    out.tensor_offsets[i] = e.dst_offset + (tensors[i].file_offset - e.file_offset);
  }
  return out;
}

}  // namespace sluice::weights
