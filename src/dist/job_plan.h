// The job's plan as sluice prints it: the planners' inputs read from the
// model file (plan/pipeline_plan.h, plan/expert_parallel_plan.h) and the
// placement map of a plan with its predicted steps. Rank 0 prints the map at
// load with the ranks' measured rates and links (session.h); `sluice plan
// parallel` prints the same map for the ranks and links it is given, so what
// it predicts is what a job of those ranks would print.
//
// Pure functions of their arguments; the inputs come back without ranks or
// links (the caller adds them).
#pragma once

#include <cstdint>
#include <string>

#include "format/model_file.h"
#include "model/hparams.h"
#include "plan/expert_parallel_plan.h"
#include "plan/pipeline_expert_plan.h"
#include "plan/pipeline_plan.h"

namespace sluice::dist {

// The pipeline planner's per-layer figures: bytes held and FLOPs per token
// (routed experts at the share a token uses), and rank 0's head beside them.
plan::PipelineInputs pipeline_inputs(const ModelFile& file, const ModelHparams& hp);
// The expert planner's: one expert's bytes and FLOPs per row, and the rest
// of the model's (rank 0's).
plan::ExpertParallelInputs expert_parallel_inputs(const ModelFile& file, const ModelHparams& hp);
// The KV pool rank 0's engine holds by default (engine/kv_pool.cpp without
// --kv-budget-mib: a context of n_ctx positions, or the window's, for
// max(1, max_seqs / 4) sequences at the model's default KV type, at most
// 4 GiB), which every rank mirrors with attention on every rank. n_ctx:
// n_ctx_max, else the trained context capped at ctx_cap (load_model's rule).
uint64_t ep_kv_bytes(const ModelFile& file, const ModelHparams& hp, int64_t n_ctx_max, int64_t ctx_cap,
                     int64_t max_seqs);
// Both, with which layers are routed, for --parallel pp,ep of ep_size ranks a stage.
plan::PipelineExpertInputs pipeline_expert_inputs(const ModelFile& file, const ModelHparams& hp, int64_t ep_size);

// What a plan predicts: one decode token and one prefill step of n_batch
// tokens (the load's batch), the links' share of decode.
struct PredictedSteps {
  double decode_s = 0;
  double decode_network_s = 0;  // of decode_s, on the links
  double decode_disk_s = 0;     // of decode_s, ranks waiting on their disks (pp: stages; ep: routed layers)
  int64_t prefill_tokens = 0;
  double prefill_s = 0;         // one prompt of prefill_tokens, cut into micro_batches
  int64_t micro_batches = 1;    // pp: the plan's best cut (PipelineDriver::pieces); ep: 1
};
// micro_batches: a step's prefill cut as --micro-batches fixes it (0: the plan's best).
PredictedSteps predicted_steps(const plan::PipelinePlan& p, int64_t n_batch, int64_t micro_batches = 0);
PredictedSteps predicted_steps(const plan::ExpertParallelPlan& p, int64_t n_batch);
PredictedSteps predicted_steps(const plan::PipelineExpertPlan& p, int64_t n_batch);

// The placement map: a row per rank (host, layers or experts, tier, weights
// held in memory, memory cap, rates, link to rank 0), a line per rank that
// streams (which layers stay resident, which stream, its disk rate), (ep)
// where attention runs and why, then the predicted steps with their network
// and disk legs. `in` holds
// the ranks the pipeline plan was made for.
std::string pipeline_map(const plan::PipelinePlan& p, const plan::PipelineInputs& in, int64_t n_batch,
                         int64_t micro_batches = 0);
std::string expert_parallel_map(const plan::ExpertParallelPlan& p, int64_t n_batch);
// pp,ep: a row per job rank (its stage, the stage's layers, its experts).
std::string pipeline_expert_map(const plan::PipelineExpertPlan& p, int64_t n_batch);

}  // namespace sluice::dist
