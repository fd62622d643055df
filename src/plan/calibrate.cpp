#include "plan/calibrate.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "backend/cpu/matmul.h"
#include "backend/cpu/repack.h"
#include "base/huge_buffer.h"
#include "base/check.h"
#include "quant/quant.h"
#include "base/timer.h"
#include "model/model_weights.h"
#include "plan/measure_rounds.h"

namespace sluice::plan {
namespace {

// Runs `pass` (which returns the rate of one pass) at least n_repeats times and
// until min_seconds have gone by, and returns the median rate. A window of a
// few hundred milliseconds, not a handful of passes, so a probe sees the same
// mix of quiet and busy moments on a shared machine as a measured run does.
template <typename Pass>
double median_rate(int n_repeats, double min_seconds, Pass&& pass) {
  std::vector<double> rates;
  Stopwatch total;
  constexpr int kMaxPasses = 1000;
  while (static_cast<int>(rates.size()) < std::max(1, n_repeats) ||
         (total.seconds() < min_seconds && static_cast<int>(rates.size()) < kMaxPasses))
    rates.push_back(pass());
  return median(std::move(rates));
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

double Calibration::decode_read_gbps() const { return weight_read_gbps > 0 ? weight_read_gbps : mem_read_gbps; }

Hardware Calibration::as_hardware() const {
  return Hardware{.name = "this machine (calibrated)",
                  .mem_gbps = decode_read_gbps(),
                  .peak_tflops = matmul_tflops,
                  .mem_capacity_gb = mem_capacity_gb,
                  .source = fmt::format("probes: {} threads; memory roof from the {}", n_threads,
                                        weight_read_gbps > 0
                                            ? fmt::format("engine's batch-1 {} matmul", dtype_name(matmul_type))
                                            : std::string("streaming-sum probe"))};
}

double probe_memory_read_gbps(ThreadPool& pool, uint64_t bytes, int n_repeats, double min_seconds) {
  const size_t n = static_cast<size_t>(bytes / sizeof(uint64_t));
  std::vector<uint64_t> data(n);
  // Touch every page from the threads that will read it.
  pool.parallel_for(static_cast<int64_t>(n), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) data[static_cast<size_t>(i)] = static_cast<uint64_t>(i);
  });
  std::vector<uint64_t> sums(static_cast<size_t>(pool.n_threads()) * 8, 0);  // padded per thread
  const double gbps = median_rate(n_repeats, min_seconds, [&] {
    Stopwatch sw;
    pool.run_on_all([&](int t, int nt) {
      const size_t b = n * static_cast<size_t>(t) / static_cast<size_t>(nt);
      const size_t e = n * static_cast<size_t>(t + 1) / static_cast<size_t>(nt);
      uint64_t s = 0;
      for (size_t i = b; i < e; ++i) s += data[i];
      sums[static_cast<size_t>(t) * 8] += s;
    });
    return static_cast<double>(n * sizeof(uint64_t)) / sw.seconds() / 1e9;
  });
  uint64_t total = 0;
  for (uint64_t s : sums) total += s;
  // The sum is consumed so the loop cannot be dropped; it is never zero.
  return total == 0 ? 0.0 : gbps;
}

double probe_matmul_tflops(ThreadPool& pool, int64_t n_in, int64_t n_out, int64_t n_tokens, int n_repeats,
                           DType type, double min_seconds) {
  std::vector<float> wf(static_cast<size_t>(n_in * n_out));
  std::vector<float> x(static_cast<size_t>(n_in * n_tokens));
  std::vector<float> y(static_cast<size_t>(n_out * n_tokens));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& v : wf) v = dist(rng);
  for (float& v : x) v = dist(rng);
  std::vector<uint8_t> w(row_bytes(type, n_in) * static_cast<size_t>(n_out));
  quantize_tensor(type, wf.data(), w.data(), n_out, n_in);
  // In the layout the engine's load repacks such a matrix to.
  const cpu::Isa isa = cpu::active_isa();
  const cpu::WeightView view{.type = type, .n_in = n_in, .n_out = n_out};
  cpu::WeightLayout layout;
  cpu::group_layouts(std::span(&view, 1), isa, &layout);
  if (layout != cpu::WeightLayout::kRows) {
    std::vector<uint8_t> packed(w.size());
    cpu::repack_rows(layout, w.data(), packed.data(), n_in, 0, n_out);
    w = std::move(packed);
  }
  std::vector<uint8_t> act(cpu::matmul_scratch_bytes(n_tokens, n_in));
  const cpu::MatmulJob job[1] = {
      {cpu::WeightView{.type = type, .data = w.data(), .n_in = n_in, .n_out = n_out, .layout = layout}, y.data()}};
  cpu::matmul_group(job, x.data(), n_in, n_tokens, act.data(), pool, isa);  // warm-up
  const double flops = 2.0 * static_cast<double>(n_in) * static_cast<double>(n_out) * static_cast<double>(n_tokens);
  return median_rate(n_repeats, min_seconds, [&] {
    Stopwatch sw;
    cpu::matmul_group(job, x.data(), n_in, n_tokens, act.data(), pool, isa);
    return flops / sw.seconds() / 1e12;
  });
}

std::vector<MatmulGroup> default_layer(DType type) {
  auto m = [type](int64_t n_in, int64_t n_out) { return MatmulShape{.type = type, .n_in = n_in, .n_out = n_out}; };
  return {{m(2048, 2048), m(2048, 256), m(2048, 256)}, {m(2048, 2048)}, {m(2048, 5632), m(2048, 5632)}, {m(5632, 2048)}};
}

namespace {

// What a pass of layer_probe() is rated by.
enum class LayerRate { kBytes, kFlops };

// `layer`'s dispatches over n_tokens tokens, over as many copies of the layer as
// make `bytes` (at least one): the median pass's weight bytes or FLOPs per second.
double layer_probe(ThreadPool& pool, std::span<const MatmulGroup> layer, uint64_t bytes, int64_t n_tokens,
                   LayerRate rate, int n_repeats, double min_seconds) {
  CHECK(!layer.empty() && n_tokens >= 1);
  // One layer's matrices, laid out one after another (64-byte aligned), then
  // as many layers as it takes to reach `bytes`.
  // Each matrix in the layout the CPU backend's load gives it (it repacks a
  // dispatch's matrices together or not at all), on huge pages as the engine's.
  const cpu::Isa isa = cpu::active_isa();
  struct Matrix {
    MatmulShape shape;
    size_t offset = 0;  // in a layer
    size_t n_bytes = 0;
    cpu::WeightLayout layout = cpu::WeightLayout::kRows;
  };
  std::vector<Matrix> mats;
  size_t layer_bytes = 0;
  int64_t max_in = 0, max_out = 0;
  for (const MatmulGroup& g : layer) {
    CHECK(!g.empty() && g.size() <= 4);
    cpu::WeightView views[4];
    cpu::WeightLayout layouts[4];
    for (size_t j = 0; j < g.size(); ++j) views[j] = {.type = g[j].type, .n_in = g[j].n_in, .n_out = g[j].n_out};
    cpu::group_layouts(std::span(views, g.size()), isa, layouts);
    for (size_t j = 0; j < g.size(); ++j) {
      const MatmulShape& m = g[j];
      CHECK(m.n_in == g.front().n_in && m.n_in > 0 && m.n_out > 0);
      const size_t n = row_bytes(m.type, m.n_in) * static_cast<size_t>(m.n_out);
      mats.push_back({m, layer_bytes, n, layouts[j]});
      layer_bytes += (n + 63) / 64 * 64;
      max_in = std::max(max_in, m.n_in);
      max_out = std::max(max_out, m.n_out);
    }
  }
  const size_t n_layers = std::max<size_t>(1, (bytes + layer_bytes - 1) / layer_bytes);
  HugeBuffer w(n_layers * layer_bytes);

  // Random values quantized once per matrix shape into a tile of rows, copied
  // down every matrix: the kernels take their usual path, and what matters
  // here is the bytes read. Each thread first touches the pages it copies.
  constexpr int64_t kTileRows = 64;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<std::vector<uint8_t>> tiles(mats.size());
  for (size_t k = 0; k < mats.size(); ++k) {
    const MatmulShape& m = mats[k].shape;
    std::vector<float> f(static_cast<size_t>(m.n_in * kTileRows));
    for (float& v : f) v = dist(rng);
    tiles[k].resize(row_bytes(m.type, m.n_in) * kTileRows);
    quantize_tensor(m.type, f.data(), tiles[k].data(), kTileRows, m.n_in);
    if (mats[k].layout != cpu::WeightLayout::kRows) {
      // A tile of 64 rows is whole row groups, so its repacked bytes are the
      // repacked bytes of any 64 rows of the matrix at a multiple of 64.
      std::vector<uint8_t> packed(tiles[k].size());
      cpu::repack_rows(mats[k].layout, tiles[k].data(), packed.data(), m.n_in, 0, kTileRows);
      tiles[k] = std::move(packed);
    }
  }
  pool.parallel_for(static_cast<int64_t>(n_layers * mats.size()), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const size_t l = static_cast<size_t>(i) / mats.size(), k = static_cast<size_t>(i) % mats.size();
      uint8_t* dst = w.data() + l * layer_bytes + mats[k].offset;
      for (size_t done = 0; done < mats[k].n_bytes; done += tiles[k].size())
        std::memcpy(dst + done, tiles[k].data(), std::min(tiles[k].size(), mats[k].n_bytes - done));
    }
  });

  std::vector<float> x(static_cast<size_t>(max_in * n_tokens));
  for (float& v : x) v = dist(rng);
  std::vector<float> y(static_cast<size_t>(4 * max_out * n_tokens));
  std::vector<uint8_t> act(cpu::matmul_scratch_bytes(n_tokens, max_in));
  // Every dispatch of every layer, built once: [n_layers x layer.size()] groups.
  std::vector<std::vector<cpu::MatmulJob>> dispatches;
  for (size_t l = 0; l < n_layers; ++l) {
    size_t k = 0;
    for (const MatmulGroup& g : layer) {
      std::vector<cpu::MatmulJob> jobs;
      for (size_t j = 0; j < g.size(); ++j, ++k) {
        const MatmulShape& m = mats[k].shape;
        jobs.push_back({cpu::WeightView{.type = m.type, .data = w.data() + l * layer_bytes + mats[k].offset,
                                        .n_in = m.n_in, .n_out = m.n_out, .layout = mats[k].layout},
                        y.data() + j * static_cast<size_t>(max_out * n_tokens)});
      }
      dispatches.push_back(std::move(jobs));
    }
  }
  double per_pass = 0;  // bytes or FLOPs
  for (const Matrix& m : mats)
    per_pass += rate == LayerRate::kBytes
                    ? static_cast<double>(m.n_bytes)
                    : 2.0 * static_cast<double>(m.shape.n_in) * static_cast<double>(m.shape.n_out) *
                          static_cast<double>(n_tokens);
  per_pass *= static_cast<double>(n_layers);
  auto pass = [&] {
    Stopwatch sw;
    for (const std::vector<cpu::MatmulJob>& jobs : dispatches)
      cpu::matmul_group(jobs, x.data(), jobs.front().w.n_in, n_tokens, act.data(), pool, isa);
    return per_pass / sw.seconds() / 1e9;
  };
  pass();  // warm-up
  return median_rate(n_repeats, min_seconds, pass);
}

}  // namespace

double probe_weight_read_gbps(ThreadPool& pool, std::span<const MatmulGroup> layer, uint64_t bytes, int n_repeats,
                              double min_seconds) {
  return layer_probe(pool, layer, bytes, 1, LayerRate::kBytes, n_repeats, min_seconds);
}

double probe_layer_matmul_tflops(ThreadPool& pool, std::span<const MatmulGroup> layer, int64_t n_tokens,
                                 uint64_t bytes, int n_repeats, double min_seconds) {
  return layer_probe(pool, layer, bytes, n_tokens, LayerRate::kFlops, n_repeats, min_seconds) / 1e3;
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

uint64_t memory_span_bytes() {
  static const uint64_t bytes = [] {
    const long llc = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
    return std::max<uint64_t>(256ull << 20, llc > 0 ? 2 * static_cast<uint64_t>(llc) : 0);
  }();
  return bytes;
}

CalibrateOptions with_model_weights(CalibrateOptions o, const ModelFile& file) {
  auto hp = hparams_from_metadata(file.metadata);
  if (!hp.ok()) return o;  // not a model this engine runs: the default layer
  const ArchSpec& spec = *hp->spec;
  // Layer 0's matrices in the dispatches the forward pass makes: the spec's
  // matmul groups, in group order.
  std::vector<MatmulGroup> layer;
  // The matmul probe's type: the up projection's (blk.0.ffn_up.weight: alone,
  // fused with the gate as in phi3, or a shared expert's in a routed block),
  // else that of the layer's largest matrix (a routed block without a shared
  // expert multiplies its attention matrices in these dispatches).
  constexpr TensorRole kUpRoles[] = {TensorRole::kFfnUp, TensorRole::kFfnGateUp, TensorRole::kFfnUpShexp};
  std::optional<DType> up_type, largest_type;
  int64_t largest = 0;
  int max_group = -1;
  for (const TensorSpec& t : spec.tensors) max_group = std::max<int>(max_group, t.per_layer ? t.group : -1);
  for (int g = 0; g <= max_group; ++g) {
    MatmulGroup group;
    for (const TensorSpec& t : spec.tensors) {
      if (!t.per_layer || t.group != g || !applies_to_layer(t, *hp, 0)) continue;
      const TensorInfo* info = file.find(gguf_tensor_name(t, 0));
      if (!info) continue;
      if (info->ne.size() != 2 || (!group.empty() && group.front().n_in != info->ne[0])) return o;
      group.push_back({.type = info->type, .n_in = info->ne[0], .n_out = info->ne[1]});
      if (!up_type && std::find(std::begin(kUpRoles), std::end(kUpRoles), t.role) != std::end(kUpRoles))
        up_type = info->type;
      if (info->ne[0] * info->ne[1] > largest) {
        largest = info->ne[0] * info->ne[1];
        largest_type = info->type;
      }
    }
    if (!group.empty()) layer.push_back(std::move(group));
  }
  if (layer.empty()) return o;
  o.matmul_type = up_type ? *up_type : *largest_type;
  o.weight_read_layer = std::move(layer);
  uint64_t block_matrix_bytes = 0;
  for (const TensorInfo& t : file.tensors)
    if (split_layer_name(t.name).first >= 0 && t.ne.size() == 2) block_matrix_bytes += t.n_bytes;
  if (o.weight_read_bytes > 0) o.weight_read_bytes = std::min(o.weight_read_bytes, block_matrix_bytes);
  return o;
}

StatusOr<Calibration> calibrate(const CalibrateOptions& o) {
  ThreadPool pool(o.n_threads);
  Calibration c;
  c.n_threads = pool.n_threads();
  c.mem_read_gbps = probe_memory_read_gbps(pool, o.mem_bytes, o.n_repeats, o.min_probe_seconds);
  if (o.weight_read_bytes > 0) {
    const std::vector<MatmulGroup> layer = o.weight_read_layer.empty() ? default_layer(o.matmul_type) : o.weight_read_layer;
    c.weight_read_gbps = probe_weight_read_gbps(pool, layer, o.weight_read_bytes, o.n_repeats, o.min_probe_seconds);
  }
  // The model's own layer when known (prefill runs exactly these
  // dispatches), else one matrix; at n tokens.
  c.matmul_model_layer = !o.weight_read_layer.empty();
  auto matmul_at = [&](int64_t n) {
    const int repeats = std::max(1, o.n_repeats / 2);
    return c.matmul_model_layer
               ? probe_layer_matmul_tflops(pool, o.weight_read_layer, n, o.weight_read_bytes, repeats,
                                           o.min_probe_seconds)
               : probe_matmul_tflops(pool, o.matmul_n_in, o.matmul_n_out, n, repeats, o.matmul_type,
                                     o.min_probe_seconds);
  };
  c.matmul_tflops = matmul_at(o.matmul_n_tokens);
  c.matmul_n_tokens = o.matmul_n_tokens;
  std::vector<RatePoint> curve{{o.matmul_n_tokens, c.matmul_tflops}};
  for (int64_t n : o.matmul_curve_tokens)
    if (n > 0 && n != o.matmul_n_tokens) curve.push_back({n, matmul_at(n)});
  c.matmul_curve = RateCurve(std::move(curve));
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
