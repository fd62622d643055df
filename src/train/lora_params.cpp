#include "train/lora_params.h"

#include <algorithm>
#include <cstring>

namespace sluice {

StatusOr<LoraParams> LoraParams::create(Backend& be, const LoraAdapter& init) {
  if (init.mats.empty()) return invalid_argument("the adapter to train has no matrices");
  LoraParams p;
  p.be_ = &be;
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
    be.write_floats(m.a.data(), p.params_->floats() + p.slots_[i].a_off, static_cast<int64_t>(m.a.size()));
    be.write_floats(m.b.data(), p.params_->floats() + p.slots_[i].b_off, static_cast<int64_t>(m.b.size()));
  }
  return p;
}

const LoraSlot* LoraParams::find(int64_t layer, TensorRole role) const {
  for (const LoraSlot& s : slots_) {
    if (s.layer == layer && s.role == role) return &s;
  }
  return nullptr;
}

void LoraParams::zero_grads() {
  if (be_->host_visible()) {
    std::memset(grads_->data(), 0, static_cast<size_t>(n_params_) * sizeof(float));
    return;
  }
  zeros_.resize(static_cast<size_t>(n_params_));  // once: zeros_ stays zero
  be_->write_floats(zeros_.data(), grads_->floats(), n_params_);
}

std::vector<float> LoraParams::read(const float* src, int64_t n) const {
  std::vector<float> out(static_cast<size_t>(n));
  be_->read_floats(src, out.data(), n);
  return out;
}

void LoraParams::write(const float* src, float* dst, int64_t n) { be_->write_floats(src, dst, n); }

LoraAdapter LoraParams::to_adapter() const {
  LoraAdapter ad;
  ad.name = name_;
  ad.arch = arch_;
  ad.alpha = alpha_;
  for (const LoraSlot& s : slots_) {
    LoraMatrix m{.base_name = s.base_name, .layer = s.layer, .role = s.role, .n_in = s.n_in, .n_out = s.n_out,
                 .rank = s.rank};
    const float* p = params_->floats();
    m.a = read(p + s.a_off, s.rank * s.n_in);
    m.b = read(p + s.b_off, s.n_out * s.rank);
    ad.mats.push_back(std::move(m));
  }
  return ad;
}

}  // namespace sluice
