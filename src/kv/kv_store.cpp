#include "kv/kv_store.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "base/half.h"
#include "quant/blocks.h"

namespace sluice {

StatusOr<KvStore> KvStore::shape(const KvLayout& layout, int64_t n_blocks) {
  if (n_blocks <= 0) return invalid_argument("KV store needs at least one block, got {}", n_blocks);
  ASSIGN_OR_RETURN(int64_t row, kv_row_bytes(layout.dtype, layout.n_embd_kv));
  KvStore s;
  s.layout_ = layout;
  s.n_blocks_ = n_blocks;
  s.row_bytes_ = static_cast<size_t>(row);
  s.n_slices_ = kv_slices(layout);
  s.block_bytes_ = s.row_bytes_ * static_cast<size_t>(layout.block_size);
  s.layer_bytes_ = s.block_bytes_ * static_cast<size_t>(n_blocks);
  s.layer_stride_ = s.layer_bytes_;
  return s;
}

StatusOr<KvStore> KvStore::create(const KvLayout& layout, int64_t n_blocks) {
  ASSIGN_OR_RETURN(KvStore s, shape(layout, n_blocks));
  const size_t total = s.layer_bytes_ * static_cast<size_t>(layout.n_layer);
  s.k_ = HugeBuffer(total);  // zero-filled
  s.v_ = HugeBuffer(total);
  s.k_base_ = s.k_.data();
  s.v_base_ = s.v_.data();
  return s;
}

StatusOr<size_t> KvStore::side_bytes(const KvLayout& layout, int64_t n_blocks) {
  ASSIGN_OR_RETURN(KvStore s, shape(layout, n_blocks));
  return s.layer_bytes_ * static_cast<size_t>(layout.n_layer);
}

StatusOr<KvStore> KvStore::create_external(const KvLayout& layout, int64_t n_blocks, std::shared_ptr<void> owner,
                                           uint8_t* k, uint8_t* v, size_t layer_stride) {
  CHECK(owner != nullptr && k != nullptr && v != nullptr);
  ASSIGN_OR_RETURN(KvStore s, shape(layout, n_blocks));
  if (layer_stride > 0) {
    if (layer_stride < s.layer_bytes_)
      return invalid_argument("KV store: a layer stride of {} bytes is below a layer's {}", layer_stride, s.layer_bytes_);
    s.layer_stride_ = layer_stride;
  }
  s.k_base_ = k;
  s.v_base_ = v;
  s.owner_ = std::move(owner);
  return s;
}

namespace {

// PREFETCHW over [p, p + n); called only where the CPU has it. An asm
// statement: GCC drops a function whose only effect is __builtin_prefetch as
// free of side effects, and without -mprfchw it emits a read prefetch.
void prefetch_for_write(const uint8_t* p, size_t n) {
  for (size_t c = 0; c < n; c += 64) asm volatile("prefetchw %0" : : "m"(p[c]));
  asm volatile("prefetchw %0" : : "m"(p[n - 1]));  // the last line when p is not line-aligned
}

// n floats -> n values of dtype at dst.
void store_values(KvDtype dtype, const float* src, uint8_t* dst, int64_t n) {
  switch (dtype) {
    case KvDtype::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case KvDtype::kF16: {
      f32_to_f16_array(src, reinterpret_cast<uint16_t*>(dst), n);
      return;
    }
    case KvDtype::kQ8_0:  // GGUF's Q8_0 blocks: [f16 d][32 x int8 q], d = max|x| / 127
      quantize_row_q8_0(src, reinterpret_cast<BlockQ8_0*>(dst), n);
      return;
  }
}

void load_values(KvDtype dtype, const uint8_t* src, float* dst, int64_t n) {
  switch (dtype) {
    case KvDtype::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case KvDtype::kF16: {
      const auto* h = reinterpret_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(h[i]);
      return;
    }
    case KvDtype::kQ8_0:
      dequantize_row_q8_0(reinterpret_cast<const BlockQ8_0*>(src), dst, n);
      return;
  }
}

}  // namespace

void KvStore::store_row(const float* src, uint8_t* layer, int64_t row) const {
  const int64_t bs = layout_.block_size, n = layout_.n_embd_kv / n_slices_;
  const size_t slice = row_bytes_ / static_cast<size_t>(n_slices_);
  uint8_t* block = layer + static_cast<size_t>(row / bs) * block_bytes_ + static_cast<size_t>(row % bs) * slice;
  for (int64_t s = 0; s < n_slices_; ++s)
    store_values(layout_.dtype, src + s * n, block + static_cast<size_t>(s * bs) * slice, n);
}

void KvStore::prefetch_row(const uint8_t* layer, int64_t row) const {
  static const bool prfchw = __builtin_cpu_supports("prfchw");
  if (!prfchw) return;
  const int64_t bs = layout_.block_size;
  const size_t slice = row_bytes_ / static_cast<size_t>(n_slices_);
  const uint8_t* block = layer + static_cast<size_t>(row / bs) * block_bytes_ + static_cast<size_t>(row % bs) * slice;
  for (int64_t s = 0; s < n_slices_; ++s) prefetch_for_write(block + static_cast<size_t>(s * bs) * slice, slice);
}

void KvStore::load_row(const uint8_t* layer, int64_t row, float* dst) const {
  CHECK(host_memory());
  const int64_t bs = layout_.block_size, n = layout_.n_embd_kv / n_slices_;
  const size_t slice = row_bytes_ / static_cast<size_t>(n_slices_);
  const uint8_t* block = layer + static_cast<size_t>(row / bs) * block_bytes_ + static_cast<size_t>(row % bs) * slice;
  for (int64_t s = 0; s < n_slices_; ++s)
    load_values(layout_.dtype, block + static_cast<size_t>(s * bs) * slice, dst + s * n, n);
}

void KvStore::release_blocks(int64_t first) {
  CHECK(host_memory() && first >= 0 && first <= n_blocks_);
  const size_t from = static_cast<size_t>(first) * block_bytes_;
  for (int64_t l = 0; l < layout_.n_layer; ++l)
    for (uint8_t* layer : {k_layer(l), v_layer(l)}) release_pages(layer + from, layer_bytes_ - from);
}

void KvStore::copy_block(int32_t src, int32_t dst) {
  CHECK(host_memory());
  CHECK(src >= 0 && src < n_blocks_ && dst >= 0 && dst < n_blocks_);
  for (int64_t l = 0; l < layout_.n_layer; ++l) {
    std::memcpy(k_layer(l) + dst * block_bytes_, k_layer(l) + src * block_bytes_, block_bytes_);
    std::memcpy(v_layer(l) + dst * block_bytes_, v_layer(l) + src * block_bytes_, block_bytes_);
  }
}

void KvStore::move_block(const KvStore& from, int32_t src, KvStore& to, int32_t dst) {
  CHECK(from.host_memory() && to.host_memory());
  CHECK(from.block_bytes_ == to.block_bytes_ && from.layout_.n_layer == to.layout_.n_layer);
  CHECK(src >= 0 && src < from.n_blocks_ && dst >= 0 && dst < to.n_blocks_);
  for (int64_t l = 0; l < from.layout_.n_layer; ++l) {
    std::memcpy(to.k_layer(l) + dst * to.block_bytes_, from.k_layer(l) + src * from.block_bytes_, from.block_bytes_);
    std::memcpy(to.v_layer(l) + dst * to.block_bytes_, from.v_layer(l) + src * from.block_bytes_, from.block_bytes_);
  }
}

}  // namespace sluice
