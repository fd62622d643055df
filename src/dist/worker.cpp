#include "dist/worker.h"

#include <cstring>
#include <optional>
#include <vector>

#include "dist/protocol.h"
#include "kv/kv_store.h"

namespace sluice::dist {

StatusOr<std::optional<StepView>> receive_step(Comm& comm, Model& model, std::vector<uint8_t>* msg,
                                               std::optional<KvStore>* kv, std::vector<ForwardSeq>* seqs) {
  RETURN_IF_ERROR(comm.recv_message(0, kTagControl, msg, "a step", /*timeout=*/0));
  ASSIGN_OR_RETURN(const StepView v, decode_step(*msg));
  if (v.h.kind == static_cast<int32_t>(StepKind::kShutdown)) return std::optional<StepView>();
  const StepHeader& h = v.h;
  if (!*kv || (*kv)->n_blocks() != h.kv_blocks || static_cast<int32_t>((*kv)->layout().dtype) != h.kv_dtype ||
      (*kv)->layout().block_size != h.kv_block_size) {
    kv->reset();
    ASSIGN_OR_RETURN(KvStore store, model.backend().create_kv(
                                        model.kv_layout(static_cast<KvDtype>(h.kv_dtype), h.kv_block_size),
                                        h.kv_blocks));
    kv->emplace(std::move(store));
  }
  for (size_t i = 0; i + 1 < v.copies.size(); i += 2) model.backend().copy_kv_block(**kv, v.copies[i], v.copies[i + 1]);
  seqs->clear();
  size_t tok = 0, tab = 0;
  for (const StepSeq& s : v.seqs) {
    seqs->push_back(ForwardSeq{.tokens = v.tokens.subspan(tok, static_cast<size_t>(s.n_tokens)), .pos0 = s.pos0,
                               .block_table = v.tables.subspan(tab, static_cast<size_t>(s.n_blocks)),
                               .n_logits = s.n_logits});
    tok += static_cast<size_t>(s.n_tokens);
    tab += static_cast<size_t>(s.n_blocks);
  }
  return std::optional<StepView>(v);
}

Status run_worker_loop(Comm& comm, Model& model, int n_stages) {
  const int rank = comm.rank();
  const bool last = rank == n_stages - 1;
  const int64_t n_embd = model.hparams().n_embd;
  const size_t row_bytes = static_cast<size_t>(n_embd) * sizeof(float);
  std::vector<uint8_t> msg;
  std::vector<ForwardSeq> seqs;
  std::vector<float> ret;  // [n_logits, n_embd] the last stage's rows back
  std::vector<Pending> sends;
  std::optional<KvStore> kv;
  for (;;) {
    ASSIGN_OR_RETURN(const std::optional<StepView> step, receive_step(comm, model, &msg, &kv, &seqs));
    if (!step) return Status();
    const StepView& v = *step;
    RETURN_IF_ERROR(model.begin_step(seqs, *kv, /*embed=*/false));
    const std::span<const int64_t> logit_rows = model.logit_rows();
    if (last && ret.size() < logit_rows.size() * static_cast<size_t>(n_embd))
      ret.resize(logit_rows.size() * static_cast<size_t>(n_embd));
    float* x = model.hidden();
    sends.clear();
    int64_t t0 = 0, k = 0;
    size_t s0 = 0;
    for (const int32_t end : v.micro_ends) {
      int64_t n_mb = 0, nl = 0;
      for (size_t i = s0; i < static_cast<size_t>(end); ++i) {
        n_mb += static_cast<int64_t>(seqs[i].tokens.size());
        nl += seqs[i].n_logits;
      }
      RETURN_IF_ERROR(comm.recv(rank - 1, kTagHidden, x + t0 * n_embd, static_cast<size_t>(n_mb) * row_bytes,
                                "a micro-batch's hidden rows"));
      RETURN_IF_ERROR(model.run_stage(s0, static_cast<size_t>(end), t0, n_mb, *kv));
      if (!last) {
        ASSIGN_OR_RETURN(Pending p, comm.isend(rank + 1, kTagHidden, x + t0 * n_embd,
                                               static_cast<size_t>(n_mb) * row_bytes));
        sends.push_back(p);
      } else if (nl > 0) {
        for (int64_t j = 0; j < nl; ++j)
          std::memcpy(ret.data() + (k + j) * n_embd, x + logit_rows[static_cast<size_t>(k + j)] * n_embd, row_bytes);
        ASSIGN_OR_RETURN(Pending p, comm.isend(0, kTagReturn, ret.data() + k * n_embd, static_cast<size_t>(nl) * row_bytes));
        sends.push_back(p);
      }
      k += nl;
      t0 += n_mb;
      s0 = static_cast<size_t>(end);
    }
    for (Pending& p : sends) RETURN_IF_ERROR(comm.wait(p, "a step's send"));
  }
}

}  // namespace sluice::dist
