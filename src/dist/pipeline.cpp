#include "dist/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "dist/protocol.h"
#include "model/model.h"

namespace sluice::dist {
namespace {

// Whether the step is one sequence's tokens: one, or pieces() of one (they
// share its block table). Its micro-batches then attend over each other's keys.
bool one_sequence(std::span<const ForwardSeq> seqs) {
  return std::all_of(seqs.begin(), seqs.end(),
                     [&](const ForwardSeq& s) { return s.block_table.data() == seqs.front().block_table.data(); });
}

}  // namespace


PipelineDriver::PipelineDriver(Comm& comm, plan::PipelinePlan plan, int64_t n_embd, int64_t n_batch,
                               double abort_grace_s, int64_t micro_batches)
    : comm_(comm),
      plan_(std::move(plan)),
      n_embd_(n_embd),
      micro_batches_fixed_(std::clamp<int64_t>(micro_batches, 0, kMaxMicroBatches)),
      failure_(comm, abort_grace_s, "the pipeline") {
  const int64_t S = plan_.n_stages();
  micro_ends_.reserve(kMaxMicroBatches);
  ret_.resize(static_cast<size_t>(n_batch * n_embd));
  sends_.reserve(static_cast<size_t>(S + kMaxMicroBatches));
  recvs_.reserve(kMaxMicroBatches);
  MetricRegistry& reg = global_metrics();
  link_bytes_.assign(static_cast<size_t>(S * S), nullptr);
  auto add = [&](int64_t src, int64_t dst) {
    Counter*& c = link_bytes_[static_cast<size_t>(src * S + dst)];
    if (!c) c = reg.counter("sluice_dist_bytes_sent_total",
                            "Bytes sent between the job's processes, per link (step plans, hidden rows, expert rows)",
                            fmt::format("link=\"{}->{}\"", comm_.world_rank(static_cast<int>(src)),
                                        comm_.world_rank(static_cast<int>(dst))));
  };
  for (int64_t r = 1; r < S; ++r) {
    add(0, r);      // step plans
    add(r - 1, r);  // hidden rows
  }
  if (S > 1) add(S - 1, 0);  // the rows back
  micro_batches_ = reg.counter("sluice_dist_micro_batches_total", "Micro-batches the pipelined steps were cut into");
}

PipelineDriver::~PipelineDriver() = default;

uint64_t PipelineDriver::link_bytes(int src, int dst) const {
  const Counter* c = link_bytes_[static_cast<size_t>(src * plan_.n_stages() + dst)];
  return c ? static_cast<uint64_t>(c->value()) : 0;
}

void PipelineDriver::copy_kv_blocks(std::span<const BlockCopy> copies) {
  copies_.insert(copies_.end(), copies.begin(), copies.end());
}

std::span<const ForwardSeq> PipelineDriver::pieces(const Model& model, std::span<const ForwardSeq> seqs) {
  if (plan_.n_stages() < 2) return seqs;
  int64_t n = 0, n_logits = 0;
  for (const ForwardSeq& s : seqs) {
    n += static_cast<int64_t>(s.tokens.size());
    n_logits += s.n_logits;
  }
  const int64_t m = micro_batches_fixed_ > 0 ? std::min(micro_batches_fixed_, n)
                                            : plan_.best_micro_batches(n, n_logits, kMaxMicroBatches,
                                                                       /*one_prompt=*/one_sequence(seqs));
  if (m <= 1) return seqs;
  if (pieces_.capacity() < static_cast<size_t>(model.max_seqs())) pieces_.reserve(static_cast<size_t>(model.max_seqs()));
  cut_sequences(seqs, m, static_cast<size_t>(model.max_seqs()), &pieces_);
  return pieces_;
}

Status PipelineDriver::run_step(Model& model, std::span<const ForwardSeq> seqs, KvStore& kv) {
  // A failed step's sends and receives in flight refer to its buffers:
  // cancelled by wait's deadline or left to the abort.
  return failure_.guard([&] { return step(model, seqs, kv); });
}

Status PipelineDriver::step(Model& model, std::span<const ForwardSeq> seqs, KvStore& kv) {
  const int64_t S = plan_.n_stages();
  const int64_t n = model.step_tokens();
  const std::span<const int64_t> logit_rows = model.logit_rows();
  const auto n_logits = static_cast<int64_t>(logit_rows.size());
  const bool one_prompt = one_sequence(seqs);
  // --micro-batches fixes the cut here too (pieces() only cut long prompts).
  const auto n_seqs = static_cast<int64_t>(seqs.size());
  const int64_t m = micro_batches_fixed_ > 0
                        ? std::min(micro_batches_fixed_, n_seqs)
                        : plan_.best_micro_batches(n, n_logits, std::min<int64_t>(kMaxMicroBatches, n_seqs), one_prompt);
  split_micro_batches(seqs, m, &micro_ends_);
  micro_batches_->add(static_cast<double>(micro_ends_.size()));
  ++steps_;
  tokens_ += n;
  const size_t row_bytes = static_cast<size_t>(n_embd_) * sizeof(float);
  float* x = model.hidden();
  sends_.clear();
  recvs_.clear();
  if (S > 1) {
    encode_step(seqs, micro_ends_, copies_, kv, &msg_);
    copies_.clear();
    for (int r = 1; r < S; ++r) {
      ASSIGN_OR_RETURN(Pending p, comm_.isend(r, kTagControl, msg_.data(), msg_.size()));
      sends_.push_back(p);
      link(0, r)->add(static_cast<double>(msg_.size()));
    }
    // The rows that ask for logits come back per micro-batch, in order.
    int64_t k = 0;
    size_t s0 = 0;
    for (const int32_t end : micro_ends_) {
      int64_t nl = 0;
      for (size_t i = s0; i < static_cast<size_t>(end); ++i) nl += seqs[i].n_logits;
      if (nl > 0) {
        ASSIGN_OR_RETURN(Pending p, comm_.irecv(static_cast<int>(S - 1), kTagReturn,
                                                ret_.data() + k * n_embd_, static_cast<size_t>(nl) * row_bytes));
        recvs_.push_back(p);
        link(static_cast<int>(S - 1), 0)->add(static_cast<double>(nl) * static_cast<double>(row_bytes));
      }
      k += nl;
      s0 = static_cast<size_t>(end);
    }
  } else {
    copies_.clear();
  }
  int64_t t0 = 0;
  size_t s0 = 0;
  for (const int32_t end : micro_ends_) {
    int64_t n_mb = 0;
    for (size_t i = s0; i < static_cast<size_t>(end); ++i) n_mb += static_cast<int64_t>(seqs[i].tokens.size());
    RETURN_IF_ERROR(model.run_stage(s0, static_cast<size_t>(end), t0, n_mb, kv));
    if (S > 1) {
      ASSIGN_OR_RETURN(Pending p, comm_.isend(1, kTagHidden, x + t0 * n_embd_, static_cast<size_t>(n_mb) * row_bytes));
      sends_.push_back(p);
      for (int r = 1; r < S; ++r)  // every hop carries the micro-batch's rows
        link(r - 1, r)->add(static_cast<double>(n_mb) * static_cast<double>(row_bytes));
    }
    t0 += n_mb;
    s0 = static_cast<size_t>(end);
  }
  if (S == 1) return Status();
  for (Pending& p : recvs_) RETURN_IF_ERROR(comm_.wait(p, "the hidden rows of the step's last stage"));
  for (int64_t k = 0; k < n_logits; ++k)
    std::memcpy(x + logit_rows[static_cast<size_t>(k)] * n_embd_, ret_.data() + k * n_embd_, row_bytes);
  for (Pending& p : sends_) RETURN_IF_ERROR(comm_.wait(p, "a step's send"));
  return Status();
}

Status PipelineDriver::shutdown() {
  if (failure_.failed()) return failure_.status();
  encode_shutdown(&msg_);
  for (int r = 1; r < plan_.n_stages(); ++r)
    RETURN_IF_ERROR(comm_.send(r, kTagControl, msg_.data(), msg_.size(), "the end of the job"));
  return Status();
}

}  // namespace sluice::dist
