// WeightStore on a small synthetic model: streamed layers equal the file's bytes
// for every layer over several passes (K = 2 and 3, both IO backends, mixed
// quant types, resident + streamed mixes), the acquire/release/prefetch/cancel/
// reprioritize semantics, and the counters.
#include <chrono>
#include <cstring>
#include <map>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "model/synth.h"
#include "model/weight_source.h"
#include "plan/train_plan.h"
#include "weights/weight_store.h"
#include "weights/weights_test_util.h"

namespace sluice::weights {
namespace {

constexpr int64_t kLayers = 6;

std::shared_ptr<const ModelFile> synth_file(const std::string& type) {
  static std::map<std::string, std::shared_ptr<const ModelFile>> cache;
  auto it = cache.find(type);
  if (it != cache.end()) return it->second;
  const std::string path = testing::scratch_dir() + "/weights_store_" + type + ".gguf";
  SynthShape shape = synth_preset("tiny", kLayers).value();
  auto written = write_synth_model({.shape = shape, .type = type, .seed = 5, .n_threads = 2}, path);
  EXPECT_TRUE(written.ok()) << written.status().to_string();
  auto mf = open_model_file(path);
  EXPECT_TRUE(mf.ok()) << mf.status().to_string();
  auto file = std::make_shared<const ModelFile>(std::move(*mf));
  cache[type] = file;
  return file;
}

uint64_t largest_layer(const PlacementPlan& all_resident) {
  uint64_t m = 0;
  for (const LayerPlacement& l : all_resident.layers) m = std::max(m, l.extent_bytes);
  return m;
}

// A plan with exactly `k` ring slots and `n_resident` resident layers: the
// compute time is chosen so that plan_stream asks for k slots at 1 GB/s.
PlacementPlan plan_with_ring(const ModelFile& f, int64_t k, int64_t n_resident) {
  const PlacementPlan probe = plan_placement(f, {}).value();
  const uint64_t slot = largest_layer(probe);
  const double transfer_s = static_cast<double>(slot) / 1e9;
  const double compute_s = transfer_s / static_cast<double>(std::max<int64_t>(1, k - 1)) * 1.0001;
  const uint64_t budget = probe.essentials_bytes + static_cast<uint64_t>(k + n_resident) * slot + 100;
  PlacementPlan p = plan_placement(f, {.mem_budget_bytes = budget, .disk_gbps = 1.0, .layer_compute_s = compute_s}).value();
  EXPECT_EQ(p.n_ring_slots, k);
  EXPECT_EQ(p.n_streamed, kLayers - n_resident);
  return p;
}

// Every tensor of the layer view equals the file's bytes (read through the mmap).
void expect_layer_matches(const ModelFile& f, const LayerView& v, int64_t layer) {
  ASSERT_EQ(v.layer, layer);
  size_t n_in_file = 0;
  for (const TensorInfo& t : f.tensors)
    if (t.name.rfind("blk." + std::to_string(layer) + ".", 0) == 0) ++n_in_file;
  ASSERT_EQ(v.tensors.size(), n_in_file);
  for (const LayerTensor& t : v.tensors) {
    const TensorInfo* info = f.find("blk." + std::to_string(layer) + "." + t.suffix);
    ASSERT_NE(info, nullptr) << t.suffix;
    ASSERT_EQ(t.n_bytes, info->n_bytes);
    ASSERT_EQ(std::memcmp(t.data, info->data, info->n_bytes), 0) << "layer " << layer << " " << t.suffix;
    EXPECT_EQ(v.find(t.suffix), t.data);
  }
}

struct StreamCase {
  int64_t k;
  int64_t n_resident;
  IoBackend io;
  std::string type;
};

void PrintTo(const StreamCase& c, std::ostream* os) {
  *os << "K=" << c.k << " resident=" << c.n_resident << " io=" << io_backend_name(c.io) << " " << c.type;
}

class StreamingEqualsFile : public ::testing::TestWithParam<StreamCase> {};

TEST_P(StreamingEqualsFile, EveryLayerEveryPass) {
  const StreamCase& c = GetParam();
  auto file = synth_file(c.type);
  PlacementPlan plan = plan_with_ring(*file, c.k, c.n_resident);
  auto store = WeightStore::open(file, plan, {.io = c.io, .queue_depth = 4, .chunk_bytes = 64u << 10});
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  WeightStore& ws = **store;
  EXPECT_NE(ws.io_description().find(c.io == IoBackend::kUring ? "io_uring" : "pread"), std::string::npos)
      << ws.io_description();
  uint64_t streamed_extent_bytes = 0;
  for (const LayerPlacement& l : ws.plan().layers)
    if (l.streamed) streamed_extent_bytes += l.extent_bytes;
  const int n_passes = 4;
  for (int pass = 0; pass < n_passes; ++pass) {
    for (int64_t l = 0; l < kLayers; ++l) {
      auto v = ws.acquire(l);
      ASSERT_TRUE(v.ok()) << v.status().to_string();
      EXPECT_EQ(v->streamed, ws.plan().layers[static_cast<size_t>(l)].streamed);
      expect_layer_matches(*file, *v, l);
      ws.release(l);
    }
    ws.end_step(1);
  }
  // Resident tensors (globals, norms) equal the file too.
  for (const char* name : {"token_embd.weight", "output_norm.weight", "blk.0.attn_norm.weight"}) {
    const uint8_t* p = ws.resident_tensor(name);
    ASSERT_NE(p, nullptr) << name;
    EXPECT_EQ(std::memcmp(p, file->find(name)->data, file->find(name)->n_bytes), 0) << name;
  }
  const WeightCountersSnapshot s = ws.counters();
  EXPECT_EQ(s.n_acquires, static_cast<uint64_t>(n_passes * kLayers));
  EXPECT_EQ(s.n_tokens, static_cast<uint64_t>(n_passes));
  // Each pass reads every streamed layer once; a slot's extents may end past EOF only for the last tensor.
  EXPECT_LE(s.disk_read_bytes, n_passes * streamed_extent_bytes);
  EXPECT_GE(s.disk_read_bytes, n_passes * (streamed_extent_bytes - kDirectAlign));
  uint64_t resident_matrix = 0;
  for (const LayerPlacement& l : ws.plan().layers)
    if (!l.streamed) resident_matrix += l.matrix_bytes;
  EXPECT_EQ(s.host_read_bytes, n_passes * resident_matrix);
  EXPECT_GT(s.load_bytes, 0u);
  EXPECT_GT(s.compute_s, 0.0);
  EXPECT_NEAR(s.resident_fraction(),
              static_cast<double>(s.resident_bytes) / static_cast<double>(s.resident_bytes + s.streamed_bytes), 1e-12);
  EXPECT_LT(s.resident_fraction(), 1.0);
}

INSTANTIATE_TEST_SUITE_P(
    Rings, StreamingEqualsFile,
    ::testing::Values(StreamCase{2, 0, IoBackend::kUring, "f16"}, StreamCase{3, 0, IoBackend::kUring, "f16"},
                      StreamCase{2, 0, IoBackend::kPread, "f16"}, StreamCase{3, 0, IoBackend::kPread, "f16"},
                      StreamCase{3, 2, IoBackend::kUring, "f16"}, StreamCase{2, 3, IoBackend::kPread, "q8_0"},
                      StreamCase{3, 0, IoBackend::kUring, "q4_k_m"}, StreamCase{2, 1, IoBackend::kUring, "q4_k_m"}),
    [](const auto& info) {
      const StreamCase& c = info.param;
      return fmt::format("K{}_res{}_{}_{}", c.k, c.n_resident, c.io == IoBackend::kUring ? "uring" : "pread", c.type);
    });

// The ring's own reads at open: the plan's disk figures are re-rated with the
// rate they got (the sizing kept), the map says so, every slot is free again
// and the ring then serves the file's bytes; the reads are four passes at most.
TEST(WeightStore, RingProbeReratesThePlanAndLeavesTheRingIntact) {
  auto file = synth_file("q8_0");
  const PlacementPlan plan = plan_with_ring(*file, 3, 1);
  auto store = WeightStore::open(file, plan, {.queue_depth = 4, .chunk_bytes = 64u << 10, .ring_probe_s = 5.0});
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  WeightStore& ws = **store;
  const PlacementPlan& p = ws.plan();
  EXPECT_GT(p.disk_gbps, 0.0);
  EXPECT_EQ(p.sized_disk_gbps, 1.0);
  EXPECT_NE(p.disk_note.find("the ring's own reads"), std::string::npos) << p.disk_note;
  EXPECT_NEAR(p.transfer_s, static_cast<double>(p.slot_bytes) / (p.disk_gbps * 1e9), 1e-15);
  EXPECT_NEAR(p.predicted_disk_s, static_cast<double>(p.n_streamed) * p.transfer_s, 1e-15);
  EXPECT_NEAR(p.predicted_stall_s, std::max(0.0, p.predicted_disk_s - p.predicted_compute_s), 1e-15);
  EXPECT_EQ(p.n_ring_slots, plan.n_ring_slots);
  EXPECT_NE(ws.placement_map().find("the ring's own reads"), std::string::npos) << ws.placement_map();
  uint64_t pass_bytes = 0;
  for (const LayerPlacement& l : p.layers)
    if (l.streamed) pass_bytes += l.extent_bytes;
  // Four passes at most (the model is tiny: the byte cap ends it long before
  // 5 s); the cap is checked before each issue, so one more layer may go. The
  // resident load and the ring's first (critical) layer read as critical too.
  const ArbiterStats io = ws.arbiter_stats();
  const uint64_t critical = io.bytes[static_cast<size_t>(TransferClass::kCritical)];
  EXPECT_LE(critical, ws.counters().load_bytes + 4 * pass_bytes + 2 * p.slot_bytes);
  EXPECT_GE(critical, ws.counters().load_bytes + 4 * pass_bytes - kDirectAlign * 4 * kLayers);
  for (int pass = 0; pass < 2; ++pass) {
    for (int64_t l = 0; l < kLayers; ++l) {
      auto v = ws.acquire(l);
      ASSERT_TRUE(v.ok()) << v.status().to_string();
      expect_layer_matches(*file, *v, l);
      ws.release(l);
    }
  }
  // Off by default: the plan keeps the rate it was made with.
  auto plain = WeightStore::open(file, plan, {.queue_depth = 4});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)->plan().disk_gbps, 1.0);
  EXPECT_TRUE((*plain)->plan().disk_note.empty());
}

// Layer l holds a ring slot: being read or landed.
bool in_ring(const WeightStore& ws, int64_t l) {
  const LayerState s = ws.state(l);
  return s == LayerState::kLoading || s == LayerState::kLanded;
}

TEST(WeightStore, ReadAheadKeepsTheNextLayersInFlightAndWraps) {
  auto file = synth_file("f16");
  auto store = WeightStore::open(file, plan_with_ring(*file, 3, 0), {.queue_depth = 4});
  ASSERT_TRUE(store.ok());
  WeightStore& ws = **store;
  // At open the first K layers start loading.
  EXPECT_TRUE(in_ring(ws, 0) && in_ring(ws, 1) && in_ring(ws, 2));
  EXPECT_EQ(ws.state(3), LayerState::kAbsent);
  ASSERT_TRUE(ws.acquire(0).ok());
  EXPECT_EQ(ws.state(0), LayerState::kAcquired);
  EXPECT_TRUE(in_ring(ws, 1) && in_ring(ws, 2));  // i+1 .. i+K-1
  EXPECT_EQ(ws.state(3), LayerState::kAbsent);
  ws.release(0);
  EXPECT_TRUE(in_ring(ws, 3));  // the freed slot takes i+K
  EXPECT_EQ(ws.state(0), LayerState::kAbsent);
  for (int64_t l = 1; l < kLayers; ++l) {
    ASSERT_TRUE(ws.acquire(l).ok());
    ws.release(l);
  }
  // After the last layer the ring holds the next step's first layers.
  EXPECT_TRUE(in_ring(ws, 0) && in_ring(ws, 1) && in_ring(ws, 2));
  EXPECT_EQ(ws.state(5), LayerState::kAbsent);
}

// Training order (forward, then backward in reverse): every acquire gets the
// file's bytes, the K streamed layers nearest each turn are read once for both
// passes, and in the steady state a period reads 2 max(0, S - K) layers.
TEST(WeightStore, TrainingScheduleReadsTheTurnsOnce) {
  auto file = synth_file("q8_0");
  const std::vector<int64_t> order = training_schedule(kLayers);
  for (const auto& [k, n_resident] : {std::pair<int64_t, int64_t>{2, 0}, {3, 0}, {3, 1}, {2, 2}, {2, 3}}) {
    SCOPED_TRACE(fmt::format("K={} resident={}", k, n_resident));
    auto store = WeightStore::open(file, plan_with_ring(*file, k, n_resident), {.queue_depth = 4});
    ASSERT_TRUE(store.ok()) << store.status().to_string();
    WeightStore& ws = **store;
    ASSERT_TRUE(ws.set_schedule(order).ok());
    EXPECT_EQ(std::vector<int64_t>(ws.schedule().begin(), ws.schedule().end()), order);
    const int64_t s = ws.plan().n_streamed;
    uint64_t least = UINT64_MAX, most = 0;  // a streamed layer's read (extents differ a little)
    for (const LayerPlacement& l : ws.plan().layers) {
      if (!l.streamed) continue;
      least = std::min(least, l.extent_bytes);
      most = std::max(most, l.extent_bytes);
    }
    std::vector<uint64_t> at_period;
    for (int period = 0; period < 4; ++period) {
      at_period.push_back(ws.arbiter_stats().total_bytes());
      for (int64_t l : order) {
        auto v = ws.acquire(l);
        ASSERT_TRUE(v.ok()) << v.status().to_string();
        expect_layer_matches(*file, *v, l);
        ws.release(l);
      }
    }
    // Wait for the reads in flight (the next period's first layers) to land.
    for (int64_t l = 0; l < kLayers; ++l)
      while (ws.state(l) == LayerState::kLoading) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    at_period.push_back(ws.arbiter_stats().total_bytes());
    // From the second period on the ring is in its steady state: the reads
    // issued during a period are the same layers every period.
    const int64_t reads = plan::training_layer_reads(s, k);
    EXPECT_EQ(reads, 2 * std::max<int64_t>(0, s - k));
    for (size_t p = 2; p + 1 < at_period.size(); ++p) {
      const uint64_t got = at_period[p] - at_period[p - 1];
      EXPECT_LE(got, static_cast<uint64_t>(reads) * most) << "period " << p;
      EXPECT_GE(got + static_cast<uint64_t>(reads) * kDirectAlign, static_cast<uint64_t>(reads) * least)
          << "period " << p;
    }
  }
}

TEST(WeightStore, TrainingScheduleKeepsTheLayersTheBackwardComesBackTo) {
  auto file = synth_file("f16");
  auto store = WeightStore::open(file, plan_with_ring(*file, 3, 0), {.queue_depth = 4});
  ASSERT_TRUE(store.ok());
  WeightStore& ws = **store;
  ASSERT_TRUE(ws.set_schedule(training_schedule(kLayers)).ok());
  for (int64_t l = 0; l < 4; ++l) {
    ASSERT_TRUE(ws.acquire(l).ok());
    ws.release(l);
  }
  // After forward layer 3 the schedule goes 4, 5, 5, 4, 3: 3 keeps its slot
  // beside 4 and 5, where the default order would have dropped it for 0.
  EXPECT_TRUE(in_ring(ws, 3) && in_ring(ws, 4) && in_ring(ws, 5));
  EXPECT_EQ(ws.state(0), LayerState::kAbsent);
  ASSERT_TRUE(ws.acquire(4).ok());
  ws.release(4);
  ASSERT_TRUE(ws.acquire(5).ok());
  ws.release(5);
  // The backward's first three layers are the forward's reads: acquiring
  // them waits for no transfer (the counter grows when one is waited for).
  const uint64_t before = ws.counters().disk_read_bytes;
  for (int64_t l : {5, 4, 3}) {
    EXPECT_TRUE(in_ring(ws, l)) << l;
    ASSERT_TRUE(ws.acquire(l).ok());
    ws.release(l);
  }
  EXPECT_EQ(ws.counters().disk_read_bytes, before);
  EXPECT_TRUE(in_ring(ws, 2) && in_ring(ws, 1));  // the backward reads ahead
  // Acquires off the schedule still get their layer (evaluation's forward passes).
  for (int64_t l = 0; l < kLayers; ++l) {
    auto v = ws.acquire(l);
    ASSERT_TRUE(v.ok());
    expect_layer_matches(*file, *v, l);
    ws.release(l);
  }
  // A schedule that names a layer the model lacks, or skips one, is refused.
  EXPECT_EQ(ws.set_schedule(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ws.set_schedule(std::vector<int64_t>{0, 1, 2, 3, 5}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ws.set_schedule(std::vector<int64_t>{}).code(), StatusCode::kInvalidArgument);
}

TEST(WeightStore, ExplicitPrefetchCancelReprioritize) {
  auto file = synth_file("f16");
  // No automatic read-ahead, and a slow cap so transfers stay in flight long enough to observe.
  auto store = WeightStore::open(file, plan_with_ring(*file, 2, 0),
                                 {.queue_depth = 1, .chunk_bytes = 64u << 10, .cap_bytes_per_s = 4e6,
                                  .auto_prefetch = false});
  ASSERT_TRUE(store.ok());
  WeightStore& ws = **store;
  for (int64_t l = 0; l < kLayers; ++l) EXPECT_EQ(ws.state(l), LayerState::kAbsent);
  EXPECT_FALSE(ws.cancel(4));
  EXPECT_FALSE(ws.reprioritize(4, TransferClass::kCritical));

  EXPECT_TRUE(ws.prefetch(4, TransferClass::kPrefetch));
  EXPECT_EQ(ws.state(4), LayerState::kLoading);
  EXPECT_TRUE(ws.reprioritize(4, TransferClass::kCritical));
  EXPECT_TRUE(ws.cancel(4));
  EXPECT_EQ(ws.state(4), LayerState::kAbsent);
  EXPECT_FALSE(ws.cancel(4));

  // Lift the cap for the rest.
  store = WeightStore::open(file, plan_with_ring(*file, 2, 0), {.queue_depth = 2, .auto_prefetch = false});
  ASSERT_TRUE(store.ok());
  WeightStore& w2 = **store;
  EXPECT_TRUE(w2.prefetch(3, TransferClass::kPrefetch));
  while (w2.state(3) != LayerState::kLanded) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_FALSE(w2.reprioritize(3, TransferClass::kCritical));  // landed: nothing to move
  auto v3 = w2.acquire(3);
  ASSERT_TRUE(v3.ok());
  expect_layer_matches(*file, *v3, 3);
  EXPECT_EQ(w2.counters().n_stalls, 0u);  // it had landed
  // Both slots held: a third streamed layer cannot be acquired or prefetched.
  auto v1 = w2.acquire(1);
  ASSERT_TRUE(v1.ok());
  expect_layer_matches(*file, *v1, 1);
  EXPECT_FALSE(w2.prefetch(5, TransferClass::kPrefetch));
  const auto v5 = w2.acquire(5);
  EXPECT_EQ(v5.status().code(), StatusCode::kResourceExhausted);
  EXPECT_FALSE(w2.cancel(1));  // acquired layers are not cancelled
  w2.release(3);
  // Layer 3 stays in its slot until the slot is needed: acquiring it again reads nothing.
  const uint64_t before = w2.counters().disk_read_bytes;
  ASSERT_TRUE(w2.acquire(3).ok());
  EXPECT_EQ(w2.counters().disk_read_bytes, before);
  w2.release(3);
  w2.release(1);
  w2.cancel_all();
  for (int64_t l = 0; l < kLayers; ++l) EXPECT_EQ(w2.state(l), LayerState::kAbsent);
  auto v5b = w2.acquire(5);  // an absent layer is read on demand
  ASSERT_TRUE(v5b.ok());
  expect_layer_matches(*file, *v5b, 5);
  w2.release(5);
}

TEST(WeightStore, CountsStallsWhenTransfersAreSlowAndNotWhenHidden) {
  auto file = synth_file("f16");
  const PlacementPlan plan = plan_with_ring(*file, 2, 0);
  {
    // Capped at 20 MB/s, a ~1.5 MB layer takes ~75 ms: every acquire waits.
    auto store = WeightStore::open(file, plan, {.queue_depth = 2, .chunk_bytes = 256u << 10, .cap_bytes_per_s = 20e6});
    ASSERT_TRUE(store.ok());
    for (int64_t l = 0; l < kLayers; ++l) {
      ASSERT_TRUE((*store)->acquire(l).ok());
      (*store)->release(l);
    }
    const WeightCountersSnapshot s = (*store)->counters();
    EXPECT_GE(s.n_stalls, static_cast<uint64_t>(kLayers - 2));
    EXPECT_GT(s.stall_s, 0.1);
    EXPECT_LT(s.overlap_efficiency(), 0.5);
  }
  {
    // Uncapped, with 40 ms of "compute" per layer: the next layer lands in the
    // meantime. Through the page cache (the file was just written): O_DIRECT
    // would time the disk, which other tests' probes share under ctest -j.
    auto store = WeightStore::open(file, plan, {.queue_depth = 4, .direct = false});
    ASSERT_TRUE(store.ok());
    WeightStore& ws = **store;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // first layers land
    for (int pass = 0; pass < 2; ++pass) {
      for (int64_t l = 0; l < kLayers; ++l) {
        ASSERT_TRUE(ws.acquire(l).ok());
        std::this_thread::sleep_for(std::chrono::milliseconds(40));
        ws.release(l);
      }
      ws.end_step(1);
    }
    const WeightCountersSnapshot s = ws.counters();
    EXPECT_LT(s.stall_s, 0.15 * s.compute_s) << s.summary();
    EXPECT_GT(s.overlap_efficiency(), 0.85);
    EXPECT_GT(s.compute_s, 2 * kLayers * 0.035);
    EXPECT_GT(s.disk_bytes_per_token(), 0.0);
    EXPECT_NE(s.prometheus().find("sluice_weights_read_bytes_total{tier=\"disk\"}"), std::string::npos);
    const WeightCountersSnapshot d = s - s;
    EXPECT_EQ(d.n_acquires, 0u);
    EXPECT_EQ(d.resident_bytes, s.resident_bytes);
  }
}

TEST(WeightStore, ResidentModes) {
  auto file = synth_file("f16");
  const PlacementPlan plan = plan_placement(*file, {}).value();
  // O_DIRECT into own buffers: same bytes, not the mmap's pointers.
  auto direct = WeightStore::open(file, plan, {.direct = true});
  ASSERT_TRUE(direct.ok());
  // mmap mode: pointers are the ModelFile's own.
  auto mapped = WeightStore::open(file, plan, {.direct = false});
  ASSERT_TRUE(mapped.ok());
  EXPECT_NE((*mapped)->io_description().find("memory map"), std::string::npos);
  for (int64_t l = 0; l < kLayers; ++l) {
    EXPECT_EQ((*direct)->state(l), LayerState::kResident);
    auto a = (*direct)->acquire(l);
    auto b = (*mapped)->acquire(l);
    ASSERT_TRUE(a.ok() && b.ok());
    expect_layer_matches(*file, *a, l);
    expect_layer_matches(*file, *b, l);
    const TensorInfo* q = file->find("blk." + std::to_string(l) + ".attn_q.weight");
    EXPECT_EQ(b->find("attn_q.weight"), q->data);
    EXPECT_NE(a->find("attn_q.weight"), q->data);
    (*direct)->release(l);
    (*mapped)->release(l);
  }
  EXPECT_EQ((*direct)->counters().disk_read_bytes, 0u);
  EXPECT_GE((*direct)->counters().load_bytes, file->total_tensor_bytes());
  EXPECT_EQ((*mapped)->counters().load_bytes, 0u);
  EXPECT_DOUBLE_EQ((*direct)->counters().resident_fraction(), 1.0);
}

TEST(WeightStore, RefusesBuffersBeyondTheMemoryAvailable) {
  auto file = synth_file("f16");
  const PlacementPlan resident = plan_placement(*file, {}).value();
  const PlacementPlan ring = plan_with_ring(*file, 3, 0);
  for (const PlacementPlan* plan : {&resident, &ring}) {
    // The buffers the store would allocate: resident extents plus the ring.
    const uint64_t need = plan->host_bytes;
    auto refused = WeightStore::open(file, *plan, {.queue_depth = 4, .host_available_bytes = need / 2});
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
    EXPECT_NE(refused.status().message().find("--mem-budget"), std::string::npos) << refused.status().message();
    auto fits = WeightStore::open(file, *plan, {.queue_depth = 4, .host_available_bytes = 2 * need + (16u << 20)});
    EXPECT_TRUE(fits.ok()) << fits.status().to_string();
  }
  // Served from the memory map, nothing is allocated: no check to fail.
  EXPECT_TRUE(WeightStore::open(file, resident, {.direct = false, .host_available_bytes = 0}).ok());
}

TEST(WeightStore, RefusesAPlanForAnotherFile) {
  auto a = synth_file("f16");
  auto b = synth_file("q8_0");
  PlacementPlan plan = plan_placement(*a, {}).value();
  plan.tensors.pop_back();
  EXPECT_EQ(WeightStore::open(b, plan).status().code(), StatusCode::kInvalidArgument);
}

// The fluid split's moves: a resident layer demoted streams through the ring
// with the file's bytes and frees its buffer; promoted, it is resident again.
TEST(WeightStore, DemotedLayersStreamAndPromotedOnesComeBack) {
  auto file = synth_file("f16");
  auto store = WeightStore::open(file, plan_with_ring(*file, 2, 3), {.queue_depth = 4});
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  WeightStore& ws = **store;
  int64_t resident = -1;
  for (int64_t l = 0; l < kLayers && resident < 0; ++l)
    if (ws.state(l) == LayerState::kResident) resident = l;
  ASSERT_GE(resident, 0);
  ASSERT_TRUE(ws.demotable(resident));
  const uint64_t freed = ws.demotable_bytes(resident);
  EXPECT_GT(freed, 0u);
  const uint64_t host_before = ws.plan().host_bytes;
  const size_t regions_before = ws.host_regions().size();
  ASSERT_TRUE(ws.demote(resident).ok());
  EXPECT_NE(ws.state(resident), LayerState::kResident);
  EXPECT_TRUE(ws.plan().layers[static_cast<size_t>(resident)].streamed);
  EXPECT_EQ(ws.plan().host_bytes, host_before - freed);
  EXPECT_EQ(ws.host_regions().size(), regions_before - 1);
  EXPECT_FALSE(ws.demotable(resident));
  EXPECT_FALSE(ws.demote(resident).ok());
  // Two passes over every layer: each acquire gives the file's bytes.
  for (int pass = 0; pass < 2; ++pass)
    for (int64_t l = 0; l < kLayers; ++l) {
      auto v = ws.acquire(l);
      ASSERT_TRUE(v.ok()) << v.status().to_string();
      expect_layer_matches(*file, *v, l);
      EXPECT_EQ(v->streamed, l == resident || ws.plan().layers[static_cast<size_t>(l)].streamed);
      ws.release(l);
    }
  ASSERT_TRUE(ws.promote(resident).ok());
  EXPECT_EQ(ws.state(resident), LayerState::kResident);
  EXPECT_EQ(ws.plan().host_bytes, host_before);
  expect_layer_matches(*file, ws.resident_view(resident), resident);
  auto v = ws.acquire(resident);
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE(v->streamed);
  expect_layer_matches(*file, *v, resident);
  ws.release(resident);
  EXPECT_FALSE(ws.promote(resident).ok());  // already resident
}

// A device-tier layer (rule 8) demoted streams through the ring; promoted, it
// is served from the file's memory again for the backend to copy.
TEST(WeightStore, DemotedDeviceLayersStreamAndComeBackToTheDeviceTier) {
  auto file = synth_file("f16");
  const PlacementPlan probe = plan_placement(*file, {}).value();
  const uint64_t slot = largest_layer(probe);
  const double compute_s = static_cast<double>(slot) / 1e9 * 1.0001;  // a ring of 2
  auto plan = plan_placement(*file, {.mem_budget_bytes = probe.essentials_bytes + 2 * slot + 100,
                                     .disk_gbps = 1.0,
                                     .layer_compute_s = compute_s,
                                     .device_layers = {0, 1}});
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  auto store = WeightStore::open(file, *plan, {.queue_depth = 4});
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  WeightStore& ws = **store;
  ASSERT_TRUE(ws.plan().layers[1].device);
  ASSERT_TRUE(ws.demotable(1));
  EXPECT_GT(ws.demotable_bytes(1), 0u);
  const uint64_t host_before = ws.plan().host_bytes;
  ASSERT_TRUE(ws.demote(1).ok());
  EXPECT_FALSE(ws.plan().layers[1].device);
  EXPECT_TRUE(ws.plan().layers[1].streamed);
  EXPECT_EQ(ws.plan().host_bytes, host_before);  // the device's bytes: no host figure moves
  for (int64_t l = 0; l < kLayers; ++l) {
    auto v = ws.acquire(l);
    ASSERT_TRUE(v.ok()) << v.status().to_string();
    expect_layer_matches(*file, *v, l);
    EXPECT_EQ(v->streamed, l != 0);
    ws.release(l);
  }
  ASSERT_TRUE(ws.promote(1).ok());
  EXPECT_TRUE(ws.plan().layers[1].device);
  EXPECT_FALSE(ws.plan().layers[1].streamed);
  const LayerView v = ws.resident_view(1);
  expect_layer_matches(*file, v, 1);
  for (const LayerTensor& t : v.tensors) {
    if (t.suffix.find("norm") != std::string::npos) continue;  // essentials: the host's copy
    const TensorInfo* info = file->find("blk.1." + t.suffix);
    EXPECT_EQ(t.data, info->data) << t.suffix;  // the matrices: the file's memory, as at load
  }
}

// With room in the host budget a demoted device-tier layer is read into a
// buffer of its own (no ring needed: everything else resident); promoted, the
// buffer goes and the file's memory is served again.
TEST(WeightStore, ADemotedDeviceLayerTakesHostRoomWhenThereIsSome) {
  auto file = synth_file("f16");
  auto plan = plan_placement(*file, {.device_layers = {0, 1}});  // no host budget: no ring
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  auto store = WeightStore::open(file, *plan, {.queue_depth = 4});
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  WeightStore& ws = **store;
  ASSERT_EQ(ws.plan().n_streamed, 0);
  ASSERT_TRUE(ws.demotable(0));
  EXPECT_TRUE(ws.layer_buffer(0).empty());
  const uint64_t host_before = ws.plan().host_bytes;
  ASSERT_TRUE(ws.demote(0).ok());
  EXPECT_EQ(ws.state(0), LayerState::kResident);
  EXPECT_FALSE(ws.plan().layers[0].device);
  ASSERT_FALSE(ws.layer_buffer(0).empty());
  EXPECT_EQ(ws.plan().host_bytes, host_before + ws.layer_buffer(0).size());
  EXPECT_FALSE(ws.demotable(0));  // one tier down at a time
  auto v = ws.acquire(0);
  ASSERT_TRUE(v.ok());
  expect_layer_matches(*file, *v, 0);
  for (const LayerTensor& t : v->tensors)
    if (t.suffix.find("norm") == std::string::npos) EXPECT_TRUE(ws.owns_resident(t.data)) << t.suffix;
  ws.release(0);
  ASSERT_TRUE(ws.promote(0).ok());
  EXPECT_TRUE(ws.plan().layers[0].device);
  EXPECT_TRUE(ws.layer_buffer(0).empty());
  EXPECT_EQ(ws.plan().host_bytes, host_before);
  for (const LayerTensor& t : ws.resident_view(0).tensors)
    if (t.suffix.find("norm") == std::string::npos) EXPECT_EQ(t.data, file->find("blk.0." + t.suffix)->data);
}

}  // namespace
}  // namespace sluice::weights
