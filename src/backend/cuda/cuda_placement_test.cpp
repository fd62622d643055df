// The CUDA backend's weight placement: Q4_0 / Q8_0 with their scales split
// off against GGUF rows, the norms with the residual add fused in, and
// matrices streamed from pinned host memory under a GPU budget. Without a
// usable GPU every test skips with the reason; in builds without nvcc the file
// is empty.
#ifdef SLUICE_HAVE_CUDA

#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cuda/cuda_test_util.h"
#include "backend/reference_backend.h"

namespace sluice::cuda::testing {
namespace {


// prepare_weights gives Q4_0 / Q8_0 their scales split off (16-byte loads);
// SLUICE_CUDA_Q8_LAYOUT=rows keeps GGUF rows. Same blocks in the same order
// and the same arithmetic, so the same bits, for a group of parts and for
// every token count the launches are cut into (8, 4, 2, 1).
TEST(CudaBackend, SplitScalesAndGgufRowsGiveTheSameBits) {
  SKIP_WITHOUT_GPU();
  for (DType type : {DType::kQ4_0, DType::kQ8_0}) {
    const int64_t n_in = 1024 + 96, n_tok = 15;  // 35 blocks a row: a partial pass of the unrolled loop
    Matrix a(type, n_in, 37, 90), b(type, n_in, 8200, 91), c(type, n_in, 64, 92);  // >= 8192 rows: two a warp
    Matrix ra = a, rb = b, rc = c;
    ra.host.data = ra.dev.data = ra.bytes.data();
    rb.host.data = rb.dev.data = rb.bytes.data();
    rc.host.data = rc.dev.data = rc.bytes.data();
    auto be = gpu();
    auto split = to_device(*be, {&a.dev, &b.dev, &c.dev});
    ASSERT_EQ(a.dev.layout, WeightLayout::kSplitScales);
    setenv("SLUICE_CUDA_Q8_LAYOUT", "rows", 1);
    auto rows = to_device(*be, {&ra.dev, &rb.dev, &rc.dev});
    unsetenv("SLUICE_CUDA_Q8_LAYOUT");
    ASSERT_EQ(ra.dev.layout, WeightLayout::kRows);
    be->reserve({.n_tok = n_tok, .n_in_max = n_in});
    const auto x = random_floats(static_cast<size_t>(n_tok * n_in), 93);
    Dev dx(*be, x);
    for (int64_t nt : {int64_t{1}, int64_t{3}, n_tok}) {
      Dev ya(*be, nt * 37), yb(*be, nt * 8200), yc(*be, nt * 64), za(*be, nt * 37), zb(*be, nt * 8200), zc(*be, nt * 64);
      const MatmulOut s3[3] = {{a.dev, ya.p()}, {b.dev, yb.p()}, {c.dev, yc.p()}};
      const MatmulOut r3[3] = {{ra.dev, za.p()}, {rb.dev, zb.p()}, {rc.dev, zc.p()}};
      be->matmul(s3, dx.p(), n_in, nt);
      be->matmul(r3, dx.p(), n_in, nt);
      for (auto [y, z] : {std::pair{&ya, &za}, std::pair{&yb, &zb}, std::pair{&yc, &zc}}) {
        const auto hy = y->host(*be), hz = z->host(*be);
        ASSERT_TRUE(all_finite(hy)) << dtype_name(type) << " " << nt;
        ASSERT_EQ(std::memcmp(hy.data(), hz.data(), hy.size() * 4), 0) << dtype_name(type) << " " << nt;
      }
    }
  }
}

// The norms hold a row in registers up to 16384 values (cuda_rows.cuh) and
// loop over memory past it: widths on both sides of each bound, with the
// residual add fused in (add() then a norm over the same rows). x must hold
// the exact sum afterwards; xn matches the reference; the 8-bit path's matmul
// after it too.
TEST(CudaBackend, NormsWithTheResidualAddAtEveryWidth) {
  SKIP_WITHOUT_GPU();
  ReferenceBackend ref;
  const int64_t n_tok = 3;
  for (int64_t n : {32, 64, 992, 1024, 1056, 4096, 8224, 16384, 16416, 20000}) {
    auto be = gpu();
    const auto x = random_floats(static_cast<size_t>(n_tok * n), 100);
    const auto y = random_floats(static_cast<size_t>(n_tok * n), 101);
    const auto norm = random_floats(static_cast<size_t>(n), 102);
    std::vector<float> sum(x.size()), rxn(x.size());
    for (size_t i = 0; i < x.size(); ++i) sum[i] = x[i] + y[i];
    ref.rmsnorm(sum.data(), norm.data(), 1e-5f, rxn.data(), n_tok, n);
    // The plain norm.
    {
      Dev dx(*be, x), dy(*be, y), xn(*be, n_tok * n);
      be->add(dx.p(), dy.p(), n_tok * n);
      be->rmsnorm(dx.p(), norm.data(), 1e-5f, xn.p(), n_tok, n);
      EXPECT_EQ(dx.host(*be), sum) << n;
      const auto g = xn.host(*be);
      ASSERT_TRUE(all_finite(g)) << n;
      EXPECT_LT(nmse(g.data(), rxn.data(), rxn.size()), 1e-11) << n;
    }
    // The norm that quantizes x for a Q8_0 matmul (n % 32 == 0).
    if (n % 32 == 0) {
      Matrix w(DType::kQ8_0, n, 40, 103);
      auto prepared = to_device(*be, {&w.dev});
      be->reserve({.n_tok = n_tok, .n_in_max = n});
      ref.reserve({.n_tok = n_tok, .n_in_max = n});
      Dev dx(*be, x), dy(*be, y), xn(*be, n_tok * n), out(*be, n_tok * 40);
      std::vector<float> rx2(rxn.size()), rout(static_cast<size_t>(n_tok * 40));
      const MatmulOut o[1] = {{w.dev, out.p()}};
      const MatmulOut ro[1] = {{w.host, rout.data()}};
      be->add(dx.p(), dy.p(), n_tok * n);
      be->norm_matmul({.x = dx.p(), .norm = norm.data(), .eps = 1e-5f, .xn = xn.p(), .n_embd = n, .n_tok = n_tok, .outs = o});
      ref.norm_matmul({.x = sum.data(), .norm = norm.data(), .eps = 1e-5f, .xn = rx2.data(), .n_embd = n, .n_tok = n_tok, .outs = ro});
      EXPECT_EQ(dx.host(*be), sum) << n;
      const auto g = xn.host(*be), go = out.host(*be);
      ASSERT_TRUE(all_finite(g) && all_finite(go)) << n;
      EXPECT_LT(nmse(g.data(), rxn.data(), rxn.size()), 1e-11) << n;
      EXPECT_LT(nmse(go.data(), rout.data(), rout.size()), 4e-4) << n;
    }
  }
}

// An add() that no norm takes is launched by the next call (here a matmul
// reading x), never dropped.
TEST(CudaBackend, AnAddNoNormTakesRunsBeforeTheNextOperator) {
  SKIP_WITHOUT_GPU();
  auto be = gpu();
  const int64_t n = 256;
  Matrix w(DType::kBF16, n, 16, 110);
  auto prepared = to_device(*be, {&w.dev});
  be->reserve({.n_tok = 1, .n_in_max = n});
  const auto x = random_floats(static_cast<size_t>(n), 111), y = random_floats(static_cast<size_t>(n), 112);
  std::vector<float> sum(x.size());
  for (size_t i = 0; i < x.size(); ++i) sum[i] = x[i] + y[i];
  Dev dx(*be, x), dy(*be, y), out(*be, 16);
  be->add(dx.p(), dy.p(), n);
  const MatmulOut o[1] = {{w.dev, out.p()}};
  be->matmul(o, dx.p(), n, 1);
  std::vector<float> ref_out(16);
  ReferenceBackend ref;
  ref.reserve({.n_tok = 1, .n_in_max = n});
  const MatmulOut ro[1] = {{w.host, ref_out.data()}};
  ref.matmul(ro, sum.data(), n, 1);
  const auto g = out.host(*be);
  EXPECT_LT(nmse(g.data(), ref_out.data(), ref_out.size()), 1e-9);
  EXPECT_EQ(dx.host(*be), sum);
}

// Under a GPU budget the dispatches past it live in pinned host memory and
// stream through a ring of device slots (cuda_weight_ring.h). Passes over the
// groups in order, as decode walks the layers once a token, give the same
// bits as every matrix resident: the same kernels on the same bytes.
TEST(CudaBackend, StreamedDispatchesGiveTheSameBitsAsResidentOnes) {
  SKIP_WITHOUT_GPU();
  const int64_t n_in = 512, n_groups = 20;
  // Group i: one Q4_0 matrix (i even) or two BF16 ones (i odd); then a Q8_0
  // head, the largest, which stays resident.
  auto make = [&](std::vector<Matrix>& m) {
    m.reserve(2 * n_groups + 1);
    for (int64_t i = 0; i < n_groups; ++i) {
      if (i % 2 == 0) {
        m.emplace_back(DType::kQ4_0, n_in, 96, static_cast<uint32_t>(200 + i));
      } else {
        m.emplace_back(DType::kBF16, n_in, 64, static_cast<uint32_t>(300 + i));
        m.emplace_back(DType::kBF16, n_in, 64, static_cast<uint32_t>(400 + i));
      }
    }
    m.emplace_back(DType::kQ8_0, n_in, 1024, 500);
  };
  std::vector<Matrix> rm, sm;
  make(rm);
  make(sm);
  auto groups_of = [&](std::vector<Matrix>& m, std::vector<std::vector<WeightView*>>& g) {
    size_t k = 0;
    for (int64_t i = 0; i < n_groups; ++i) {
      if (i % 2 == 0) g.push_back({&m[k++].dev});
      else g.push_back({&m[k].dev, &m[k + 1].dev}), k += 2;
    }
    g.push_back({&m[k].dev});
  };
  std::vector<std::vector<WeightView*>> rg, sg;
  groups_of(rm, rg);
  groups_of(sm, sg);
  const size_t head = 16 * 34 * 1024, slot = 2 * 512 * 64 * 2, first = 16 * 18 * 96;
  auto resident = gpu();
  auto streamed = create_backend({.name = "cuda", .device_budget_bytes = head + 3 * slot + first + 1000}).value();
  std::vector<WeightGroup> rspans(rg.begin(), rg.end()), sspans(sg.begin(), sg.end());
  auto rp = resident->prepare_weights(rspans);
  auto sp = streamed->prepare_weights(sspans);
  ASSERT_TRUE(sp.status.ok()) << sp.status.message();
  EXPECT_NE(sp.summary.find("stream from pinned host memory"), std::string::npos) << sp.summary;
  const int64_t n_tok = 2;
  const auto x = random_floats(static_cast<size_t>(n_tok * n_in), 600);
  for (Backend* be : {resident.get(), streamed.get()}) be->reserve({.n_tok = n_tok, .n_in_max = n_in});
  Dev xr(*resident, x), xs(*streamed, x);
  for (int pass = 0; pass < 3; ++pass)
    for (size_t gi = 0; gi < rg.size(); ++gi) {
      const size_t n = rg[gi].size();
      std::vector<Dev> yr, ys;
      std::vector<MatmulOut> outr, outs;
      for (size_t j = 0; j < n; ++j) {
        yr.emplace_back(*resident, n_tok * rg[gi][j]->n_out);
        ys.emplace_back(*streamed, n_tok * sg[gi][j]->n_out);
      }
      for (size_t j = 0; j < n; ++j) {
        outr.push_back({*rg[gi][j], yr[j].p()});
        outs.push_back({*sg[gi][j], ys[j].p()});
      }
      resident->matmul(outr, xr.p(), n_in, n_tok);
      streamed->matmul(outs, xs.p(), n_in, n_tok);
      for (size_t j = 0; j < n; ++j) {
        const auto a = yr[j].host(*resident), b = ys[j].host(*streamed);
        ASSERT_TRUE(all_finite(b)) << "pass " << pass << " group " << gi;
        ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "pass " << pass << " group " << gi;
      }
    }
  // A budget below the head and the ring is refused with the smallest that works.
  std::vector<Matrix> tm;
  make(tm);
  std::vector<std::vector<WeightView*>> tg;
  groups_of(tm, tg);
  std::vector<WeightGroup> tspans(tg.begin(), tg.end());
  auto tiny = create_backend({.name = "cuda", .device_budget_bytes = head}).value();
  const PreparedWeights tp = tiny->prepare_weights(tspans);
  EXPECT_FALSE(tp.status.ok());
  EXPECT_NE(tp.status.message().find("smallest"), std::string::npos) << tp.status.message();
}

}  // namespace
}  // namespace sluice::cuda::testing

#endif  // SLUICE_HAVE_CUDA
