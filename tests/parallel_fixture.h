// Helpers of the --parallel end-to-end tests (parallel_pipeline_test.cpp,
// parallel_experts_test.cpp): mpirun of N ranks of this build, the fixtures
// that compare a job's tokens with one process's, and the hung-rank check.
// Each rank runs one thread (-t 1): three or four ranks share CI's two cores.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "base/test_data.h"
#include "cli_runner.h"
#include "dist/comm.h"

namespace sluice {


using testing::CliResult;
using testing::run_cli;

using testing::model_path;

// mpirun of `n` ranks, each running `sluice <args>` (root allowed, as CI is).
inline std::string mpirun_prefix(int n) {
  return fmt::format("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader,tcp {} "
                     "--oversubscribe --bind-to none -np {} ",
                     SLUICE_MPIEXEC, n);
}

inline CliResult run_mpi(int n, const std::string& args) {
  return testing::run_binary(mpirun_prefix(n) + SLUICE_BINARY, args);
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

  // `run` of `model` (24 greedy tokens) alone and over n ranks with
  // `job_args` (--parallel and the rest): the same tokens. Returns the job's result.
  static CliResult run_matching_alone(const std::string& model, int n, const std::string& job_args) {
    const std::string args = "run -m " + model + " -p 'Once upon a time' -n 24 --temp 0 --json -t 1";
    const std::vector<int32_t> alone = run_tokens(run_cli(args));
    EXPECT_EQ(alone.size(), 24u);
    CliResult r = run_mpi(n, args + " " + job_args);
    EXPECT_EQ(run_tokens(r), alone) << n << " ranks, " << job_args << "\n" << r.err;
    return r;
  }

  // `run` alone and over n ranks give the same greedy tokens.
  static void expect_run_matches(const std::string& model, const std::vector<int>& ranks) {
    for (int n : ranks) {
      const CliResult r = run_matching_alone(model, n, "--parallel pp");
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

// The pid of the child of `parent` whose MPI rank is `rank` (from its environment).
inline pid_t rank_pid(pid_t parent, int rank) {
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
inline void expect_hung_rank_fails(const std::string& model, const std::string& served, const std::string& mode,
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

class ExpertParallel : public Pipeline {
 protected:
  // `run` alone and over 2 ranks with --parallel ep give the same greedy tokens.
  static void expect_run_matches(const std::string& model, const std::string& attention = "rank0") {
    const CliResult r = run_matching_alone(model, 2, "--parallel ep --ep-attention " + attention);
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

  // A streaming expert rank's store table (printed at the job's end): it
  // read ahead what rank 0 predicted, and found some of its experts ready.
  static void expect_read_ahead(const std::string& err, int rank) {
    const size_t at = err.find(fmt::format("[sluice] rank {}'s experts (", rank));
    ASSERT_NE(at, std::string::npos) << err;
    const size_t all = err.find("\n    all ", at);
    ASSERT_NE(all, std::string::npos) << err;
    double recall = 0, precision = 0, hit = 0, kept = 0;
    int resident = 0, chosen = 0, ready = 0;
    ASSERT_EQ(std::sscanf(err.c_str() + all, "\n    all %d %lf%% %lf%% %lf%% %lf%% %d %d", &resident, &recall,
                          &precision, &hit, &kept, &chosen, &ready),
              7)
        << err.substr(all, 200);
    EXPECT_GT(recall, 0.0) << err.substr(at, 800);
    EXPECT_GT(ready, 0) << err.substr(at, 800);
  }

  static std::string synth(const char* preset) {
    const std::string path = testing::cli_temp_path(std::string(preset) + ".gguf");
    const CliResult w = run_cli(fmt::format("synth --preset {} --layers 3 --type q8_0 -t 1 -o {}", preset, path));
    EXPECT_EQ(w.exit_code, 0) << w.err;
    return path;
  }
};

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

}  // namespace sluice
