#include "plan/calibrate.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "quant/quant.h"
#include "base/timer.h"

namespace sluice::plan {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

constexpr size_t kDirectAlign = 4096;
constexpr size_t kDiskChunk = 8u << 20;

// Reads up to `bytes` of an open fd sequentially into an aligned buffer.
StatusOr<uint64_t> read_all(int fd, uint64_t bytes, const std::string& path) {
  std::unique_ptr<void, FreeDeleter> buf(std::aligned_alloc(kDirectAlign, kDiskChunk));
  if (!buf) return resource_exhausted("cannot allocate the disk probe buffer");
  uint64_t done = 0;
  while (done < bytes) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(kDiskChunk, bytes - done));
    const size_t aligned = (want + kDirectAlign - 1) / kDirectAlign * kDirectAlign;
    const ssize_t got = ::pread(fd, buf.get(), aligned, static_cast<off_t>(done));
    if (got < 0) return io_error("{}: read failed: {}", path, std::strerror(errno));
    if (got == 0) break;
    done += static_cast<uint64_t>(got);
  }
  return done;
}

Status write_temp_file(const std::string& path, uint64_t bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return io_error("{}: cannot create: {}", path, std::strerror(errno));
  std::vector<uint64_t> chunk(kDiskChunk / sizeof(uint64_t));
  std::mt19937_64 rng(1);
  for (uint64_t& x : chunk) x = rng();  // incompressible, so no filesystem trick skips it
  uint64_t done = 0;
  Status st;
  while (done < bytes && st.ok()) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(kDiskChunk, bytes - done));
    const ssize_t w = ::write(fd, chunk.data(), want);
    if (w <= 0) st = io_error("{}: write failed: {}", path, std::strerror(errno));
    else done += static_cast<uint64_t>(w);
  }
  if (st.ok() && ::fsync(fd) != 0) st = io_error("{}: fsync failed: {}", path, std::strerror(errno));
  ::close(fd);
  return st;
}

}  // namespace

Hardware Calibration::as_hardware() const {
  return Hardware{.name = "this machine (calibrated)",
                  .mem_gbps = mem_read_gbps,
                  .peak_tflops = matmul_tflops,
                  .mem_capacity_gb = mem_capacity_gb,
                  .source = fmt::format("probes: {} threads", n_threads)};
}

double probe_memory_read_gbps(ThreadPool& pool, uint64_t bytes, int n_repeats) {
  const size_t n = static_cast<size_t>(bytes / sizeof(uint64_t));
  std::vector<uint64_t> data(n);
  // Touch every page from the threads that will read it.
  pool.parallel_for(static_cast<int64_t>(n), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) data[static_cast<size_t>(i)] = static_cast<uint64_t>(i);
  });
  std::vector<uint64_t> sums(static_cast<size_t>(pool.n_threads()) * 8, 0);  // padded per thread
  std::vector<double> gbps;
  for (int r = 0; r < std::max(1, n_repeats); ++r) {
    Stopwatch sw;
    pool.run_on_all([&](int t, int nt) {
      const size_t b = n * static_cast<size_t>(t) / static_cast<size_t>(nt);
      const size_t e = n * static_cast<size_t>(t + 1) / static_cast<size_t>(nt);
      uint64_t s = 0;
      for (size_t i = b; i < e; ++i) s += data[i];
      sums[static_cast<size_t>(t) * 8] += s;
    });
    gbps.push_back(static_cast<double>(n * sizeof(uint64_t)) / sw.seconds() / 1e9);
  }
  uint64_t total = 0;
  for (uint64_t s : sums) total += s;
  // The sum is consumed so the loop cannot be dropped; it is never zero.
  return total == 0 ? 0.0 : median(gbps);
}

double probe_matmul_tflops(ThreadPool& pool, int64_t n_in, int64_t n_out, int64_t n_tokens, int n_repeats,
                           DType type) {
  std::vector<float> wf(static_cast<size_t>(n_in * n_out));
  std::vector<float> x(static_cast<size_t>(n_in * n_tokens));
  std::vector<float> y(static_cast<size_t>(n_out * n_tokens));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& v : wf) v = dist(rng);
  for (float& v : x) v = dist(rng);
  std::vector<uint8_t> w(row_bytes(type, n_in) * static_cast<size_t>(n_out));
  quantize_tensor(type, wf.data(), w.data(), n_out, n_in);
  std::vector<uint8_t> act(cpu::matmul_scratch_bytes(n_tokens, n_in));
  const cpu::MatmulJob job[1] = {{cpu::WeightView{.type = type, .data = w.data(), .n_in = n_in, .n_out = n_out}, y.data()}};
  const cpu::Isa isa = cpu::active_isa();
  cpu::matmul_group(job, x.data(), n_in, n_tokens, act.data(), pool, isa);  // warm-up
  std::vector<double> tflops;
  const double flops = 2.0 * static_cast<double>(n_in) * static_cast<double>(n_out) * static_cast<double>(n_tokens);
  for (int r = 0; r < std::max(1, n_repeats); ++r) {
    Stopwatch sw;
    cpu::matmul_group(job, x.data(), n_in, n_tokens, act.data(), pool, isa);
    tflops.push_back(flops / sw.seconds() / 1e12);
  }
  return median(tflops);
}

StatusOr<DiskProbe> probe_disk_read(const std::string& path, const std::string& temp_dir, uint64_t bytes) {
  std::string file = path;
  bool temp = false;
  if (file.empty()) {
    file = fmt::format("{}/sluice-plan-disk-probe-{}.bin", temp_dir, ::getpid());
    RETURN_IF_ERROR(write_temp_file(file, bytes));
    temp = true;
  }
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) return not_found("{}: no such file", file);
  const uint64_t to_read = std::min<uint64_t>(bytes, static_cast<uint64_t>(st.st_size)) / kDirectAlign * kDirectAlign;
  DiskProbe probe;
  int fd = ::open(file.c_str(), O_RDONLY | O_DIRECT);
  probe.direct = fd >= 0;
  if (fd < 0) {
    // O_DIRECT refused (tmpfs, some network filesystems): drop cached pages and read buffered.
    fd = ::open(file.c_str(), O_RDONLY);
    if (fd < 0) {
      if (temp) ::unlink(file.c_str());
      return io_error("{}: cannot open: {}", file, std::strerror(errno));
    }
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  }
  Stopwatch sw;
  StatusOr<uint64_t> got = read_all(fd, to_read, file);
  double seconds = sw.seconds();
  ::close(fd);
  if (!got.ok() && probe.direct) {
    // Opened with O_DIRECT but the filesystem rejects direct reads: go buffered.
    probe.direct = false;
    fd = ::open(file.c_str(), O_RDONLY);
    if (fd >= 0) {
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      sw.reset();
      got = read_all(fd, to_read, file);
      seconds = sw.seconds();
      ::close(fd);
    }
  }
  if (temp) ::unlink(file.c_str());
  if (!got.ok()) return got.status();
  if (*got == 0) return data_loss("{}: nothing to read for the disk probe", file);
  probe.gbps = static_cast<double>(*got) / seconds / 1e9;
  probe.note = fmt::format("{} MiB of {}{}", *got >> 20, temp ? "a temporary file" : file,
                           probe.direct ? " with O_DIRECT" : " buffered (O_DIRECT refused; cached pages dropped first)");
  return probe;
}

StatusOr<Calibration> calibrate(const CalibrateOptions& o) {
  ThreadPool pool(o.n_threads);
  Calibration c;
  c.n_threads = pool.n_threads();
  c.mem_read_gbps = probe_memory_read_gbps(pool, o.mem_bytes, o.n_repeats);
  c.matmul_tflops = probe_matmul_tflops(pool, o.matmul_n_in, o.matmul_n_out, o.matmul_n_tokens,
                                        std::max(1, o.n_repeats / 2), o.matmul_type);
  c.matmul_type = o.matmul_type;
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && page_size > 0) c.mem_capacity_gb = static_cast<double>(pages) * static_cast<double>(page_size) / 1e9;
  if (o.probe_disk) {
    ASSIGN_OR_RETURN(DiskProbe d, probe_disk_read(o.disk_path, o.temp_dir, o.disk_bytes));
    c.disk_read_gbps = d.gbps;
    c.disk_direct = d.direct;
    c.disk_note = d.note;
  }
  return c;
}

}  // namespace sluice::plan
