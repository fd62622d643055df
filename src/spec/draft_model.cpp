#include "spec/draft_model.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/check.h"
#include "base/timer.h"
#include "runtime/load_model.h"

namespace sluice::spec {
namespace {

int32_t argmax(const float* row, int64_t n) {
  int32_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (row[i] > row[best]) best = static_cast<int32_t>(i);
  return best;
}

}  // namespace

StatusOr<std::unique_ptr<DraftModel>> DraftModel::create(const DraftModelConfig& config,
                                                         const Tokenizer& target_vocab) {
  if (config.n_batch < 1 || config.max_seqs < 1 || config.n_ctx < 2) {
    return invalid_argument("draft model: batch {}, sequences {} and context {} must be positive", config.n_batch,
                            config.max_seqs, config.n_ctx);
  }
  std::unique_ptr<DraftModel> d(new DraftModel());
  d->config_ = config;
  ASSIGN_OR_RETURN(LoadedModel lm, load_model(config.path, {.n_threads = config.n_threads,
                                                            .n_batch = config.n_batch,
                                                            .n_ctx_max = config.n_ctx,
                                                            .max_seqs = config.max_seqs,
                                                            .shared_backend = config.backend}));
  const std::unique_ptr<Tokenizer>& tok = lm.tokenizer;
  if (tok->n_vocab() != target_vocab.n_vocab()) {
    return invalid_argument("draft model {}: vocabulary of {} tokens, the target has {}", config.path,
                            tok->n_vocab(), target_vocab.n_vocab());
  }
  for (int32_t id = 0; id < tok->n_vocab(); ++id) {
    if (tok->token_text(id) != target_vocab.token_text(id)) {
      return invalid_argument("draft model {}: token {} is '{}', the target's is '{}'", config.path, id,
                              tok->token_text(id), target_vocab.token_text(id));
    }
  }
  d->model_ = std::move(lm.model);
  if (d->model_->hparams().n_vocab != target_vocab.n_vocab()) {
    return invalid_argument("draft model {}: {} logits per token for a vocabulary of {}", config.path,
                            d->model_->hparams().n_vocab, target_vocab.n_vocab());
  }
  d->name_ = lm.name;
  const KvLayout layout = d->model_->kv_layout(d->model_->default_kv_dtype());
  const int64_t kv_tokens =
      config.kv_tokens > 0 ? config.kv_tokens : std::max(config.n_ctx, config.max_seqs * config.n_ctx / 4);
  const int64_t n_blocks = (kv_tokens + layout.block_size - 1) / layout.block_size;
  ASSIGN_OR_RETURN(d->kv_, d->model_->backend().create_kv(layout, n_blocks));
  // With a window on every layer, blocks wholly behind it are released as the
  // target's are (the model skips table entries before a query's window).
  d->blocks_ = std::make_unique<BlockManager>(BlockManagerConfig{.n_blocks = n_blocks,
                                                                 .block_size = layout.block_size,
                                                                 .enable_prefix_caching = false,
                                                                 .window = d->model_->hparams().kv_window()});
  d->logits_ = d->model_->backend().alloc_host(static_cast<size_t>(config.max_seqs * d->model_->hparams().n_vocab) *
                                               sizeof(float));
  d->fseqs_.reserve(static_cast<size_t>(config.max_seqs));
  d->owner_.reserve(static_cast<size_t>(config.max_seqs));
  d->one_.resize(static_cast<size_t>(config.max_seqs));
  return d;
}

std::string DraftModel::describe() const {
  return fmt::format("draft model {} ({:.1f} MiB of weights, KV {} blocks{})", name_,
                     static_cast<double>(model_->weight_bytes()) / (1 << 20), kv_.n_blocks(),
                     blocks_->window() > 0
                         ? fmt::format(", sliding window {}: blocks behind it freed", blocks_->window())
                         : "");
}

void DraftModel::release(SeqId seq) {
  seqs_.erase(seq);
  if (blocks_->has_seq(seq)) CHECK(blocks_->free(seq).ok());
}

void DraftModel::make_room(int64_t n_needed, std::span<const DraftTask> tasks) {
  if (blocks_->pool().n_available() >= n_needed) return;
  std::vector<SeqId> idle;
  for (const auto& [id, st] : seqs_) {
    const bool busy = std::any_of(tasks.begin(), tasks.end(), [&](const DraftTask& t) { return t.seq == id; });
    if (!busy) idle.push_back(id);
  }
  for (const SeqId id : idle) {
    if (blocks_->pool().n_available() >= n_needed) return;
    release(id);
  }
}

int32_t DraftModel::pick(DraftTask& t, int32_t i, const float* logits) {
  const int64_t n_vocab = model_->hparams().n_vocab;
  if (t.sampler && t.probs) {
    float* row = t.probs + static_cast<int64_t>(i) * n_vocab;
    t.sampler->distribution(logits, row);
    return t.sampler->sample_from(row);
  }
  return argmax(logits, n_vocab);
}

Status DraftModel::propose(std::span<DraftTask> tasks) {
  const int64_t n_vocab = model_->hparams().n_vocab;
  const int64_t bs = blocks_->block_size();
  // 1. Per task: keep the common prefix of the cache, reserve the rest.
  std::vector<int64_t>& from = from_;  // first token to compute; -1: no draft for this task
  from.assign(tasks.size(), -1);
  for (size_t ti = 0; ti < tasks.size(); ++ti) {
    DraftTask& t = tasks[ti];
    t.draft->clear();
    const int64_t len = static_cast<int64_t>(t.tokens.size());
    if (t.max_draft < 1 || len < 1 || len + t.max_draft - 1 > config_.n_ctx) continue;
    SeqState& st = seqs_[t.seq];
    const size_t n_common = static_cast<size_t>(
        std::mismatch(st.cached.begin(), st.cached.end(), t.tokens.begin(), t.tokens.end()).first - st.cached.begin());
    int64_t keep = std::min<int64_t>(static_cast<int64_t>(n_common), len - 1);
    const int64_t n_released = blocks_->has_seq(t.seq) ? blocks_->n_released(t.seq) : 0;
    if (n_released > 0 && keep - blocks_->window() + 1 < n_released * bs) {
      // Rolled back so far that the first query's window reaches released
      // blocks (preemption, a rollback into the prompt): start over.
      CHECK(blocks_->free(t.seq).ok());
      st.cached.clear();
      keep = 0;
    }
    const int64_t n_blocks = (len + t.max_draft - 1 + bs - 1) / bs;
    make_room(n_blocks, tasks);
    if (blocks_->has_seq(t.seq)) {
      CHECK(blocks_->truncate(t.seq, keep).ok());
      if (!blocks_->can_append(t.seq, len + t.max_draft - 1 - keep)) {
        release(t.seq);
        continue;
      }
      CHECK(blocks_->append(t.seq, t.tokens.subspan(static_cast<size_t>(keep))).ok());
    } else {
      if (blocks_->pool().n_available() < n_blocks) {
        seqs_.erase(t.seq);
        continue;
      }
      CHECK(blocks_->allocate(t.seq, t.tokens).ok());
    }
    st.cached.assign(t.tokens.begin(), t.tokens.end());
    from[ti] = keep;
  }

  cost_ = ProposeCost{};
  const double t_catch_up = now_seconds();
  for (size_t ti = 0; ti < tasks.size(); ++ti) {
    if (from[ti] >= 0) {
      cost_.catch_up_tokens =
          std::max<int64_t>(cost_.catch_up_tokens, static_cast<int64_t>(tasks[ti].tokens.size()) - from[ti]);
    }
  }
  // 2. Catch up: tokens from[ti] .. len - 1 of every task, in passes of at most
  // n_batch tokens and max_seqs pieces (a long piece is split; only the piece
  // that ends at the last token asks for logits, which give d1).
  fseqs_.clear();
  owner_.clear();
  int64_t n_in_pass = 0;
  auto run_pass = [&]() -> Status {
    if (fseqs_.empty()) return Status::ok_status();
    RETURN_IF_ERROR(model_->forward(fseqs_, kv_, logits_->floats()));
    int64_t row = 0;
    for (size_t i = 0; i < fseqs_.size(); ++i) {
      if (fseqs_[i].n_logits == 0) continue;
      DraftTask& t = tasks[static_cast<size_t>(owner_[i])];
      t.draft->push_back(pick(t, 0, logits_->floats() + row++ * n_vocab));
    }
    fseqs_.clear();
    owner_.clear();
    n_in_pass = 0;
    return Status::ok_status();
  };
  for (size_t ti = 0; ti < tasks.size(); ++ti) {
    if (from[ti] < 0) continue;
    const DraftTask& t = tasks[ti];
    const int64_t len = static_cast<int64_t>(t.tokens.size());
    for (int64_t b = from[ti]; b < len;) {
      if (n_in_pass == config_.n_batch || static_cast<int64_t>(fseqs_.size()) == config_.max_seqs ||
          (!owner_.empty() && owner_.back() == static_cast<int32_t>(ti))) {
        RETURN_IF_ERROR(run_pass());
      }
      const int64_t e = std::min(len, b + (config_.n_batch - n_in_pass));
      fseqs_.push_back(ForwardSeq{.tokens = t.tokens.subspan(static_cast<size_t>(b), static_cast<size_t>(e - b)),
                                  .pos0 = b,
                                  .block_table = blocks_->block_table(t.seq),
                                  .n_logits = e == len ? 1 : 0});
      owner_.push_back(static_cast<int32_t>(ti));
      n_in_pass += e - b;
      b = e;
    }
  }
  RETURN_IF_ERROR(run_pass());
  cost_.catch_up_s = now_seconds() - t_catch_up;
  // The committed tokens have K/V now and are never rolled back past (a
  // rollback that would be starts over, above), so with a window the blocks
  // wholly before the next round's first query's window can go. Drafts are
  // left out: they may be rejected, and the query after a rejection reads the
  // window ending at the last committed token.
  for (size_t ti = 0; ti < tasks.size(); ++ti) {
    if (from[ti] >= 0) CHECK(blocks_->mark_computed(tasks[ti].seq, static_cast<int64_t>(tasks[ti].tokens.size())).ok());
  }

  // 3. Single-token steps: feed d_r, draw d_{r+1}.
  const double t_steps = now_seconds();
  for (int32_t r = 1;; ++r) {
    fseqs_.clear();
    owner_.clear();
    for (size_t ti = 0; ti < tasks.size(); ++ti) {
      DraftTask& t = tasks[ti];
      if (from[ti] < 0 || t.max_draft <= r || static_cast<int32_t>(t.draft->size()) != r) continue;
      if (static_cast<int64_t>(fseqs_.size()) == config_.max_seqs) break;
      const int32_t d = t.draft->back();
      CHECK(blocks_->append(t.seq, std::span<const int32_t>(&d, 1)).ok());
      seqs_[t.seq].cached.push_back(d);
      one_[fseqs_.size()] = d;
      owner_.push_back(static_cast<int32_t>(ti));
      fseqs_.push_back(ForwardSeq{});
    }
    if (fseqs_.empty()) break;
    for (size_t i = 0; i < fseqs_.size(); ++i) {
      const DraftTask& t = tasks[static_cast<size_t>(owner_[i])];
      fseqs_[i] = ForwardSeq{.tokens = std::span<const int32_t>(&one_[i], 1),
                             .pos0 = static_cast<int64_t>(t.tokens.size()) + r - 1,
                             .block_table = blocks_->block_table(t.seq),
                             .n_logits = 1};
    }
    RETURN_IF_ERROR(model_->forward(fseqs_, kv_, logits_->floats()));
    for (size_t i = 0; i < fseqs_.size(); ++i) {
      DraftTask& t = tasks[static_cast<size_t>(owner_[i])];
      t.draft->push_back(pick(t, r, logits_->floats() + static_cast<int64_t>(i) * n_vocab));
    }
    ++cost_.n_steps;
  }
  cost_.steps_s = now_seconds() - t_steps;
  return Status::ok_status();
}

}  // namespace sluice::spec
