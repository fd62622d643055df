#include "plan/expert_parallel_plan.h"

#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "plan/expert_plan.h"

namespace sluice::plan {
namespace {

// Header and ids of one message (dist/expert_parallel.cpp's layout).
constexpr double kMessageHeaderBytes = 16;

}  // namespace

const char* ep_attention_name(EpAttention a) {
  switch (a) {
    case EpAttention::kAuto: return "auto";
    case EpAttention::kRank0: return "rank0";
    case EpAttention::kEvery: return "every";
  }
  return "?";
}

StatusOr<EpAttention> parse_ep_attention(std::string_view s) {
  for (EpAttention a : {EpAttention::kAuto, EpAttention::kRank0, EpAttention::kEvery})
    if (s == ep_attention_name(a)) return a;
  return invalid_argument("unknown --ep-attention '{}' (rank0: attention on rank 0; every: on every rank; auto: the "
                          "planner's choice)",
                          s);
}

double ExpertParallelPlan::used_experts(int64_t r, double n_tokens) const {
  const ExpertRange g = shares[static_cast<size_t>(r)];
  const double pick = static_cast<double>(in.n_expert_used) / static_cast<double>(in.n_expert);
  return static_cast<double>(g.end - g.begin) * (1.0 - std::pow(1.0 - pick, n_tokens));
}

double ExpertParallelPlan::hit_rate(int64_t r, double n_tokens) const {
  if (!streams(r)) return 1.0;
  const ExpertRange g = shares[static_cast<size_t>(r)];
  const int64_t z = slots[static_cast<size_t>(r)];
  // Every streaming rank reads the next layer's experts ahead: a rank that
  // routes from its own prediction, the others from rank 0's.
  return expected_hit_rate(z, in.n_routed_layers, g.end - g.begin, used_experts(r, n_tokens));
}

double ExpertParallelPlan::disk_s(int64_t r, double n_tokens) const {
  if (!streams(r)) return 0.0;
  const RankResources& k = in.ranks[static_cast<size_t>(r)];
  const double missed = (1.0 - hit_rate(r, n_tokens)) * used_experts(r, n_tokens);
  return missed * static_cast<double>(in.expert_bytes) / (k.disk_gbps * 1e9);
}

double ExpertParallelPlan::experts_s(int64_t r, double n_tokens) const {
  const RankResources& k = in.ranks[static_cast<size_t>(r)];
  const ExpertRange g = shares[static_cast<size_t>(r)];
  const double share = static_cast<double>(g.end - g.begin) / static_cast<double>(in.n_expert);
  const double rows = n_tokens * static_cast<double>(in.n_expert_used) * share;
  const double read = used_experts(r, n_tokens) * static_cast<double>(in.expert_bytes) / (k.read_gbps * 1e9);
  // Each chosen expert multiplies its own rows: the rate at that many.
  const double used = used_experts(r, n_tokens);
  const double compute = rows * in.expert_flops / (k.tflops_curve.at_or(used > 0 ? rows / used : rows, k.tflops) * 1e12);
  return std::max(read, compute) + disk_s(r, n_tokens);
}

double ExpertParallelPlan::bytes_out(int64_t r, double n_tokens) const {
  if (every()) return bytes_back(0, n_tokens);
  const ExpertRange g = shares[static_cast<size_t>(r)];
  const double rows = n_tokens * static_cast<double>(in.n_expert_used) * static_cast<double>(g.end - g.begin) /
                      static_cast<double>(in.n_expert);
  return kMessageHeaderBytes + rows * (static_cast<double>(in.n_embd) * 4 + 4);
}

double ExpertParallelPlan::bytes_back(int64_t r, double n_tokens) const {
  const ExpertRange g = shares[static_cast<size_t>(r)];
  const double rows = n_tokens * static_cast<double>(in.n_expert_used) * static_cast<double>(g.end - g.begin) /
                      static_cast<double>(in.n_expert);
  return rows * static_cast<double>(in.n_embd) * 4;
}

double ExpertParallelPlan::link_s(int64_t r, double n_tokens) const {
  if (every()) return exchange_s(n_tokens);
  const LinkFigures& l = in.links[static_cast<size_t>(r)];
  return 2 * l.latency_s + (bytes_out(r, n_tokens) + bytes_back(r, n_tokens)) / (l.gbps * 1e9);
}

// The slowest link's latency (every rank waits for its peers) and bandwidth.
static LinkFigures ep_slowest_link(const ExpertParallelInputs& in) {
  LinkFigures w{.latency_s = 0, .gbps = 0};
  for (size_t r = 1; r < in.links.size(); ++r) {
    w.latency_s = std::max(w.latency_s, in.links[r].latency_s);
    w.gbps = r == 1 ? in.links[r].gbps : std::min(w.gbps, in.links[r].gbps);
  }
  return w;
}

double ExpertParallelPlan::exchange_s(double n_tokens) const {
  if (!every() || n_ranks() < 2) return 0.0;
  double total = 0, worst = 0;
  for (int64_t r = 0; r < n_ranks(); ++r) total += bytes_back(r, n_tokens);
  for (int64_t r = 0; r < n_ranks(); ++r) {
    const double b = bytes_back(r, n_tokens);
    worst = std::max(worst, std::max(static_cast<double>(n_ranks() - 1) * b, total - b));
  }
  const LinkFigures l = ep_slowest_link(in);
  return l.latency_s + worst / (l.gbps * 1e9);
}

double ExpertParallelPlan::dense_s(int64_t r, double n_tokens) const {
  const RankResources& k = in.ranks[static_cast<size_t>(r)];
  return std::max(static_cast<double>(in.dense_read_bytes) / (k.read_gbps * 1e9),
                  n_tokens * in.dense_flops_per_token / (k.tflops_curve.at_or(n_tokens, k.tflops) * 1e12));
}

double ExpertParallelPlan::layer_s(double n_tokens, bool with_disk) const {
  auto rank_s = [&](int64_t r) { return experts_s(r, n_tokens) - (with_disk ? 0.0 : disk_s(r, n_tokens)); };
  double layer = rank_s(0);
  if (every()) {
    for (int64_t r = 1; r < n_ranks(); ++r) layer = std::max(layer, rank_s(r));
    return layer + exchange_s(n_tokens);
  }
  for (int64_t r = 1; r < n_ranks(); ++r) layer = std::max(layer, rank_s(r) + link_s(r, n_tokens));
  return layer;
}

// kEvery: rank 0 sends each step's description before the ranks start.
static double ep_step_message_s(const ExpertParallelPlan& p) {
  return p.every() && p.n_ranks() > 1 ? ep_slowest_link(p.in).latency_s : 0.0;
}

double ExpertParallelPlan::step_s(double n_tokens) const {
  double dense = dense_s(0, n_tokens);
  for (int64_t r = 1; r < n_ranks() && every(); ++r) dense = std::max(dense, dense_s(r, n_tokens));
  return dense + ep_step_message_s(*this) + static_cast<double>(in.n_routed_layers) * layer_s(n_tokens, /*with_disk=*/true);
}

double ExpertParallelPlan::network_s(double n_tokens) const {
  const auto L = static_cast<double>(in.n_routed_layers);
  if (every()) return ep_step_message_s(*this) + L * exchange_s(n_tokens);
  return L * (layer_s(n_tokens, /*with_disk=*/true) - experts_s(0, n_tokens));
}

double ExpertParallelPlan::disk_wait_s(double n_tokens) const {
  return static_cast<double>(in.n_routed_layers) *
         (layer_s(n_tokens, /*with_disk=*/true) - layer_s(n_tokens, /*with_disk=*/false));
}

std::string share_stream_refusal(const RankResources& k, uint64_t expert_slot_bytes, uint64_t resident,
                                 int64_t n_share) {
  if (expert_slot_bytes == 0) return "; this model's experts cannot stream expert by expert";
  if (!k.budget_given) return "; only a rank given --mem-budget streams its share from its disk";
  if (!(k.disk_gbps > 0)) return "; its disk was not measured, so it cannot stream its share";
  const uint64_t least = resident + static_cast<uint64_t>(n_share) * expert_slot_bytes;
  return fmt::format("; streaming the share from its disk needs at least {:.2f} MiB ({}a pool of {} expert slots x "
                     "{:.3f} MiB)",
                     mib(least), resident > 0 ? fmt::format("resident {:.2f} MiB + ", mib(resident)) : "", n_share,
                     mib(expert_slot_bytes));
}

namespace {

// The shares and each rank's memory under placement `a` (kRank0 or kEvery).
// Errors: a share that does not fit its rank even streaming.
StatusOr<ExpertParallelPlan> plan_ep_placement(const ExpertParallelInputs& in, EpAttention a) {
  const auto S = static_cast<int64_t>(in.ranks.size());
  ExpertParallelPlan p;
  p.in = in;
  p.attention = a;
  const uint64_t dense_resident = in.dense_resident_bytes > 0 ? in.dense_resident_bytes : in.dense_bytes;
  std::string refusal;
  for (int64_t r = 0; r < S; ++r) {
    const ExpertRange g{r * in.n_expert / S, (r + 1) * in.n_expert / S};
    p.shares.push_back(g);
    const int64_t n_share = g.end - g.begin;
    const uint64_t experts = static_cast<uint64_t>(n_share) * static_cast<uint64_t>(in.n_routed_layers) *
                             in.expert_bytes;
    // Beside its share: the rest of the model where the rank runs attention,
    // and in a worker's memory its KV pool (a --mem-budget is for weights
    // alone, as rank 0's is; rank 0's pool is the engine's either way).
    const RankResources& k = in.ranks[static_cast<size_t>(r)];
    const bool rest = p.runs_attention(r);
    const uint64_t kv = rest && r > 0 && !k.budget_given ? in.kv_bytes : 0;
    const uint64_t weights = experts + (rest ? in.dense_bytes : 0);
    const uint64_t bytes = weights + kv;
    p.share_bytes.push_back(weights);
    p.rank_bytes.push_back(weights);
    p.slots.push_back(0);
    if (bytes <= k.mem_cap_bytes) continue;
    // Streaming the share (under a budget): the resident part, then a pool
    // of at least one routed layer's share of slots.
    const bool can_stream = k.budget_given && k.disk_gbps > 0 && in.expert_slot_bytes > 0;
    const uint64_t resident = rest ? dense_resident : 0;
    const uint64_t least = resident + static_cast<uint64_t>(n_share) * in.expert_slot_bytes;
    if (can_stream && least <= k.mem_cap_bytes) {
      const auto fit = static_cast<int64_t>((k.mem_cap_bytes - resident) / in.expert_slot_bytes);
      p.slots.back() = std::min(fit, n_share * in.n_routed_layers);
      p.rank_bytes.back() = resident + static_cast<uint64_t>(p.slots.back()) * in.expert_slot_bytes;
      continue;
    }
    const std::string why = share_stream_refusal(k, in.expert_slot_bytes, resident, n_share);
    const std::string beside = r == 0  ? " and the rest of the model"
                               : rest ? fmt::format(", the rest of the model{} (attention on every rank)",
                                                    kv > 0 ? fmt::format(" and a KV pool of {:.1f} MiB", mib(kv)) : "")
                                      : "";
    refusal += fmt::format("{}rank {} needs {:.1f} MiB for experts {}-{}{} and may hold {:.1f} MiB ({}){}",
                           refusal.empty() ? "" : "; ", r, mib(bytes), g.begin, g.end - 1, beside,
                           mib(k.mem_cap_bytes), k.budget_given ? "its --mem-budget" : "memory available", why);
  }
  if (!refusal.empty())
    return invalid_argument("the model's experts cannot be split over {} ranks that fit{}: {}", S,
                            a == EpAttention::kEvery ? " with attention on every rank" : "", refusal);
  return p;
}

}  // namespace

Status check_expert_split(const ExpertParallelInputs& in, int64_t parts, std::string_view mode,
                          std::string_view parts_name) {
  if (in.n_expert <= 0 || in.n_routed_layers <= 0)
    return invalid_argument("{} needs a mixture-of-experts model; this one has no routed experts (use --parallel pp)",
                            mode);
  if (parts > in.n_expert)
    return invalid_argument("{} for {} experts: expert parallelism needs at least one expert per rank", parts_name,
                            in.n_expert);
  return Status();
}

StatusOr<ExpertParallelPlan> plan_expert_parallel(const ExpertParallelInputs& in) {
  const auto S = static_cast<int64_t>(in.ranks.size());
  if (S == 0) return invalid_argument("an expert-parallel plan needs at least one rank");
  RETURN_IF_ERROR(check_expert_split(in, S, "--parallel ep", fmt::format("{} ranks", S)));
  if (static_cast<int64_t>(in.links.size()) != S) return invalid_argument("links for {} ranks, not {}", in.links.size(), S);
  for (int64_t r = 0; r < S; ++r) {
    const RankResources& k = in.ranks[static_cast<size_t>(r)];
    if (!(k.read_gbps > 0) || !(k.tflops > 0)) return invalid_argument("rank {} has no measured rates", r);
    if (r > 0 && !(in.links[static_cast<size_t>(r)].gbps > 0))
      return invalid_argument("the link to rank {} has no measured bandwidth", r);
  }
  if (in.attention != EpAttention::kAuto) {
    ASSIGN_OR_RETURN(ExpertParallelPlan p, plan_ep_placement(in, in.attention));
    (p.every() ? p.every_decode_s : p.rank0_decode_s) = p.step_s(1);
    p.attention_why = fmt::format("as --ep-attention {} asks", ep_attention_name(in.attention));
    return p;
  }
  StatusOr<ExpertParallelPlan> rank0 = plan_ep_placement(in, EpAttention::kRank0);
  StatusOr<ExpertParallelPlan> every = plan_ep_placement(in, EpAttention::kEvery);
  if (!rank0.ok() && !every.ok()) return rank0.status();
  const double rank0_s = rank0.ok() ? rank0->step_s(1) : 0.0;
  const double every_s = every.ok() ? every->step_s(1) : 0.0;
  const bool take_every = every.ok() && (!rank0.ok() || every_s < rank0_s);
  std::string why;
  if (!every.ok())
    why = fmt::format("attention on every rank does not fit: {}", every.status().message());
  else if (!rank0.ok())
    why = fmt::format("attention on rank 0 does not fit: {}", rank0.status().message());
  else
    why = fmt::format("predicted decode {:.3f} ms/token with attention on every rank, {:.3f} ms on rank 0",
                      every_s * 1e3, rank0_s * 1e3);
  ExpertParallelPlan p = take_every ? std::move(every).value() : std::move(rank0).value();
  p.rank0_decode_s = rank0_s;
  p.every_decode_s = every_s;
  p.attention_why = std::move(why);
  return p;
}

}  // namespace sluice::plan
