// The io_uring backend of IoEngine (see io_engine.h).
//
// Every read in flight owns one entry of `pending_` (its index is the SQE's
// user_data), so a short read can be reissued for its remainder without the
// caller noticing. submit() only fills an SQE: wait() hands every one filled
// since to the kernel in one io_uring_submit (a refill of 16 reads was 16
// system calls, each building its O_DIRECT read, while the caller held its
// lock), then sleeps in ppoll() on two eventfds: the one registered with the
// ring (signalled on each completion) and a private one interrupt() writes to.
#include <fcntl.h>
#include <liburing.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>

#include "base/check.h"
#include "weights/io_engine.h"

namespace sluice::weights {
namespace {

class UringEngine final : public IoEngine {
 public:
  UringEngine(int fd, const std::string& path, bool direct, uint64_t file_size, int queue_depth)
      : IoEngine(IoBackend::kUring, path, direct, file_size, queue_depth), fd_(fd) {}

  ~UringEngine() override {
    // Drain reads still in flight: their buffers belong to the caller.
    if (ring_ok_) flush();
    while (ring_ok_ && in_flight_ > 0) {
      io_uring_cqe* cqe = nullptr;
      if (io_uring_wait_cqe(&ring_, &cqe) != 0) break;
      io_uring_cqe_seen(&ring_, cqe);
      --in_flight_;
    }
    if (ring_ok_) io_uring_queue_exit(&ring_);
    if (ring_efd_ >= 0) ::close(ring_efd_);
    if (wake_efd_ >= 0) ::close(wake_efd_);
    if (owns_fd_) ::close(fd_);
  }

  Status init() {
    const int rc = io_uring_queue_init(static_cast<unsigned>(queue_depth_), &ring_, 0);
    if (rc < 0) return io_error("io_uring_queue_init: {}", std::strerror(-rc));
    ring_ok_ = true;
    ring_efd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    wake_efd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (ring_efd_ < 0 || wake_efd_ < 0) return io_error("eventfd: {}", std::strerror(errno));
    const int reg = io_uring_register_eventfd(&ring_, ring_efd_);
    if (reg < 0) return io_error("io_uring_register_eventfd: {}", std::strerror(-reg));
    pending_.resize(static_cast<size_t>(queue_depth_));
    for (int i = queue_depth_ - 1; i >= 0; --i) free_.push_back(i);
    owns_fd_ = true;
    return Status();
  }

  int in_flight() const override { return in_flight_; }

  void submit(const IoRead& r) override {
    check_submit(r, direct_, in_flight_, queue_depth_);
    const int idx = free_.back();
    free_.pop_back();
    pending_[static_cast<size_t>(idx)] = Pending{.read = r, .done = 0};
    ++in_flight_;
    if (r.offset >= file_size_) {  // entirely past EOF: nothing to read
      ready_.push_back({.tag = r.tag, .bytes = 0, .status = Status()});
      release(idx);
      return;
    }
    queue_sqe(idx);
  }

  int wait(std::vector<IoCompletion>& out, double timeout_s) override {
    flush();
    int n = drain(out);
    if (n > 0 || timeout_s == 0) return n;
    pollfd fds[2] = {{.fd = ring_efd_, .events = POLLIN, .revents = 0}, {.fd = wake_efd_, .events = POLLIN, .revents = 0}};
    timespec ts{};
    timespec* tsp = nullptr;
    if (timeout_s > 0) {
      ts.tv_sec = static_cast<time_t>(timeout_s);
      ts.tv_nsec = static_cast<long>((timeout_s - std::floor(timeout_s)) * 1e9);
      tsp = &ts;
    }
    while (true) {
      const int rc = ::ppoll(fds, 2, tsp, nullptr);
      if (rc < 0 && errno == EINTR) continue;
      break;
    }
    uint64_t v = 0;
    if (fds[1].revents & POLLIN) (void)!::read(wake_efd_, &v, sizeof v);
    return drain(out);
  }

  void interrupt() override {
    const uint64_t one = 1;
    (void)!::write(wake_efd_, &one, sizeof one);
  }

 private:
  struct Pending {
    IoRead read;
    uint64_t done = 0;  // bytes landed so far
  };

  void queue_sqe(int idx) {
    Pending& p = pending_[static_cast<size_t>(idx)];
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    CHECK(sqe != nullptr);  // at most queue_depth entries are ever outstanding
    io_uring_prep_read(sqe, fd_, p.read.dst + p.done, static_cast<unsigned>(p.read.length - p.done),
                       p.read.offset + p.done);
    io_uring_sqe_set_data64(sqe, static_cast<uint64_t>(idx));
    ++unsubmitted_;
  }

  // Hands the filled SQEs to the kernel. One refused for now (EAGAIN, EBUSY,
  // EINTR) stays in the ring and goes with the next call.
  void flush() {
    if (unsubmitted_ == 0) return;
    const int rc = io_uring_submit(&ring_);
    CHECK(rc >= 0 || rc == -EINTR || rc == -EAGAIN || rc == -EBUSY);
    if (rc > 0) unsubmitted_ = std::max(0, unsubmitted_ - rc);
  }

  void release(int idx) {
    free_.push_back(idx);
    --in_flight_;
  }

  // Moves every completion that is ready into `out`, reissuing short reads.
  int drain(std::vector<IoCompletion>& out) {
    uint64_t v = 0;
    (void)!::read(ring_efd_, &v, sizeof v);  // reset before peeking, so no wakeup is lost
    int n = 0;
    for (IoCompletion& c : ready_) {
      out.push_back(std::move(c));
      ++n;
    }
    ready_.clear();
    io_uring_cqe* cqe = nullptr;
    while (io_uring_peek_cqe(&ring_, &cqe) == 0 && cqe != nullptr) {
      const int idx = static_cast<int>(io_uring_cqe_get_data64(cqe));
      const int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      Pending& p = pending_[static_cast<size_t>(idx)];
      if (res == -EAGAIN || res == -EINTR) {
        queue_sqe(idx);
        continue;
      }
      if (res < 0) {
        out.push_back({.tag = p.read.tag, .bytes = p.done,
                       .status = io_error("{}: read of {} bytes at {} failed: {}", path_, p.read.length,
                                          p.read.offset, std::strerror(-res))});
        release(idx);
        ++n;
        continue;
      }
      p.done += static_cast<uint64_t>(res);
      const bool at_eof = res == 0 || p.read.offset + p.done >= file_size_;
      if (p.done < p.read.length && !at_eof) {
        queue_sqe(idx);  // short read: ask for the rest
        continue;
      }
      out.push_back({.tag = p.read.tag, .bytes = p.done, .status = Status()});
      release(idx);
      ++n;
    }
    flush();  // the remainders of short reads
    return n;
  }

  int fd_;
  bool owns_fd_ = false;  // from a successful init() on
  io_uring ring_{};
  bool ring_ok_ = false;
  int ring_efd_ = -1;
  int wake_efd_ = -1;
  int in_flight_ = 0;
  int unsubmitted_ = 0;  // SQEs filled since the last io_uring_submit
  std::vector<Pending> pending_;
  std::vector<int> free_;
  std::vector<IoCompletion> ready_;
};

}  // namespace

StatusOr<std::unique_ptr<IoEngine>> make_uring_engine(int fd, const std::string& path, bool direct,
                                                      uint64_t file_size, int queue_depth) {
  auto engine = std::make_unique<UringEngine>(fd, path, direct, file_size, queue_depth);
  RETURN_IF_ERROR(engine->init());  // on failure fd stays the caller's
  return std::unique_ptr<IoEngine>(std::move(engine));
}

}  // namespace sluice::weights
