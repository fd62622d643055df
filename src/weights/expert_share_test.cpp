// An expert share (--parallel ep, placement rule 7): the placement holds and
// counts only the share's experts, and the store never reads another expert
// of the file (every read it makes recorded and checked against the share's
// extents). A pipeline stage of a routed model (rule 6) pools the experts of
// its own layers alone.
#include <cstring>
#include <mutex>
#include <vector>

#include <gtest/gtest.h>

#include "model/hparams.h"
#include "model/synth.h"
#include "weights/arbiter.h"
#include "weights/expert_store.h"
#include "weights/io_engine.h"
#include "weights/placement.h"
#include "weights/weight_counters.h"
#include "weights/weights_test_util.h"

namespace sluice::weights {
namespace {

constexpr int64_t kExperts = 16;

// A tiny-qwen2moe of 16 experts in Q8_0 (one expert's slice of a stacked
// tensor: 17 pages), written once to the scratch dir.
std::shared_ptr<const ModelFile> share_model() {
  static const std::shared_ptr<const ModelFile> file = [] {
    SynthShape shape = synth_preset("tiny-qwen2moe").value();
    shape.n_vocab = 256;
    shape.n_expert = kExperts;
    const std::string path = testing::scratch_dir() + "/expert_share.gguf";
    auto bytes = write_synth_model(SynthOptions{.shape = shape, .type = "q8_0", .seed = 11, .n_threads = 2}, path);
    EXPECT_TRUE(bytes.ok()) << bytes.status().to_string();
    auto mf = open_model_file(path);
    EXPECT_TRUE(mf.ok()) << mf.status().to_string();
    return mf.ok() ? std::make_shared<const ModelFile>(std::move(*mf)) : nullptr;
  }();
  return file;
}

bool is_expert_tensor(const ModelHparams& hp, const TensorInfo& t) {
  const TensorSpec* s = hp.spec->find_tensor(t.name);
  return s && s->kind == TensorKind::kExperts;
}

// The model, its hyperparameters and one expert's slot, for every test.
class ExpertShare : public ::testing::Test {
 protected:
  void SetUp() override {
    file = share_model();
    ASSERT_NE(file, nullptr);
    hp = hparams_from_metadata(file->metadata).value();
    slot = ExpertStore::slot_bytes_for(*file, hp);
  }
  // Routed layers from `begin` to the last.
  int64_t routed_from(int64_t begin) const {
    int64_t n = 0;
    for (int64_t l = begin; l < hp.n_layer; ++l) n += hp.layer_is_moe(l);
    return n;
  }

  std::shared_ptr<const ModelFile> file;
  ModelHparams hp;
  uint64_t slot = 0;
};

TEST_F(ExpertShare, PlacementHoldsOnlyTheShare) {
  const int64_t n_moe = routed_from(0);
  uint64_t expert_tensor_bytes = 0;
  for (const TensorInfo& t : file->tensors)
    if (is_expert_tensor(hp, t)) expert_tensor_bytes += t.n_bytes;
  // Rank 1 of 4 alone: experts 4-7, nothing else held; a budget that would
  // hold its share whole still streams it (rule 7), with a pool of at most
  // the share's experts of every routed layer.
  const PlacementInputs alone{.mem_budget_bytes = 1ull << 30, .disk_gbps = 1, .layer_compute_s = 1e-3,
                              .expert_begin = 4, .expert_end = 8, .experts_only = true};
  const PlacementPlan p = plan_placement(*file, alone).value();
  EXPECT_TRUE(p.expert_share);
  EXPECT_EQ(p.n_share(), 4);
  EXPECT_EQ(p.resident_bytes, 0u);
  EXPECT_EQ(p.n_experts_total, 4 * n_moe);
  EXPECT_EQ(p.n_expert_slots, 4 * n_moe);
  EXPECT_EQ(p.host_bytes, static_cast<uint64_t>(4 * n_moe) * slot);
  EXPECT_EQ(p.total_tensor_bytes, expert_tensor_bytes / kExperts * 4);
  EXPECT_EQ(p.min_budget_bytes, 4 * slot);
  EXPECT_DOUBLE_EQ(p.expected_hit_rate, 1.0);
  for (const TensorPlacement& t : p.tensors) {
    const bool expert = is_expert_tensor(hp, file->tensors[t.index]);
    EXPECT_EQ(t.elsewhere, !expert) << file->tensors[t.index].name;
    if (expert) {
      EXPECT_EQ(t.tier, Tier::kDisk) << file->tensors[t.index].name;
    }
  }
  const std::string map = placement_map(p);
  EXPECT_NE(map.find("experts 4-7 of 16: an expert share"), std::string::npos) << map;
  EXPECT_NE(map.find("resident: nothing else"), std::string::npos) << map;
  // Half the share's experts of every layer, read ahead as the routing
  // process predicts: found at (slots - d) / (experts - d), d the share of the
  // experts a token chooses (4 of 16 experts, 2 used: d = 4 x 2/16).
  PlacementInputs half = alone;
  half.mem_budget_bytes = static_cast<uint64_t>(2 * n_moe) * slot;
  const PlacementPlan h = plan_placement(*file, half).value();
  EXPECT_EQ(h.n_expert_slots, 2 * n_moe);
  const double d = 4.0 * static_cast<double>(hp.n_expert_used) / kExperts;
  EXPECT_NEAR(h.expected_hit_rate, (2.0 * static_cast<double>(n_moe) - d) / (4.0 * static_cast<double>(n_moe) - d),
              1e-12);
  // Below one routed layer's share: refused with the smallest budget that works.
  half.mem_budget_bytes = 4 * slot - 1;
  const StatusOr<PlacementPlan> refused = plan_placement(*file, half);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("4 experts of this share (4-7)"), std::string::npos)
      << refused.status().message();
  EXPECT_NE(refused.status().message().find(std::to_string(4 * slot) + " bytes"), std::string::npos)
      << refused.status().message();
  // Rank 0's share beside the rest of the model: its dense part resident, nothing elsewhere.
  const PlacementInputs first{.mem_budget_bytes = 1ull << 30, .disk_gbps = 1, .layer_compute_s = 1e-3,
                              .expert_begin = 0, .expert_end = 4};
  const PlacementPlan f = plan_placement(*file, first).value();
  EXPECT_GT(f.resident_bytes, 0u);
  EXPECT_EQ(f.min_budget_bytes, f.resident_bytes + 4 * slot);
  EXPECT_EQ(f.n_expert_slots, 4 * n_moe);
  for (const TensorPlacement& t : f.tensors) EXPECT_FALSE(t.elsewhere) << file->tensors[t.index].name;
  // A share outside the model's experts.
  PlacementInputs bad = alone;
  bad.expert_end = kExperts + 1;
  EXPECT_FALSE(plan_placement(*file, bad).ok());
}

TEST_F(ExpertShare, APipelineStagePoolsOnlyItsOwnLayersExperts) {
  ASSERT_GE(hp.n_layer, 3);
  // Layers 1.. of the model, held whole when the budget allows.
  PlacementInputs in{.mem_budget_bytes = 1ull << 30, .disk_gbps = 1, .layer_compute_s = 1e-3, .head_compute_s = 5e-4,
                     .layer_begin = 1};
  const PlacementPlan held = plan_placement(*file, in).value();
  EXPECT_EQ(held.n_expert_slots, 0);
  // Below that: the stage's dense part resident, its own routed layers'
  // experts pooled, layer 0 and the head elsewhere.
  in.mem_budget_bytes = held.resident_bytes - 1;
  const PlacementPlan pooled = plan_placement(*file, in).value();
  const int64_t n_moe = routed_from(1);
  ASSERT_GT(n_moe, 0);
  EXPECT_EQ(pooled.n_layer_moe, n_moe);
  EXPECT_EQ(pooled.n_experts_total, n_moe * kExperts);
  EXPECT_GE(pooled.n_expert_slots, kExperts);
  EXPECT_LE(pooled.n_expert_slots, n_moe * kExperts);
  EXPECT_LE(pooled.host_bytes, in.mem_budget_bytes);
  EXPECT_DOUBLE_EQ(pooled.predicted_compute_s, static_cast<double>(hp.n_layer - 1) * 1e-3);
  EXPECT_DOUBLE_EQ(pooled.predicted_boundary_s, 0.0);  // no head: rank 0 runs it
  for (const TensorPlacement& t : pooled.tensors) {
    const bool own = t.layer >= 1;
    EXPECT_EQ(t.elsewhere, !own) << file->tensors[t.index].name;
    if (own && is_expert_tensor(hp, file->tensors[t.index])) {
      EXPECT_EQ(t.tier, Tier::kDisk);
    }
  }
  // The least budget: the stage's resident part and one routed layer's experts.
  in.mem_budget_bytes = pooled.resident_bytes + kExperts * slot;
  const PlacementPlan least = plan_placement(*file, in).value();
  EXPECT_EQ(least.min_budget_bytes, in.mem_budget_bytes);
  EXPECT_EQ(least.n_expert_slots, kExperts);
  EXPECT_LT(least.expected_hit_rate, 1.0);
  EXPECT_GT(least.expert_disk_bytes_per_step, 0.0);
  in.mem_budget_bytes -= 1;
  const StatusOr<PlacementPlan> refused = plan_placement(*file, in);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  // The first stage: the head and layers 0-1, the rest elsewhere; the head
  // is part of its step boundary.
  in.layer_begin = 0;
  in.layer_end = 2;
  in.mem_budget_bytes = 1ull << 30;
  in.mem_budget_bytes = plan_placement(*file, in).value().resident_bytes - 1;
  const PlacementPlan first = plan_placement(*file, in).value();
  EXPECT_EQ(first.n_layer_moe, (hp.layer_is_moe(0) ? 1 : 0) + (hp.layer_is_moe(1) ? 1 : 0));
  EXPECT_GT(first.n_expert_slots, 0);
  EXPECT_DOUBLE_EQ(first.predicted_boundary_s, 5e-4);
  for (const TensorPlacement& t : first.tensors) EXPECT_EQ(t.elsewhere, t.layer >= 2) << file->tensors[t.index].name;
}

TEST_F(ExpertShare, AStagesShareHoldsOnlyItsLayersExperts) {
  // --parallel pp,ep: an expert rank of the stage of layers 1.. holds experts
  // 4-7 of those layers alone; everything else is elsewhere.
  const int64_t n_moe = routed_from(1);
  const PlacementInputs in{.mem_budget_bytes = 4 * slot, .disk_gbps = 1, .layer_compute_s = 1e-3, .layer_begin = 1,
                           .expert_begin = 4, .expert_end = 8, .experts_only = true};
  const PlacementPlan p = plan_placement(*file, in).value();
  EXPECT_EQ(p.resident_bytes, 0u);
  EXPECT_EQ(p.n_layer_moe, n_moe);
  EXPECT_EQ(p.n_experts_total, 4 * n_moe);
  EXPECT_EQ(p.n_expert_slots, 4);
  EXPECT_EQ(p.min_budget_bytes, 4 * slot);
  for (const TensorPlacement& t : p.tensors) {
    const bool mine = t.layer >= 1 && is_expert_tensor(hp, file->tensors[t.index]);
    EXPECT_EQ(t.elsewhere, !mine) << file->tensors[t.index].name;
  }
  // The stage's lead: its layers' dense parts and experts 0-3 of them.
  const PlacementInputs lead{.mem_budget_bytes = 1ull << 30, .disk_gbps = 1, .layer_compute_s = 1e-3,
                             .layer_begin = 1, .expert_begin = 0, .expert_end = 4};
  const PlacementPlan l = plan_placement(*file, lead).value();
  EXPECT_GT(l.resident_bytes, 0u);
  EXPECT_EQ(l.n_experts_total, 4 * n_moe);
  for (const TensorPlacement& t : l.tensors) EXPECT_EQ(t.elsewhere, t.layer < 1) << file->tensors[t.index].name;
}

// Forwards to an engine and keeps every read's file range.
class RecordingEngine : public IoEngine {
 public:
  explicit RecordingEngine(std::unique_ptr<IoEngine> inner)
      : IoEngine(inner->backend(), inner->path(), inner->direct(), inner->file_size(), inner->queue_depth()),
        inner_(std::move(inner)) {}
  int in_flight() const override { return inner_->in_flight(); }
  void submit(const IoRead& read) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      reads_.push_back({.file_offset = read.offset, .n_bytes = read.length});
    }
    inner_->submit(read);
  }
  int wait(std::vector<IoCompletion>& out, double timeout_s) override { return inner_->wait(out, timeout_s); }
  void interrupt() override { inner_->interrupt(); }
  std::vector<TensorRange> reads() const {
    std::lock_guard<std::mutex> lock(mu_);
    return reads_;
  }

 private:
  std::unique_ptr<IoEngine> inner_;
  mutable std::mutex mu_;
  std::vector<TensorRange> reads_;  // offset, length
};

TEST_F(ExpertShare, TheStoreReadsOnlyItsOwnExperts) {
  auto inner = IoEngine::open({.path = file->source_path, .backend = IoBackend::kPread, .queue_depth = 4,
                               .direct = testing::dir_supports_direct(testing::scratch_dir())});
  ASSERT_TRUE(inner.ok()) << inner.status().to_string();
  RecordingEngine engine(std::move(*inner));
  BandwidthArbiter arbiter(engine, {});
  WeightCounters counters;
  const ExpertStoreOptions options{.n_slots = 8, .slot_bytes = slot,
                                   .expert_begin = 4, .expert_end = 8};
  auto opened = ExpertStore::open(*file, hp, options, arbiter, counters);
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  ExpertStore& store = **opened;
  // Fewer slots than the share's experts cannot work.
  EXPECT_FALSE(ExpertStore::open(*file, hp, {.n_slots = 3, .slot_bytes = options.slot_bytes, .expert_begin = 4,
                                             .expert_end = 8},
                                 arbiter, counters)
                   .ok());
  // A prediction naming other experts reads only the share's; a routing
  // naming another's is refused before any read.
  store.predict(1, std::vector<int32_t>{2, 5, 9, 15});
  const std::vector<int32_t> chosen = {4, 7, 5};
  ExpertPointers out[3];
  ASSERT_TRUE(store.acquire(1, chosen, out).ok());
  for (size_t k = 0; k < chosen.size(); ++k) {
    int64_t i = -1;
    ASSERT_TRUE(store.next_landed(1, &i).ok());
    ASSERT_GE(i, 0);
    const TensorInfo* gate = file->find("blk.1.ffn_gate_exps.weight");
    ASSERT_NE(gate, nullptr);
    const uint64_t slice = gate->n_bytes / kExperts;
    EXPECT_EQ(std::memcmp(out[i].gate, gate->data + static_cast<uint64_t>(chosen[static_cast<size_t>(i)]) * slice, slice), 0);
  }
  store.release(1);
  const std::vector<int32_t> foreign = {6, 3};
  const Status st = store.acquire(1, foreign, out);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("expert 3 of layer 1 is not this store's (experts 4-7)"), std::string::npos)
      << st.message();
  // What was read: experts 4, 5 and 7 of layer 1, nothing else.
  const ExpertHeatSnapshot heat = store.stats().experts;
  for (int64_t e = 0; e < kExperts; ++e) {
    const bool read = e == 4 || e == 5 || e == 7;
    EXPECT_EQ(heat.at(1, e).resident, read) << e;
    if (e < 4 || e >= 8) {
      EXPECT_EQ(heat.at(1, e).predicted, 0u) << e;
    }
  }
  // Every read lies inside an aligned extent of one of those experts' slices.
  std::vector<TensorRange> allowed;
  for (const char* name : {"blk.1.ffn_gate_exps.weight", "blk.1.ffn_up_exps.weight", "blk.1.ffn_down_exps.weight"}) {
    const TensorInfo* t = file->find(name);
    ASSERT_NE(t, nullptr) << name;
    const uint64_t slice = t->n_bytes / kExperts;
    for (int64_t e : {4, 5, 7}) {
      const uint64_t begin = static_cast<uint64_t>(t->file_offset) + static_cast<uint64_t>(e) * slice;
      const uint64_t lo = align_down(begin, kDirectAlign), hi = align_up(begin + slice, kDirectAlign);
      allowed.push_back({.file_offset = lo, .n_bytes = hi - lo});
    }
  }
  const std::vector<TensorRange> reads = engine.reads();
  ASSERT_FALSE(reads.empty());
  uint64_t read_bytes = 0;
  for (const TensorRange& r : reads) {
    read_bytes += r.n_bytes;
    bool inside = false;
    for (const TensorRange& a : allowed) inside = inside || (r.file_offset >= a.file_offset && r.file_offset + r.n_bytes <= a.file_offset + a.n_bytes);
    EXPECT_TRUE(inside) << "a read of " << r.n_bytes << " bytes at " << r.file_offset << " outside experts 4, 5, 7";
  }
  uint64_t allowed_bytes = 0;
  for (const TensorRange& a : allowed) allowed_bytes += a.n_bytes;
  EXPECT_LE(read_bytes, allowed_bytes);
}

}  // namespace
}  // namespace sluice::weights
