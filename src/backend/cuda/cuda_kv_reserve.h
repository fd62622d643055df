// KvReservation: device memory for a KV store whose blocks are backed on
// demand (the fluid split, Backend::create_kv_reserved / resize_kv).
//
// One virtual range per side (K and V), reserved for every block id; each
// layer's rows start at a stride rounded up to the allocation granularity G
// (2 MiB on current GPUs), so every layer's blocks 0 .. n-1 are one prefix of
// its own stride, backed by ceil(n x block_bytes / G) granules of physical
// memory mapped there (CUDA's virtual memory management, the driver API found
// through the runtime, nothing linked):
//
//   K range:  [layer 0: granule granule ... | unmapped ] [layer 1: ...] ...
//             ^ k()      <- n backed blocks ->            ^ k() + stride
//
// back(n) maps the granules the first n blocks need (zero-filled) and unmaps
// those past them; what it unmaps must be read by no work still queued (the
// caller synchronizes). Calls from one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "sluice/status.h"

namespace sluice::cuda {

class KvReservation {
 public:
  // Reserves both ranges for n_blocks blocks of block_bytes in each of
  // n_layer layers, backing none. Errors: the driver lacks virtual memory
  // management, or the ranges cannot be reserved.
  static StatusOr<std::shared_ptr<KvReservation>> create(size_t block_bytes, int64_t n_layer, int64_t n_blocks);
  ~KvReservation();
  KvReservation(const KvReservation&) = delete;
  KvReservation& operator=(const KvReservation&) = delete;

  uint8_t* k() const { return k_; }
  uint8_t* v() const { return v_; }
  size_t layer_stride() const { return stride_; }
  int64_t n_backed() const { return n_backed_; }

  // Backs blocks 0 .. n_blocks-1 of every layer (and no more). Errors: the
  // device is out of memory (the granules mapped so far stay; n_backed()
  // says what is whole).
  Status back(int64_t n_blocks);

 private:
  KvReservation() = default;
  // Granules a prefix of n blocks of one layer takes.
  size_t granules_for(int64_t n_blocks) const;

  size_t block_bytes_ = 0, granule_ = 0, stride_ = 0;
  int64_t n_layer_ = 0, n_blocks_ = 0, n_backed_ = 0;
  int device_ = 0;
  uint8_t* k_ = nullptr;
  uint8_t* v_ = nullptr;
  // [2 * n_layer]: the physical granules mapped at each side-layer's start, in order.
  std::vector<std::vector<unsigned long long>> mapped_;
};

}  // namespace sluice::cuda
