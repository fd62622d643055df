// KvStore: the bytes of the paged KV cache.
//
// The block manager decides which block holds which positions; this class holds
// the rows. Layout, per layer, for K and for V separately:
//
//   layer l:  [n_blocks][n_slices][block_size][slice]
//             slice = n_embd_kv / n_slices values of `dtype`: the K (or V) of
//             one KV head when n_slices = n_head_kv (kv_slices(); else the row)
//   position p of a sequence: block block_table[p / block_size], slot
//             p % block_size; its row index ("slot" below) is block * block_size + slot
//
//   block b:  +--------------------------+--------------------------+-- ...
//             | head 0: slot 0 .. bs-1   | head 1: slot 0 .. bs-1   |
//             +--------------------------+--------------------------+-- ...
//
// So attention, which reads one head of every position, reads block_size
// consecutive slices per block instead of a short piece of every long row.
//
//   dtype f32:  4 bytes per value          f16: 2 bytes per value
//   dtype q8_0: per 32 values [f16 scale][32 x int8]  (34 bytes; GGUF Q8_0 blocks)
//
// A block id names the same block in every layer, so copying or swapping a block
// moves its rows in all layers. A host-side KvStore with the same layout is the
// swap target. Allocated once; not thread-safe for writes to the same rows.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/huge_buffer.h"
#include "kv/block_pool.h"
#include "sluice/status.h"

namespace sluice {

class KvStore {
 public:
  // Errors: invalid layout (see kv_block_bytes), n_blocks <= 0.
  static StatusOr<KvStore> create(const KvLayout& layout, int64_t n_blocks);

  // A store over memory a backend owns elsewhere (a GPU's): the same layout
  // and accessors, but the bytes are not host memory, so the host-side
  // store_row, load_row, prefetch_row, copy_block and move_block must not be
  // called (the backend moves rows and blocks itself). k and v each hold
  // side_bytes(layout, n_blocks), or, with layer_stride (0: none), n_layer
  // strides of that many bytes each starting with a layer's rows (a device
  // that backs each layer's blocks in granules of its own); `owner` keeps
  // them alive. Errors: as create(); a stride below a layer's rows.
  static StatusOr<KvStore> create_external(const KvLayout& layout, int64_t n_blocks, std::shared_ptr<void> owner,
                                           uint8_t* k, uint8_t* v, size_t layer_stride = 0);
  // Bytes of all layers' K (or V) rows. Errors: as create().
  static StatusOr<size_t> side_bytes(const KvLayout& layout, int64_t n_blocks);

  // False for create_external() stores.
  bool host_memory() const { return owner_ == nullptr; }
  size_t block_bytes() const { return block_bytes_; }  // one layer's K (or V) rows of one block
  const KvLayout& layout() const { return layout_; }
  int64_t n_blocks() const { return n_blocks_; }
  size_t row_bytes() const { return row_bytes_; }
  int64_t n_slices() const { return n_slices_; }
  uint64_t bytes() const { return 2 * static_cast<uint64_t>(layer_bytes_) * static_cast<uint64_t>(layout_.n_layer); }

  // Base of layer l's K (or V) rows: [n_blocks][n_slices][block_size][slice].
  uint8_t* k_layer(int64_t l) { return k_base_ + static_cast<size_t>(l) * layer_stride_; }
  uint8_t* v_layer(int64_t l) { return v_base_ + static_cast<size_t>(l) * layer_stride_; }
  const uint8_t* k_layer(int64_t l) const { return k_base_ + static_cast<size_t>(l) * layer_stride_; }
  const uint8_t* v_layer(int64_t l) const { return v_base_ + static_cast<size_t>(l) * layer_stride_; }

  // Stores n_embd_kv floats as row `row` (= block * block_size + slot) of a
  // layer's K or V (`layer`: k_layer() or v_layer()), converted to the dtype.
  void store_row(const float* src, uint8_t* layer, int64_t row) const;
  // Asks for the cache lines store_row(.., layer, row) will write, for
  // writing: a row's slices are a block's slice stride apart, so each is a
  // miss the hardware prefetchers do not foresee. A no-op on CPUs without
  // PREFETCHW.
  void prefetch_row(const uint8_t* layer, int64_t row) const;
  // Loads row `row` of a layer's K or V back to n_embd_kv floats.
  void load_row(const uint8_t* layer, int64_t row, float* dst) const;

  // Copies every layer's K and V rows of block src to block dst (copy-on-write).
  void copy_block(int32_t src, int32_t dst);
  // Gives the memory of blocks first .. n_blocks()-1 back to the system (every
  // layer's K and V; whole pages inside the range only): the pool no longer
  // hands them out (BlockPool::set_limit) and none is in use. A block written
  // later takes fresh zero pages. Host stores only.
  void release_blocks(int64_t first);
  // Copies block `src` of `from` into block `dst` of `to` (swap out / swap in).
  // Both stores must have the same layout.
  static void move_block(const KvStore& from, int32_t src, KvStore& to, int32_t dst);

 private:
  // Every size of a store but its memory. Errors: those of create().
  static StatusOr<KvStore> shape(const KvLayout& layout, int64_t n_blocks);

  KvLayout layout_;
  int64_t n_blocks_ = 0;
  size_t row_bytes_ = 0;
  int64_t n_slices_ = 1;
  size_t block_bytes_ = 0;  // one layer's K (or V) rows of one block
  size_t layer_bytes_ = 0;  // one layer's K (or V) rows of every block
  size_t layer_stride_ = 0; // from one layer's rows to the next's (layer_bytes_ unless external says more)
  HugeBuffer k_;  // [n_layer][n_blocks][block_size][row]; huge pages: attention reads
  HugeBuffer v_;  // short slices of rows scattered over blocks
  uint8_t* k_base_ = nullptr;      // k_.data(), or the external memory
  uint8_t* v_base_ = nullptr;
  std::shared_ptr<void> owner_;    // external memory's owner (null: host HugeBuffers)
};

}  // namespace sluice
