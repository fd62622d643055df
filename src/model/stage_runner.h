// StageRunner: how a model split into pipeline stages runs a step's layers.
//
// A Model with a stage runner (Model::set_stage_runner) still embeds the
// tokens and computes the logits itself; between the two it hands the step to
// the runner, which runs the model's own layer range (Model::run_stage, per
// micro-batch) and the stages that other processes hold (dist/pipeline.h),
// and returns once the hidden rows that ask for logits (Model::logit_rows)
// hold the state after the last layer.
//
//   forward(seqs) = pieces = runner.pieces(model, seqs)
//                   -> begin_step(pieces, embed) -> runner.run_step(model, pieces, kv)
//                   -> finish_step(logits)
//
// Called on the model's forward() thread only.
#pragma once

#include <span>

#include "kv/block_manager.h"
#include "sluice/status.h"

namespace sluice {

class KvStore;
class Model;
struct ForwardSeq;

class StageRunner {
 public:
  virtual ~StageRunner() = default;
  // The step begun on `model` (Model::begin_step), through every layer.
  // Errors: a stage failed or did not answer in time (the step's KV rows are
  // then undefined; the caller fails the step).
  virtual Status run_step(Model& model, std::span<const ForwardSeq> seqs, KvStore& kv) = 0;
  // The step's sequences as the runner will run them, before the model lays
  // the step out: a runner that ends micro-batches inside a sequence returns
  // it in pieces (the same sequence at consecutive positions, its logits in
  // the last piece; at most model.max_seqs() in all), valid until the next
  // call. Default: as they are.
  virtual std::span<const ForwardSeq> pieces(const Model& model, std::span<const ForwardSeq> seqs) { return seqs; }
  // Copy-on-write block copies the caller just made in its KV pool (before
  // the next run_step): the other stages make them in theirs.
  virtual void copy_kv_blocks(std::span<const BlockCopy> copies) {}
};

}  // namespace sluice
