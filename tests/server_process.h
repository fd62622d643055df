// A `sluice serve` child process for end-to-end tests: started on an
// OS-chosen loopback port (read from its log), ready once /health answers,
// killed when destroyed. Its stderr is kept for failure messages.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>

extern char** environ;

namespace sluice::testing {

// `sluice serve -m model <extra>` (model "": no -m, the shipped default
// model); port() is 0 if it did not become ready in 60 s.
class ServerProcess {
 public:
  ServerProcess(const std::string& model, const std::vector<std::string>& extra) {
    int fds[2];
    if (pipe(fds) != 0) return;
    std::vector<std::string> args = {SLUICE_BINARY, "serve", "--host", "127.0.0.1", "--port", "0"};
    if (!model.empty()) args.insert(args.begin() + 2, {"-m", model});
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDERR_FILENO);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    if (posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    err_fd_ = fds[0];
    fcntl(err_fd_, F_SETFL, O_NONBLOCK);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    const std::regex listening(R"(listening on http://127\.0\.0\.1:(\d+))");
    std::smatch m;
    while (pid_ > 0 && std::chrono::steady_clock::now() < deadline) {
      read_stderr();
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {  // exited (a bad flag or file): no point waiting
        reaped_ = true;
        break;
      }
      if (port_ == 0 && std::regex_search(stderr_, m, listening)) port_ = std::stoi(m[1]);
      if (port_ != 0) {
        httplib::Client c("127.0.0.1", port_);
        auto r = c.Get("/health");
        if (r && r->status == 200) return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
    }
    port_ = 0;
  }
  ~ServerProcess() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (err_fd_ >= 0) close(err_fd_);
  }
  int port() const { return port_; }
  // Sends `sig` and waits (bounded) for the exit code; -1 if it did not exit.
  int stop(int sig) {
    kill(pid_, sig);
    for (int i = 0; i < 600; ++i) {
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        reaped_ = true;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return -1;
  }
  const std::string& log() {
    read_stderr();
    return stderr_;
  }

 private:
  void read_stderr() {
    char buf[4096];
    ssize_t n;
    while ((n = read(err_fd_, buf, sizeof buf)) > 0) stderr_.append(buf, static_cast<size_t>(n));
  }
  pid_t pid_ = -1;
  int err_fd_ = -1;
  int port_ = 0;
  bool reaped_ = false;
  std::string stderr_;
};

}  // namespace sluice::testing
