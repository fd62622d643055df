#include "train/lora_params.h"

#include <algorithm>
#include <cstring>

namespace sluice {

StatusOr<LoraParams> LoraParams::create(Backend& be, const LoraAdapter& init) {
  if (!be.host_visible()) {
    return unimplemented("training on the {} backend is not supported yet (its buffers are not host memory)",
                         be.name());
  }
  if (init.mats.empty()) return invalid_argument("the adapter to train has no matrices");
  LoraParams p;
  p.name_ = init.name;
  p.arch_ = init.arch;
  p.alpha_ = init.alpha;
  int64_t off = 0;
  for (const LoraMatrix& m : init.mats) {
    LoraSlot s{.base_name = m.base_name, .layer = m.layer, .role = m.role, .n_in = m.n_in, .n_out = m.n_out,
               .rank = m.rank, .scale = init.scale(m)};
    s.a_off = off;
    off += m.rank * m.n_in;
    s.b_off = off;
    off += m.n_out * m.rank;
    p.max_rank_ = std::max(p.max_rank_, m.rank);
    p.slots_.push_back(s);
  }
  p.n_params_ = off;
  const auto bytes = static_cast<size_t>(off) * sizeof(float);
  p.params_ = be.alloc(bytes);
  p.grads_ = be.alloc(bytes);
  p.m_ = be.alloc(bytes);
  p.v_ = be.alloc(bytes);
  for (size_t i = 0; i < init.mats.size(); ++i) {
    const LoraMatrix& m = init.mats[i];
    std::memcpy(p.params_->floats() + p.slots_[i].a_off, m.a.data(), m.a.size() * sizeof(float));
    std::memcpy(p.params_->floats() + p.slots_[i].b_off, m.b.data(), m.b.size() * sizeof(float));
  }
  return p;
}

const LoraSlot* LoraParams::find(int64_t layer, TensorRole role) const {
  for (const LoraSlot& s : slots_) {
    if (s.layer == layer && s.role == role) return &s;
  }
  return nullptr;
}

void LoraParams::zero_grads() { std::memset(grads_->data(), 0, static_cast<size_t>(n_params_) * sizeof(float)); }

LoraAdapter LoraParams::to_adapter() const {
  LoraAdapter ad;
  ad.name = name_;
  ad.arch = arch_;
  ad.alpha = alpha_;
  for (const LoraSlot& s : slots_) {
    LoraMatrix m{.base_name = s.base_name, .layer = s.layer, .role = s.role, .n_in = s.n_in, .n_out = s.n_out,
                 .rank = s.rank};
    const float* p = params_->floats();
    m.a.assign(p + s.a_off, p + s.a_off + s.rank * s.n_in);
    m.b.assign(p + s.b_off, p + s.b_off + s.n_out * s.rank);
    ad.mats.push_back(std::move(m));
  }
  return ad;
}

}  // namespace sluice
