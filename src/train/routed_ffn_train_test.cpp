// The training step through a routed FFN (routed_ffn_train.h) on a real
// Mixtral-style model (stories-moe: routing renormalized over the chosen, no
// shared expert) and a synth qwen2moe (routing over all experts, a gated
// shared expert; F16, as the CPU's Q8_0 kernels round activations to int8
// blocks, which a float64 derivative would count as error), on the
// reference and CPU backends and on cuda where it can be created (a GPU, or
// the emulator of tests/cuda_emu):
//   - its forward is the inference routed FFN (the same experts, weights and
//     sums within float rounding);
//   - its backward is the derivative of that function at fixed choices,
//     against central differences of a float64 forward of the same formula
//     (the base's weights dequantized), through the experts, the routing
//     weights' softmax and the shared expert's gate.
#include "train/routed_ffn_train.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <random>

#include "backend/backend.h"
#include "base/check.h"
#include "base/test_data.h"
#include "format/model_file.h"
#include "model/model.h"
#include "model/synth.h"
#include "quant/quant.h"
#include "weights/weights_test_util.h"

namespace sluice {
namespace {

using R = TensorRole;

std::shared_ptr<const ModelFile> open_file(const std::string& path) {
  auto mf = open_model_file(path);
  EXPECT_TRUE(mf.ok()) << mf.status().to_string();
  return mf.ok() ? std::make_shared<const ModelFile>(std::move(*mf)) : nullptr;
}

// A tiny qwen2moe in F16 (12 experts, 4 used, a gated shared expert).
std::shared_ptr<const ModelFile> synth_qwen2moe() {
  const std::string path = weights::testing::scratch_dir() + "/routed_train_qwen2moe.gguf";
  SynthShape shape = synth_preset("tiny-qwen2moe").value();
  shape.n_vocab = 256;
  auto written = write_synth_model(SynthOptions{.shape = shape, .type = "f16", .seed = 17, .n_threads = 2}, path);
  EXPECT_TRUE(written.ok()) << written.status().to_string();
  return written.ok() ? open_file(path) : nullptr;
}

// A matrix of the base as doubles, [n_out][n_in].
std::vector<double> dequantized(const WeightView& w) {
  CHECK(w.layout == WeightLayout::kRows);
  std::vector<float> row(static_cast<size_t>(w.n_in));
  std::vector<double> out;
  out.reserve(static_cast<size_t>(w.n_out * w.n_in));
  const uint64_t stride = row_bytes(w.type, w.n_in);
  for (int64_t r = 0; r < w.n_out; ++r) {
    dequantize_row(w.type, w.data + r * stride, row.data(), w.n_in);
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

// y = W x for one row, W [n_out][n_in] doubles.
std::vector<double> mul(const std::vector<double>& w, const double* x, int64_t n_in, int64_t n_out) {
  std::vector<double> y(static_cast<size_t>(n_out), 0.0);
  for (int64_t o = 0; o < n_out; ++o)
    for (int64_t i = 0; i < n_in; ++i) y[o] += w[static_cast<size_t>(o * n_in + i)] * x[i];
  return y;
}

double silu(double x) { return x / (1.0 + std::exp(-x)); }

// The routed FFN of one token in float64 at fixed choices `ids` (the
// header's formula), its output dotted with dout.
struct Float64Ffn {
  const ModelHparams& hp;
  std::vector<double> router;
  std::vector<std::vector<double>> gate, up, down;  // by expert (those used only)
  std::vector<double> gate_s, up_s, down_s, shared_gate;
  double value(const double* xn, const int32_t* ids, const float* dout) const {
    const int64_t E = hp.n_embd, k = hp.n_expert_used, X = hp.n_expert;
    const std::vector<double> lg = mul(router, xn, E, X);
    const double mx = *std::max_element(lg.begin(), lg.end());
    double all = 0, chosen = 0;
    for (double l : lg) all += std::exp(l - mx);
    for (int64_t j = 0; j < k; ++j) chosen += std::exp(lg[ids[j]] - mx);
    std::vector<double> out(static_cast<size_t>(E), 0.0);
    auto ffn = [&](const std::vector<double>& g, const std::vector<double>& u, const std::vector<double>& d,
                   int64_t F, double scale) {
      const std::vector<double> gv = mul(g, xn, E, F), uv = mul(u, xn, E, F);
      std::vector<double> h(static_cast<size_t>(F));
      for (int64_t f = 0; f < F; ++f) h[f] = silu(gv[f]) * uv[f];
      const std::vector<double> y = mul(d, h.data(), F, E);
      for (int64_t i = 0; i < E; ++i) out[i] += scale * y[i];
    };
    for (int64_t j = 0; j < k; ++j) {
      const auto e = static_cast<size_t>(ids[j]);
      const double w = std::exp(lg[ids[j]] - mx) / (hp.expert_weights_norm ? chosen : all);
      ffn(gate[e], up[e], down[e], hp.n_ff_expert, w);
    }
    if (!gate_s.empty()) {
      double z = 0;
      for (int64_t i = 0; i < E; ++i) z += shared_gate.empty() ? 0.0 : shared_gate[i] * xn[i];
      ffn(gate_s, up_s, down_s, hp.n_ff_shared, shared_gate.empty() ? 1.0 : 1.0 / (1.0 + std::exp(-z)));
    }
    double v = 0;
    for (int64_t i = 0; i < E; ++i) v += out[i] * dout[i];
    return v;
  }
};

struct Case {
  const char* model;    // "stories-moe" or "qwen2moe"
  const char* backend;  // "reference", "cpu" or "cuda"
};

// Host vectors' copies in buffers of a backend (RoutedFfnTrain::VecFn), as a training step keeps them.
struct VecCopies {
  Backend& be;
  std::vector<std::unique_ptr<Buffer>> held;
  const float* operator()(const float* host, int64_t n) {
    if (host == nullptr || be.host_visible()) return host;
    held.push_back(be.alloc(static_cast<size_t>(n) * sizeof(float)));
    be.write_floats(host, held.back()->floats(), n);
    return held.back()->floats();
  }
};

class RoutedFfnTrainTest : public ::testing::TestWithParam<Case> {};

TEST_P(RoutedFfnTrainTest, ForwardIsTheInferenceFfnAndBackwardItsDerivative) {
  const Case c = GetParam();
  const bool real = std::string(c.model) == "stories-moe";
  auto file = real ? open_file(testing::shipped_model_path("stories-moe-f16.gguf")) : synth_qwen2moe();
  ASSERT_NE(file, nullptr);
  auto be = create_backend({.name = c.backend, .n_threads = 2});
  if (!be.ok() && std::string(c.backend) == "cuda") GTEST_SKIP() << be.status().to_string();
  ASSERT_TRUE(be.ok()) << be.status().to_string();
  auto model = Model::load(file, {.n_batch = 1, .max_seqs = 1, .backend = *be, .repack = false});
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  Model& mdl = **model;
  const ModelHparams& hp = mdl.hparams();
  ASSERT_TRUE(hp.is_moe());
  ASSERT_EQ(hp.spec->act, Activation::kSilu);
  EXPECT_EQ(hp.expert_weights_norm, real);
  const int64_t l = hp.n_layer_dense, E = hp.n_embd, k = hp.n_expert_used, n = 6;
  Backend& b = mdl.backend();
  ASSERT_NE(b.train_ops(), nullptr);
  auto w = mdl.acquire_layer(l);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ((*w)->has_mat(R::kFfnGateShexp), !real);

  // Rows entering the FFN, and the gradient arriving at its output.
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto floats = [&](int64_t count) { return b.alloc(static_cast<size_t>(count) * sizeof(float)); };
  auto m = floats(n * E), xn = floats(n * E), out = floats(n * E), dout = floats(n * E), dxn = floats(n * E);
  std::vector<float> hm(static_cast<size_t>(n * E)), hdout(hm.size());
  for (int64_t i = 0; i < n * E; ++i) {
    hm[i] = normal(rng);
    hdout[i] = normal(rng);
  }
  b.write_floats(hm.data(), m->floats(), n * E);
  b.write_floats(hdout.data(), dout->floats(), n * E);
  // A buffer's floats in host memory.
  auto host = [&](const std::unique_ptr<Buffer>& buf, int64_t count) {
    std::vector<float> v(static_cast<size_t>(count));
    b.read_floats(buf->floats(), v.data(), count);
    return v;
  };
  const int64_t n_in_max = std::max({E, hp.n_ff_expert, hp.n_ff_shared});
  b.reserve({.n_tok = n, .n_in_max = n_in_max, .n_ctx = n, .n_head = hp.n_head, .n_head_kv = hp.n_head_kv,
             .head_dim = hp.head_dim, .max_seqs = 1, .n_expert = hp.n_expert, .n_used = k,
             .n_ff_expert = hp.n_ff_expert, .n_ff_shared = hp.n_ff_shared, .n_embd = E});
  b.train_ops()->reserve({.n_tok = n, .n_ctx = n, .n_head = hp.n_head, .head_dim = hp.head_dim, .n_in_max = n_in_max});
  VecCopies vecs{.be = b};
  RoutedFfnTrain routed(b, *b.train_ops(), hp, n, std::ref(vecs));
  ASSERT_TRUE(routed.forward(mdl, l, **w, m->floats(), xn->floats(), out->floats(), n).ok());

  // The inference routed FFN over the same rows.
  auto xn2 = floats(n * E), logits = floats(n * hp.n_expert), out2 = floats(n * E);
  std::vector<int32_t> ids(static_cast<size_t>(n * k));
  std::vector<float> weights(ids.size());
  const MatmulOut router[1] = {{(*w)->mat(R::kFfnRouter), logits->floats()}};
  b.norm_matmul({.x = m->floats(), .norm = (*w)->vec(R::kFfnNorm), .eps = hp.rms_eps, .xn = xn2->floats(),
                 .n_embd = E, .n_tok = n, .outs = router});
  b.route({.logits = logits->floats(), .n_tok = n, .n_expert = hp.n_expert, .n_used = k,
           .renormalize = hp.expert_weights_norm, .ids = ids.data(), .weights = weights.data()});
  const ExpertWeights shared{(*w)->mat(R::kFfnGateShexp), (*w)->mat(R::kFfnUpShexp), (*w)->mat(R::kFfnDownShexp)};
  b.expert_ffn({.x = xn2->floats(), .out = out2->floats(), .ids = ids.data(), .weights = weights.data(), .n_tok = n,
                .n_used = k, .n_embd = E, .n_ff = hp.n_ff_expert, .act = hp.spec->act, .experts = (*w)->experts,
                .shared = real ? nullptr : &shared, .n_ff_shared = hp.n_ff_shared,
                .shared_gate = (*w)->vec(R::kFfnSharedGate)});
  const std::vector<float> hxn = host(xn, n * E), hout = host(out, n * E), hxn2 = host(xn2, n * E),
                           hout2 = host(out2, n * E);
  float scale = 0, diff = 0;
  for (int64_t i = 0; i < n * E; ++i) {
    scale = std::max(scale, std::abs(hout2[i]));
    diff = std::max(diff, std::abs(hout[i] - hout2[i]));
    ASSERT_EQ(hxn[i], hxn2[i]) << i;
  }
  EXPECT_GT(scale, 0.0f);
  EXPECT_LE(diff, 1e-5f * scale) << "largest |out| " << scale;

  routed.backward(**w, dout->floats(), dxn->floats(), n);
  const std::vector<float> hdxn = host(dxn, n * E);

  // Central differences of the float64 function at the same choices, the
  // weights read on the host (a device's matrices are in device memory: from
  // the same file on the reference backend).
  const LayerWeights* hw = *w;
  std::unique_ptr<Model> ref;
  if (!b.host_visible()) {
    auto rb = create_backend({.name = "reference", .n_threads = 1});
    ASSERT_TRUE(rb.ok()) << rb.status().to_string();
    auto rm = Model::load(file, {.n_batch = 1, .max_seqs = 1, .backend = *rb, .repack = false});
    ASSERT_TRUE(rm.ok()) << rm.status().to_string();
    ref = std::move(*rm);
    auto rw = ref->acquire_layer(l);
    ASSERT_TRUE(rw.ok()) << rw.status().to_string();
    hw = *rw;
  }
  const ExpertWeights host_shared{hw->mat(R::kFfnGateShexp), hw->mat(R::kFfnUpShexp), hw->mat(R::kFfnDownShexp)};
  Float64Ffn f{.hp = hp, .router = dequantized(hw->mat(R::kFfnRouter))};
  f.gate.resize(static_cast<size_t>(hp.n_expert));
  f.up.resize(f.gate.size());
  f.down.resize(f.gate.size());
  for (int32_t e : ids) {
    const ExpertWeights& x = hw->experts[static_cast<size_t>(e)];
    if (!f.gate[e].empty()) continue;
    f.gate[e] = dequantized(x.gate);
    f.up[e] = dequantized(x.up);
    f.down[e] = dequantized(x.down);
  }
  if (!real) {
    f.gate_s = dequantized(host_shared.gate);
    f.up_s = dequantized(host_shared.up);
    f.down_s = dequantized(host_shared.down);
    const float* g = hw->vec(R::kFfnSharedGate);
    ASSERT_NE(g, nullptr);
    f.shared_gate.assign(g, g + E);
  }
  std::uniform_int_distribution<int64_t> dim(0, E - 1);
  double grad_scale = 0, err = 0;
  int checked = 0;
  for (int64_t t = 0; t < n; ++t) {
    std::vector<double> x(hxn.begin() + t * E, hxn.begin() + (t + 1) * E);
    for (int s = 0; s < 24; ++s) {
      const int64_t i = dim(rng);
      const double h = 1e-4, x0 = x[i];
      x[i] = x0 + h;
      const double up = f.value(x.data(), ids.data() + t * k, hdout.data() + t * E);
      x[i] = x0 - h;
      const double dn = f.value(x.data(), ids.data() + t * k, hdout.data() + t * E);
      x[i] = x0;
      const double fd = (up - dn) / (2 * h);
      grad_scale = std::max(grad_scale, std::abs(fd));
      err = std::max(err, std::abs(fd - hdxn[t * E + i]));
      ++checked;
    }
  }
  mdl.release_layer(l);
  EXPECT_GT(grad_scale, 0.0);
  EXPECT_LE(err, 1e-4 * grad_scale) << checked << " elements, largest |gradient| " << grad_scale;
  RecordProperty("gradient_error_relative", fmt::format("{:.3g}", err / grad_scale));
}

INSTANTIATE_TEST_SUITE_P(Models, RoutedFfnTrainTest,
                         ::testing::Values(Case{"stories-moe", "reference"}, Case{"stories-moe", "cpu"},
                                           Case{"stories-moe", "cuda"}, Case{"qwen2moe", "reference"},
                                           Case{"qwen2moe", "cpu"}, Case{"qwen2moe", "cuda"}),
                         [](const auto& info) { return std::string(info.param.model == std::string("stories-moe")
                                                                        ? "stories_moe_"
                                                                        : "qwen2moe_") +
                                                       info.param.backend; });

}  // namespace
}  // namespace sluice
