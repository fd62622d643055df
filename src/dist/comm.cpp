#include "dist/comm.h"

#include <chrono>
#include <cstring>
#include <thread>

#include "base/check.h"

#ifdef SLUICE_HAVE_MPI
#include <mpi.h>
#endif

namespace sluice::dist {

#ifdef SLUICE_HAVE_MPI

namespace {

static_assert(sizeof(MPI_Request) <= sizeof(uint64_t) && sizeof(MPI_Comm) <= sizeof(uint64_t));

template <typename T>
uint64_t to_bits(T v) {
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof v);
  return b;
}
template <typename T>
T from_bits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof v);
  return v;
}

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return fmt::format("MPI error {}", code);
  return std::string(text, static_cast<size_t>(len));
}

// Messages are sent in pieces of at most this many bytes (MPI counts are int).
constexpr size_t kMaxCount = size_t{1} << 30;

}  // namespace

bool have_mpi() { return true; }

StatusOr<std::unique_ptr<Comm>> Comm::init(double timeout_s) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = 0;
  if (!initialized && MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
    return internal_error("MPI_Init_thread failed");
  if (initialized) MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE)
    return unimplemented("this MPI gives thread level {}; sluice needs MPI_THREAD_MULTIPLE", provided);
  std::unique_ptr<Comm> c(new Comm());
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  c->comm_ = to_bits(comm);
  MPI_Comm_rank(comm, &c->rank_);
  MPI_Comm_size(comm, &c->size_);
  char name[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  MPI_Get_processor_name(name, &len);
  c->host_.assign(name, static_cast<size_t>(len));
  c->timeout_s_ = timeout_s;
  c->sent_ = std::make_unique<std::atomic<uint64_t>[]>(static_cast<size_t>(c->size_));
  for (int i = 0; i < c->size_; ++i) {
    c->sent_[static_cast<size_t>(i)] = 0;
    c->world_ranks_.push_back(i);
  }
  return c;
}

StatusOr<std::unique_ptr<Comm>> Comm::split(int color, int key) const {
  MPI_Comm sub;
  const int rc = MPI_Comm_split(from_bits<MPI_Comm>(comm_), color < 0 ? MPI_UNDEFINED : color, key, &sub);
  if (rc != MPI_SUCCESS) return unavailable("splitting the job's processes failed: {}", mpi_error(rc));
  if (sub == MPI_COMM_NULL) return std::unique_ptr<Comm>();
  MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN);
  std::unique_ptr<Comm> c(new Comm());
  c->comm_ = to_bits(sub);
  c->finalizes_ = false;
  MPI_Comm_rank(sub, &c->rank_);
  MPI_Comm_size(sub, &c->size_);
  c->host_ = host_;
  c->timeout_s_ = timeout_s_;
  c->sent_ = std::make_unique<std::atomic<uint64_t>[]>(static_cast<size_t>(c->size_));
  // Each rank's in the job: this communicator's ranks of the new one's, translated.
  MPI_Group mine, theirs;
  MPI_Comm_group(sub, &mine);
  MPI_Comm_group(from_bits<MPI_Comm>(comm_), &theirs);
  std::vector<int> in_sub(static_cast<size_t>(c->size_)), in_this(static_cast<size_t>(c->size_));
  for (int i = 0; i < c->size_; ++i) {
    c->sent_[static_cast<size_t>(i)] = 0;
    in_sub[static_cast<size_t>(i)] = i;
  }
  MPI_Group_translate_ranks(mine, c->size_, in_sub.data(), theirs, in_this.data());
  MPI_Group_free(&mine);
  MPI_Group_free(&theirs);
  for (const int r : in_this) c->world_ranks_.push_back(world_ranks_[static_cast<size_t>(r)]);
  return c;
}

Comm::~Comm() {
  MPI_Comm comm = from_bits<MPI_Comm>(comm_);
  MPI_Comm_free(&comm);
  if (!finalizes_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

double Comm::wtime() { return MPI_Wtime(); }

void Comm::abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);  // every process of the job, whichever communicator failed
  std::_Exit(code);
}

StatusOr<Pending> Comm::isend(int dest, int tag, const void* data, size_t bytes) {
  CHECK(dest >= 0 && dest < size_ && bytes <= kMaxCount);
  MPI_Request r;
  const int rc = MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, dest, tag, from_bits<MPI_Comm>(comm_), &r);
  if (rc != MPI_SUCCESS) return unavailable("sending to rank {} failed: {}", world_rank(dest), mpi_error(rc));
  sent_[static_cast<size_t>(dest)].fetch_add(bytes, std::memory_order_relaxed);
  return Pending{.handle = to_bits(r), .peer = dest, .tag = tag};
}

StatusOr<Pending> Comm::irecv(int src, int tag, void* data, size_t bytes) {
  CHECK(src >= 0 && src < size_ && bytes <= kMaxCount);
  MPI_Request r;
  const int rc = MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, src, tag, from_bits<MPI_Comm>(comm_), &r);
  if (rc != MPI_SUCCESS) return unavailable("receiving from rank {} failed: {}", world_rank(src), mpi_error(rc));
  return Pending{.handle = to_bits(r), .peer = src, .tag = tag};
}

namespace {

// Polls `done` until it says yes or `timeout` seconds pass (<= 0: forever):
// a few immediate polls, then sleeps of 20 us growing to 100 us while the
// wait is short (a pipeline stage waiting for the other's hidden rows: a
// message is seen within about 0.1 ms a hop), and to 1 ms once it has lasted
// kLongWait (an idle job), so a long wait costs the machine little.
template <typename Poll>
StatusOr<bool> poll_until(double timeout, Poll done) {
  constexpr double kLongWait = 0.05;
  const auto start = std::chrono::steady_clock::now();
  auto sleep = std::chrono::microseconds(20);
  for (int i = 0;; ++i) {
    ASSIGN_OR_RETURN(const bool ok, done());
    if (ok) return true;
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (timeout > 0 && waited > timeout) return false;
    if (i < 64) continue;
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(waited < kLongWait ? 100 : 1000));
  }
}

}  // namespace

Status Comm::wait(Pending& p, const char* what) {
  if (!p.active()) return Status();
  MPI_Request r = from_bits<MPI_Request>(p.handle);
  MPI_Status st;
  ASSIGN_OR_RETURN(const bool done, poll_until(timeout_s_, [&]() -> StatusOr<bool> {
    int flag = 0;
    const int rc = MPI_Test(&r, &flag, &st);
    if (rc != MPI_SUCCESS) return unavailable("{} with rank {} failed: {}", what, world_rank(p.peer), mpi_error(rc));
    return flag != 0;
  }));
  if (!done) {
    MPI_Cancel(&r);
    MPI_Request_free(&r);
    p.handle = 0;
    return unavailable("rank {} did not complete {} within {:.0f} s (it died or hangs)", world_rank(p.peer), what,
                             timeout_s_);
  }
  p.handle = 0;
  return Status();
}

Status Comm::send(int dest, int tag, const void* data, size_t bytes, const char* what) {
  ASSIGN_OR_RETURN(Pending p, isend(dest, tag, data, bytes));
  return wait(p, what);
}

Status Comm::recv(int src, int tag, void* data, size_t bytes, const char* what) {
  ASSIGN_OR_RETURN(Pending p, irecv(src, tag, data, bytes));
  return wait(p, what);
}

Status Comm::recv_message(int src, int tag, std::vector<uint8_t>* out, const char* what, double timeout) {
  MPI_Status st;
  MPI_Comm comm = from_bits<MPI_Comm>(comm_);
  ASSIGN_OR_RETURN(const bool arrived, poll_until(timeout, [&]() -> StatusOr<bool> {
    int flag = 0;
    const int rc = MPI_Iprobe(src, tag, comm, &flag, &st);
    if (rc != MPI_SUCCESS) return unavailable("{} from rank {} failed: {}", what, world_rank(src), mpi_error(rc));
    return flag != 0;
  }));
  if (!arrived)
    return unavailable("rank {} sent no {} within {:.0f} s (it died or hangs)", world_rank(src), what, timeout);
  int count = 0;
  MPI_Get_count(&st, MPI_BYTE, &count);
  out->resize(static_cast<size_t>(count));
  return recv(src, tag, out->data(), out->size(), what);
}

#else  // no MPI in this build

bool have_mpi() { return false; }

StatusOr<std::unique_ptr<Comm>> Comm::init(double) {
  return unimplemented("this sluice was built without MPI (install libopenmpi-dev and rebuild) so it cannot run "
                       "across processes (--parallel)");
}
StatusOr<std::unique_ptr<Comm>> Comm::split(int, int) const { return unimplemented("no MPI"); }
Comm::~Comm() = default;
double Comm::wtime() { return 0; }
void Comm::abort(int code) { std::_Exit(code); }
StatusOr<Pending> Comm::isend(int, int, const void*, size_t) { return unimplemented("no MPI"); }
StatusOr<Pending> Comm::irecv(int, int, void*, size_t) { return unimplemented("no MPI"); }
Status Comm::wait(Pending&, const char*) { return unimplemented("no MPI"); }
Status Comm::send(int, int, const void*, size_t, const char*) { return unimplemented("no MPI"); }
Status Comm::recv(int, int, void*, size_t, const char*) { return unimplemented("no MPI"); }
Status Comm::recv_message(int, int, std::vector<uint8_t>*, const char*, double) { return unimplemented("no MPI"); }

#endif

}  // namespace sluice::dist
