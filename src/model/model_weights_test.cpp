// layer_bytes_of_groups: how much of each layer a placement put somewhere, from
// the dispatch groups it marked (what Model::host_layer_bytes reports of the
// groups the cuda backend leaves in host memory under --gpu-budget), and
// dispatch_schedule: the order a layer schedule uses those groups in.
#include "model/model_weights.h"

#include <gtest/gtest.h>

#include "model/synth.h"

namespace sluice {
namespace {

TEST(ModelWeights, LayerBytesOfGroupsCountsEachMarkedMatrixOnceInItsLayer) {
  SynthShape shape = synth_preset("tiny-qwen2moe").value();
  shape.n_vocab = 256;
  const std::string path = ::testing::TempDir() + "/model_weights_layer_bytes.gguf";
  ASSERT_TRUE(write_synth_model(SynthOptions{.shape = shape, .type = "q8_0", .seed = 3, .n_threads = 2}, path).ok());
  auto file = open_model_file(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  auto hp = hparams_from_metadata(file->metadata);
  ASSERT_TRUE(hp.ok());
  auto w = bind_weights(*file, *hp, nullptr);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  ASSERT_GE(w->layers.size(), 3u);
  ASSERT_TRUE(hp->layer_is_moe(1));
  std::vector<std::vector<WeightView*>> groups = dispatch_groups(*w, *hp->spec);
  const std::vector<WeightGroup> spans(groups.begin(), groups.end());

  // Every expert of layer 1, the group holding layer 2's q, and the output head.
  std::vector<uint8_t> which(spans.size(), 0);
  const LayerWeights& l1 = w->layers[1];
  const WeightView* q2 = &w->layers[2].mat(TensorRole::kAttnQ);
  for (size_t g = 0; g < spans.size(); ++g) {
    for (const WeightView* v : spans[g]) {
      for (const ExpertWeights& e : l1.experts)
        if (v == &e.gate || v == &e.down) which[g] = 1;
      if (v == q2 || v == &w->output) which[g] = 1;
    }
  }
  const std::vector<uint64_t> got = layer_bytes_of_groups(*w, spans, which);
  ASSERT_EQ(got.size(), w->layers.size());
  uint64_t experts = 0;
  for (const char* t : {"blk.1.ffn_gate_exps.weight", "blk.1.ffn_up_exps.weight", "blk.1.ffn_down_exps.weight"}) {
    ASSERT_NE(file->find(t), nullptr) << t;
    experts += file->find(t)->n_bytes;
  }
  EXPECT_EQ(got[1], experts);  // the slices of the stacked tensors add up to them
  EXPECT_GE(got[2], file->find("blk.2.attn_q.weight")->n_bytes);
  for (size_t l = 0; l < got.size(); ++l) {
    if (l != 1 && l != 2) {
      EXPECT_EQ(got[l], 0u) << "layer " << l;  // the head belongs to none
    }
  }

  // A matrix in two marked groups counts once; nothing marked, nothing counted.
  std::vector<WeightGroup> twice(spans);
  twice.push_back(spans[0]);
  std::vector<uint8_t> which_twice(which);
  which_twice.push_back(1);
  which_twice[0] = 1;
  const std::vector<uint64_t> once = layer_bytes_of_groups(*w, twice, which_twice);
  std::vector<uint8_t> first_only(which);
  first_only[0] = 1;
  EXPECT_EQ(once, layer_bytes_of_groups(*w, spans, first_only));
  EXPECT_EQ(layer_bytes_of_groups(*w, spans, {}), std::vector<uint64_t>(w->layers.size(), 0));
}

TEST(ModelWeights, DispatchScheduleVisitsALayersGroupsForwardAndTheBackwardInReverseToo) {
  // Two layers of two groups, then the head: 0 1 | 2 3 | 4.
  const std::vector<int64_t> layer_of = {0, 0, 1, 1, -1};
  EXPECT_EQ(dispatch_schedule(layer_of, forward_schedule(2)), (std::vector<int>{0, 1, 2, 3, 4}));
  // Training: the forward, the loss (the head), then from the top layer each
  // layer's groups forward (recomputed) and in reverse (transposed).
  EXPECT_EQ(dispatch_schedule(layer_of, training_schedule(2)),
            (std::vector<int>{0, 1, 2, 3, 4, 2, 3, 3, 2, 0, 1, 1, 0}));
  // Groups of layers the order never visits are left out (a stage's others),
  // and so are routed experts' (the router picks their turn).
  EXPECT_EQ(dispatch_schedule(std::vector<int64_t>{0, 1, 1}, forward_schedule(1)), (std::vector<int>{0}));
  const std::vector<int64_t> routed = {0, kRoutedGroup, kRoutedGroup, 1, kRoutedGroup, -1};
  EXPECT_EQ(dispatch_schedule(routed, forward_schedule(2)), (std::vector<int>{0, 3, 5}));
  EXPECT_EQ(dispatch_schedule(routed, training_schedule(2)), (std::vector<int>{0, 3, 5, 3, 3, 0, 0}));
}

}  // namespace
}  // namespace sluice
