// End-to-end tests of --parallel ep and pp,ep: the same command run by 2 or
// 4 processes of an MPI job on this machine (mpirun --oversubscribe) against
// one process (helpers in parallel_fixture.h).
//
//   ExpertParallel.RunMatchesOneProcess  ep over 2 ranks: greedy tokens of
//                                    `sluice run` equal (stories-moe, synth
//                                    routed models with and without a shared expert)
//   ExpertParallel.BatchedMatchesOneProcess  bench-serve's requests, batched
//   ExpertParallel.StreamingRanksMatchOneProcess  each rank's --mem-budget
//                                    below its share: both ranks stream their
//                                    experts from disk, alone and batched,
//                                    and the greedy tokens equal one process's
//   ExpertParallel.Refuses*          a dense model, shares that do not fit the
//                                    ranks' budgets even streaming, an unknown
//                                    --ep-attention
//   ExpertParallel.AttentionOnEveryRank*  --ep-attention every: each rank
//                                    runs attention itself and the ranks
//                                    exchange their experts' outputs; greedy
//                                    tokens equal one process's, alone
//                                    (stories-moe, a synth with a gated shared
//                                    expert), batched, and with both ranks
//                                    streaming their shares
//   (the tests above pin --ep-attention rank0; auto picks by measured rates)
//   ExpertParallel.HungRankFailsRequests*  as the pipeline's, with attention
//                                    on rank 0 and on every rank
//   PipelineExperts.MatchesOneProcess  pp,ep over 4 ranks (2 stages x 2):
//                                    greedy tokens of `run` and bench-serve's
//                                    batched requests equal one process's; the
//                                    map names each rank's layers and experts,
//                                    and both stages' expert ranks computed rows
//   PipelineExperts.StreamingRanksMatchOneProcess  every rank under a budget
//                                    below its part: each pools its share of
//                                    its stage's experts and reads the rest
//                                    from its disk; tokens equal, alone and batched
//   PipelineExperts.RefusesBadCombinations  no --ep-size, --ep-size without
//                                    pp,ep, a size not a multiple of it, a
//                                    dense model
//   PipelineExperts.HungExpertRankFailsRequests  a later stage's expert rank
//                                    stopped: as the pipeline's
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "parallel_fixture.h"

namespace sluice {
namespace {

TEST_F(ExpertParallel, RunMatchesOneProcess) {
  expect_run_matches(model_path("stories-moe/stories-moe.gguf"));
  for (const char* preset : {"tiny-qwen3moe", "tiny-qwen2moe"}) {  // qwen2moe: a gated shared expert
    const std::string path = synth(preset);
    expect_run_matches(path);
    std::filesystem::remove(path);
  }
}

TEST_F(ExpertParallel, BatchedMatchesOneProcess) {
  const std::string synth_path = synth("tiny-qwen2moe");
  for (const std::string& model : {model_path("stories-moe/stories-moe.gguf"), synth_path})
    expect_batched_matches(model, "ep --ep-attention rank0", {2}, expect_rank1_computed);
  std::filesystem::remove(synth_path);
}

TEST_F(ExpertParallel, StreamingRanksMatchOneProcess) {
  // stories-moe (f32): 4 routed layers of 16 experts of 72 KiB, 0.5 MB
  // beside them. Over 2 ranks a share is 2.4 MB of experts (rank 0: 2.9 MB
  // with the rest); under 1.5 MB each rank keeps a pool of expert slots and
  // reads the rest of its share from its own disk.
  const std::string model = model_path("stories-moe/stories-moe.gguf");
  const CliResult r = run_matching_alone(model, 2, "--mem-budget 1.5M --parallel ep --ep-attention rank0");
  EXPECT_NE(r.err.find("rank(s) 0, 1 stream their share from their own disk"), std::string::npos) << r.err;
  // Each rank's store holds and reads only its share (its placement map).
  EXPECT_NE(r.err.find("rank 0's share streams from its disk:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("experts 0-7 of 16: an expert share"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 1's share streams from its disk:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("experts 8-15 of 16: an expert share"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ms waiting on disks"), std::string::npos) << r.err;
  expect_rank1_computed(r.err);
  // Rank 1 has no router: it read ahead what rank 0 predicted.
  EXPECT_NE(r.err.find("read ahead by rank 0's prediction"), std::string::npos) << r.err;
  expect_read_ahead(r.err, 1);
  // Batched, the same (bench-serve prints no job map: rank 1's load says it streams).
  expect_batched_matches(model, "ep --ep-attention rank0 --mem-budget 1.5M", {2}, [](const std::string& err) {
    EXPECT_NE(err.find("rank 1's share streams from its disk:"), std::string::npos) << err;
    expect_rank1_computed(err);
  });
}

TEST_F(ExpertParallel, RefusesDenseModel) {
  const CliResult r = run_mpi(2, "run -m " + model_path("stories260K/stories260K.gguf") + " -p hi -n 2 -t 1 --parallel ep");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--parallel ep needs a mixture-of-experts model"), std::string::npos) << r.err;
}

TEST_F(ExpertParallel, RefusesBudgetsTooSmall) {
  const CliResult r = run_mpi(2, "run -m " + model_path("stories-moe/stories-moe.gguf") +
                                     " -p hi -n 2 -t 1 --mem-budget 100K --parallel ep");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("cannot be split over 2 ranks that fit"), std::string::npos) << r.err;
  // 100 KB holds not even one routed layer's share of expert slots: the least that streams.
  EXPECT_NE(r.err.find("streaming the share from its disk needs at least"), std::string::npos) << r.err;
}

// Attention on every rank: rank 1 holds the rest of the model and runs each
// step itself; the ranks exchange their experts' outputs per routed layer.
TEST_F(ExpertParallel, AttentionOnEveryRankMatchesOneProcess) {
  expect_run_matches(model_path("stories-moe/stories-moe.gguf"), "every");
  const std::string path = synth("tiny-qwen2moe");  // a gated shared expert, computed on every rank
  expect_run_matches(path, "every");
  std::filesystem::remove(path);
}

TEST_F(ExpertParallel, AttentionOnEveryRankBatchedMatchesOneProcess) {
  expect_batched_matches(model_path("stories-moe/stories-moe.gguf"), "ep --ep-attention every", {2},
                         expect_rank1_computed);
}

// Each rank under 1.5 MB streams its share beside the rest of the model and
// (rank 1) the KV pool: rank 1 routes too, so it reads its experts ahead.
TEST_F(ExpertParallel, AttentionOnEveryRankWithStreamingSharesMatchesOneProcess) {
  const std::string model = model_path("stories-moe/stories-moe.gguf");
  const CliResult r = run_matching_alone(model, 2, "--mem-budget 1.5M --parallel ep --ep-attention every");
  EXPECT_NE(r.err.find("rank(s) 0, 1 stream their share from their own disk"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 1's share streams from its disk:"), std::string::npos) << r.err;
  expect_rank1_computed(r.err);
}

TEST_F(ExpertParallel, RefusesAnUnknownAttentionPlacement) {
  const CliResult r = run_cli("run -m " + model_path("stories-moe/stories-moe.gguf") +
                              " -p hi -n 2 -t 1 --parallel ep --ep-attention all");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--ep-attention"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("all"), std::string::npos) << r.err;
  const CliResult p = run_cli("plan parallel -m " + model_path("stories-moe/stories-moe.gguf") +
                              " --parallel ep --ep-attention all");
  EXPECT_NE(p.exit_code, 0);
  EXPECT_NE(p.err.find("unknown --ep-attention 'all' (rank0: attention on rank 0; every: on every rank; auto"),
            std::string::npos)
      << p.err;
  const CliResult pp = run_cli("plan parallel -m " + model_path("stories-moe/stories-moe.gguf") +
                               " --parallel pp --ep-attention every");
  EXPECT_NE(pp.exit_code, 0);
  EXPECT_NE(pp.err.find("--ep-attention every places attention for --parallel ep, not --parallel pp"),
            std::string::npos)
      << pp.err;
}

TEST_F(ExpertParallel, HungRankFailsRequests) {
  expect_hung_rank_fails(model_path("stories-moe/stories-moe.gguf"), "stories-moe", "ep --ep-attention rank0",
                         "expert parallelism failed");
}

// With attention on every rank rank 0 waits for a stopped rank's outputs in
// the layer's exchange (or for its step description to be taken): the same
// bounded failure.
TEST_F(ExpertParallel, HungRankFailsRequestsWithAttentionOnEveryRank) {
  expect_hung_rank_fails(model_path("stories-moe/stories-moe.gguf"), "stories-moe", "ep --ep-attention every",
                         "expert parallelism failed");
}

TEST_F(PipelineExperts, MatchesOneProcess) {
  const std::string model = model_path("stories-moe/stories-moe.gguf");
  const CliResult r = run_matching_alone(model, 4, "--parallel pp,ep --ep-size 2");
  EXPECT_NE(r.err.find("[sluice] pipeline of 2 stages x 2 ranks (pp,ep)"), std::string::npos) << r.err;
  // The map: a row per rank with its stage, role, layers and experts.
  for (const char* row : {"0      lead     0-", "0      experts  0-", "1      lead     ", "1      experts  "}) {
    const size_t at = r.err.find(row);
    ASSERT_NE(at, std::string::npos) << row << "\n" << r.err;
  }
  EXPECT_NE(r.err.find(" 0-7 +rest "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" 8-15 "), std::string::npos) << r.err;
  expect_both_stages_computed(r.err);
  // Batched, cut into micro-batches between the stages (pinned: the plan's
  // choice depends on the rates this machine measures).
  expect_batched_matches(model, "pp,ep --ep-size 2 --micro-batches 3", {4}, [](const std::string& err) {
    expect_both_stages_computed(err);
    expect_micro_batches(err);
  });
}

TEST_F(PipelineExperts, StreamingRanksMatchOneProcess) {
  // stories-moe over 2 stages x 2 ranks: a rank's part is its stage's dense
  // parts (stage 0: the head) and 8 experts of each of 2 routed layers, 1.2
  // to 1.6 MB; under 1.15 MB a rank pools expert slots for its share and
  // reads the rest from its own disk. Which ranks do is the plan's: the
  // stages split the layers 2/2 on like ranks, but the split follows the
  // rates each stage lead measures (a lead whose disk probe ran slow under
  // CI's load can take 1 layer and the head, and its stage then fits).
  const std::string model = model_path("stories-moe/stories-moe.gguf");
  const CliResult r = run_matching_alone(model, 4, "--mem-budget 1.15M --parallel pp,ep --ep-size 2");
  const size_t at = r.err.find("rank(s) ");
  ASSERT_NE(at, std::string::npos) << r.err;
  const size_t end = r.err.find(" stream their share's experts from their own disk", at);
  ASSERT_NE(end, std::string::npos) << r.err;
  const std::string named = r.err.substr(at + 8, end - at - 8);
  int n_named = 0;
  for (size_t p = 0; p <= named.size(); ++n_named) {
    const size_t comma = std::min(named.find(", ", p), named.size());
    const int rank = std::stoi(named.substr(p, comma - p));
    EXPECT_NE(r.err.find(fmt::format("rank {}'s part streams from its disk:", rank)), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(fmt::format("  rank {} experts {}: a pool of", rank, rank % 2 ? "8-15" : "0-7")),
              std::string::npos)
        << r.err;
    // An expert rank reads ahead what its lead predicted.
    if (rank % 2) expect_read_ahead(r.err, rank);
    p = comma + 2;
  }
  EXPECT_GE(n_named, 1) << r.err;  // the model's 5.2 MB cannot fit in 4 x 1.15 MB
  // Each store pools only its stage's layers (its placement map).
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(layers \d-\d of 4 \(a pipeline stage\))"))) << r.err;
  expect_both_stages_computed(r.err);
  expect_batched_matches(model, "pp,ep --ep-size 2 --micro-batches 3 --mem-budget 1.15M", {4},
                         [](const std::string& err) {
                           expect_both_stages_computed(err);
                           EXPECT_NE(err.find("'s part streams from its disk:"), std::string::npos) << err;
                         });
}

TEST_F(PipelineExperts, RefusesBadCombinations) {
  const std::string moe = model_path("stories-moe/stories-moe.gguf");
  // Checked before the job starts, by one process alone.
  CliResult r = run_cli("run -m " + moe + " -p hi -n 2 -t 1 --parallel pp,ep");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--parallel pp,ep needs --ep-size E"), std::string::npos) << r.err;
  r = run_cli("run -m " + moe + " -p hi -n 2 -t 1 --parallel ep --ep-size 2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--ep-size applies to --parallel pp,ep only"), std::string::npos) << r.err;
  // Checked by every rank at the job's start.
  r = run_mpi(3, "run -m " + moe + " -p hi -n 2 -t 1 --parallel pp,ep --ep-size 2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("3 ranks cannot be pipeline stages of --ep-size 2 ranks each"), std::string::npos) << r.err;
  // Planned by rank 0.
  r = run_mpi(2, "run -m " + model_path("stories260K/stories260K.gguf") + " -p hi -n 2 -t 1 --parallel pp,ep --ep-size 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--parallel pp,ep needs a mixture-of-experts model"), std::string::npos) << r.err;
  // More stages than layers, shares that do not fit: the same planner's
  // words, tested through `plan parallel` (cli_test.cpp) and its unit tests.
}

TEST_F(PipelineExperts, HungExpertRankFailsRequests) {
  // Rank 3: the expert rank of stage 1, whose lead (rank 2) waits for it on
  // its stage's communicator while rank 0 waits for stage 1.
  std::string err;
  expect_hung_rank_fails(model_path("stories-moe/stories-moe.gguf"), "stories-moe", "pp,ep --ep-size 2",
                         "the pipeline failed", 4, 3, &err);
  EXPECT_NE(err.find("expert parallelism failed: rank 3 did not complete"), std::string::npos) << err;
}

}  // namespace
}  // namespace sluice
