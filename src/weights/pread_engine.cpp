// The pread thread-pool backend of IoEngine (see io_engine.h): queue_depth
// worker threads each take one read at a time and do blocking pread() calls
// until it is complete (or hits end of file), then post the completion.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "base/check.h"
#include "weights/io_engine.h"

namespace sluice::weights {
namespace {

class PreadEngine final : public IoEngine {
 public:
  PreadEngine(int fd, const std::string& path, bool direct, uint64_t file_size, int queue_depth)
      : IoEngine(IoBackend::kPread, path, direct, file_size, queue_depth), fd_(fd) {
    for (int i = 0; i < queue_depth; ++i) workers_.emplace_back([this] { worker_loop(); });
  }

  ~PreadEngine() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;  // workers finish the reads already queued, then exit
    }
    work_cv_.notify_all();
    for (std::thread& t : workers_) t.join();
    ::close(fd_);
  }

  int in_flight() const override { return in_flight_; }

  void submit(const IoRead& r) override {
    check_submit(r, direct_, in_flight_, queue_depth_);
    ++in_flight_;
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(r);
    }
    work_cv_.notify_one();
  }

  int wait(std::vector<IoCompletion>& out, double timeout_s) override {
    std::unique_lock<std::mutex> lock(mu_);
    auto ready = [&] { return !done_.empty() || interrupted_; };
    if (timeout_s < 0) {
      done_cv_.wait(lock, ready);
    } else if (timeout_s > 0) {
      done_cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), ready);
    }
    interrupted_ = false;
    const int n = static_cast<int>(done_.size());
    for (IoCompletion& c : done_) out.push_back(std::move(c));
    done_.clear();
    in_flight_ -= n;
    return n;
  }

  void interrupt() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      interrupted_ = true;
    }
    done_cv_.notify_all();
  }

 private:
  void worker_loop() {
    while (true) {
      IoRead r;
      {
        std::unique_lock<std::mutex> lock(mu_);
        work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stop_ and nothing left
        r = queue_.front();
        queue_.pop_front();
      }
      IoCompletion c{.tag = r.tag};
      while (c.bytes < r.length) {
        const ssize_t got = ::pread(fd_, r.dst + c.bytes, r.length - c.bytes, static_cast<off_t>(r.offset + c.bytes));
        if (got < 0) {
          if (errno == EINTR || errno == EAGAIN) continue;
          c.status = io_error("{}: read of {} bytes at {} failed: {}", path_, r.length, r.offset, std::strerror(errno));
          break;
        }
        if (got == 0) break;  // end of file
        c.bytes += static_cast<uint64_t>(got);
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        done_.push_back(std::move(c));
      }
      done_cv_.notify_all();
    }
  }

  int fd_;
  int in_flight_ = 0;  // touched only by the submitting thread
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::deque<IoRead> queue_;
  std::vector<IoCompletion> done_;
  bool interrupted_ = false;
  bool stop_ = false;
};

}  // namespace

std::unique_ptr<IoEngine> make_pread_engine(int fd, const std::string& path, bool direct, uint64_t file_size,
                                            int queue_depth) {
  return std::make_unique<PreadEngine>(fd, path, direct, file_size, queue_depth);
}

}  // namespace sluice::weights
