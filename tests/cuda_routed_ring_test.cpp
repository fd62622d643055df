// A routed model under --gpu-budget alone on the cuda backend: the experts the
// budget does not hold stream through the backend's ring of dispatch slots,
// which copies only the experts the router picks (the model leaves them out
// of the ring's schedule), never the next ones by index. Greedy decode gives
// the tokens of the model resident, and a decode step copies no more than the
// streamed layers' dense matrices and their picked experts.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>

#include "backend/backend.h"
#include "model/model.h"
#include "model/model_weights.h"
#include "model/synth.h"

namespace sluice {
namespace {

struct Decoded {
  std::vector<float> logits;     // every step's
  std::vector<int32_t> tokens;   // the prompt and the greedy ones
  double decode_bytes = 0;       // Backend::bytes_streamed over the decode steps
  int64_t decode_steps = 0;
  double bound_bytes = 0;        // a decode step's most: dense + picked experts of the layers that stream
};

Decoded decode(const std::shared_ptr<const ModelFile>& file, uint64_t budget) {
  Decoded r;
  auto be = create_backend({.name = "cuda", .device_budget_bytes = budget});
  EXPECT_TRUE(be.ok()) << be.status().to_string();
  if (!be.ok()) return r;
  auto m = Model::load(file, ModelOptions{.n_batch = 16, .max_seqs = 1, .backend = *be});
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  if (!m.ok()) return r;
  Model& model = **m;
  const ModelHparams& hp = model.hparams();
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    if (model.host_layer_bytes()[static_cast<size_t>(l)] == 0) continue;  // held whole on the device
    const LayerWeights& w = model.weights().layers[static_cast<size_t>(l)];
    const uint64_t expert = expert_bytes(w.experts[0]);
    const uint64_t dense = layer_matrix_bytes(w) - expert * static_cast<uint64_t>(hp.n_expert);
    // What the layer reads a step, and no more than it left in host memory.
    r.bound_bytes += static_cast<double>(std::min(model.host_layer_bytes()[static_cast<size_t>(l)],
                                                  dense + expert * static_cast<uint64_t>(hp.n_expert_used)));
  }
  auto kv = (*be)->create_kv(model.kv_layout(KvDtype::kF32), 8);
  EXPECT_TRUE(kv.ok()) << kv.status().to_string();
  if (!kv.ok()) return r;
  const int64_t bs = model.kv_layout(KvDtype::kF32).block_size;
  std::vector<int32_t> table;
  for (int32_t b = 0; b < 8; ++b) table.push_back(b);
  std::vector<int32_t> toks;
  for (int32_t t = 0; t < 8; ++t) toks.push_back((t * 37 + 5) % static_cast<int32_t>(hp.n_vocab));
  std::vector<float> out(static_cast<size_t>(hp.n_vocab));
  int64_t pos = 0;
  uint64_t before = 0;
  for (int step = 0; step < 25 && pos + 1 < 8 * bs; ++step) {
    const auto n_new = static_cast<size_t>(step == 0 ? toks.size() : 1);
    const ForwardSeq seq{.tokens = std::span(toks).last(n_new), .pos0 = pos, .block_table = table};
    if (step == 1) before = (*be)->bytes_streamed();
    const Status st = model.forward(std::span(&seq, 1), *kv, out.data());
    EXPECT_TRUE(st.ok()) << st.to_string();
    if (!st.ok()) return r;
    pos += static_cast<int64_t>(n_new);
    r.logits.insert(r.logits.end(), out.begin(), out.end());
    toks.push_back(static_cast<int32_t>(std::max_element(out.begin(), out.end()) - out.begin()));
    if (step > 0) ++r.decode_steps;
  }
  r.decode_bytes = static_cast<double>((*be)->bytes_streamed() - before);
  r.tokens = toks;
  return r;
}

TEST(CudaRoutedRing, ADecodeStepCopiesOnlyThePickedExpertsAndGivesTheResidentLogits) {
  if (auto be = create_backend({.name = "cuda"}); !be.ok()) GTEST_SKIP() << be.status().to_string();
  SynthShape shape = synth_preset("tiny-mixtral", 2).value();
  const std::string path = ::testing::TempDir() + "routed_ring_" + std::to_string(::getpid()) + ".gguf";
  auto n = write_synth_model(SynthOptions{.shape = shape, .type = "q4_0", .seed = 3, .n_threads = 2}, path);
  ASSERT_TRUE(n.ok()) << n.status().to_string();
  const uint64_t file_bytes = std::filesystem::file_size(path);
  auto mf = open_model_file(path);
  ASSERT_TRUE(mf.ok()) << mf.status().to_string();
  std::remove(path.c_str());  // the mapping outlives the name
  const auto file = std::make_shared<const ModelFile>(std::move(*mf));

  const Decoded resident = decode(file, 0);
  const Decoded ring = decode(file, file_bytes / 2);
  ASSERT_FALSE(resident.logits.empty());
  ASSERT_EQ(resident.logits.size(), ring.logits.size());
  // The same tokens; the logits to float rounding (the ring's experts are
  // multiplied one by one, the resident ones grouped: another order of sums).
  double diff = 0, scale = 0;
  for (size_t i = 0; i < resident.logits.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::abs(resident.logits[i] - ring.logits[i])));
    scale = std::max(scale, static_cast<double>(std::abs(resident.logits[i])));
  }
  EXPECT_LE(diff, 1e-5 * scale) << diff << " of " << scale;
  EXPECT_EQ(resident.tokens, ring.tokens);
  EXPECT_EQ(resident.decode_bytes, 0);
  ASSERT_GT(ring.bound_bytes, 0) << "no layer streams under half the file";
  ASSERT_GT(ring.decode_steps, 0);
  const double per_step = ring.decode_bytes / static_cast<double>(ring.decode_steps);
  EXPECT_GT(per_step, 0);
  // The dispatches' 256-byte alignment in the ring: a few percent over the file's bytes.
  EXPECT_LE(per_step, 1.05 * ring.bound_bytes) << "a decode step copied experts the router did not pick";
}

}  // namespace
}  // namespace sluice
