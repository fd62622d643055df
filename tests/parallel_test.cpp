// End-to-end tests of --parallel pp and ep: the same command run by 2 or 3
// processes of an MPI job on this machine (mpirun --oversubscribe) against
// one process.
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
//   ExpertParallel.HungRankFailsRequests  as the pipeline's
//   PipelineExperts.MatchesOneProcess  pp,ep over 4 ranks (2 stages x 2):
//                                    greedy tokens of `run` and bench-serve's
//                                    batched requests equal one process's; the
//                                    map names each rank's layers and experts,
//                                    and both stages' expert ranks computed rows
//   PipelineExperts.RefusesBadCombinations  no --ep-size, --ep-size without
//                                    pp,ep, a size not a multiple of it, a
//                                    dense model
//   PipelineExperts.HungExpertRankFailsRequests  a later stage's expert rank
//                                    stopped: as the pipeline's
//
// Each rank runs one thread (-t 1): three or four ranks share CI's two cores.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "base/test_data.h"
#include "cli_runner.h"
#include "dist/comm.h"

namespace sluice {
namespace {

using testing::CliResult;
using testing::run_cli;

using testing::model_path;

// mpirun of `n` ranks, each running `sluice <args>` (root allowed, as CI is).
std::string mpirun_prefix(int n) {
  return fmt::format("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader,tcp {} "
                     "--oversubscribe --bind-to none -np {} ",
                     SLUICE_MPIEXEC, n);
}

CliResult run_mpi(int n, const std::string& args) {
  // run_cli prefixes the binary; a shell wrapper puts mpirun before it.
  const std::string err_path = testing::cli_temp_path("mpi_stderr.txt");
  const std::string cmd = mpirun_prefix(n) + SLUICE_BINARY + " " + args + " 2>" + err_path;
  CliResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {-1, "", "popen failed"};
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, got);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream e(err_path);
  r.err.assign(std::istreambuf_iterator<char>(e), {});
  std::remove(err_path.c_str());
  return r;
}

class Pipeline : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!dist::have_mpi() || std::string(SLUICE_MPIEXEC).empty()) GTEST_SKIP() << "built without MPI";
    if (!std::filesystem::exists(model_path("stories260K/stories260K.gguf")))
      GTEST_SKIP() << "no shared models at " << SLUICE_SHARED_DIR;
  }

  static std::vector<int32_t> run_tokens(const CliResult& r) {
    EXPECT_EQ(r.exit_code, 0) << r.err;
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    if (j.is_discarded()) return {};
    return j["tokens"].get<std::vector<int32_t>>();
  }

  // `run` alone and over n ranks give the same greedy tokens.
  static void expect_run_matches(const std::string& model, const std::vector<int>& ranks) {
    const std::string args = "run -m " + model + " -p 'Once upon a time' -n 24 --temp 0 --json -t 1";
    const std::vector<int32_t> alone = run_tokens(run_cli(args));
    ASSERT_EQ(alone.size(), 24u);
    for (int n : ranks) {
      const CliResult r = run_mpi(n, args + " --parallel pp");
      EXPECT_EQ(run_tokens(r), alone) << n << " ranks\n" << r.err;
      EXPECT_NE(r.err.find("pipeline of " + std::to_string(n) + " ranks"), std::string::npos) << r.err;
    }
  }

  // bench-serve's requests (batched) on `model`, alone and over each of
  // `ranks` with --parallel `mode`: the same outputs; `check` reads each job's stderr.
  static void expect_batched_matches(const std::string& model, const std::string& mode, const std::vector<int>& ranks,
                                     void (*check)(const std::string& err)) {
    const std::string out = testing::cli_temp_path("outputs.json");
    const std::string args = "bench-serve -m " + model +
                             " --requests 6 --prompt-len uniform:4:40 --output-len 10 --arrival all --max-seqs 6"
                             " -t 1 --json --dump-outputs " + out;
    auto outputs = [&](const CliResult& r) {
      EXPECT_EQ(r.exit_code, 0) << r.err;
      std::ifstream f(out);
      return nlohmann::json::parse(f, nullptr, false);
    };
    const nlohmann::json alone = outputs(run_cli(args));
    ASSERT_EQ(alone.size(), 6u);
    for (int n : ranks) {
      const CliResult r = run_mpi(n, args + " --parallel " + mode);
      EXPECT_EQ(outputs(r), alone) << model << ", " << n << " ranks\n" << r.err;
      check(r.err);
    }
    std::filesystem::remove(out);
  }

  // The pipeline's summary: the prefill step was cut into micro-batches, more of them than steps.
  static void expect_micro_batches(const std::string& err) {
    int steps = 0, micro = 0;
    const size_t at = err.find("[sluice] pipeline: ");
    ASSERT_NE(at, std::string::npos) << err;
    ASSERT_EQ(std::sscanf(err.c_str() + at, "[sluice] pipeline: %d steps in %d micro-batches", &steps, &micro), 2);
    EXPECT_GT(micro, steps) << err;
  }
};

TEST_F(Pipeline, RunMatchesOneProcessDense) { expect_run_matches(model_path("stories260K/stories260K.gguf"), {2, 3}); }

// One long prompt, alone in its step: the pipeline cuts it into pieces so
// that the stages work at once (PipelineDriver::pieces), and the tokens stay
// those of one process.
TEST_F(Pipeline, OneLongPromptIsCutIntoMicroBatches) {
  std::string prompt;
  for (int i = 0; i < 12; ++i) prompt += "Once upon a time, there was a little girl named Lily. ";
  const std::string args = "run -m " + model_path("stories260K/stories260K.gguf") + " -p '" + prompt +
                           "' -n 8 --temp 0 --json -t 1";
  const std::vector<int32_t> alone = run_tokens(run_cli(args));
  ASSERT_EQ(alone.size(), 8u);
  const CliResult r = run_mpi(2, args + " --parallel pp");
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
  EXPECT_NE(r.err.find("ms waiting on disks"), std::string::npos) << r.err;
  std::filesystem::remove(path);
}

TEST_F(Pipeline, StreamingRoutedRanksMatchOneProcess) {
  // stories-moe (f32): 4 routed layers of 16 experts of 72 KiB and 0.5 MB
  // beside them. Over 2 ranks a range is 2.3 MB of experts; under 1.8 MB each
  // rank keeps its layers' dense parts, pools expert slots in the rest and
  // reads the other experts of its range from its own disk.
  const std::string model = model_path("stories-moe/stories-moe.gguf");
  const std::string args = "run -m " + model + " -p 'Once upon a time' -n 24 --temp 0 --json -t 1";
  const std::vector<int32_t> alone = run_tokens(run_cli(args));
  ASSERT_EQ(alone.size(), 24u);
  const CliResult r = run_mpi(2, args + " --mem-budget 1.8M --parallel pp");
  EXPECT_EQ(run_tokens(r), alone) << r.err;
  EXPECT_NE(r.err.find("rank(s) 0, 1 stream part of their range"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 0 layers 0-1: experts stream from its disk"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 1 layers 2-3: experts stream from its disk"), std::string::npos) << r.err;
  // Each rank's store pools only its own layers' experts (its placement map).
  EXPECT_NE(r.err.find("rank 0's range streams from its disk:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 1's range streams from its disk:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ms waiting on disks"), std::string::npos) << r.err;
  // Batched, the same.
  expect_batched_matches(model, "pp --mem-budget 1.8M", {2}, [](const std::string& err) {
    EXPECT_NE(err.find("rank 1's range streams from its disk:"), std::string::npos) << err;
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

// The pid of the child of `parent` whose MPI rank is `rank` (from its environment).
pid_t rank_pid(pid_t parent, int rank) {
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    int ppid = 0;
    char state = 0;
    if (std::sscanf(line.c_str() + close + 1, " %c %d", &state, &ppid) != 2 || ppid != parent) continue;
    std::ifstream env(e.path() / "environ");
    const std::string vars((std::istreambuf_iterator<char>(env)), {});
    if (vars.find("OMPI_COMM_WORLD_RANK=" + std::to_string(rank) + '\0') != std::string::npos)
      return static_cast<pid_t>(std::stoi(name));
  }
  return -1;
}

// serve over n_ranks; rank `stopped` stops (SIGSTOP) once tokens flow: the
// request ends with an error within the timeout, the next gets 503 and the job
// ends non-zero, rank 0 saying `failure`. served: the model's name in the API.
// *err: the job's stderr, when asked.
void expect_hung_rank_fails(const std::string& model, const std::string& served, const std::string& mode,
                            const std::string& failure, int n_ranks = 2, int stopped = 1, std::string* err_out = nullptr) {
  const std::string err_path = testing::cli_temp_path("serve_stderr.txt");
  const std::string cmd = mpirun_prefix(n_ranks) + SLUICE_BINARY + " serve -m " + model + " --port 0 -t 1 --parallel " +
                          mode + " --parallel-timeout 2 2>" + err_path;
  const pid_t mpirun = fork();
  ASSERT_GE(mpirun, 0);
  if (mpirun == 0) {
    setpgid(0, 0);
    execl("/bin/sh", "sh", "-c", ("exec env " + cmd).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // A failed assertion below leaves no job behind.
  struct Reaper {
    pid_t job;
    pid_t worker = -1;
    bool done = false;
    ~Reaper() {
      if (done) return;
      if (worker > 0) kill(worker, SIGKILL);
      kill(-job, SIGKILL);
      waitpid(job, nullptr, 0);
    }
  } reaper{mpirun};
  auto read_err = [&] {
    std::ifstream e(err_path);
    return std::string((std::istreambuf_iterator<char>(e)), {});
  };
  // The port rank 0 bound (printed), then the model loaded.
  int port = 0;
  for (int i = 0; i < 600 && port == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const std::string err = read_err();
    const size_t at = err.find("listening on http://127.0.0.1:");
    if (at != std::string::npos) port = std::atoi(err.c_str() + at + 30);
  }
  ASSERT_GT(port, 0) << read_err();
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60, 0);
  bool up = false;
  for (int i = 0; i < 600 && !up; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto h = c.Get("/health");
    up = h && h->status == 200;
  }
  ASSERT_TRUE(up) << "server did not come up\n" << read_err();
  const pid_t worker = rank_pid(mpirun, stopped);
  ASSERT_GT(worker, 0);
  reaper.worker = worker;
  // A streamed generation; the worker stops answering once tokens flow.
  const nlohmann::json body{{"model", served}, {"prompt", "Once upon a time"}, {"max_tokens", 400}, {"temperature", 0},
                            {"ignore_eos", true}, {"stream", true}};
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  std::string stream;
  bool stopped = false;
  auto t_stop = std::chrono::steady_clock::now();
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    stream.append(data, len);
    if (!stopped && stream.find("\"text\"") != std::string::npos) {
      kill(worker, SIGSTOP);
      stopped = true;
      t_stop = std::chrono::steady_clock::now();
    }
    return true;
  };
  auto res = c.send(req);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_stop).count();
  ASSERT_TRUE(res) << "no response";
  ASSERT_TRUE(stopped) << stream;
  EXPECT_NE(stream.find("service_unavailable"), std::string::npos) << stream;
  EXPECT_NE(stream.find("did not complete"), std::string::npos) << stream;
  EXPECT_LT(took, 20.0);
  // A request after the failure fails at once with 503, until the job ends.
  auto again = c.Post("/v1/completions", nlohmann::json{{"model", served}, {"prompt", "Hi"}, {"max_tokens", 4}}.dump(), "application/json");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 503) << again->body;
  // The job ends by itself, non-zero.
  int status = 0;
  pid_t done = 0;
  for (int i = 0; i < 300 && done == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    done = waitpid(mpirun, &status, WNOHANG);
  }
  if (done == 0) {
    kill(worker, SIGKILL);
    kill(-mpirun, SIGKILL);
    waitpid(mpirun, &status, 0);
    reaper.done = true;
    FAIL() << "the job did not end";
  }
  reaper.done = true;
  EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const std::string err = read_err();
  EXPECT_NE(err.find(failure), std::string::npos) << err;
  if (err_out) *err_out = err;
}

TEST_F(Pipeline, HungRankFailsRequests) {
  expect_hung_rank_fails(model_path("stories260K/stories260K.gguf"), "llama", "pp", "the pipeline failed");
}

class ExpertParallel : public Pipeline {
 protected:
  // `run` alone and over 2 ranks with --parallel ep give the same greedy tokens.
  static void expect_run_matches(const std::string& model, const std::string& attention = "rank0") {
    const std::string args = "run -m " + model + " -p 'Once upon a time' -n 24 --temp 0 --json -t 1";
    const std::vector<int32_t> alone = run_tokens(run_cli(args));
    ASSERT_EQ(alone.size(), 24u);
    const CliResult r = run_mpi(2, args + " --parallel ep --ep-attention " + attention);
    EXPECT_EQ(run_tokens(r), alone) << r.err;
    EXPECT_NE(r.err.find("experts over 2 ranks (ep)"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("[sluice] attention on " + std::string(attention == "every" ? "every rank" : "rank 0")),
              std::string::npos)
        << r.err;
    expect_rank1_computed(r.err);
  }

  // The job's summary says rank 1 computed expert rows and rows crossed its link.
  static void expect_rank1_computed(const std::string& err) {
    const size_t at = err.find("[sluice] experts: ");
    ASSERT_NE(at, std::string::npos) << err;
    int layers = 0, rows0 = 0, rows1 = 0;
    ASSERT_EQ(std::sscanf(err.c_str() + at, "[sluice] experts: %d routed layers dispatched, expert rows per rank %d/%d",
                          &layers, &rows0, &rows1),
              3)
        << err;
    EXPECT_GT(layers, 0);
    EXPECT_GT(rows0, 0);
    EXPECT_GT(rows1, 0);
    EXPECT_EQ(err.find("0->1 0 B"), std::string::npos) << err;
  }

  static std::string synth(const char* preset) {
    const std::string path = testing::cli_temp_path(std::string(preset) + ".gguf");
    const CliResult w = run_cli(fmt::format("synth --preset {} --layers 3 --type q8_0 -t 1 -o {}", preset, path));
    EXPECT_EQ(w.exit_code, 0) << w.err;
    return path;
  }
};

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
  const std::string args = "run -m " + model + " -p 'Once upon a time' -n 24 --temp 0 --json -t 1";
  const std::vector<int32_t> alone = run_tokens(run_cli(args));
  ASSERT_EQ(alone.size(), 24u);
  const CliResult r = run_mpi(2, args + " --mem-budget 1.5M --parallel ep --ep-attention rank0");
  EXPECT_EQ(run_tokens(r), alone) << r.err;
  EXPECT_NE(r.err.find("rank(s) 0, 1 stream their share from their own disk"), std::string::npos) << r.err;
  // Each rank's store holds and reads only its share (its placement map).
  EXPECT_NE(r.err.find("rank 0's share streams from its disk:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("experts 0-7 of 16: an expert share"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 1's share streams from its disk:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("experts 8-15 of 16: an expert share"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ms waiting on disks"), std::string::npos) << r.err;
  expect_rank1_computed(r.err);
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
  const std::string args = "run -m " + model + " -p 'Once upon a time' -n 24 --temp 0 --json -t 1";
  const std::vector<int32_t> alone = run_tokens(run_cli(args));
  ASSERT_EQ(alone.size(), 24u);
  const CliResult r = run_mpi(2, args + " --mem-budget 1.5M --parallel ep --ep-attention every");
  EXPECT_EQ(run_tokens(r), alone) << r.err;
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

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

class PipelineExperts : public ExpertParallel {
 protected:
  // Both stages' expert summaries: the lead of each sent rows to its expert
  // rank and each computed some (rank 0 -> 1, rank 2 -> 3).
  static void expect_both_stages_computed(const std::string& err) {
    for (const char* link : {"sent 0->1 ", "sent 2->3 "}) {
      const size_t end = err.find(link);
      ASSERT_NE(end, std::string::npos) << link << "\n" << err;
      const size_t at = err.rfind("[sluice] experts: ", end);
      ASSERT_NE(at, std::string::npos) << err;
      int layers = 0, rows0 = 0, rows1 = 0;
      ASSERT_EQ(std::sscanf(err.c_str() + at,
                            "[sluice] experts: %d routed layers dispatched, expert rows per rank %d/%d", &layers,
                            &rows0, &rows1),
                3)
          << err;
      EXPECT_GT(layers, 0) << link;
      EXPECT_GT(rows0, 0) << link;
      EXPECT_GT(rows1, 0) << link;
    }
  }
};

TEST_F(PipelineExperts, MatchesOneProcess) {
  const std::string model = model_path("stories-moe/stories-moe.gguf");
  const std::string args = "run -m " + model + " -p 'Once upon a time' -n 24 --temp 0 --json -t 1";
  const std::vector<int32_t> alone = run_tokens(run_cli(args));
  ASSERT_EQ(alone.size(), 24u);
  const CliResult r = run_mpi(4, args + " --parallel pp,ep --ep-size 2");
  EXPECT_EQ(run_tokens(r), alone) << r.err;
  EXPECT_NE(r.err.find("[sluice] pipeline of 2 stages x 2 ranks (pp,ep)"), std::string::npos) << r.err;
  // The map: a row per rank with its stage, role, layers and experts.
  for (const char* row : {"0      lead     0-", "0      experts  0-", "1      lead     ", "1      experts  "}) {
    const size_t at = r.err.find(row);
    ASSERT_NE(at, std::string::npos) << row << "\n" << r.err;
  }
  EXPECT_NE(r.err.find(" 0-7 +rest "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" 8-15 "), std::string::npos) << r.err;
  expect_both_stages_computed(r.err);
  // Batched, cut into micro-batches between the stages.
  expect_batched_matches(model, "pp,ep --ep-size 2", {4}, [](const std::string& err) {
    expect_both_stages_computed(err);
    expect_micro_batches(err);
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
