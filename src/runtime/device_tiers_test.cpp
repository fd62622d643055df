// Three tiers (--gpu-budget with --mem-budget on a device backend), the parts
// that run without a GPU: the placement's device tier (rule 8), the store
// serving it, and the model's contract with a backend whose memory is not the
// host's: the device tier's layers and the head prepared once and kept bound,
// every other view in the store's registered memory, and the host reads
// finished before the store reuses a layer's bytes. The backend here is the
// reference one saying it is not host-visible, with a checking arena as its
// "device" memory; the CUDA side (cuda/cuda_host_views.h) is tested on a GPU.
#include <gtest/gtest.h>

#include <cstring>

#include "backend/reference_backend.h"
#include "model/generate.h"
#include "model/model.h"
#include "model/synth.h"
#include "runtime/device_like_test_util.h"
#include "runtime/device_tiers.h"
#include "runtime/load_model.h"
#include "sample/sampler.h"
#include "weights/expert_store.h"
#include "weights/store_source.h"
#include "weights/weights_test_util.h"

namespace sluice::weights {
namespace {

using ::sluice::testing::DeviceLike;

uint64_t slot_of(const ModelFile& f) {
  auto all = plan_placement(f, {});
  EXPECT_TRUE(all.ok());
  uint64_t slot = 0;
  for (const LayerPlacement& l : all->layers) slot = std::max(slot, l.extent_bytes);
  return slot;
}

TEST(DeviceTier, ItsLayersAreTheBackendsAndTheOthersArePlacedAsBefore) {
  auto file = testing::small_synth_model("device_tier_place.gguf", 8, 5);
  ASSERT_NE(file, nullptr);
  const uint64_t slot = slot_of(*file);
  auto base = plan_placement(*file, {});
  ASSERT_TRUE(base.ok());
  // Room for the essentials, a ring of 2 and one resident layer, over the 5
  // layers the device does not hold.
  PlacementInputs in{.mem_budget_bytes = base->essentials_bytes + 3 * slot + 4096, .disk_gbps = 2,
                     .layer_compute_s = 1e-3, .device_layers = {1, 4, 6}};
  auto p = plan_placement(*file, in);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  int64_t device = 0, resident = 0;
  for (int64_t l = 0; l < 8; ++l) {
    const LayerPlacement& lp = p->layers[static_cast<size_t>(l)];
    const bool want = l == 1 || l == 4 || l == 6;
    EXPECT_EQ(lp.device, want) << l;
    if (want) {
      EXPECT_FALSE(lp.streamed) << l;
    }
    device += lp.device;
    resident += !lp.device && !lp.streamed;
  }
  EXPECT_EQ(device, 3);
  EXPECT_EQ(p->n_streamed + resident, 5);
  EXPECT_EQ(resident, 1);
  for (const TensorPlacement& t : p->tensors) {
    const TensorInfo& info = file->tensors[t.index];
    const bool want = t.layer >= 0 && p->layers[static_cast<size_t>(t.layer)].device && info.ne.size() > 1;
    EXPECT_EQ(t.tier == Tier::kDevice, want) << info.name;
  }
  // The host holds what it held for the five layers alone.
  EXPECT_LE(p->host_bytes, in.mem_budget_bytes);
  EXPECT_EQ(p->resident_layer_bytes, slot);
  const std::string map = placement_map(*p);
  EXPECT_NE(map.find("3 layers, copied to the device"), std::string::npos) << map;
  EXPECT_NE(map.find("G"), std::string::npos) << map;

  // Bad requests.
  PlacementInputs out = in;
  out.device_layers = {8};
  EXPECT_EQ(plan_placement(*file, out).status().code(), StatusCode::kInvalidArgument);
  out.device_layers = {2, 2};
  EXPECT_EQ(plan_placement(*file, out).status().code(), StatusCode::kInvalidArgument);
  // Training: the device's layer is neither read nor held by the host
  // (placement_test.cpp has the training spread around it).
  out.device_layers = {2};
  out.training = true;
  out.train_backward_s = 1e-3;
  const StatusOr<PlacementPlan> t = plan_placement(*file, out);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_TRUE(t->layers[2].device);
  EXPECT_FALSE(t->layers[2].streamed);
  EXPECT_TRUE(t->training);
}

// The store as the model's source, checking at each release that the reads
// from the layer's host bytes were finished first.
class CheckedSource final : public testing::ForwardingSource {
 public:
  CheckedSource(std::shared_ptr<StoreWeightSource> s, const DeviceLike& be) : ForwardingSource(std::move(s)), be_(be) {}
  void release(int64_t layer) override {
    if (be_.unfinished) ++early_releases;
    ForwardingSource::release(layer);
  }
  int early_releases = 0;

 private:
  const DeviceLike& be_;
};

std::vector<int32_t> greedy(Model& m, const std::vector<int32_t>& prompt, int n) {
  KvCache kv = m.make_kv_cache(static_cast<int64_t>(prompt.size()) + n);
  Sampler s(SamplingParams{.temperature = 0}, static_cast<int32_t>(m.hparams().n_vocab));
  auto r = generate(m, kv, prompt, s, GenerateParams{.stop = {.max_tokens = n}});
  EXPECT_TRUE(r.ok());
  return r.ok() ? r->tokens : std::vector<int32_t>{};
}

// The model's greedy tokens run plainly on the reference backend: the same
// kernels as DeviceLike's, so the same tokens whatever the ISA.
std::vector<int32_t> reference_tokens(const std::shared_ptr<const ModelFile>& file, const std::vector<int32_t>& prompt,
                                      int n) {
  auto plain = Model::load(file, ModelOptions{.backend = std::make_shared<ReferenceBackend>()});
  EXPECT_TRUE(plain.ok()) << plain.status().to_string();
  return plain.ok() ? greedy(**plain, prompt, n) : std::vector<int32_t>{};
}

// An 8-layer dense model over three tiers: the device holds what plan_tiers
// gives it under a budget of 5 layers' bytes beside the essentials; the host
// the essentials, a ring of 2 and one layer.
struct DenseTiers {
  std::shared_ptr<const ModelFile> file;
  std::vector<int64_t> device_layers;
  std::shared_ptr<StoreWeightSource> source;
};

void open_dense_tiers(const std::string& name, DenseTiers* t) {
  t->file = testing::small_synth_model(name, 8, 5);
  ASSERT_NE(t->file, nullptr);
  const uint64_t slot = slot_of(*t->file);
  auto base = plan_placement(*t->file, {});
  ASSERT_TRUE(base.ok());
  const uint64_t essentials = base->essentials_bytes;
  auto tiers = plan_device_tiers(*t->file, essentials + 5 * slot, essentials + 3 * slot + 4096,
                                 plan::h200_tier_rates());
  ASSERT_TRUE(tiers.ok()) << tiers.status().to_string();
  ASSERT_GT(tiers->device_layers.size(), 0u);
  ASSERT_LT(tiers->device_layers.size(), 8u);
  t->device_layers = tiers->device_layers;
  auto setup = open_streaming(t->file, StreamingOptions{.mem_budget_bytes = essentials + 3 * slot + 4096,
                                                         .n_threads = 2,
                                                         .direct = testing::dir_supports_direct(testing::scratch_dir()),
                                                         .device_layers = tiers->device_layers});
  ASSERT_TRUE(setup.ok()) << setup.status().to_string();
  EXPECT_GT(setup->source->store().plan().n_streamed, 0);
  t->source = setup->source;
}

TEST(DeviceTier, TheModelKeepsTheDevicesCopiesAndFinishesHostReadsBeforeReleasing) {
  DenseTiers t;
  ASSERT_NO_FATAL_FAILURE(open_dense_tiers("device_tier_model.gguf", &t));
  const std::shared_ptr<const ModelFile>& file = t.file;
  const std::vector<int32_t> prompt = {1, 300, 301, 302, 500, 77};
  const std::vector<int32_t> want = reference_tokens(file, prompt, 16);
  const std::vector<int64_t>& device_layers = t.device_layers;
  for (int64_t l : device_layers) {
    const std::string name = fmt::format("blk.{}.attn_q.weight", l);
    EXPECT_EQ(t.source->resident(name), file->find(name)->data) << "served from the file's mapping";
  }

  auto be = std::make_shared<DeviceLike>();
  auto src = std::make_shared<CheckedSource>(t.source, *be);
  {
    auto m = Model::load(file, ModelOptions{.n_threads = 2, .weights = src, .backend = be});
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    EXPECT_FALSE(be->ranges.empty());
    EXPECT_GT(be->host_weight_bytes, 0u);
    // The device tier's q/k/v, o, gate/up, down and the output head.
    EXPECT_EQ(be->prepared, static_cast<int>(device_layers.size()) * 7 + 1);
    EXPECT_EQ(greedy(**m, prompt, 16), want);
    EXPECT_EQ(be->stray, "");
    EXPECT_GT(be->device_reads, 0);
    EXPECT_GT(be->host_reads, 0);
    EXPECT_GT(be->finishes, 0);
    EXPECT_EQ(src->early_releases, 0);
    const std::vector<uint64_t>& host = (*m)->host_layer_bytes();
    for (int64_t l = 0; l < 8; ++l) {
      const bool dev = std::find(device_layers.begin(), device_layers.end(), l) !=
                       device_layers.end();
      EXPECT_EQ(host[static_cast<size_t>(l)] == 0, dev) << l;
    }
  }
  EXPECT_EQ(be->unregistered, static_cast<int>(be->ranges.size()));
}

// The fluid split's moves on the device: a device-tier layer demoted is
// copied in from the store's ring at each use (its arena freed), promoted it
// is copied to the device again, and the tokens never change.
TEST(DeviceTier, ADemotedDeviceLayerStreamsAndComesBackWithTheSameTokens) {
  DenseTiers t;
  ASSERT_NO_FATAL_FAILURE(open_dense_tiers("device_tier_fluid.gguf", &t));
  const std::vector<int32_t> prompt = {1, 300, 301, 302, 500, 77};
  const std::vector<int32_t> want = reference_tokens(t.file, prompt, 12);
  auto be = std::make_shared<DeviceLike>();
  auto m = Model::load(t.file, ModelOptions{.n_threads = 2, .weights = t.source, .backend = be});
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const int64_t l = t.device_layers.back();
  ASSERT_GT((*m)->demotable_bytes(l), 0u);
  EXPECT_EQ((*m)->host_layer_bytes()[static_cast<size_t>(l)], 0u);
  ASSERT_TRUE((*m)->demote_layer(l).ok());
  EXPECT_FALSE(t.source->device_resident(l));
  EXPECT_GT((*m)->host_layer_bytes()[static_cast<size_t>(l)], 0u);
  EXPECT_EQ(greedy(**m, prompt, 12), want);
  EXPECT_EQ(be->stray, "");
  const int prepared = be->prepared;
  ASSERT_TRUE((*m)->promote_layer(l).ok());
  EXPECT_TRUE(t.source->device_resident(l));
  EXPECT_EQ(be->prepared, prepared + 7);  // its q/k/v, o, gate/up and down copied again
  EXPECT_EQ((*m)->host_layer_bytes()[static_cast<size_t>(l)], 0u);
  EXPECT_EQ(greedy(**m, prompt, 12), want);
  EXPECT_EQ(be->stray, "");
}

// A routed model: the device holds every layer's dense part and the head;
// the experts stay the store's, resident in host RAM when they fit and
// streamed through its expert pool when not, and are read from there.
TEST(DeviceTier, ARoutedModelKeepsItsExpertsInTheStore) {
  SynthShape shape = synth_preset("tiny-qwen2moe").value();
  shape.n_vocab = 256;
  shape.n_expert = 16;
  const std::string path = testing::scratch_dir() + "/device_tier_moe.gguf";
  ASSERT_TRUE(write_synth_model(SynthOptions{.shape = shape, .type = "q8_0", .seed = 7, .n_threads = 2}, path).ok());
  auto mf = open_model_file(path);
  ASSERT_TRUE(mf.ok());
  auto file = std::make_shared<const ModelFile>(std::move(*mf));
  const ModelHparams hp = hparams_from_metadata(file->metadata).value();
  const std::vector<int32_t> prompt = {1, 30, 31, 32, 50, 77};
  const std::vector<int32_t> want = reference_tokens(file, prompt, 12);

  auto tiers = plan_device_tiers(*file, 0, 0, plan::h200_tier_rates());
  ASSERT_TRUE(tiers.ok()) << tiers.status().to_string();
  ASSERT_TRUE(tiers->plan.routed);
  ASSERT_EQ(static_cast<int64_t>(tiers->device_layers.size()), hp.n_layer);
  auto base = plan_placement(*file, {});
  ASSERT_TRUE(base.ok());
  const uint64_t slot = ExpertStore::slot_bytes_for(*file, hp);
  // Every expert resident in host RAM; then a pool of a routed layer's experts and two more.
  for (uint64_t budget : {uint64_t{0}, base->essentials_bytes + (static_cast<uint64_t>(hp.n_expert) + 2) * slot}) {
    auto setup = open_streaming(file, StreamingOptions{.mem_budget_bytes = budget == 0 ? (uint64_t{1} << 40) : budget,
                                                        .n_threads = 2,
                                                        .direct = testing::dir_supports_direct(testing::scratch_dir()),
                                                        .device_layers = tiers->device_layers});
    ASSERT_TRUE(setup.ok()) << setup.status().to_string();
    EXPECT_EQ(setup->source->store().streams_experts(), budget != 0);
    auto be = std::make_shared<DeviceLike>();
    auto src = std::make_shared<CheckedSource>(setup->source, *be);
    auto m = Model::load(file, ModelOptions{.n_threads = 2, .weights = src, .backend = be});
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    EXPECT_EQ(greedy(**m, prompt, 12), want) << budget;
    EXPECT_EQ(be->stray, "") << budget;
    EXPECT_FALSE(be->prepared_expert) << budget;
    EXPECT_GT(be->device_reads, 0) << budget;
    EXPECT_GT(be->host_reads, 0) << budget;
    EXPECT_EQ(src->early_releases, 0) << budget;
    // Experts are copied ahead: resident ones by the router's prediction;
    // streamed ones from the store's pool as they land (the chosen and the
    // predicted), each let go before the store reuses its slot (DeviceLike
    // checks the bytes: a stray otherwise).
    EXPECT_GT(be->prefetches, 0) << budget;
    EXPECT_EQ(be->transient_prefetches > 0, budget != 0) << budget;
    // What a layer reads from host memory (the page's tiers): its experts when
    // they are resident there; streamed ones come from the disk.
    for (int64_t l = 0; l < hp.n_layer; ++l)
      EXPECT_EQ((*m)->host_layer_bytes()[static_cast<size_t>(l)] > 0, budget == 0 && hp.layer_is_moe(l)) << l;
  }
}

// load_model on a backend that is not host-visible, with --mem-budget: the
// three tiers' plan (no --gpu-budget: every layer on the device), the store
// holding the rest, the report with both maps, and the plain run's tokens.
TEST(DeviceTier, LoadModelPlansTheTiersForABackendThatIsNotHostVisible) {
  auto file = testing::small_synth_model("device_tier_load.gguf", 4, 5);
  ASSERT_NE(file, nullptr);
  const std::vector<int32_t> prompt = {1, 300, 301, 302, 500, 77};
  const std::vector<int32_t> want = reference_tokens(file, prompt, 8);
  auto be = std::make_shared<DeviceLike>();
  auto lm = load_model(file->source_path, LoadOptions{.n_threads = 2, .max_seqs = 1, .shared_backend = be,
                                                      .mem_budget_bytes = uint64_t{64} << 20});
  ASSERT_TRUE(lm.ok()) << lm.status().to_string();
  ASSERT_TRUE(lm->tiers.has_value());
  EXPECT_EQ(lm->tiers->device_layers.size(), 4u);
  EXPECT_NE(lm->placement_report.find("three tiers on the device: 4 layers"), std::string::npos)
      << lm->placement_report;
  EXPECT_NE(lm->placement_report.find("layers    GGGG"), std::string::npos) << lm->placement_report;
  EXPECT_NE(lm->placement_report.find("an H200's stated"), std::string::npos) << lm->placement_report;
  EXPECT_EQ(greedy(*lm->model, prompt, 8), want);
  EXPECT_EQ(be->stray, "");
  EXPECT_EQ(be->prepared, 4 * 7 + 1);
}

// The report names the layers held on the device and the legs' plan.
TEST(DeviceTier, TheReportGivesTheThreeTiersPlan) {
  auto file = testing::small_synth_model("device_tier_report.gguf", 8, 5);
  ASSERT_NE(file, nullptr);
  const uint64_t slot = slot_of(*file);
  auto tiers = plan_device_tiers(*file, 6 * slot, 4 * slot, plan::h200_tier_rates());
  ASSERT_TRUE(tiers.ok()) << tiers.status().to_string();
  const std::string r = device_tiers_report(*tiers, 1.5);
  EXPECT_NE(r.find("three tiers on the device"), std::string::npos) << r;
  EXPECT_NE(r.find("disk 1.50 GB/s"), std::string::npos) << r;
  EXPECT_NE(r.find("layers    "), std::string::npos) << r;
  // What a bench holds its figures to: the plan at the store's disk rate and its prompt length.
  auto again = replan_device_tiers(*tiers, 1.5, 1024);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->prefill.n_tokens, 1024);
  EXPECT_EQ(again->decode.n_tokens, 1);
  EXPECT_EQ(again->layer_map, tiers->plan.layer_map);
  // Too small a GPU budget is refused with the smallest that streams.
  auto small = plan_device_tiers(*file, slot, 4 * slot, plan::h200_tier_rates());
  EXPECT_EQ(small.status().code(), StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace sluice::weights
