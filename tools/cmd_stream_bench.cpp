// sluice stream-bench: the weight-streaming analysis (essay 002) measured on
// this machine for one model.
//
//   1. disk      O_DIRECT read GB/s of the model file by block size x queue depth
//                (the IoEngine the weight store uses; each cell reads a different
//                region so nothing is served twice from a device cache)
//   2. memory    read GB/s of a large buffer (plan/calibrate's probe)
//   3. matmul    the engine's matmul_group on a real layer's weights, per
//                tokens-per-step: compute seconds per layer and GFLOP/s
//   4. overlap   one layer read from disk while another is computed: how much of
//                the shorter leg disappears behind the longer one
//   5. pipeline  per tokens-per-step T: a step over every layer with weights
//                resident (the same resident layer buffer for each layer: the
//                cost of a layer's compute does not depend on which bytes it
//                reads, and the model may not fit in memory) against the same
//                step through the WeightStore, streaming from disk with the
//                placement for --mem-budget (or every layer through the full
//                planned ring when no budget is given, trimmed to 3/4 of the
//                memory available). Resident and streamed
//                steps alternate --steps times; each figure is the median.
// Table columns: compute/layer (resident step / n_layer, the figure the
// placement is planned with), transfer/layer (slot bytes / the disk rate the
// store's own reads got), measured overhead = streamed / resident - 1, the
// verdict (fully hidden when the overhead is within 5%, else transfer-limited),
// the ring K plan_stream asks for and the K in use, the host buffer bytes
// plan_stream predicts, and the stall per step the placement predicts.
// The page cache (Cached: in /proc/meminfo) is sampled around the pipeline runs,
// so O_DIRECT streaming shows it does not grow by the bytes read.
#include <algorithm>
#include <cmath>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "arch/arch_spec.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/matmul.h"
#include "base/meminfo.h"
#include "base/timer.h"
#include "bench/pipeline_rows.h"
#include "bench/stats.h"
#include "bench/units.h"
#include "cli.h"
#include "model_flags.h"
#include "model/hparams.h"
#include "plan/calibrate.h"
#include "plan/stream_plan.h"
#include "weights/arbiter.h"
#include "weights/io_engine.h"
#include "weights/placement.h"
#include "weights/weight_store.h"

namespace sluice::cli {
namespace {

using nlohmann::ordered_json;
namespace w = sluice::weights;

struct StreamBenchArgs {
  ModelFlags m;            // -m and -t (its --mem-budget is the streamed pipeline's own)
  std::string mem_budget;
  std::vector<int64_t> tokens = {1, 16, 64, 256, 512};
  std::vector<std::string> block_sizes = {"64Ki", "256Ki", "1Mi", "4Mi"};
  std::vector<int> depths = {1, 4, 16, 32};
  std::string io = "auto";
  int queue_depth = 16;
  std::string chunk = "1Mi";
  std::string disk_bytes = "256Mi";
  std::string cap;
  int steps = 2;
  bool no_direct = false;
  bool json = false;
};

double cached_bytes() { return static_cast<double>(meminfo_bytes("Cached").value_or(0)); }

const auto ms = bench::format_ms;

// Sequential O_DIRECT reads of `bytes` from `offset` in blocks of `block`, queue_depth in flight.
StatusOr<double> disk_gbps(const std::string& path, w::IoBackend io, bool direct, uint64_t block, int depth,
                           uint64_t offset, uint64_t bytes) {
  ASSIGN_OR_RETURN(auto engine, w::IoEngine::open({.path = path, .backend = io, .queue_depth = depth, .direct = direct}));
  return w::probe_read_gbps(*engine, block, offset, bytes);
}

// The matrices of one layer, in the order of the layer's tensors in the file
// (the order of LayerView::tensors), to run as matmuls over whatever bytes a view holds.
struct LayerMatmuls {
  struct Job {
    size_t tensor;  // index in LayerView::tensors
    DType type;
    int64_t n_in, n_out;
  };
  std::vector<Job> jobs;
  int64_t max_in = 0, max_out = 0;
  double flops_per_token = 0;
};

LayerMatmuls layer_matmuls(const ModelFile& f, int64_t layer) {
  LayerMatmuls m;
  size_t index = 0;
  for (const TensorInfo& t : f.tensors) {
    if (split_layer_name(t.name).first != layer) continue;
    if (t.ne.size() == 2) {
      m.jobs.push_back({index, t.type, t.ne[0], t.ne[1]});
      m.max_in = std::max(m.max_in, t.ne[0]);
      m.max_out = std::max(m.max_out, t.ne[1]);
      m.flops_per_token += 2.0 * static_cast<double>(t.ne[0]) * static_cast<double>(t.ne[1]);
    }
    ++index;
  }
  return m;
}

// Buffers for running a layer's matmuls at up to max_tokens tokens, planned once.
struct Compute {
  ThreadPool& pool;
  cpu::Isa isa;
  std::vector<float> x, y;
  std::vector<uint8_t> scratch;

  Compute(ThreadPool& p, int64_t max_tokens, int64_t max_in, int64_t max_out) : pool(p), isa(cpu::active_isa()) {
    x.resize(static_cast<size_t>(max_tokens * max_in));
    y.resize(static_cast<size_t>(max_tokens * max_out));
    scratch.resize(cpu::matmul_scratch_bytes(max_tokens, max_in));
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> d(-1, 1);
    for (float& v : x) v = d(rng);
  }
  void run(const LayerMatmuls& m, const w::LayerView& v, int64_t n_tokens) {
    for (const LayerMatmuls::Job& j : m.jobs) {
      const cpu::MatmulJob job[1] = {{cpu::WeightView{.type = j.type, .data = v.tensors[j.tensor].data,
                                                      .n_in = j.n_in, .n_out = j.n_out},
                                      y.data()}};
      cpu::matmul_group(job, x.data(), j.n_in, n_tokens, scratch.data(), pool, isa);
    }
  }
};

// One layer's tensors read once (O_DIRECT) into an aligned buffer.
struct ResidentLayer {
  w::AlignedBuffer buf;
  std::vector<w::LayerTensor> tensors;
  w::ExtentLayout layout;
  w::LayerView view() const { return {.layer = layer, .streamed = false, .tensors = tensors}; }
  int64_t layer = 0;
};

StatusOr<ResidentLayer> read_layer(const ModelFile& f, w::IoEngine& engine, int64_t layer) {
  ResidentLayer r;
  r.layer = layer;
  std::vector<w::TensorRange> ranges;
  for (const TensorInfo& t : f.tensors) {
    const auto [tensor_layer, suffix] = split_layer_name(t.name);
    if (tensor_layer != layer) continue;
    if (t.file_offset < 0) return unimplemented("tensor {} is not stored in the file as is", t.name);
    ranges.push_back({static_cast<uint64_t>(t.file_offset), t.n_bytes});
    r.tensors.push_back({.suffix = suffix, .n_bytes = t.n_bytes});
  }
  r.layout = w::layout_extents(ranges, w::kDirectAlign);
  ASSIGN_OR_RETURN(r.buf, w::AlignedBuffer::allocate(r.layout.buffer_bytes));
  for (const w::IoExtent& e : r.layout.extents) {
    const uint64_t len = std::min(e.length, engine.file_size() - e.file_offset);
    RETURN_IF_ERROR(w::read_exact(engine, e.file_offset, len, r.buf.data() + e.dst_offset));
  }
  for (size_t i = 0; i < r.tensors.size(); ++i) r.tensors[i].data = r.buf.data() + r.layout.tensor_offsets[i];
  return r;
}

// Median seconds of fn() over repeats, repeating until ~0.3 s or 5 runs (at least 1).
template <typename Fn>
double time_median(Fn&& fn) {
  std::vector<double> v;
  Stopwatch total;
  while (v.empty() || (v.size() < 5 && total.seconds() < 0.3)) {
    Stopwatch sw;
    fn();
    v.push_back(sw.seconds());
  }
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}


int run(const StreamBenchArgs& a) {
  if (a.steps < 1) return fail(invalid_argument("--steps must be >= 1"));
  if (a.tokens.empty()) return fail(invalid_argument("--tokens needs at least one value"));
  for (int64_t t : a.tokens)
    if (t < 1) return fail(invalid_argument("--tokens values must be >= 1"));
  auto io = w::parse_io_backend(a.io);
  if (!io.ok()) return fail(io.status());
  auto chunk = w::parse_byte_size(a.chunk);
  if (!chunk.ok()) return fail(chunk.status());
  auto disk_bytes = w::parse_byte_size(a.disk_bytes);
  if (!disk_bytes.ok()) return fail(disk_bytes.status());
  uint64_t budget = 0;
  if (!a.mem_budget.empty()) {
    auto b = w::parse_byte_size(a.mem_budget);
    if (!b.ok()) return fail(b.status());
    budget = *b;
  }
  double cap = 0;
  if (!a.cap.empty()) {
    auto c = w::parse_byte_size(a.cap);
    if (!c.ok()) return fail(c.status());
    cap = static_cast<double>(*c);
  }
  const bool direct = !a.no_direct;
  auto log = [&](const std::string& line) {
    if (!a.json) fmt::print(stderr, "[stream-bench] {}\n", line);
  };

  auto mf = open_model_file(a.m.model);
  if (!mf.ok()) return fail(mf.status());
  auto file = std::make_shared<const ModelFile>(std::move(*mf));
  auto layout = w::plan_placement(*file, {});
  if (!layout.ok()) return fail(layout.status());
  const int64_t n_layer = layout->n_layer;
  // The pipeline rows move whole layers; a routed model streams expert by
  // expert instead, which these rows do not measure.
  std::string moe_note;
  if (auto hp = hparams_from_metadata(file->metadata); hp.ok() && hp->is_moe())
    moe_note = fmt::format(
        "a mixture-of-experts model ({} experts, {} per token): the pipeline rows stream whole layers, every "
        "expert included; `sluice bench --mem-budget` and `sluice plan --measure` measure expert-by-expert "
        "streaming",
        hp->n_expert, hp->n_expert_used);
  uint64_t slot_bytes = 0;
  for (const w::LayerPlacement& l : layout->layers) slot_bytes = std::max(slot_bytes, l.extent_bytes);
  ThreadPool pool(a.m.n_threads);
  auto engine_or = w::IoEngine::open({.path = file->source_path, .backend = *io, .queue_depth = a.queue_depth,
                                      .direct = direct});
  if (!engine_or.ok()) return fail(engine_or.status());
  std::unique_ptr<w::IoEngine> engine = std::move(*engine_or);
  const uint64_t file_size = engine->file_size();

  // 1. Disk: block size x queue depth, each cell on its own region of the file.
  const uint64_t probe_bytes = w::align_down(std::min(*disk_bytes, file_size / 2), 4u << 20);
  if (probe_bytes == 0) return fail(invalid_argument("the model file is too small for the disk probe"));
  uint64_t region = 0;
  auto next_offset = [&] { return w::align_down((region++ * probe_bytes) % (file_size - probe_bytes), 4u << 20); };
  std::vector<uint64_t> blocks;
  for (const std::string& text : a.block_sizes) {
    auto bs = w::parse_byte_size(text);
    if (!bs.ok()) return fail(bs.status());
    if (*bs == 0 || *bs % w::kDirectAlign != 0) return fail(invalid_argument("block size {} is not a multiple of 4096", *bs));
    blocks.push_back(*bs);
  }
  log(fmt::format("disk: {} MiB per cell, {}", probe_bytes >> 20, engine->describe()));
  std::vector<std::vector<double>> disk_table;
  for (uint64_t bs : blocks) {
    std::vector<double> row;
    for (int qd : a.depths) {
      auto g = disk_gbps(file->source_path, *io, direct, bs, qd, next_offset(), w::align_down(probe_bytes, bs));
      if (!g.ok()) return fail(g.status());
      row.push_back(*g);
    }
    disk_table.push_back(row);
  }
  auto store_rate = disk_gbps(file->source_path, *io, direct, *chunk, a.queue_depth, next_offset(), probe_bytes);
  if (!store_rate.ok()) return fail(store_rate.status());
  const double disk_rate = *store_rate;  // what the store's reads get: its chunk size and queue depth

  // 2. Memory.
  log("memory read probe");
  const double mem_gbps = plan::probe_memory_read_gbps(pool, 256u << 20, 5);

  // 3. Matmul on a real layer, resident, per tokens-per-step.
  auto layer0 = read_layer(*file, *engine, 0);
  if (!layer0.ok()) return fail(layer0.status());
  const w::LayerView view0 = layer0->view();
  std::vector<LayerMatmuls> matmuls;
  int64_t max_in = 0, max_out = 0;
  for (int64_t l = 0; l < n_layer; ++l) {
    matmuls.push_back(layer_matmuls(*file, l));
    max_in = std::max(max_in, matmuls.back().max_in);
    max_out = std::max(max_out, matmuls.back().max_out);
  }
  const int64_t max_tokens = *std::max_element(a.tokens.begin(), a.tokens.end());
  Compute compute(pool, max_tokens, max_in, max_out);
  std::vector<double> layer_s;
  for (int64_t t : a.tokens) {
    log(fmt::format("matmul: layer 0 at {} tokens", t));
    compute.run(matmuls[0], view0, t);  // warm-up
    layer_s.push_back(time_median([&] { compute.run(matmuls[0], view0, t); }));
  }
  const double transfer_s = static_cast<double>(slot_bytes) / (disk_rate * 1e9);

  // 4. One overlap test: read layer 1 while computing layer 0, at the tokens
  //    whose compute is closest to the transfer.
  size_t pick = 0;
  for (size_t i = 0; i < layer_s.size(); ++i)
    if (std::abs(std::log(layer_s[i] / transfer_s)) < std::abs(std::log(layer_s[pick] / transfer_s))) pick = i;
  const int64_t overlap_tokens = a.tokens[pick];
  double read_alone = 0, compute_alone = layer_s[pick], both = 0;
  {
    const int64_t other = n_layer > 1 ? 1 : 0;
    std::vector<w::TensorRange> ranges;
    for (const TensorInfo& t : file->tensors)
      if (split_layer_name(t.name).first == other)
        ranges.push_back({static_cast<uint64_t>(t.file_offset), t.n_bytes});
    const w::ExtentLayout lay = w::layout_extents(ranges, w::kDirectAlign);
    auto buf = w::AlignedBuffer::allocate(lay.buffer_bytes);
    if (!buf.ok()) return fail(buf.status());
    w::BandwidthArbiter arbiter(*engine, {.chunk_bytes = *chunk});
    auto read = [&] {
      auto id = arbiter.submit(w::TransferClass::kCritical, lay.extents, buf->data());
      return id.ok() ? arbiter.wait(*id).status : id.status();
    };
    Stopwatch sw;
    Status st = read();
    read_alone = sw.seconds();
    if (!st.ok()) return fail(st);
    sw.reset();
    auto id = arbiter.submit(w::TransferClass::kCritical, lay.extents, buf->data());
    if (!id.ok()) return fail(id.status());
    compute.run(matmuls[0], view0, overlap_tokens);
    st = arbiter.wait(*id).status;
    both = sw.seconds();
    if (!st.ok()) return fail(st);
  }
  const double hidden = std::clamp((read_alone + compute_alone - both) / std::min(read_alone, compute_alone), 0.0, 1.0);

  // 5. The pipeline per tokens-per-step.
  std::vector<bench::PipelineRow> rows;
  std::string first_map;
  for (size_t i = 0; i < a.tokens.size(); ++i) {
    bench::PipelineRow r;
    r.tokens = a.tokens[i];
    r.compute_layer_s = layer_s[i];
    r.gflops = matmuls[0].flops_per_token * static_cast<double>(r.tokens) / layer_s[i] / 1e9;
    r.transfer_layer_s = transfer_s;
    // The placement needs the compute time per layer: one resident step first.
    log(fmt::format("pipeline: {} tokens/step", r.tokens));
    auto resident_step = [&] {
      Stopwatch sw;
      for (int64_t l = 0; l < n_layer; ++l) compute.run(matmuls[static_cast<size_t>(l)], view0, r.tokens);
      return sw.seconds();
    };
    const double first_resident_s = resident_step();
    // Without a budget every layer streams through the full planned ring,
    // trimmed to three quarters of the memory available: a disk-bound ring
    // asks for a slot per layer, which for a model larger than memory is more
    // than the machine holds.
    const uint64_t ring_cap = budget > 0 ? budget : meminfo_bytes("MemAvailable").value_or(0) / 4 * 3;
    auto plan = w::plan_placement(*file, {.mem_budget_bytes = ring_cap,
                                          .disk_gbps = disk_rate,
                                          .layer_compute_s = first_resident_s / static_cast<double>(n_layer),
                                          .tokens_per_step = r.tokens,
                                          .stream_all = budget == 0});
    if (!plan.ok()) {
      r.resident_step_s = first_resident_s;
      r.compute_layer_s = first_resident_s / static_cast<double>(n_layer);
      r.refused = plan.status().message();
      r.verdict = "refused";
      rows.push_back(r);
      continue;
    }
    r.k_planned = plan->n_ring_slots_planned;
    r.k_used = plan->n_ring_slots;
    r.n_streamed = plan->n_streamed;
    r.host_buffer_bytes = plan->stream.host_buffer_bytes;
    r.predicted_stall_s = plan->predicted_stall_s;
    auto store = w::WeightStore::open(file, *plan, {.io = *io, .queue_depth = a.queue_depth, .direct = direct,
                                                    .chunk_bytes = *chunk, .cap_bytes_per_s = cap});
    if (!store.ok()) return fail(store.status());
    w::WeightStore& ws = **store;
    if (first_map.empty()) first_map = ws.placement_map();
    // Start from a full ring, as every later step does (the ring wraps).
    for (int64_t l = 0; l < n_layer; ++l)
      while (ws.state(l) == w::LayerState::kLoading) std::this_thread::sleep_for(std::chrono::microseconds(200));
    log(fmt::format("  streaming {} of {} layers, K = {}", r.n_streamed, n_layer, r.k_used));
    const double cache0 = cached_bytes();
    const w::WeightCountersSnapshot c0 = ws.counters();
    // Resident and streamed steps alternate, so drift in the machine's speed
    // (other load, clocks) hits both alike; each figure is a median.
    std::vector<double> resident_s, stream_s;
    for (int s = 0; s < a.steps; ++s) {
      resident_s.push_back(resident_step());
      Stopwatch sw;
      for (int64_t l = 0; l < n_layer; ++l) {
        auto v = ws.acquire(l);
        if (!v.ok()) return fail(v.status());
        compute.run(matmuls[static_cast<size_t>(l)], *v, r.tokens);
        ws.release(l);
      }
      ws.end_step(r.tokens);
      stream_s.push_back(sw.seconds());
    }
    r.resident_step_s = bench::median(resident_s);
    r.stream_step_s = bench::median(stream_s);
    r.compute_layer_s = r.resident_step_s / static_cast<double>(n_layer);
    r.gflops = matmuls[0].flops_per_token * static_cast<double>(r.tokens) / r.compute_layer_s / 1e9;
    const w::WeightCountersSnapshot d = ws.counters() - c0;
    r.page_cache_growth = cached_bytes() - cache0;
    r.measured_stall_s = d.stall_s / a.steps;
    r.overlap_efficiency = d.overlap_efficiency();
    r.disk_mb_per_token = d.disk_bytes_per_token() / 1e6;
    bench::set_overhead(r);
    rows.push_back(r);
  }

  if (a.json) {
    ordered_json j;
    j["model"] = a.m.model;
    if (!moe_note.empty()) j["note"] = moe_note;
    j["n_layer"] = n_layer;
    j["slot_bytes"] = slot_bytes;
    j["n_threads"] = pool.n_threads();
    j["io"] = engine->describe();
    ordered_json disk = ordered_json::array();
    for (size_t b = 0; b < blocks.size(); ++b)
      for (size_t q = 0; q < a.depths.size(); ++q)
        disk.push_back({{"block_bytes", blocks[b]}, {"queue_depth", a.depths[q]}, {"gbps", disk_table[b][q]}});
    j["disk"] = disk;
    j["disk_gbps_store"] = disk_rate;
    j["mem_read_gbps"] = mem_gbps;
    j["overlap"] = {{"tokens", overlap_tokens}, {"read_s", read_alone}, {"compute_s", compute_alone},
                    {"both_s", both}, {"hidden_fraction", hidden}};
    j["pipeline"] = bench::pipeline_rows_json(rows);
    fmt::print("{}\n", j.dump(2));
    return 0;
  }

  fmt::print("sluice stream-bench: {} ({} layers, slot {:.1f} MB, {} threads)\n", a.m.model, n_layer,
             static_cast<double>(slot_bytes) / 1e6, pool.n_threads());
  fmt::print("io: {}\n\n", engine->describe());
  if (!moe_note.empty()) fmt::print("note: {}\n\n", moe_note);
  fmt::print("disk read GB/s ({}), block size x queue depth:\n", direct ? "O_DIRECT" : "buffered");
  fmt::print("  {:>8}", "block");
  for (int qd : a.depths) fmt::print(" {:>8}", fmt::format("qd {}", qd));
  fmt::print("\n");
  for (size_t b = 0; b < blocks.size(); ++b) {
    fmt::print("  {:>8}", human_bytes(blocks[b]));
    for (double g : disk_table[b]) fmt::print(" {:>8.2f}", g);
    fmt::print("\n");
  }
  fmt::print("  store reads ({} chunks, qd {}): {:.2f} GB/s\n", human_bytes(*chunk), a.queue_depth, disk_rate);
  fmt::print("memory read: {:.2f} GB/s\n", mem_gbps);
  fmt::print("overlap test at {} tokens: read {} alone, compute {} alone, both {} -> {:.0f}% of the shorter leg hidden\n\n",
             overlap_tokens, ms(read_alone), ms(compute_alone), ms(both), 100 * hidden);
  if (!first_map.empty()) fmt::print("{}\n", first_map);
  fmt::print("{}", bench::pipeline_rows_table(rows));
  return 0;
}

}  // namespace

Runner add_stream_bench(CLI::App& app) {
  auto a = std::make_shared<StreamBenchArgs>();
  CLI::App* c = app.add_subcommand("stream-bench", "measure weight streaming: disk, memory, matmul, overlap, pipeline");
  a->m.add_to(c, {.model = "GGUF file", .threads = "compute threads (default: all cores)", .mem_budget = false,
                  .gpu_budget = false, .backend = false, .lora = std::nullopt, .parallel = false});
  c->add_option("--mem-budget", a->mem_budget,
                "compute-tier budget for the streamed pipeline (600M, 2G, 512MiB); default: stream every layer");
  c->add_option("--tokens", a->tokens, "tokens per step of the pipeline rows")->delimiter(',')->capture_default_str();
  c->add_option("--block-sizes", a->block_sizes, "disk probe block sizes")->delimiter(',')->capture_default_str();
  c->add_option("--depths", a->depths, "disk probe queue depths")->delimiter(',')->capture_default_str();
  c->add_option("--io", a->io, "IO backend: auto, uring, pread")->capture_default_str();
  c->add_option("--queue-depth", a->queue_depth, "reads in flight for the weight store")->capture_default_str();
  c->add_option("--chunk", a->chunk, "largest single read of the weight store")->capture_default_str();
  c->add_option("--disk-bytes", a->disk_bytes, "bytes read per disk probe cell")->capture_default_str();
  c->add_option("--cap", a->cap, "bandwidth cap of the arbiter in bytes/s (e.g. 500M)");
  c->add_option("--steps", a->steps, "timed steps per pipeline row")->capture_default_str();
  c->add_flag("--no-direct", a->no_direct, "buffered reads instead of O_DIRECT");
  c->add_flag("--json", a->json, "print one JSON object");
  return [a] { return run(*a); };
}

}  // namespace sluice::cli
