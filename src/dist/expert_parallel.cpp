#include "dist/expert_parallel.h"

#include <chrono>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include "dist/protocol.h"
#include "dist/worker.h"
#include "kv/kv_store.h"

namespace sluice::dist {
namespace {

enum ExpertMsgKind : int32_t { kExpertRows = 1, kExpertShutdown = 2, kExpertPredict = 3 };

// The ids padded to a multiple of 4 so the rows after them stay 16-byte aligned.
size_t padded_ids(int64_t n_rows) { return static_cast<size_t>((n_rows + 3) / 4 * 4); }

size_t message_bytes(int64_t n_rows, int64_t n_embd) {
  return sizeof(ExpertMsgHeader) + padded_ids(n_rows) * sizeof(int32_t) +
         static_cast<size_t>(n_rows * n_embd) * sizeof(float);
}

template <typename T>
void grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

}  // namespace

ExpertParallelDriver::ExpertParallelDriver(Comm& comm, const ModelHparams& hp, std::vector<plan::ExpertRange> shares,
                                           plan::EpAttention attention, double abort_grace_s)
    : comm_(comm),
      hp_(hp),
      shares_(std::move(shares)),
      attention_(attention),
      me_(comm.rank()),
      failure_(comm, abort_grace_s, "expert parallelism") {
  const auto S = shares_.size();
  owner_.assign(static_cast<size_t>(hp.n_expert), 0);
  for (size_t r = 0; r < S; ++r)
    for (int64_t e = shares_[r].begin; e < shares_[r].end; ++e) owner_[static_cast<size_t>(e)] = static_cast<int32_t>(r);
  count_.assign(S, 0);
  rows_.assign(S, 0);
  msg_.resize(S);
  out_.resize(S);
  sends_.reserve(2 * S);
  recvs_.reserve(S);
  step_sends_.reserve(S);
  pred_msg_.resize(S);
  for (std::vector<int32_t>& m : pred_msg_)
    m.reserve(sizeof(ExpertMsgHeader) / sizeof(int32_t) + padded_ids(hp.n_expert));
  pred_seen_.resize(static_cast<size_t>(hp.n_expert));
  micro_ends_.reserve(1);
  out_bytes_.assign(S, nullptr);
  back_bytes_.assign(S, nullptr);
  if (me_ != 0) return;
  MetricRegistry& reg = global_metrics();
  const char* help = "Bytes sent between the job's processes, per link (step plans, hidden rows, expert rows)";
  const int lead = comm_.world_rank(0);  // links named by job ranks (pp,ep: a stage's group)
  for (size_t r = 1; r < S; ++r) {
    const int w = comm_.world_rank(static_cast<int>(r));
    out_bytes_[r] = reg.counter("sluice_dist_bytes_sent_total", help, fmt::format("link=\"{}->{}\"", lead, w));
    back_bytes_[r] = reg.counter("sluice_dist_bytes_sent_total", help, fmt::format("link=\"{}->{}\"", w, lead));
  }
}

ExpertParallelDriver::~ExpertParallelDriver() = default;

uint64_t ExpertParallelDriver::link_bytes(int src, int dst) const {
  const Counter* c = nullptr;
  if (src == 0 && dst > 0) c = out_bytes_[static_cast<size_t>(dst)];
  if (dst == 0 && src > 0) c = back_bytes_[static_cast<size_t>(src)];
  return c ? static_cast<uint64_t>(c->value()) : 0;
}

Status ExpertParallelDriver::experts(const LayerStep& s, const MoeStep& m) {
  // A worker returns its error and ends (its loop's caller).
  return failure_.guard([&] { return dispatch(s, m); }, /*fail_on_error=*/me_ == 0);
}

void ExpertParallelDriver::predict(int64_t layer, std::span<const int32_t> ids) {
  if (failure_.failed() || me_ != 0 || attention_ != plan::EpAttention::kRank0) return;
  constexpr size_t kHeaderWords = sizeof(ExpertMsgHeader) / sizeof(int32_t);
  for (size_t r = 1; r < read_ahead_.size() && r < shares_.size(); ++r) {
    if (!read_ahead_[r]) continue;
    // Its share of the prediction, each expert once.
    std::vector<int32_t>& msg = pred_msg_[r];
    std::fill(pred_seen_.begin(), pred_seen_.end(), 0);
    msg.resize(kHeaderWords);
    for (const int32_t e : ids) {
      if (e < shares_[r].begin || e >= shares_[r].end || pred_seen_[static_cast<size_t>(e)]) continue;
      pred_seen_[static_cast<size_t>(e)] = 1;
      msg.push_back(e);
    }
    const auto n = static_cast<int64_t>(msg.size() - kHeaderWords);
    if (n == 0) continue;
    msg.resize(kHeaderWords + padded_ids(n), -1);
    const ExpertMsgHeader hd{.kind = kExpertPredict, .layer = static_cast<int32_t>(layer), .n_rows = n};
    std::memcpy(msg.data(), &hd, sizeof hd);
    // Small: sent at once (MPI's eager protocol), so the buffer is free again.
    if (Status st = comm_.send(static_cast<int>(r), kTagControl, msg.data(), msg.size() * sizeof(int32_t),
                               "a routed layer's predicted experts");
        !st.ok()) {
      failure_.fail(st);
      return;
    }
    out_bytes_[r]->add(static_cast<double>(msg.size() * sizeof(int32_t)));
  }
}

void ExpertParallelDriver::copy_kv_blocks(std::span<const BlockCopy> copies) {
  copies_.insert(copies_.end(), copies.begin(), copies.end());
}

Status ExpertParallelDriver::run_step(Model& model, std::span<const ForwardSeq> seqs, KvStore& kv) {
  return failure_.guard([&] { return broadcast_step(model, seqs, kv); });
}

Status ExpertParallelDriver::broadcast_step(Model& model, std::span<const ForwardSeq> seqs, KvStore& kv) {
  // Every rank runs the whole step as one batch.
  micro_ends_.assign(1, static_cast<int32_t>(seqs.size()));
  encode_step(seqs, micro_ends_, copies_, kv, &step_msg_);
  copies_.clear();
  step_sends_.clear();
  for (int r = 1; r < static_cast<int>(n_ranks()); ++r) {
    ASSIGN_OR_RETURN(Pending p, comm_.isend(r, kTagControl, step_msg_.data(), step_msg_.size()));
    step_sends_.push_back(p);
    out_bytes_[static_cast<size_t>(r)]->add(static_cast<double>(step_msg_.size()));
  }
  RETURN_IF_ERROR(model.run_stage(0, seqs.size(), 0, model.step_tokens(), kv));
  for (Pending& p : step_sends_) RETURN_IF_ERROR(comm_.wait(p, "a step's description"));
  return Status();
}

Status ExpertParallelDriver::send_rows(const LayerStep& s, const MoeStep& m) {
  const int64_t k = hp_.n_expert_used, E = hp_.n_embd, n_pairs = s.n_tok * k;
  const size_t row_bytes = static_cast<size_t>(E) * sizeof(float);
  for (size_t r = 1; r < count_.size(); ++r) {
    const int64_t c = count_[r];
    if (c == 0) continue;
    std::vector<uint8_t>& msg = msg_[r];
    msg.resize(message_bytes(c, E));
    const ExpertMsgHeader hd{.kind = kExpertRows, .layer = static_cast<int32_t>(s.layer), .n_rows = c};
    std::memcpy(msg.data(), &hd, sizeof hd);
    auto* ids = reinterpret_cast<int32_t*>(msg.data() + sizeof hd);
    auto* rows = reinterpret_cast<float*>(msg.data() + sizeof hd + padded_ids(c) * sizeof(int32_t));
    int64_t i = 0;
    for (int64_t p = 0; p < n_pairs; ++p) {
      if (owner_[static_cast<size_t>(m.ids[p])] != static_cast<int32_t>(r)) continue;
      ids[i] = m.ids[p];
      std::memcpy(rows + i * E, s.xn + (p / k) * E, row_bytes);
      ++i;
    }
    for (size_t j = static_cast<size_t>(c); j < padded_ids(c); ++j) ids[j] = -1;
    ASSIGN_OR_RETURN(Pending rp, comm_.irecv(static_cast<int>(r), kTagReturn, out_[r].data(), static_cast<size_t>(c) * row_bytes));
    recvs_.push_back(rp);
    ASSIGN_OR_RETURN(Pending sp, comm_.isend(static_cast<int>(r), kTagControl, msg.data(), msg.size()));
    sends_.push_back(sp);
    out_bytes_[r]->add(static_cast<double>(msg.size()));
    back_bytes_[r]->add(static_cast<double>(c) * static_cast<double>(row_bytes));
  }
  return Status();
}

Status ExpertParallelDriver::post_exchange() {
  const size_t row_bytes = static_cast<size_t>(hp_.n_embd) * sizeof(float);
  const auto me = static_cast<size_t>(me_);
  for (size_t q = 0; q < count_.size(); ++q) {
    if (q == me) continue;
    if (count_[me] > 0) {
      ASSIGN_OR_RETURN(Pending sp, comm_.isend(static_cast<int>(q), kTagReturn, out_[me].data(),
                                               static_cast<size_t>(count_[me]) * row_bytes));
      sends_.push_back(sp);
    }
    if (me == 0 && count_[0] > 0) out_bytes_[q]->add(static_cast<double>(count_[0]) * static_cast<double>(row_bytes));
    if (me == 0 && count_[q] > 0) back_bytes_[q]->add(static_cast<double>(count_[q]) * static_cast<double>(row_bytes));
  }
  return Status();
}

Status ExpertParallelDriver::dispatch(const LayerStep& s, const MoeStep& m) {
  const ModelHparams& h = hp_;
  const int64_t n = s.n_tok, k = h.n_expert_used, E = h.n_embd;
  const int64_t n_pairs = n * k;
  const auto S = count_.size();
  const auto me = static_cast<size_t>(me_);
  const bool every = attention_ == plan::EpAttention::kEvery;
  const size_t row_bytes = static_cast<size_t>(E) * sizeof(float);
  ++layers_;
  // Each (token, slot) pair's row in its rank's outputs, in pair order: an
  // expert's rows keep the token order one process gives them.
  std::fill(count_.begin(), count_.end(), 0);
  grow(slot_row_, static_cast<size_t>(n_pairs));
  for (int64_t p = 0; p < n_pairs; ++p) slot_row_[static_cast<size_t>(p)] = count_[static_cast<size_t>(owner_[static_cast<size_t>(m.ids[p])])]++;
  for (size_t r = 0; r < S; ++r) {
    rows_[r] += count_[r];
    grow(out_[r], static_cast<size_t>(count_[r] * E));
  }
  sends_.clear();
  recvs_.clear();
  if (every) {  // the other ranks' outputs, received as they come
    for (size_t q = 0; q < S; ++q) {
      if (q == me || count_[q] == 0) continue;
      ASSIGN_OR_RETURN(Pending rp, comm_.irecv(static_cast<int>(q), kTagReturn, out_[q].data(),
                                               static_cast<size_t>(count_[q]) * row_bytes));
      recvs_.push_back(rp);
    }
  } else {  // the other ranks' rows, sent first so they compute while rank 0 does
    RETURN_IF_ERROR(send_rows(s, m));
  }
  // This rank's own experts: one row per pair, weight 1 (the output is the expert's exactly).
  if (const int64_t c = count_[me]; c > 0) {
    grow(xme_, static_cast<size_t>(c * E));
    grow(ids_me_, static_cast<size_t>(c));
    if (ones_.size() < static_cast<size_t>(c)) ones_.resize(static_cast<size_t>(c), 1.0f);
    int64_t i = 0;
    for (int64_t p = 0; p < n_pairs; ++p) {
      if (owner_[static_cast<size_t>(m.ids[p])] != me_) continue;
      ids_me_[static_cast<size_t>(i)] = m.ids[p];
      std::memcpy(xme_.data() + i * E, s.xn + (p / k) * E, row_bytes);
      ++i;
    }
    s.be.expert_ffn({.x = xme_.data(), .out = out_[me].data(), .ids = ids_me_.data(), .weights = ones_.data(),
                     .n_tok = c, .n_used = 1, .n_embd = E, .n_ff = h.n_ff_expert, .act = h.spec->act,
                     .experts = m.experts});
  }
  if (every) RETURN_IF_ERROR(post_exchange());
  // The shared expert over every token, as the backend's expert_ffn runs it.
  const LayerWeights& w = s.w;
  const bool has_shared = w.has_mat(TensorRole::kFfnGateShexp);
  if (has_shared) {
    grow(sh_gate_, static_cast<size_t>(n * h.n_ff_shared));
    grow(sh_up_, static_cast<size_t>(n * h.n_ff_shared));
    grow(sh_y_, static_cast<size_t>(n * E));
    const MatmulOut gate_up[2] = {{w.mat(TensorRole::kFfnGateShexp), sh_gate_.data()},
                                  {w.mat(TensorRole::kFfnUpShexp), sh_up_.data()}};
    s.be.matmul(gate_up, s.xn, E, n);
    s.be.glu_matmul({.gate = sh_gate_.data(), .up = sh_up_.data(), .n_ff = h.n_ff_shared, .n_tok = n, .act = h.spec->act,
                     .out = {w.mat(TensorRole::kFfnDownShexp), sh_y_.data()}});
  }
  for (Pending& p : recvs_) RETURN_IF_ERROR(comm_.wait(p, "the outputs of a rank's experts"));
  for (Pending& p : sends_) RETURN_IF_ERROR(comm_.wait(p, every ? "a routed layer's outputs" : "a routed layer's rows"));
  // out[t] = sum over slots in order of weight x expert output, then the
  // gated shared expert: the CPU backend's expert_ffn, term by term.
  const float* shared_gate = w.vec(TensorRole::kFfnSharedGate);
  for (int64_t t = 0; t < n; ++t) {
    float* o = s.proj + t * E;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t p = t * k + j;
      const float wt = m.weights[p];
      const float* y = out_[static_cast<size_t>(owner_[static_cast<size_t>(m.ids[p])])].data() +
                       slot_row_[static_cast<size_t>(p)] * E;
      if (j == 0) {
        for (int64_t i = 0; i < E; ++i) o[i] = wt * y[i];
      } else {
        for (int64_t i = 0; i < E; ++i) o[i] += wt * y[i];
      }
    }
    if (has_shared) {
      const float g = shared_gate ? shared_gate_weight(shared_gate, s.xn + t * E, E) : 1.0f;
      const float* y = sh_y_.data() + t * E;
      for (int64_t i = 0; i < E; ++i) o[i] += g * y[i];
    }
  }
  s.be.add(s.x, s.proj, n * E);
  return Status();
}

Status ExpertParallelDriver::shutdown() {
  if (failure_.failed()) return failure_.status();
  const ExpertMsgHeader hd{.kind = kExpertShutdown};
  if (attention_ == plan::EpAttention::kEvery) encode_shutdown(&step_msg_);
  const void* data = attention_ == plan::EpAttention::kEvery ? static_cast<const void*>(step_msg_.data()) : &hd;
  const size_t bytes = attention_ == plan::EpAttention::kEvery ? step_msg_.size() : sizeof hd;
  for (int r = 1; r < n_ranks(); ++r) RETURN_IF_ERROR(comm_.send(r, kTagControl, data, bytes, "the end of the job"));
  return Status();
}

Status run_expert_worker_loop(Comm& comm, Model& model, plan::ExpertRange mine) {
  const ModelHparams& h = model.hparams();
  const int64_t E = h.n_embd;
  std::vector<uint8_t> msg;
  std::vector<float> out;
  std::vector<float> ones;
  for (;;) {
    RETURN_IF_ERROR(comm.recv_message(0, kTagControl, &msg, "a routed layer's rows", /*timeout=*/0));
    ExpertMsgHeader hd;
    if (msg.size() < sizeof hd) return data_loss("an expert message of {} bytes is shorter than its header", msg.size());
    std::memcpy(&hd, msg.data(), sizeof hd);
    if (hd.kind == kExpertShutdown) return Status();
    const bool its_layer = hd.layer >= model.layer_begin() && hd.layer < model.layer_end() && h.layer_is_moe(hd.layer);
    if (hd.kind == kExpertPredict) {  // read ahead; no answer
      const size_t bytes = sizeof hd + padded_ids(hd.n_rows) * sizeof(int32_t);
      if (hd.n_rows <= 0 || hd.n_rows > h.n_expert || !its_layer || msg.size() != bytes)
        return data_loss("a malformed expert prediction (layer {}, {} experts, {} bytes)", hd.layer, hd.n_rows,
                         msg.size());
      const auto* ids = reinterpret_cast<const int32_t*>(msg.data() + sizeof hd);
      for (int64_t i = 0; i < hd.n_rows; ++i)
        if (ids[i] < mine.begin || ids[i] >= mine.end)
          return data_loss("rank 0 predicted expert {}, which is not this rank's ({}-{})", ids[i], mine.begin,
                           mine.end - 1);
      model.predict_experts(hd.layer, std::span(ids, static_cast<size_t>(hd.n_rows)));
      continue;
    }
    if (hd.kind != kExpertRows || hd.n_rows <= 0 || !its_layer || msg.size() != message_bytes(hd.n_rows, E))
      return data_loss("a malformed expert message (kind {}, layer {}, {} rows, {} bytes)", hd.kind, hd.layer,
                       hd.n_rows, msg.size());
    const auto* ids = reinterpret_cast<const int32_t*>(msg.data() + sizeof hd);
    const auto* rows = reinterpret_cast<const float*>(msg.data() + sizeof hd + padded_ids(hd.n_rows) * sizeof(int32_t));
    for (int64_t i = 0; i < hd.n_rows; ++i)
      if (ids[i] < mine.begin || ids[i] >= mine.end)
        return data_loss("rank 0 sent rows for expert {}, which is not this rank's ({}-{})", ids[i], mine.begin,
                         mine.end - 1);
    RETURN_IF_ERROR(model.acquire_layer(hd.layer).status());
    // Resident, or streamed from this rank's disk under its --mem-budget:
    // the experts the rows name, landed in its store's slots.
    StatusOr<std::span<const ExpertWeights>> experts =
        model.landed_experts(hd.layer, std::span(ids, static_cast<size_t>(hd.n_rows)));
    if (!experts.ok()) {
      model.release_layer(hd.layer);
      return experts.status();
    }
    grow(out, static_cast<size_t>(hd.n_rows * E));
    if (ones.size() < static_cast<size_t>(hd.n_rows)) ones.resize(static_cast<size_t>(hd.n_rows), 1.0f);
    model.backend().expert_ffn({.x = rows, .out = out.data(), .ids = ids, .weights = ones.data(), .n_tok = hd.n_rows,
                                .n_used = 1, .n_embd = E, .n_ff = h.n_ff_expert, .act = h.spec->act,
                                .experts = *experts});
    model.release_layer(hd.layer);
    RETURN_IF_ERROR(comm.send(0, kTagReturn, out.data(), static_cast<size_t>(hd.n_rows * E) * sizeof(float),
                              "a routed layer's expert outputs"));
  }
}

Status run_replica_worker_loop(Comm& comm, Model& model) {
  std::vector<uint8_t> msg;
  std::vector<ForwardSeq> seqs;
  std::optional<KvStore> kv;
  for (;;) {
    ASSIGN_OR_RETURN(const std::optional<StepView> step, receive_step(comm, model, &msg, &kv, &seqs));
    if (!step) return Status();
    for (ForwardSeq& s : seqs) s.n_logits = 0;  // rank 0 computes the logits
    RETURN_IF_ERROR(model.begin_step(seqs, *kv, /*embed=*/true));
    RETURN_IF_ERROR(model.run_stage(0, seqs.size(), 0, model.step_tokens(), *kv));
    RETURN_IF_ERROR(model.finish_step(nullptr));  // no logits: the step's end for a weight store
  }
}

}  // namespace sluice::dist
