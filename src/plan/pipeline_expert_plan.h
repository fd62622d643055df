// Pipeline and expert parallelism in one job (--parallel pp,ep --ep-size E):
// the job's N = P x E ranks are P pipeline stages of E ranks each.
//
//   job rank:   0   1  ..  E-1 | E  E+1 .. 2E-1 | ... | (P-1)E .. PE-1
//   stage:      0              | 1              | ... | P-1
//   role:       lead  experts  | lead  experts  | ... | lead  experts
//
// Stage g's lead (job rank g x E) runs the stage's layers as a pipeline
// stage does (pipeline_plan.h; stage 0's lead is rank 0, which also holds
// the head and does everything else), and holds the first share of each of
// its routed layers' experts; its other E - 1 ranks hold the other shares of
// those layers' experts alone (expert_parallel_plan.h, within the stage).
//
// The plan, in two steps (no search over both at once):
//   1. the cut: plan_pipeline() over the P leads, each layer counted as its
//      lead holds and computes it: the layer's non-expert weights and the
//      lead's share of its experts (bytes and FLOPs);
//   2. per stage: plan_expert_parallel() over the stage's routed layers and
//      its group's E ranks, the lead holding the stage's non-expert part.
// A rank whose part does not fit its --mem-budget streams its share's
// experts from its own disk, as under --parallel ep: in step 1 a lead's range
// is fitted as pipeline_plan.h fits a routed range (its layers' dense parts
// resident, a pool of at least one routed layer's share of slots, its
// expert count E_0 = its share), in step 2 every rank's share as
// expert_parallel_plan.h streams one (the lead routes and reads ahead, the
// other ranks read what they are sent). A part that fits neither way is
// refused, naming the rank and the sizes. Links between
// ranks other than rank 0 are taken to be like their links to rank 0 (the
// job probes those only).
//
// A step of n tokens (one micro-batch): the stages' times, each its expert
// plan's step (its dense part, then per routed layer the slowest rank of
// its group with that rank's round trip), plus the pipeline's hops:
//
//   step = sum_g experts_g.step_s(n) + sum_g pipeline.hop_s(g, n)
//
// Pure functions: no measuring here.
#pragma once

#include <cstdint>
#include <vector>

#include "plan/expert_parallel_plan.h"
#include "plan/pipeline_plan.h"
#include "sluice/status.h"

namespace sluice::plan {

struct PipelineExpertInputs {
  PipelineInputs layers;            // the model's per-layer figures (whole layers, every expert); ranks, links unused
  ExpertParallelInputs experts;     // the model's expert figures (every routed layer); ranks, links unused
  std::vector<uint8_t> routed;      // [n_layer] 1: the layer's FFN is routed experts
  int64_t ep_size = 0;              // E: ranks per stage
  std::vector<RankResources> ranks; // [P x E] the job's ranks
  std::vector<LinkFigures> links;   // [P x E] links[r]: rank 0 <-> rank r (links[0] unused)
};

struct PipelineExpertPlan {
  int64_t ep_size = 0;
  PipelineInputs lead_inputs;              // step 1's inputs: the leads' layers and ranks
  PipelinePlan pipeline;                   // the cut: stage g = the leads' rank g
  std::vector<ExpertParallelPlan> stages;  // [P] stage g's experts over job ranks g x E ..

  int64_t n_stages() const { return pipeline.n_stages(); }
  // Job rank of stage g's member m (m = 0: the lead).
  int64_t rank_of(int64_t g, int64_t m) const { return g * ep_size + m; }
  // Whether stage g's member m streams experts from its disk (the lead: as
  // the cut fitted it or as its stage's plan did).
  bool streams(int64_t g, int64_t m) const {
    const ExpertParallelPlan& e = stages[static_cast<size_t>(g)];
    return e.streams(m) || (m == 0 && pipeline.streams(g));
  }
  // Predicted seconds of a step of n tokens as one micro-batch (above), and
  // of it the time on links (the hops and the routed layers' round trips).
  double step_s(double n_tokens) const;
  double network_s(double n_tokens) const;
};

// Errors: ep_size < 1, or n_ranks not a multiple of it (naming both). The
// job checks this at its start, before it splits into stages.
Status check_stage_groups(int64_t n_ranks, int64_t ep_size);

// Errors: check_stage_groups()'s, more stages than layers, a
// model without routed experts, more ranks per stage than experts, a stage
// with no routed layer (its expert ranks would idle), no cut whose leads fit
// (plan_pipeline's refusal), a share that does not fit its rank's memory
// (naming the job rank, the stage and the sizes).
StatusOr<PipelineExpertPlan> plan_pipeline_experts(const PipelineExpertInputs& in);

}  // namespace sluice::plan
