// Decode steps recorded as CUDA graphs (backend/cuda/cuda_step_graph.h) give
// the bits of the same steps launched kernel by kernel: three sequences
// prefilled in one step, then decoded greedily in one batch that shrinks as
// they stop (3, 2, 1 tokens a step; keys past the attention's split and the
// sliding window), on a dense model, on a routed one (routing kept on the
// device: its ids come back through pinned memory the graph copies into), and
// with weights streamed through the pinned ring (each step recorded up to
// the first streamed matrix), in one graph a step or one a layer. The
// recorded runs must have updated their graphs in place, not rebuilt them
// each step.
// On a GPU, or on the CUDA emulator (tests/cuda_emu); skips otherwise.
#ifdef SLUICE_HAVE_CUDA

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_step_graph.h"
#include "model/model.h"
#include "model/op_profile.h"
#include "model/synth.h"

namespace sluice::graph_steps_test {

struct Case {
  std::string preset;
  std::string type;
  double budget_share = 0;  // --gpu-budget as a share of the file; 0: every weight resident
  int64_t n_layer = 2;
  int graph_layers = 0;  // SLUICE_CUDA_GRAPH_LAYERS: a step's graphs this many layers each; 0: the default
};

struct Model1 {
  std::shared_ptr<const ModelFile> file;
  uint64_t file_bytes = 0;
};

Model1 synth(const Case& c) {
  SynthShape shape = synth_preset(c.preset, c.n_layer).value();
  const std::string path =
      ::testing::TempDir() + "/graph_" + c.preset + "_" + c.type + "_" + std::to_string(::getpid()) + ".gguf";
  auto n = write_synth_model(SynthOptions{.shape = shape, .type = c.type, .seed = 5, .n_threads = 2}, path);
  EXPECT_TRUE(n.ok()) << n.status().to_string();
  Model1 m;
  m.file_bytes = std::filesystem::file_size(path);
  auto mf = open_model_file(path);
  EXPECT_TRUE(mf.ok()) << mf.status().to_string();
  std::remove(path.c_str());  // the mapping outlives the name
  m.file = std::make_shared<const ModelFile>(std::move(*mf));
  return m;
}

struct Decoded {
  std::vector<float> logits;  // every step's, in order
  std::string summary;        // the backend's copy_summary()
};

// profiled: every operator timed (model/op_profile.h) while it decodes, its rows here.
Decoded decode(const Model1& m1, const Case& c, bool graphs, std::vector<OpProfile::Row>* profiled = nullptr) {
  cuda::StepGraph::set_enabled(graphs);
  Decoded r;
  if (c.graph_layers > 0) setenv("SLUICE_CUDA_GRAPH_LAYERS", std::to_string(c.graph_layers).c_str(), 1);
  auto be = create_backend({.name = "cuda",
                            .device_budget_bytes = static_cast<uint64_t>(c.budget_share * static_cast<double>(m1.file_bytes))});
  unsetenv("SLUICE_CUDA_GRAPH_LAYERS");  // read when the backend is made
  EXPECT_TRUE(be.ok()) << be.status().to_string();
  if (!be.ok()) return r;
  auto m = Model::load(m1.file, ModelOptions{.n_batch = 64, .max_seqs = 4, .backend = *be});
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  if (!m.ok()) return r;
  Model& model = **m;
  std::unique_ptr<OpProfile> profile;  // destroyed before the backend its clock is of
  if (profiled) {
    profile = std::make_unique<OpProfile>((*be)->op_clock());
    model.set_op_profile(profile.get());
  }
  auto finish = [&] {
    if (profiled) *profiled = profile->rows();
    model.set_op_profile(nullptr);
    return r;
  };
  const int64_t n_vocab = model.hparams().n_vocab;
  const KvLayout layout = model.kv_layout(KvDtype::kF32);
  const int64_t bs = layout.block_size, per_seq = (128 + bs - 1) / bs;
  auto kv = (*be)->create_kv(layout, 3 * per_seq);
  EXPECT_TRUE(kv.ok()) << kv.status().to_string();
  if (!kv.ok()) return r;
  // Prompts of 40, 17 and 3 tokens; sequence i decodes until step stop[i].
  const int64_t prompt[3] = {40, 17, 3}, stop[3] = {36, 12, 24};
  std::vector<std::vector<int32_t>> toks(3), tables(3);
  for (int i = 0; i < 3; ++i) {
    for (int64_t t = 0; t < prompt[i]; ++t) toks[i].push_back(static_cast<int32_t>((t * 31 + i * 7 + 3) % n_vocab));
    for (int64_t b = 0; b < per_seq; ++b) tables[i].push_back(static_cast<int32_t>(i * per_seq + b));
  }
  std::vector<float> out(static_cast<size_t>(3 * n_vocab));
  std::vector<int64_t> pos(3, 0);
  for (int step = 0;; ++step) {
    std::vector<ForwardSeq> seqs;
    std::vector<int> who;
    for (int i = 0; i < 3; ++i) {
      if (step > stop[i]) continue;
      const auto n_new = static_cast<size_t>(step == 0 ? prompt[i] : 1);
      seqs.push_back({.tokens = std::span(toks[i]).last(n_new), .pos0 = pos[i], .block_table = tables[i]});
      who.push_back(i);
    }
    if (seqs.empty()) break;
    const Status st = model.forward(seqs, *kv, out.data());
    EXPECT_TRUE(st.ok()) << st.to_string();
    if (!st.ok()) return finish();
    r.logits.insert(r.logits.end(), out.begin(), out.begin() + static_cast<int64_t>(seqs.size()) * n_vocab);
    for (size_t j = 0; j < who.size(); ++j) {  // the greedy token joins the sequence
      const int i = who[j];
      pos[i] += static_cast<int64_t>(seqs[j].tokens.size());
      const float* row = out.data() + static_cast<int64_t>(j) * n_vocab;
      toks[i].push_back(static_cast<int32_t>(std::max_element(row, row + n_vocab) - row));
    }
  }
  r.summary = (*be)->copy_summary();
  return finish();
}

// The number just before `what` in a summary line; 0 when `what` is not there.
int count_before(const std::string& s, const std::string& what) {
  const size_t at = s.find(what);
  if (at == std::string::npos) return 0;
  size_t b = at;
  while (b > 0 && std::isdigit(static_cast<unsigned char>(s[b - 1]))) --b;
  return std::stoi(s.substr(b, at - b));
}

class CudaGraphSteps : public ::testing::TestWithParam<Case> {
 protected:
  void TearDown() override { cuda::StepGraph::set_enabled(true); }
};

TEST_P(CudaGraphSteps, RecordedStepsGiveTheBitsOfKernelByKernelLaunches) {
  if (auto be = create_backend({.name = "cuda"}); !be.ok()) GTEST_SKIP() << be.status().to_string();
  const Case& c = GetParam();
  const Model1 m1 = synth(c);
  const Decoded eager = decode(m1, c, false), recorded = decode(m1, c, true);
  ASSERT_FALSE(eager.logits.empty());
  ASSERT_EQ(eager.logits.size(), recorded.logits.size());
  EXPECT_EQ(std::memcmp(eager.logits.data(), recorded.logits.data(), eager.logits.size() * sizeof(float)), 0);
  EXPECT_EQ(eager.summary.find("CUDA graphs"), std::string::npos) << eager.summary;
  // 37 steps, of 3, 2 and 1 tokens after the prefill: a few builds (each
  // size's first steps, the split attention's arrival), the rest updated.
  // The step up to a wait: the first ones (a first use copies in a norm,
  // grows a buffer); every one when a streamed matrix comes in.
  const std::string& s = recorded.summary;
  // A step in one graph, or one each graph_layers layers (a step that stops at a wait: fewer).
  const int per_step = c.graph_layers > 0 ? static_cast<int>((c.n_layer + c.graph_layers - 1) / c.graph_layers) : 1;
  EXPECT_NE(s.find("CUDA graphs: 37 in "), std::string::npos) << s;
  EXPECT_LE(count_before(s, " launches"), 37 * per_step) << s;
  if (c.budget_share == 0) {
    EXPECT_GE(count_before(s, " launches"), 34 * per_step) << s;
  }
  EXPECT_LE(count_before(s, " built"), 10 * per_step) << s;
  EXPECT_GE(count_before(s, " updated in place"), 27 * (c.budget_share > 0 ? 1 : per_step)) << s;
  if (c.budget_share > 0) {
    EXPECT_EQ(count_before(s, " only up to a wait"), 37) << s;
  } else {
    EXPECT_LE(count_before(s, " only up to a wait"), 3) << s;
  }
}

// While a step is profiled, its marks are timed events on the stream, so it is
// not recorded: the same bits, no graph, and every operator timed.
TEST(CudaGraphStepsProfiled, ProfiledStepsRunUnrecordedWithTheSameBits) {
  if (auto be = create_backend({.name = "cuda"}); !be.ok()) GTEST_SKIP() << be.status().to_string();
  const Case c{"tiny-mistral", "q4_0"};
  const Model1 m1 = synth(c);
  std::vector<OpProfile::Row> rows;
  const Decoded eager = decode(m1, c, false), profiled = decode(m1, c, true, &rows);
  cuda::StepGraph::set_enabled(true);
  ASSERT_FALSE(eager.logits.empty());
  ASSERT_EQ(eager.logits.size(), profiled.logits.size());
  EXPECT_EQ(std::memcmp(eager.logits.data(), profiled.logits.data(), eager.logits.size() * sizeof(float)), 0);
  EXPECT_EQ(profiled.summary.find("CUDA graphs"), std::string::npos) << profiled.summary;
  std::vector<std::string> ops;
  double seconds = 0;
  for (const OpProfile::Row& r : rows) {
    ops.push_back(r.label);
    EXPECT_EQ(r.calls, 37 * (r.label == "embed" || r.label == "rope tables" || r.label == "output norm + logits"
                                 ? 1
                                 : r.label == "residual add" ? 2 * c.n_layer : c.n_layer))
        << r.label;
    EXPECT_GE(r.seconds, 0) << r.label;
    seconds += r.seconds;
  }
  EXPECT_GT(seconds, 0);
  EXPECT_EQ(ops, (std::vector<std::string>{"embed", "rope tables", "attn norm + q/k/v", "bias + rope + kv store",
                                           "attention", "attn output", "residual add", "ffn norm + gate/up",
                                           "ffn act + down", "output norm + logits"}));
}

INSTANTIATE_TEST_SUITE_P(Models, CudaGraphSteps,
                         ::testing::Values(Case{"tiny-mistral", "q4_0"}, Case{"tiny-mixtral", "q4_0", 0, 2, 1},
                                           Case{"tiny-mistral", "f16", 0.6, 4}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           std::string n = i.param.preset + "_" + i.param.type +
                                           (i.param.budget_share > 0 ? "_streamed" : "") +
                                           (i.param.graph_layers > 0 ? "_layer_graphs" : "");
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace sluice::graph_steps_test

#endif  // SLUICE_HAVE_CUDA
