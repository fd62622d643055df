// KvCache: contiguous per-sequence key/value storage, f32.
//
// Layout per layer:  k, v: [n_ctx, n_head_kv * head_dim]  (position-major)
// The model writes rows pos0 .. pos0 + n - 1 of each layer during a forward pass
// and reads rows 0 .. pos0 + n - 1. One sequence; not thread-safe (owned by the
// caller running the forward pass). Allocated once at construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice {

class KvCache {
 public:
  KvCache(int64_t n_layer, int64_t n_ctx, int64_t n_embd_kv);

  int64_t n_ctx() const { return n_ctx_; }
  int64_t n_embd_kv() const { return n_embd_kv_; }
  // Number of positions holding valid K/V (the next position to write).
  int64_t n_past() const { return n_past_; }
  void set_n_past(int64_t n) { n_past_ = n; }
  // Forgets everything (the memory stays allocated).
  void clear() { n_past_ = 0; }

  float* k(int64_t layer) { return k_.data() + layer * n_ctx_ * n_embd_kv_; }  // [n_ctx, n_embd_kv]
  float* v(int64_t layer) { return v_.data() + layer * n_ctx_ * n_embd_kv_; }  // [n_ctx, n_embd_kv]
  uint64_t bytes() const { return (k_.size() + v_.size()) * sizeof(float); }

 private:
  int64_t n_ctx_;
  int64_t n_embd_kv_;
  int64_t n_past_ = 0;
  std::vector<float> k_;  // [n_layer, n_ctx, n_embd_kv]
  std::vector<float> v_;  // [n_layer, n_ctx, n_embd_kv]
};

}  // namespace sluice
