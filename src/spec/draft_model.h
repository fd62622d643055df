// DraftModel: drafts with a smaller model that shares the target's vocabulary.
//
// The draft model is kept resident (its weights never stream) with its own
// paged KV cache. For each task it remembers which tokens its cache holds; a
// round first catches up (the longest common prefix with the task's committed
// tokens is kept, the rest computed), which also rolls back rejected drafts and
// follows preemption, then runs k - 1 single-token steps:
//
//   cache holds   t0 .. tj-1                  (common prefix with the committed tokens)
//   catch up      tj .. tL-1   -> logits -> d1
//   step 1        d1           -> logits -> d2
//   ...
//   step k-1      dk-1         -> logits -> dk      cache now holds t0..tL-1 d1..dk-1
//
// Every round is one batched forward pass over all tasks (catch-up pieces longer
// than the batch are split). Drafts are the draft model's argmax, or draws from
// the task's sampler (probs filled). A task whose cache does not fit the pool
// gets an empty draft.
//
// A draft model with a sliding window on every layer releases the blocks wholly
// behind the window of its next query, as the target's KV manager does: after a
// round's catch-up, those before position len - window + 1 (len: the task's
// committed tokens, which a later round does not roll back past; one that does
// recomputes the task from its first token). Its blocks in use stay flat in a
// long generation.
// Not thread-safe: engine thread only.
#pragma once

#include <memory>
#include <unordered_map>

#include "format/model_file.h"
#include "kv/kv_store.h"
#include "model/model.h"
#include "spec/proposer.h"
#include "tokenizer/tokenizer.h"

namespace sluice::spec {

struct DraftModelConfig {
  std::string path;           // GGUF file or HF folder
  int n_threads = 0;          // <= 0: one per core (unused with a backend)
  std::shared_ptr<Backend> backend;  // the target's backend, shared (null: a CPU backend of its own)
  int64_t n_batch = 512;      // tokens per forward pass
  int64_t max_seqs = 64;      // sequences per forward pass
  int64_t n_ctx = 4096;       // longest sequence
  int64_t kv_tokens = 0;      // KV pool capacity in tokens; 0: max_seqs x n_ctx / 4, at least n_ctx
};

class DraftModel : public Proposer {
 public:
  // Loads the model (load_model). Errors: unreadable file, a vocabulary that
  // differs from the target's (size or any token's text).
  static StatusOr<std::unique_ptr<DraftModel>> create(const DraftModelConfig& config, const Tokenizer& target_vocab);

  std::string describe() const override;
  bool draws_from_sampler() const override { return true; }
  Status propose(std::span<DraftTask> tasks) override;
  void release(SeqId seq) override;
  ProposeCost last_cost() const override { return cost_; }

  const Model& model() const { return *model_; }
  // The draft cache's block accounting (blocks in use, ...).
  BlockStats kv_stats() const { return blocks_->stats(); }

 private:
  struct SeqState {
    std::vector<int32_t> cached;  // tokens whose K/V rows are in the cache
  };
  DraftModel() = default;
  // Picks the next draft of task t from a logits row, into draft slot i.
  int32_t pick(DraftTask& t, int32_t i, const float* logits);
  // Frees other sequences' caches until n_needed blocks are available.
  void make_room(int64_t n_needed, std::span<const DraftTask> tasks);

  DraftModelConfig config_;
  std::string name_;
  std::unique_ptr<Model> model_;
  KvStore kv_;
  std::unique_ptr<BlockManager> blocks_;
  std::unordered_map<SeqId, SeqState> seqs_;
  std::unique_ptr<Buffer> logits_;  // [max_seqs, n_vocab] floats, from Backend::alloc_host
  std::vector<ForwardSeq> fseqs_;
  std::vector<int32_t> owner_;    // task index of each fseq
  std::vector<int32_t> one_;      // [max_seqs] the single token each task feeds in a step
  ProposeCost cost_;
  std::vector<int64_t> from_;     // [tasks] per-call scratch: first token each task computes
};

}  // namespace sluice::spec
