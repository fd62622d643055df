// The expert-parallel planner: which process holds which routed experts,
// where attention runs, and how long a step takes when a routed layer's
// experts are spread over processes joined by links (dist/expert_parallel.h
// runs it).
//
// Shares are contiguous runs of expert ids, as equal as the count allows (the
// same ids in every routed layer). The rest of the model (embeddings,
// attention, routers, shared experts, the output head) runs in one of two
// placements (EpAttention):
//
//   rank 0 (kRank0)   rank 0 holds the rest and its share; rank r > 0 its
//                     share alone. Per routed layer rank 0 sends each rank
//                     its rows and gets their outputs back (a round trip).
//   every  (kEvery)   every rank holds the rest, its share and a KV pool
//                     mirroring rank 0's (kv_bytes; in a worker's memory
//                     beside its weights unless it has a --mem-budget, which
//                     is for weights alone as rank 0's is), and runs attention,
//                     routers and shared experts for the whole batch itself;
//                     per routed layer the ranks exchange their experts'
//                     outputs (one exchange, no rows sent).
//
// A share that does not fit its rank's --mem-budget streams from the rank's
// own disk, expert by expert, as one process does under a budget
// (weights/placement.h, plan_expert_placement): what the rank holds besides
// its share stays resident (the rest of the model where the rank holds it)
// and the rest of the budget is a pool
// of Z_r expert slots, at least one routed layer's share (E_r slots), at
// most all of it (L x E_r). Its experts are then found in a slot at the hit
// rate h_r of expert_plan.h over the share: (Z_r - u_r) / (L E_r - u_r), every
// streaming rank reading the next layer's experts ahead (a rank that routes,
// rank 0 and under kEvery every rank, from its own prediction; a rank r > 0
// under kRank0 from rank 0's, sent before the layer's rows,
// dist/expert_parallel.h), and the rest are read before the layer's experts
// compute:
//
//   disk_r = (1 - h_r) x u_r x expert_bytes / disk_gbps_r   per routed layer
//
// Only a rank with its own budget (budget_given) and a measured disk rate
// streams; a share whose resident part and E_r slots exceed the budget is
// refused, naming each such rank's least need.
//
// A step of n tokens (k of E experts per token; rank r holds E_r of them):
//
//   experts rank r runs per routed layer:  u_r = E_r x (1 - (1 - k/E)^n)
//   rows rank r gets per routed layer:     p_r = n x k x E_r / E
//   rank r's experts:  t_r = max(u_r x expert_bytes / read_r, p_r x expert_flops / rate_r) + disk_r
//   rank r's rest:     dense_r = max(dense_read_bytes / read_r, n x dense_flops / rate_r)
//   kRank0:
//     the link (r > 0):  h_r = 2 x latency_r + (16 + p_r x (2 x n_embd x 4 + 4)) B / gbps_r
//     routed layer:      layer = max(t_0, max_{r > 0} (t_r + h_r))
//     step = dense_0 + n_routed x layer
//   kEvery (links between workers taken to be like their links to rank 0):
//     outputs of rank r: b_r = p_r x n_embd x 4 B, B = sum of b_r
//     exchange:          x = max_{r>0} latency_r + max_r max((S-1) b_r, B - b_r) / min_{r>0} gbps_r
//     routed layer:      layer = max_r t_r + x
//     step = max_r dense_r + max_{r>0} latency_r (the step's description) + n_routed x layer
//
// EpAttention::kAuto plans both, keeps those that fit (kEvery needs every
// rank to hold the rest of the model and the KV pool besides its share, or
// to stream its share beside them) and takes the faster decode step (a
// tie: kRank0); the plan says which and why.
//
// Pure functions: no measuring here.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "plan/pipeline_plan.h"
#include "sluice/status.h"

namespace sluice::plan {

// Where attention (and everything else but the routed experts) runs.
enum class EpAttention { kAuto, kRank0, kEvery };
// "auto", "rank0", "every" (the --ep-attention values).
const char* ep_attention_name(EpAttention a);
// Errors: any other value (naming it and the accepted ones).
StatusOr<EpAttention> parse_ep_attention(std::string_view s);

struct ExpertParallelInputs {
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_embd = 0;
  int64_t n_routed_layers = 0;
  uint64_t expert_bytes = 0;        // one expert of one layer (gate, up, down)
  double expert_flops = 0;          // per row through one expert (2 x its parameters)
  uint64_t dense_bytes = 0;         // everything else rank 0 holds
  uint64_t dense_read_bytes = 0;    // of it, read every step (not the embedding table)
  double dense_flops_per_token = 0;
  // Streaming a share (above): one expert's aligned extents as a pool slot
  // holds them (0: the model's experts cannot stream), and rank 0's dense
  // part as a streaming placement holds it, aligned (0: dense_bytes).
  uint64_t expert_slot_bytes = 0;
  uint64_t dense_resident_bytes = 0;
  // The KV pool rank 0 holds, which every rank mirrors under kEvery.
  uint64_t kv_bytes = 0;
  EpAttention attention = EpAttention::kAuto;  // asked for (--ep-attention)
  std::vector<RankResources> ranks;  // [n_ranks]
  std::vector<LinkFigures> links;    // [n_ranks] links[r]: rank 0 <-> rank r (links[0] unused)
};

struct ExpertRange {
  int64_t begin = 0;
  int64_t end = 0;  // exclusive
};

struct ExpertParallelPlan {
  ExpertParallelInputs in;
  EpAttention attention = EpAttention::kRank0;  // chosen: kRank0 or kEvery
  std::string attention_why;                    // the choice, in words
  // Predicted decode (one token) under each placement; 0: not planned (asked
  // for the other) or does not fit.
  double rank0_decode_s = 0;
  double every_decode_s = 0;
  std::vector<ExpertRange> shares;   // [n_ranks] rank r's expert ids
  std::vector<uint64_t> rank_bytes;  // [n_ranks] weights held in memory (streaming: resident part and pool)
  std::vector<uint64_t> share_bytes; // [n_ranks] the share's experts, with the rest of the model (rank 0;
                                     // kEvery: every rank)
  std::vector<int64_t> slots;        // [n_ranks] expert slots of a streaming rank's pool (0: all in memory)

  // Whether rank r streams its share from its disk.
  bool streams(int64_t r) const { return slots[static_cast<size_t>(r)] > 0; }
  // Rank r's share of a routed layer's experts a step of n tokens chooses (u_r).
  double used_experts(int64_t r, double n_tokens) const;
  // The share of those rank r finds in a slot (h_r; 1 when it holds its share).
  double hit_rate(int64_t r, double n_tokens) const;
  // Rank r's seconds reading a routed layer's missed experts from its disk (disk_r).
  double disk_s(int64_t r, double n_tokens) const;

  int64_t n_ranks() const { return static_cast<int64_t>(shares.size()); }
  bool every() const { return attention == EpAttention::kEvery; }
  // Whether rank r holds the rest of the model and runs attention.
  bool runs_attention(int64_t r) const { return r == 0 || every(); }
  // Rank r's seconds on its experts of one routed layer, n tokens (t_r, its disk included).
  double experts_s(int64_t r, double n_tokens) const;
  // Seconds on the link to rank r > 0 in one routed layer (h_r; kEvery: the exchange x).
  double link_s(int64_t r, double n_tokens) const;
  // kEvery: seconds of one routed layer's exchange of outputs (x; 0 under kRank0).
  double exchange_s(double n_tokens) const;
  // Rank r's seconds on the rest of the model in a step of n tokens (dense_r).
  double dense_s(int64_t r, double n_tokens) const;
  // Predicted seconds of a step of n tokens (the formula above), and of it
  // the links' share (the routed layers' time beyond rank 0's own experts).
  double step_s(double n_tokens) const;
  double network_s(double n_tokens) const;
  // Of step_s, the routed layers' wait on streaming ranks' disks (the step
  // less the same step with every share in memory).
  double disk_wait_s(double n_tokens) const;
  // Expected bytes rank 0 sends to rank r > 0 (kRank0: rows and ids; kEvery:
  // rank 0's outputs) and gets back (rank r's outputs) per routed layer for n tokens.
  double bytes_out(int64_t r, double n_tokens) const;
  double bytes_back(int64_t r, double n_tokens) const;

 private:
  // One routed layer: the slowest rank's experts with its link (and disk).
  double layer_s(double n_tokens, bool with_disk) const;
};

// Why rank k cannot stream a share of n_share experts a routed layer beside
// `resident` bytes, as "; ..." for a refusal: the model's experts do not
// stream, no budget of its own, no measured disk, or the least it needs.
std::string share_stream_refusal(const RankResources& k, uint64_t expert_slot_bytes, uint64_t resident,
                                 int64_t n_share);

// The model's experts split `parts` ways, one expert at least to each: an
// error naming `mode` ("--parallel ep") for a dense model, or `parts_name`
// ("3 ranks") when there are fewer experts than parts.
Status check_expert_split(const ExpertParallelInputs& in, int64_t parts, std::string_view mode,
                          std::string_view parts_name);

// Errors: no ranks, a dense model, more ranks than experts, a rank without
// rates, or a share that does not fit its rank even streaming (naming the
// rank, the sizes and the least budget that would stream it) in the
// placement asked for (kAuto: in neither).
StatusOr<ExpertParallelPlan> plan_expert_parallel(const ExpertParallelInputs& in);

}  // namespace sluice::plan
