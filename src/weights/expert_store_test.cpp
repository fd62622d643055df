// The expert cache's rules, and routed models streamed expert by expert giving
// the tokens they give resident.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "base/test_data.h"
#include "model/generate.h"
#include "model/hparams.h"
#include "model/model.h"
#include "model/synth.h"
#include "sample/sampler.h"
#include "weights/arbiter.h"
#include "weights/expert_cache.h"
#include "weights/expert_store.h"
#include "weights/io_engine.h"
#include "weights/store_source.h"
#include "weights/weights_test_util.h"

namespace sluice::weights {
namespace {

TEST(ExpertCache, PinnedStayProtectedGoLastLeastUsedGoFirst) {
  ExpertCache c({.n_layer = 2, .n_expert = 4, .n_slots = 3, .policy = CachePolicy::kUsage});
  EXPECT_EQ(c.insert(0, 0).slot, 0);
  EXPECT_EQ(c.insert(0, 1).slot, 1);
  EXPECT_EQ(c.insert(0, 2).slot, 2);
  for (int i = 0; i < 3; ++i) c.note_use(0, 1);  // expert 1 is the most used
  c.note_use(0, 2);
  c.note_use(0, 0);
  c.pin(0, 0);
  // Full: the least used unpinned expert (0, 2) gives way, not (0, 0), pinned.
  ExpertCache::Placement p = c.insert(1, 3);
  EXPECT_EQ(p.evicted_layer, 0);
  EXPECT_EQ(p.evicted_expert, 2);
  EXPECT_EQ(c.slot_of(0, 2), -1);
  EXPECT_EQ(c.count_layer(1), 1);
  // A protected (predicted) expert goes after every unprotected one.
  c.protect(1, 3);
  p = c.insert(1, 0);
  EXPECT_EQ(p.evicted_expert, 1);  // (1, 3) is less used but protected
  c.unprotect_layer(1);
  c.unpin(0, 0);
  // Nothing left but pinned slots: no room.
  c.pin(0, 0);
  c.pin(1, 0);
  c.pin(1, 3);
  EXPECT_EQ(c.insert(0, 3).slot, -1);
}

// A limit keeps experts out of the slots past it (the fluid split shrinking
// the pool); raised, they take experts again.
TEST(ExpertCache, ALimitKeepsExpertsOutOfTheSlotsPastIt) {
  ExpertCache c({.n_layer = 1, .n_expert = 8, .n_slots = 4, .policy = CachePolicy::kLru});
  EXPECT_EQ(c.insert(0, 0).slot, 0);
  EXPECT_EQ(c.insert(0, 1).slot, 1);
  c.set_limit(2);
  EXPECT_EQ(c.n_slots(), 2);
  EXPECT_EQ(c.n_slot_ids(), 4);
  const ExpertCache::Placement p = c.insert(0, 2);  // full below the limit: one gives way
  EXPECT_LT(p.slot, 2);
  EXPECT_GE(p.evicted_expert, 0);
  c.set_limit(4);
  EXPECT_EQ(c.insert(0, 3).slot, 2);  // the first empty slot, now within the limit
}

TEST(ExpertCache, LruEvictsTheLeastRecentlyUsed) {
  ExpertCache c({.n_layer = 1, .n_expert = 4, .n_slots = 2, .policy = CachePolicy::kLru});
  c.insert(0, 0);
  c.insert(0, 1);
  for (int i = 0; i < 5; ++i) c.note_use(0, 0);
  c.note_use(0, 1);  // used once, but last
  EXPECT_EQ(c.insert(0, 2).evicted_expert, 0);
}

std::vector<int32_t> greedy_ids(const std::shared_ptr<const ModelFile>& file, std::shared_ptr<LayerWeightSource> source,
                            const std::vector<int32_t>& prompt, int n) {
  auto m = Model::load(file, ModelOptions{.n_threads = 2, .weights = std::move(source)});
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  if (!m.ok()) return {};
  KvCache kv = (*m)->make_kv_cache(static_cast<int64_t>(prompt.size()) + n);
  Sampler s(SamplingParams{.temperature = 0}, static_cast<int32_t>((*m)->hparams().n_vocab));
  auto r = generate(**m, kv, prompt, s, GenerateParams{.stop = {.max_tokens = n}});
  EXPECT_TRUE(r.ok());
  return r->tokens;
}

// Streamed under `budget` (0: the smallest workable), the same greedy tokens.
void expect_streamed_equals_resident(const std::shared_ptr<const ModelFile>& file, uint64_t budget,
                                     const std::vector<int32_t>& prompt) {
  const auto resident = greedy_ids(file, nullptr, prompt, 40);
  const bool direct = testing::dir_supports_direct(testing::scratch_dir());
  auto setup = open_streaming(file, StreamingOptions{.mem_budget_bytes = budget, .n_threads = 2, .direct = direct});
  ASSERT_TRUE(setup.ok()) << setup.status().to_string();
  const PlacementPlan& plan = setup->source->store().plan();
  ASSERT_GT(plan.n_expert_slots, 0);
  EXPECT_EQ(plan.n_streamed, 0);  // experts stream one by one, layers stay
  EXPECT_LT(plan.host_bytes, plan.total_tensor_bytes);
  // The disk waits at each step boundary (the last expert, the head).
  EXPECT_GT(plan.predicted_boundary_s, 0.0);
  EXPECT_NEAR(plan.predicted_step_s(),
              std::max(plan.predicted_compute_s, plan.predicted_disk_s + plan.predicted_boundary_s), 1e-12);
  EXPECT_EQ(greedy_ids(file, setup->source, prompt, 40), resident);
  const ExpertStatsSnapshot s = setup->source->store().expert_stats();
  EXPECT_GT(s.total().chosen, 0u);
  EXPECT_GT(s.total().predicted, 0u);
  EXPECT_GT(s.disk_bytes, 0u);
  EXPECT_LE(s.total().resident, plan.n_expert_slots);
  // The per-expert figures add up to the layer's.
  ASSERT_EQ(s.experts.n_layer, static_cast<int64_t>(s.layers.size()));
  for (int64_t l = 0; l < s.experts.n_layer; ++l) {
    ExpertLayerStats sum;
    for (int64_t e = 0; e < s.experts.n_expert; ++e) {
      const ExpertHeatCell& c = s.experts.at(l, e);
      sum.ready += c.ready;
      sum.late += c.late;
      sum.missed += c.missed;
      sum.predicted += c.predicted;
      sum.predicted_chosen += c.predicted_chosen;
      sum.resident += c.resident;
    }
    const ExpertLayerStats& x = s.layers[static_cast<size_t>(l)];
    EXPECT_EQ(sum.ready, x.ready) << "layer " << l;
    EXPECT_EQ(sum.late, x.late) << "layer " << l;
    EXPECT_EQ(sum.missed, x.missed) << "layer " << l;
    EXPECT_EQ(sum.ready + sum.late + sum.missed, x.chosen) << "layer " << l;
    EXPECT_EQ(sum.predicted, x.predicted) << "layer " << l;
    EXPECT_EQ(sum.predicted_chosen, x.predicted_chosen) << "layer " << l;
    EXPECT_EQ(sum.resident, x.resident) << "layer " << l;
  }
}

TEST(ExpertStore, StoriesMoeStreamedExpertByExpertGivesTheResidentTokens) {
  const std::string path = sluice::testing::shipped_model_path("stories-moe-f16.gguf");
  auto mf = open_model_file(path);
  ASSERT_TRUE(mf.ok());
  auto file = std::make_shared<const ModelFile>(std::move(*mf));
  // 2.6 MB in all, 2.4 MB of it experts. Below the resident parts plus 17 expert
  // slots (1.07 MB): refused. At 1.5 MB: 24 slots of 64 experts.
  EXPECT_FALSE(open_streaming(file, {.mem_budget_bytes = 600'000, .n_threads = 2}).ok());
  expect_streamed_equals_resident(file, 1'500'000, {1, 403, 407, 261, 378});
}

// With the disk slowed to 0.5 MB/s (an expert of ~37 KB takes ~75 ms), two
// predicted experts are still reading when their layer routes: late, by the
// time from routing to landing; the two not predicted are missed. Every
// chosen expert is ready, late or missed.
TEST(ExpertStore, ChosenExpertsAreReadyLateOrMissedAndLatenessIsTimed) {
  const std::string path = sluice::testing::shipped_model_path("stories-moe-f16.gguf");
  auto mf = open_model_file(path);
  ASSERT_TRUE(mf.ok());
  auto file = std::make_shared<const ModelFile>(std::move(*mf));
  const bool direct = testing::dir_supports_direct(testing::scratch_dir());
  auto setup = open_streaming(file, StreamingOptions{.mem_budget_bytes = 1'500'000, .n_threads = 2, .direct = direct,
                                                     .disk_rate_cap_bytes_per_s = 0.5e6});
  ASSERT_TRUE(setup.ok()) << setup.status().to_string();
  WeightStore& store = setup->source->store();
  ASSERT_TRUE(store.streams_experts());
  const std::vector<int32_t> chosen = {3, 5, 8, 9};
  store.predict_experts(2, std::vector<int32_t>{3, 5});
  ExpertPointers out[4];
  ASSERT_TRUE(store.begin_experts(2, chosen, out).ok());
  for (size_t k = 0; k < chosen.size(); ++k) {
    int64_t i = -1;
    ASSERT_TRUE(store.next_expert(2, &i).ok());
    ASSERT_GE(i, 0);
  }
  store.release(2);
  const ExpertLayerStats l = store.expert_stats().layers[2];
  EXPECT_EQ(l.chosen, 4u);
  EXPECT_EQ(l.ready, 0u);
  EXPECT_EQ(l.late, 2u);
  EXPECT_EQ(l.missed, 2u);
  EXPECT_EQ(l.ready + l.late + l.missed, l.chosen);
  EXPECT_GT(l.late_s, 0.02);  // the first late one needs at least one throttled read of its three
  EXPECT_GE(l.late_max_s, l.late_s / 2);
  EXPECT_LE(l.late_max_s, l.late_s);
  EXPECT_NEAR(l.late_mean_ms(), 1e3 * l.late_s / 2, 1e-9);
  // Per expert: 3 and 5 predicted (hits) and late, 8 and 9 missed, all four in slots.
  const ExpertHeatSnapshot h = store.expert_stats().experts;
  for (int32_t e : {3, 5}) {
    EXPECT_EQ(h.at(2, e).late, 1u) << e;
    EXPECT_EQ(h.at(2, e).predicted_chosen, 1u) << e;
  }
  for (int32_t e : {8, 9}) {
    EXPECT_EQ(h.at(2, e).missed, 1u) << e;
    EXPECT_EQ(h.at(2, e).predicted, 0u) << e;
  }
  for (int64_t e = 0; e < h.n_expert; ++e) {
    const bool was_chosen = std::find(chosen.begin(), chosen.end(), e) != chosen.end();
    EXPECT_EQ(h.at(2, e).resident, was_chosen) << e;
    EXPECT_EQ(h.at(2, e).chosen(), was_chosen ? 1u : 0u) << e;
    EXPECT_FALSE(h.at(1, e).resident) << e;
  }
  // Again: all four in slots now, ready, and no later lateness.
  ASSERT_TRUE(store.begin_experts(2, chosen, out).ok());
  for (size_t k = 0; k < chosen.size(); ++k) {
    int64_t i = -1;
    ASSERT_TRUE(store.next_expert(2, &i).ok());
  }
  store.release(2);
  const ExpertLayerStats again = store.expert_stats().layers[2];
  EXPECT_EQ(again.ready, 4u);
  EXPECT_EQ(again.late_s, l.late_s);
  EXPECT_EQ(again.ready + again.late + again.missed, again.chosen);
  for (int32_t e : chosen) EXPECT_EQ(store.expert_stats().experts.at(2, e).ready, 1u) << e;
}

// A small tiny-qwen2moe with n_expert experts, written to the scratch dir in Q8_0.
std::shared_ptr<const ModelFile> synth_qwen2moe(const std::string& name, int64_t n_vocab, int64_t n_expert,
                                                int64_t n_ff_shared, uint64_t seed) {
  SynthShape shape = synth_preset("tiny-qwen2moe").value();
  shape.n_vocab = n_vocab;
  shape.n_expert = n_expert;
  if (n_ff_shared > 0) shape.n_ff_shared = n_ff_shared;
  const std::string path = testing::scratch_dir() + "/" + name;
  auto bytes = write_synth_model(SynthOptions{.shape = shape, .type = "q8_0", .seed = seed, .n_threads = 2}, path);
  EXPECT_TRUE(bytes.ok()) << bytes.status().to_string();
  auto mf = open_model_file(path);
  EXPECT_TRUE(mf.ok()) << mf.status().to_string();
  return mf.ok() ? std::make_shared<const ModelFile>(std::move(*mf)) : nullptr;
}

// The file streamed under half its size: the experts of more than one layer fit.
StatusOr<StreamingSetup> stream_at_half(const std::shared_ptr<const ModelFile>& file) {
  const bool direct = testing::dir_supports_direct(testing::scratch_dir());
  return open_streaming(file, StreamingOptions{.mem_budget_bytes = file->total_tensor_bytes() / 2, .n_threads = 2,
                                               .direct = direct});
}

// A synth_qwen2moe file (256 tokens) and its experts streamed at half its
// size; load_streamed_at_half ASSERTs, so call it under ASSERT_NO_FATAL_FAILURE.
struct StreamedAtHalf {
  std::shared_ptr<const ModelFile> file;
  StreamingSetup setup;
  WeightStore& store() const { return setup.source->store(); }
};

void load_streamed_at_half(const std::string& name, int64_t n_expert, uint64_t seed, StreamedAtHalf* out) {
  out->file = synth_qwen2moe(name, 256, n_expert, 0, seed);
  ASSERT_NE(out->file, nullptr);
  auto setup = stream_at_half(out->file);
  ASSERT_TRUE(setup.ok()) << setup.status().to_string();
  out->setup = std::move(*setup);
}

// acquire without waiting, then next_landed(): every chosen expert handed out
// once, its bytes in place when it is, then -1.
TEST(ExpertStore, ExpertsAreHandedOutOnceEachAsTheyLand) {
  constexpr int64_t kExperts = 16;
  StreamedAtHalf streamed;
  ASSERT_NO_FATAL_FAILURE(load_streamed_at_half("expert_store_landing.gguf", kExperts, 5, &streamed));
  WeightStore& store = streamed.store();
  ASSERT_TRUE(store.streams_experts());
  const TensorInfo* gate = streamed.file->find("blk.1.ffn_gate_exps.weight");
  ASSERT_NE(gate, nullptr);
  const uint64_t slice = gate->n_bytes / static_cast<uint64_t>(kExperts);
  const std::vector<int32_t> chosen = {3, 11, 0, 7};
  store.predict_experts(1, std::vector<int32_t>{11});  // one already reading at prefetch priority
  ExpertPointers out[4];
  ASSERT_TRUE(store.begin_experts(1, chosen, out).ok());
  std::vector<int> handed(chosen.size(), 0);
  for (size_t k = 0; k < chosen.size(); ++k) {
    int64_t i = -1;
    ASSERT_TRUE(store.next_expert(1, &i).ok());
    ASSERT_GE(i, 0);
    ASSERT_LT(i, static_cast<int64_t>(chosen.size()));
    ++handed[static_cast<size_t>(i)];
    const uint8_t* want = gate->data + static_cast<uint64_t>(chosen[static_cast<size_t>(i)]) * slice;
    EXPECT_EQ(std::memcmp(out[i].gate, want, slice), 0) << "expert " << chosen[static_cast<size_t>(i)];
  }
  EXPECT_EQ(handed, std::vector<int>(chosen.size(), 1));
  int64_t i = 0;
  ASSERT_TRUE(store.next_expert(1, &i).ok());
  EXPECT_EQ(i, -1);
  for (const ExpertPointers& p : out) EXPECT_FALSE(p.prepared);  // fresh from disk
  store.expert_prepared(1, 2);  // the caller reordered expert 0 (chosen[2]) in place
  store.release(1);
  // The same experts again: all in slots now, expert 0 as the caller left it.
  ASSERT_TRUE(store.begin_experts(1, chosen, out).ok());
  for (size_t k = 0; k < chosen.size(); ++k) EXPECT_EQ(out[k].prepared, k == 2) << "expert " << chosen[k];
  for (size_t k = 0; k < chosen.size(); ++k) ASSERT_TRUE(store.next_expert(1, &i).ok());
  store.release(1);
}

// landed() finds an expert once its read has landed; before a slot whose
// expert had landed takes another, the store calls the reuse hook with that
// expert while its bytes are still whole (a device copying ahead from them
// lets go there).
TEST(ExpertStore, TheReuseHookNamesALandedExpertBeforeItsSlotIsReused) {
  constexpr int64_t kExperts = 16;
  StreamedAtHalf streamed;
  ASSERT_NO_FATAL_FAILURE(load_streamed_at_half("expert_store_reuse.gguf", kExperts, 6, &streamed));
  WeightStore& store = streamed.store();
  ASSERT_TRUE(store.streams_experts());
  const auto hp = hparams_from_metadata(streamed.file->metadata);
  ASSERT_TRUE(hp.ok());
  const TensorInfo* gate = streamed.file->find("blk.1.ffn_gate_exps.weight");
  ASSERT_NE(gate, nullptr);
  const uint64_t slice = gate->n_bytes / static_cast<uint64_t>(kExperts);
  ExpertPointers p;
  EXPECT_FALSE(store.landed_expert(1, 5, &p));  // never read
  // Where each landed expert's gate lies, from landed(); the hook checks it is still whole.
  std::map<std::pair<int64_t, int32_t>, const uint8_t*> where;
  int reused = 0, whole = 0;
  store.set_expert_reuse_hook([&](int64_t l, int32_t e) {
    ++reused;
    const auto it = where.find({l, e});
    ASSERT_NE(it, where.end()) << l << " " << e;
    const TensorInfo* g = streamed.file->find(fmt::format("blk.{}.ffn_gate_exps.weight", l));
    whole += std::memcmp(it->second, g->data + static_cast<uint64_t>(e) * slice, slice) == 0;
    where.erase(it);
  });
  // Every routed layer's experts four at a time, twice: more than the pool holds.
  for (int round = 0; round < 2; ++round)
    for (int64_t l = 0; l < hp->n_layer; ++l) {
      if (!hp->layer_is_moe(l)) continue;
      for (int32_t first = 0; first < kExperts; first += 4) {
        const std::vector<int32_t> chosen = {first, first + 1, first + 2, first + 3};
        ExpertPointers out[4];
        ASSERT_TRUE(store.begin_experts(l, chosen, out).ok());
        for (size_t k = 0; k < chosen.size(); ++k) {
          int64_t i = -1;
          ASSERT_TRUE(store.next_expert(l, &i).ok());
        }
        for (size_t k = 0; k < chosen.size(); ++k) {
          ASSERT_TRUE(store.landed_expert(l, chosen[k], &p));
          EXPECT_EQ(p.gate, out[k].gate);
          where[{l, chosen[k]}] = p.gate;
        }
        store.release(l);
      }
    }
  EXPECT_GT(reused, 0);
  EXPECT_EQ(whole, reused);
  store.set_expert_reuse_hook(nullptr);
}

// An ExpertStore of n_slots over a synth_qwen2moe file of n_expert experts,
// on an arbiter of its own (the store keeps references: not moved once open).
struct OwnStore {
  std::shared_ptr<const ModelFile> file;
  std::unique_ptr<IoEngine> engine;
  std::unique_ptr<BandwidthArbiter> arbiter;
  WeightCounters counters;
  std::unique_ptr<ExpertStore> store;
  // acquire, every expert landed, release; ASSERTs.
  void take(int64_t layer, std::span<const int32_t> experts) {
    std::vector<ExpertPointers> out(experts.size());
    ASSERT_TRUE(store->acquire(layer, experts, out.data()).ok());
    int64_t i = 0;
    for (size_t k = 0; k < experts.size(); ++k) ASSERT_TRUE(store->next_landed(layer, &i).ok());
    store->release(layer);
  }
};

// ASSERTs: call it under ASSERT_NO_FATAL_FAILURE.
void open_own_store(const std::string& name, int64_t n_expert, int64_t n_slots, uint64_t seed, OwnStore* out) {
  out->file = synth_qwen2moe(name, 256, n_expert, 0, seed);
  ASSERT_NE(out->file, nullptr);
  auto hp = hparams_from_metadata(out->file->metadata);
  ASSERT_TRUE(hp.ok()) << hp.status().to_string();
  auto engine = IoEngine::open({.path = out->file->source_path, .backend = IoBackend::kPread, .queue_depth = 4,
                                .direct = testing::dir_supports_direct(testing::scratch_dir())});
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  out->engine = std::move(*engine);
  out->arbiter = std::make_unique<BandwidthArbiter>(*out->engine, ArbiterOptions{});
  const ExpertStoreOptions options{.n_slots = n_slots, .slot_bytes = ExpertStore::slot_bytes_for(*out->file, *hp)};
  auto store = ExpertStore::open(*out->file, *hp, options, *out->arbiter, out->counters);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  out->store = std::move(*store);
}

// A prediction's read that the arbiter had not begun when it was dropped
// leaves the slot to the expert it evicted: the slot's bytes were never
// touched, so that expert is still a hit, with no read.
TEST(ExpertStore, ADroppedPrefetchThatNeverBeganKeepsTheExpertItEvicted) {
  constexpr int64_t kExperts = 8;
  OwnStore own;
  ASSERT_NO_FATAL_FAILURE(open_own_store("expert_store_restore.gguf", kExperts, kExperts, 9, &own));
  ExpertStore& es = *own.store;
  // Every slot holds a landed expert of layer 1.
  std::vector<int32_t> all(kExperts);
  for (int32_t e = 0; e < kExperts; ++e) all[static_cast<size_t>(e)] = e;
  ASSERT_NO_FATAL_FAILURE(own.take(1, all));
  const uint64_t read_before = es.stats().disk_bytes;
  // With the disk held, layer 0's prediction evicts one of them for a read
  // that is queued but not issued; the refined prediction drops it.
  own.arbiter->pause();
  es.predict(0, std::vector<int32_t>{5});
  es.predict(0, std::vector<int32_t>{});
  own.arbiter->resume();
  EXPECT_EQ(es.stats().restored, 1u);
  EXPECT_EQ(es.stats().disk_bytes, read_before);
  // Layer 1 again: all of its experts are in their slots, none read.
  ASSERT_NO_FATAL_FAILURE(own.take(1, all));
  const ExpertLayerStats l1 = es.stats().layers[1];
  EXPECT_EQ(l1.ready, static_cast<uint64_t>(kExperts));
  EXPECT_EQ(l1.missed, static_cast<uint64_t>(kExperts));  // the first time only
  EXPECT_EQ(l1.kept, static_cast<uint64_t>(kExperts));    // the second time, all
  EXPECT_EQ(es.stats().disk_bytes, read_before);
  EXPECT_EQ(es.stats().layers[1].resident, kExperts);
  EXPECT_EQ(es.stats().layers[0].resident, 0);
  EXPECT_EQ(es.stats().layers[0].cancelled, 1u);
}

// A layer's chosen experts already in slots are pinned before a missed one
// is read: its read takes another slot, not that of an expert chosen after
// it, which would then be read again.
TEST(ExpertStore, AMissedExpertsReadLeavesTheOtherChosenOnesInTheirSlots) {
  OwnStore own;
  ASSERT_NO_FATAL_FAILURE(open_own_store("expert_store_chosen_pinned.gguf", 8, 8, 10, &own));
  ExpertStore& es = *own.store;
  own.take(1, std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7});  // every slot
  const uint64_t one_expert = es.stats().disk_bytes / 8;
  ASSERT_GT(one_expert, 0u);
  own.take(0, std::vector<int32_t>{0, 1, 2, 3});  // in place of layer 1's 0-3; its 4 is now the least recent
  own.take(1, std::vector<int32_t>{0, 4});        // 0 missed, then 4 in its slot
  EXPECT_EQ(es.stats().disk_bytes, 13 * one_expert);
  const ExpertLayerStats l = es.stats().layers[1];
  EXPECT_EQ(l.missed, 9u);
  EXPECT_EQ(l.ready, 1u);
  own.take(1, std::vector<int32_t>{4, 0});  // both still there
  EXPECT_EQ(es.stats().disk_bytes, 13 * one_expert);
  EXPECT_EQ(es.stats().layers[1].ready, 3u);
}

// The model predicts a layer twice (a first guess before the previous
// layer's experts are added, then the refined one): the second replaces the
// first, so an expert only the first named is neither counted as predicted
// nor kept reading.
TEST(ExpertStore, ALaterPredictionOfALayerReplacesTheEarlierOne) {
  StreamedAtHalf streamed;
  ASSERT_NO_FATAL_FAILURE(load_streamed_at_half("expert_store_repredict.gguf", 16, 7, &streamed));
  WeightStore& store = streamed.store();
  store.predict_experts(1, std::vector<int32_t>{3, 5, 9});
  store.predict_experts(1, std::vector<int32_t>{3, 12});
  const std::vector<int32_t> chosen = {3, 12};
  ExpertPointers out[2];
  ASSERT_TRUE(store.begin_experts(1, chosen, out).ok());
  int64_t i = 0;
  for (size_t k = 0; k < chosen.size(); ++k) ASSERT_TRUE(store.next_expert(1, &i).ok());
  store.release(1);
  const ExpertLayerStats l = store.expert_stats().layers[1];
  EXPECT_EQ(l.predicted, 2u);  // 3 and 12, not 5 and 9
  EXPECT_EQ(l.predicted_chosen, 2u);
  EXPECT_EQ(l.chosen, 2u);
  EXPECT_EQ(l.missed, 0u);  // both were reading or landed when the layer routed
  EXPECT_EQ(l.prefetch_reads, 4u);  // 3, 5, 9, then 12
  EXPECT_LE(l.cancelled, 2u);       // 5 and 9, if still reading when dropped
}

// While a layer would wait for a read, the model reorders experts that landed
// earlier and are not in use: the store offers those (predicted ones first,
// never a pinned one), and a later hit finds them reordered.
TEST(ExpertStore, LandedExpertsNotInUseAreOfferedForReorderingWhileWaiting) {
  constexpr int64_t kExperts = 16;
  StreamedAtHalf streamed;
  ASSERT_NO_FATAL_FAILURE(load_streamed_at_half("expert_store_idle.gguf", kExperts, 8, &streamed));
  WeightStore& store = streamed.store();
  auto drain = [&](int64_t layer, size_t n) {
    int64_t i = 0;
    for (size_t k = 0; k < n; ++k) ASSERT_TRUE(store.next_expert(layer, &i).ok());
    EXPECT_TRUE(store.next_expert_ready(layer));  // all handed out: nothing to wait for
  };
  int64_t l = -1;
  int32_t e = -1;
  ExpertPointers p;
  ExpertPointers out[2];
  // Layer 1's experts 2 and 6 land and are used without being reordered.
  ASSERT_TRUE(store.begin_experts(1, std::vector<int32_t>{2, 6}, out).ok());
  drain(1, 2);
  store.release(1);
  // Expert 2 in use again (pinned): only 6 is offered.
  ASSERT_TRUE(store.begin_experts(1, std::vector<int32_t>{2}, out).ok());
  EXPECT_TRUE(store.next_expert_ready(1));  // it is in its slot
  ASSERT_TRUE(store.unprepared_expert(&l, &e, &p));
  EXPECT_EQ(l, 1);
  EXPECT_EQ(e, 6);
  store.unpinned_expert_prepared(1, 6);
  EXPECT_FALSE(store.unprepared_expert(&l, &e, &p));
  drain(1, 1);
  store.release(1);
  // A predicted expert of layer 2 goes first once it has landed.
  store.predict_experts(2, std::vector<int32_t>{9});
  bool found = false;
  for (int tries = 0; tries < 1000 && !found; ++tries) {
    ASSERT_TRUE(store.unprepared_expert(&l, &e, &p));
    found = l == 2 && e == 9;
    if (!found) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(found);
  const TensorInfo* gate = streamed.file->find("blk.2.ffn_gate_exps.weight");
  ASSERT_NE(gate, nullptr);
  const uint64_t slice = gate->n_bytes / static_cast<uint64_t>(kExperts);
  EXPECT_EQ(std::memcmp(p.gate, gate->data + 9 * slice, slice), 0);
  store.unpinned_expert_prepared(2, 9);
  ASSERT_TRUE(store.unprepared_expert(&l, &e, &p));  // layer 1's expert 2, used but never reordered
  EXPECT_EQ(l, 1);
  EXPECT_EQ(e, 2);
  store.unpinned_expert_prepared(1, 2);
  EXPECT_FALSE(store.unprepared_expert(&l, &e, &p));
  // Hits find them reordered.
  ASSERT_TRUE(store.begin_experts(2, std::vector<int32_t>{9}, out).ok());
  EXPECT_TRUE(out[0].prepared);
  drain(2, 1);
  store.release(2);
  ASSERT_TRUE(store.begin_experts(1, std::vector<int32_t>{2, 6}, out).ok());
  EXPECT_TRUE(out[0].prepared);
  EXPECT_TRUE(out[1].prepared);
  drain(1, 2);
  store.release(1);
}

TEST(ExpertStore, SynthQwen2MoeAtAThirdOfItsSizeGivesTheResidentTokens) {
  // The qwen2moe family with many small experts, as the real ones have (most
  // of the bytes are experts).
  const auto file = synth_qwen2moe("expert_store_qwen2moe.gguf", 1024, 48, 256, 4);
  ASSERT_NE(file, nullptr);
  expect_streamed_equals_resident(file, file->total_tensor_bytes() / 3, {1, 300, 301, 302, 500, 77});
}

// Forwards to a store source and counts the experts the model reports as
// reordered in place.
class CountingSource : public testing::ForwardingSource {
 public:
  using ForwardingSource::ForwardingSource;
  void expert_prepared(int64_t layer, int64_t index) override {
    ++n_prepared;
    ForwardingSource::expert_prepared(layer, index);
  }
  void unpinned_expert_prepared(int64_t layer, int32_t expert) override {
    ++n_prepared;
    ForwardingSource::unpinned_expert_prepared(layer, expert);
  }
  bool reorderable(const uint8_t* data) const override {
    const bool yes = ForwardingSource::reorderable(data);
    n_reorderable += yes;
    return yes;
  }
  int64_t n_prepared = 0;
  mutable int64_t n_reorderable = 0;
};

// Resident matrices (attention, head) sit in the store's own buffers, so with
// repacking on they are reordered there once at load, where the backend's
// level has a layout for them; the tokens stay the same.
TEST(ExpertStore, NoRepackLeavesLandedExpertsAndResidentMatricesInGgufRows) {
  const auto file = synth_qwen2moe("expert_store_norepack.gguf", 256, 16, 0, 6);
  ASSERT_NE(file, nullptr);
  const std::vector<int32_t> prompt = {1, 20, 30, 40};
  const auto resident = greedy_ids(file, nullptr, prompt, 12);
  for (const bool repack : {true, false}) {
    auto setup = stream_at_half(file);
    ASSERT_TRUE(setup.ok()) << setup.status().to_string();
    auto counting = std::make_shared<CountingSource>(setup->source);
    auto m = Model::load(file, ModelOptions{.n_threads = 2, .weights = counting, .repack = repack});
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    KvCache kv = (*m)->make_kv_cache(static_cast<int64_t>(prompt.size()) + 12);
    Sampler sampler(SamplingParams{.temperature = 0}, static_cast<int32_t>((*m)->hparams().n_vocab));
    auto r = generate(**m, kv, prompt, sampler, GenerateParams{.stop = {.max_tokens = 12}});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->tokens, resident) << "repack " << repack;
    // Landed experts are reordered (and reported) only when repacking is on.
    if (repack) {
      EXPECT_GT(counting->n_prepared, 0);
      EXPECT_GT(counting->n_reorderable, 0);
    } else {
      EXPECT_EQ(counting->n_prepared, 0);
      EXPECT_EQ(counting->n_reorderable, 0);
    }
    const TensorInfo* out = file->find("output.weight");
    ASSERT_NE(out, nullptr);
    const WeightView head{.type = out->type, .data = out->data, .n_in = out->ne[0], .n_out = out->ne[1]};
    WeightLayout layout = WeightLayout::kRows;
    (*m)->backend().in_place_layouts(std::span(&head, 1), &layout);
    const uint8_t* held = setup->source->store().resident_tensor("output.weight");
    ASSERT_NE(held, nullptr);
    EXPECT_EQ(std::memcmp(held, out->data, out->n_bytes) != 0, repack && layout != WeightLayout::kRows)
        << "repack " << repack;
    EXPECT_GT(setup->source->store().expert_stats().disk_bytes, 0u);
  }
}

}  // namespace
}  // namespace sluice::weights
