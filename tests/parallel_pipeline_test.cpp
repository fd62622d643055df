// End-to-end tests of --parallel pp: the same command run by 2 or 3
// processes of an MPI job on this machine (mpirun --oversubscribe) against
// one process (helpers in parallel_fixture.h).
//
//   Pipeline.RunMatchesOneProcess*   greedy tokens of `sluice run` equal, for
//                                    dense and routed models (real and synth)
//   Pipeline.BatchedMatchesOneProcess  bench-serve's requests, batched and cut
//                                    into micro-batches, equal one process's
//   Pipeline.StreamingRanksMatchOneProcess  each rank's --mem-budget below
//                                    the range it would hold: the ranks that
//                                    must stream the rest from disk, and the
//                                    greedy tokens equal one process's
//   Pipeline.StreamingRoutedRanksMatchOneProcess  the same for a routed
//                                    model: each rank pools its own layers'
//                                    experts and reads the rest from disk
//   Pipeline.Refuses*                a rank with another model file; budgets
//                                    below even the streaming minimum;
//                                    --micro-batches out of range or with ep
//   Pipeline.HungRankFailsRequests   serve; a worker stopped (SIGSTOP) mid-
//                                    request: the request ends with an error
//                                    within the timeout and the job exits non-zero
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "parallel_fixture.h"

namespace sluice {
namespace {

TEST_F(Pipeline, RunMatchesOneProcessDense) { expect_run_matches(model_path("stories260K/stories260K.gguf"), {2, 3}); }

// One long prompt, alone in its step: the pipeline cuts it into pieces so
// that the stages work at once (PipelineDriver::pieces), and the tokens stay
// those of one process. --micro-batches pins the cut: on a 0.5 MiB model the
// plan's own choice depends on the link latency this machine measures (CI once
// timed 209 us a hop and rightly kept the prompt whole); the choice itself is
// PipelinePlan's unit test.
TEST_F(Pipeline, OneLongPromptIsCutIntoMicroBatches) {
  std::string prompt;
  for (int i = 0; i < 12; ++i) prompt += "Once upon a time, there was a little girl named Lily. ";
  const std::string args = "run -m " + model_path("stories260K/stories260K.gguf") + " -p '" + prompt +
                           "' -n 8 --temp 0 --json -t 1";
  const std::vector<int32_t> alone = run_tokens(run_cli(args));
  ASSERT_EQ(alone.size(), 8u);
  const CliResult r = run_mpi(2, args + " --parallel pp --micro-batches 4");
  EXPECT_EQ(run_tokens(r), alone) << r.err;
  expect_micro_batches(r.err);
}

TEST_F(Pipeline, RunMatchesOneProcessMoe) { expect_run_matches(model_path("stories-moe/stories-moe.gguf"), {2, 3}); }

TEST_F(Pipeline, RunMatchesOneProcessSynth) {
  for (const char* preset : {"tiny-gemma2", "tiny-qwen3moe"}) {
    const std::string path = testing::cli_temp_path(std::string(preset) + ".gguf");
    const CliResult w = run_cli(fmt::format("synth --preset {} --layers 3 --type q8_0 -t 1 -o {}", preset, path));
    ASSERT_EQ(w.exit_code, 0) << w.err;
    expect_run_matches(path, {2});
    std::filesystem::remove(path);
  }
}

// --micro-batches 3 pins the cut: how many micro-batches the plan picks
// depends on the rates this machine measures.
TEST_F(Pipeline, BatchedMatchesOneProcess) {
  expect_batched_matches(model_path("stories260K/stories260K.gguf"), "pp --micro-batches 3", {2, 3},
                         expect_micro_batches);
  expect_batched_matches(model_path("stories-moe/stories-moe.gguf"), "pp --micro-batches 3", {2},
                         expect_micro_batches);
}

TEST_F(Pipeline, RefusesMicroBatchesOutOfRangeOrWithoutAPipeline) {
  const std::string run = "run -m " + model_path("stories-moe/stories-moe.gguf") + " -p hi -n 2 -t 1";
  CliResult r = run_mpi(2, run + " --parallel pp --micro-batches 9");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--micro-batches 9 is outside 0 (the plan's choice) to 8"), std::string::npos) << r.err;
  r = run_mpi(2, run + " --parallel ep --micro-batches 2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--micro-batches cuts a pipeline's steps"), std::string::npos) << r.err;
}

TEST_F(Pipeline, RefusesAnotherModelFile) {
  const std::string a = model_path("stories260K/stories260K.gguf"), b = model_path("stories-moe/stories-moe.gguf");
  // MPMD: rank 0 and rank 1 run the same command on different files.
  const std::string cmd = fmt::format("-np 1 {} run -m {} -p hi -n 2 -t 1 --parallel pp : -np 1 {} run -m {} -p hi "
                                      "-n 2 -t 1 --parallel pp",
                                      SLUICE_BINARY, a, SLUICE_BINARY, b);
  const std::string err_path = testing::cli_temp_path("mpmd_stderr.txt");
  const int status = std::system((mpirun_prefix(1).substr(0, mpirun_prefix(1).find("-np")) + cmd + " >/dev/null 2>" +
                                  err_path).c_str());
  std::ifstream e(err_path);
  const std::string err((std::istreambuf_iterator<char>(e)), {});
  EXPECT_NE(status, 0);
  EXPECT_NE(err.find("rank 1"), std::string::npos) << err;
  EXPECT_NE(err.find("its model differs from rank 0's"), std::string::npos) << err;
}

TEST_F(Pipeline, StreamingRanksMatchOneProcess) {
  // 8 layers of 0.84 MB (q8_0) and a 0.3 MB head: under 2.4 MB a rank holds
  // at most 2 layers in memory, so 2 ranks must stream (a range of 3 or more
  // layers streams the rest from the rank's disk through its ring).
  const std::string path = testing::cli_temp_path("pp_stream.gguf");
  const CliResult w = run_cli("synth --preset tiny --layers 8 --vocab 512 --type q8_0 -t 1 -o " + path);
  ASSERT_EQ(w.exit_code, 0) << w.err;
  const std::string args = "run -m " + path + " -p 'Once upon a time' -n 12 --temp 0 --json -t 1";
  const std::vector<int32_t> alone = run_tokens(run_cli(args));
  ASSERT_GE(alone.size(), 4u);
  const CliResult r = run_mpi(2, args + " --mem-budget 2.4M --parallel pp");
  EXPECT_EQ(run_tokens(r), alone) << r.err;
  // The plan names the streaming ranks; each of them loads its range
  // through its own weight store (its stage's placement map).
  const size_t at = r.err.find("rank(s) ");
  ASSERT_NE(at, std::string::npos) << r.err;
  const std::string named = r.err.substr(at + 8, r.err.find(" stream part of their range", at) - at - 8);
  int n_named = 1, n_loaded = 0;
  for (char ch : named) n_named += ch == ',';
  for (size_t p = r.err.find("'s range streams from its disk:"); p != std::string::npos;
       p = r.err.find("'s range streams from its disk:", p + 1))
    ++n_loaded;
  EXPECT_EQ(n_loaded, n_named) << r.err;
  EXPECT_NE(r.err.find("(a pipeline stage)"), std::string::npos) << r.err;
  // Each rank's forward, timed alone and with every rank at once, by rows.
  EXPECT_NE(r.err.find("rank 1 forward TFLOP/s by rows at once: 8 "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("; every rank at once: 8 "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ms waiting on disks"), std::string::npos) << r.err;
  std::filesystem::remove(path);
}

TEST_F(Pipeline, StreamingRoutedRanksMatchOneProcess) {
  // stories-moe (f32): 4 routed layers of 16 experts of 72 KiB and 0.5 MB
  // beside them. Over 2 ranks a range is 2.3 MB of experts; under 1.8 MB each
  // rank keeps its layers' dense parts, pools expert slots in the rest and
  // reads the other experts of its range from its own disk.
  const std::string model = model_path("stories-moe/stories-moe.gguf");
  const CliResult r = run_matching_alone(model, 2, "--mem-budget 1.8M --parallel pp");
  // Which ranks stream, and over which layers, is the plan's choice from the
  // ranks' timed forwards (0-1 / 2-3, or 0 and the head / 1-3 when the probes
  // differ); 3.6 MB of budget cannot hold the model's 5 MB, so some do. Each
  // one named streams its range's experts from its own disk, and its store
  // pools only its own layers' experts (its placement map).
  const size_t at = r.err.find("rank(s) ");
  ASSERT_NE(at, std::string::npos) << r.err;
  const std::string named = r.err.substr(at + 8, r.err.find(" stream part of their range", at) - at - 8);
  for (size_t p = 0; p <= named.size();) {
    const size_t comma = std::min(named.find(", ", p), named.size());
    const std::string rank = named.substr(p, comma - p);
    const size_t line = r.err.find("rank " + rank + " layers ");
    ASSERT_NE(line, std::string::npos) << rank << "\n" << r.err;
    EXPECT_NE(r.err.substr(line, r.err.find('\n', line) - line).find(": experts stream from its disk"),
              std::string::npos) << rank << "\n" << r.err;
    EXPECT_NE(r.err.find("rank " + rank + "'s range streams from its disk:"), std::string::npos) << r.err;
    p = comma + 2;
  }
  EXPECT_NE(r.err.find("ms waiting on disks"), std::string::npos) << r.err;
  // Batched, the same (whichever ranks the plan streams this time).
  expect_batched_matches(model, "pp --mem-budget 1.8M", {2}, [](const std::string& err) {
    EXPECT_NE(err.find("'s range streams from its disk:"), std::string::npos) << err;
  });
}

TEST_F(Pipeline, RefusesBudgetsTooSmall) {
  // 100 KB: below one layer of stories260K (0.17 MiB) and below what a rank
  // streaming one needs (2 slots of 0.18 MiB); the refusal gives both.
  const CliResult r = run_mpi(2, "run -m " + model_path("stories260K/stories260K.gguf") +
                                     " -p hi -n 2 -t 1 --mem-budget 100K --parallel pp");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("cannot be cut into 2 ranges that fit"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 1 ("), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the least a rank streaming from its disk needs"), std::string::npos) << r.err;
}

TEST_F(Pipeline, HungRankFailsRequests) {
  expect_hung_rank_fails(model_path("stories260K/stories260K.gguf"), "llama", "pp", "the pipeline failed");
}
}  // namespace
}  // namespace sluice
