// LoraParams: an adapter's factors as training holds them. Every A and B is
// packed into one backend buffer, their gradients and AdamW moments into
// buffers of the same layout, so the optimizer is one call over all of them:
//
//   params  | A_0 | B_0 | A_1 | B_1 | ... |     each row-major: A [rank, n_in], B [n_out, rank]
//   grads   | dA_0| dB_0| ...               (same offsets)
//   adam_m, adam_v                          (same offsets)
//
// The buffers are the backend's (device memory on one that is not
// host-visible): params() and the like point into them, for the operators;
// read() and write() move floats between them and the host.
// The base model never changes; only these do. Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "lora/lora_adapter.h"

namespace sluice {

struct LoraSlot {
  std::string base_name;  // "blk.0.attn_q.weight"
  int64_t layer = 0;
  TensorRole role = TensorRole::kCount;
  int64_t n_in = 0;
  int64_t n_out = 0;
  int64_t rank = 0;
  float scale = 1.0f;   // alpha / rank
  int64_t a_off = 0;    // floats into each buffer
  int64_t b_off = 0;
};

class LoraParams {
 public:
  // The factors of `init` in buffers of `be` (outliving this).
  static StatusOr<LoraParams> create(Backend& be, const LoraAdapter& init);

  int64_t n_params() const { return n_params_; }
  int64_t max_rank() const { return max_rank_; }
  const std::vector<LoraSlot>& slots() const { return slots_; }
  // The slot adapting (layer, role), or nullptr.
  const LoraSlot* find(int64_t layer, TensorRole role) const;

  float* params() { return params_->floats(); }
  float* grads() { return grads_->floats(); }
  float* adam_m() { return m_->floats(); }
  float* adam_v() { return v_->floats(); }
  const float* params() const { return params_->floats(); }
  const float* a(const LoraSlot& s) const { return params_->floats() + s.a_off; }
  const float* b(const LoraSlot& s) const { return params_->floats() + s.b_off; }
  float* grad_a(const LoraSlot& s) { return grads_->floats() + s.a_off; }
  float* grad_b(const LoraSlot& s) { return grads_->floats() + s.b_off; }

  void zero_grads();
  // n floats at src (one of the buffers above) copied to the host, after the
  // operators enqueued before; and n host floats copied to dst (in them).
  std::vector<float> read(const float* src, int64_t n) const;
  void write(const float* src, float* dst, int64_t n);
  // The current factors as an adapter (name, architecture and alpha of the init).
  LoraAdapter to_adapter() const;

 private:
  LoraParams() = default;
  Backend* be_ = nullptr;
  std::vector<LoraSlot> slots_;
  std::string name_, arch_;
  float alpha_ = 0.0f;
  int64_t n_params_ = 0;
  int64_t max_rank_ = 0;
  std::unique_ptr<Buffer> params_, grads_, m_, v_;
  std::vector<float> zeros_;  // [n_params] zero_grads' source where buffers are not host memory
};

}  // namespace sluice
