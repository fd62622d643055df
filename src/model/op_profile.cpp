#include "model/op_profile.h"

#include <algorithm>

#include "base/check.h"
#include "quant/dtype.h"

namespace sluice {

OpWork matmul_work(std::span<const MatmulOut> outs, int64_t n_tok) {
  OpWork w;
  for (const MatmulOut& o : outs) {
    w.flops += 2.0 * static_cast<double>(n_tok) * static_cast<double>(o.w.n_in) * static_cast<double>(o.w.n_out);
    w.bytes += static_cast<double>(row_bytes(o.w.type, o.w.n_in)) * static_cast<double>(o.w.n_out);
  }
  return w;
}

OpWork attention_work(std::span<const AttentionSeq> seqs, int64_t n_head, int64_t head_dim, int64_t window,
                      double kv_row_bytes) {
  OpWork w;
  for (const AttentionSeq& s : seqs) {
    double pairs = 0;  // (query, key) pairs of one head
    for (int64_t pos = s.pos0; pos < s.pos0 + s.n_tok; ++pos)
      pairs += static_cast<double>(window > 0 ? std::min(pos + 1, window) : pos + 1);
    w.flops += 4.0 * static_cast<double>(head_dim * n_head) * pairs;
    const int64_t last = s.pos0 + s.n_tok - 1;
    const int64_t first = window > 0 ? std::max<int64_t>(0, s.pos0 - window + 1) : 0;
    w.bytes += 2.0 * kv_row_bytes * static_cast<double>(last - first + 1);  // K and V
  }
  return w;
}

OpProfile::OpProfile(std::unique_ptr<OpClock> clock) : clock_(std::move(clock)) {
  CHECK(clock_ != nullptr);
  pending_.reserve(static_cast<size_t>(clock_->capacity()));
  at_.reserve(static_cast<size_t>(clock_->capacity()));
}

void OpProfile::begin() { mark(nullptr); }

void OpProfile::mark(const char* label, OpWork work) {
  if (static_cast<int>(pending_.size()) == clock_->capacity()) collect();
  clock_->mark();
  pending_.push_back({label, work});
}

void OpProfile::collect() {
  clock_->read(at_);
  CHECK(at_.size() == pending_.size());
  for (size_t i = 1; i < pending_.size(); ++i) {
    const Pending& p = pending_[i];
    if (p.label == nullptr) continue;  // a step's begin: the time before it is no operator's
    auto row = std::find_if(rows_.begin(), rows_.end(), [&](const Row& r) { return r.label == p.label; });
    if (row == rows_.end()) row = rows_.insert(rows_.end(), Row{.label = p.label});
    ++row->calls;
    row->seconds += at_[i] - at_[i - 1];
    row->work += p.work;
  }
  // The clock keeps its last mark as the next read's first: so do the marks here
  // (the next read does not count its time again: it is at[0]).
  if (!pending_.empty()) pending_.erase(pending_.begin(), pending_.end() - 1);
}

const std::vector<OpProfile::Row>& OpProfile::rows() {
  collect();
  return rows_;
}

void OpProfile::clear() {
  collect();
  rows_.clear();
}

}  // namespace sluice
