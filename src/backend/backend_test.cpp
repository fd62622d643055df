// Every operator of every registered backend against the reference backend:
// the op-case list (op_cases.h) on each backend that can run here, one test
// per backend and case; a backend that cannot run here skips with the reason,
// an operator a backend does not support (supports()) skips with its name.
// Set SLUICE_OP_CASES_VERBOSE=1 to print each output's error and tolerance.
// Plus what the list relies on: every operator has cases, the reference's
// variants differ, and each backend's KV blocks copy and swap.
#include "backend/backend.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <tuple>

#include <gtest/gtest.h>

#include "backend/backend_registry.h"
#include "backend/cpu/matmul.h"
#include "backend/op_cases.h"
#include "backend/reference_backend.h"

namespace sluice::op_cases {

// Measured on the list's cases (SLUICE_OP_CASES_VERBOSE), with margin.
double matmul_tolerance(DType weight, ActRounding rounding, int depth) {
  switch (rounding) {
    case ActRounding::kNone:  // summation order only
      return weight == DType::kF32 ? 1e-10 : 1e-9;
    case ActRounding::kBF16:  // ~2^-9 relative per element
      return depth == 1 ? 2e-5 : 8e-5;
    case ActRounding::kInt8Blocks32:
      return depth == 1 ? 1.5e-4 : 4e-4;
    case ActRounding::kInt8Blocks256:  // one scale per 256 elements
      return depth == 1 ? 4e-4 : 1.6e-3;
  }
  return 0;
}

const OpOutput* find_output(const OpOutputs& outs, const std::string& name) {
  for (const OpOutput& o : outs)
    if (o.name == name) return &o;
  return nullptr;
}

const OpCaseList& op_case_list() {
  static const OpCaseList list = [] {
    OpCaseList l;
    add_matmul_cases(l);
    add_attention_cases(l);
    add_moe_cases(l);
    add_norm_cases(l);
    add_train_cases(l);
    add_train_attention_cases(l);
    add_train_moe_cases(l);
    return l;
  }();
  return list;
}

// --- OpRun ------------------------------------------------------------------

float* OpRun::in(std::span<const float> values) {
  ins_.push_back(be_.alloc(std::max<size_t>(values.size(), 1) * sizeof(float)));
  float* p = ins_.back()->floats();
  be_.write_floats(values.data(), p, static_cast<int64_t>(values.size()));
  return p;
}

// [kGuard canaries][the values, or NaN][kGuard canaries], in the backend's
// memory (d.device) or on the host.
float* OpRun::guarded(Declared& d, std::span<const float> init) {
  const auto n = static_cast<size_t>(d.out.n_rows * d.out.row_len);
  std::vector<float> all(n + 2 * kGuard);
  for (float& f : all) std::memcpy(&f, &cpu::testing::kCanaryBits, 4);
  for (size_t i = 0; i < n; ++i) all[kGuard + i] = init.empty() ? std::numeric_limits<float>::quiet_NaN() : init[i];
  if (!d.device) {
    d.host = std::move(all);
    return d.host.data() + kGuard;
  }
  be_.write_floats(all.data(), d.device->floats(), static_cast<int64_t>(all.size()));
  return d.device->floats() + kGuard;
}

float* OpRun::out(const std::string& name, int64_t n_rows, int64_t row_len, Tol tol) {
  Declared& d = outs_.emplace_back();
  d.out = {.name = name, .n_rows = n_rows, .row_len = row_len, .tol = tol};
  d.device = be_.alloc(static_cast<size_t>(n_rows * row_len + 2 * kGuard) * sizeof(float));
  return guarded(d, {});
}

float* OpRun::inout(const std::string& name, std::span<const float> values, int64_t row_len, Tol tol) {
  Declared& d = outs_.emplace_back();
  d.out = {.name = name, .n_rows = static_cast<int64_t>(values.size()) / row_len, .row_len = row_len, .tol = tol};
  d.device = be_.alloc((values.size() + 2 * kGuard) * sizeof(float));
  return guarded(d, values);
}

float* OpRun::host_out(const std::string& name, int64_t n_rows, int64_t row_len, Tol tol) {
  Declared& d = outs_.emplace_back();
  d.out = {.name = name, .n_rows = n_rows, .row_len = row_len, .tol = tol};
  return guarded(d, {});
}

int32_t* OpRun::host_ints(const std::string& name, int64_t n_rows, int64_t row_len) {
  Declared& d = outs_.emplace_back();
  d.out = {.name = name, .n_rows = n_rows, .row_len = row_len, .tol = Tol::bits()};
  d.ints = true;
  float* p = guarded(d, {});
  std::fill_n(reinterpret_cast<int32_t*>(p), n_rows * row_len, -1);  // no id
  return reinterpret_cast<int32_t*>(p);
}

double* OpRun::host_doubles(const std::string& name, int64_t n_rows, int64_t row_len, Tol tol) {
  Declared& d = outs_.emplace_back();
  d.out = {.name = name, .n_rows = n_rows, .row_len = row_len, .tol = tol};
  d.doubles.assign(static_cast<size_t>(n_rows * row_len + 2 * kGuard), kDoubleCanary);
  std::fill_n(d.doubles.begin() + kGuard, n_rows * row_len, std::numeric_limits<double>::quiet_NaN());
  return d.doubles.data() + kGuard;
}

void OpRun::snapshot(const std::string& name, const float* data, int64_t n_rows, int64_t row_len, Tol tol) {
  Declared& d = outs_.emplace_back();
  d.out = {.name = name, .n_rows = n_rows, .row_len = row_len, .tol = tol, .guards_intact = true};
  d.out.values.resize(static_cast<size_t>(n_rows * row_len));
  be_.read_floats(data, d.out.values.data(), n_rows * row_len);
  d.taken = true;
}

std::span<const WeightView> OpRun::weights(std::initializer_list<WeightView> group) {
  std::vector<WeightView>& views = views_.emplace_back(group);
  if (prepare_) {
    std::vector<WeightView*> ptrs;
    for (WeightView& v : views) ptrs.push_back(&v);
    const WeightGroup g(ptrs.data(), ptrs.size());
    PreparedWeights p = be_.prepare_weights(std::span(&g, 1));
    EXPECT_TRUE(p.status.ok()) << p.status.to_string();
    prepared_.push_back(std::move(p));
  }
  return views;
}

KvStore& OpRun::kv(const KvLayout& layout, int64_t n_blocks) {
  StatusOr<KvStore> kv = be_.create_kv(layout, n_blocks);
  EXPECT_TRUE(kv.ok()) << kv.status().to_string();
  return kvs_.emplace_back(std::move(kv).value());
}

OpOutputs OpRun::finish() {
  OpOutputs outs;
  for (Declared& d : outs_) {
    OpOutput o = d.out;
    if (!d.taken) {
      const auto n = static_cast<size_t>(o.n_rows * o.row_len);
      std::vector<float> all = d.host;
      if (!d.doubles.empty()) {
        o.guards_intact = true;
        for (size_t i = 0; i < kGuard; ++i)
          o.guards_intact &= d.doubles[i] == kDoubleCanary && d.doubles[kGuard + n + i] == kDoubleCanary;
        for (size_t i = 0; i < n; ++i) o.values.push_back(static_cast<float>(d.doubles[kGuard + i]));
        outs.push_back(std::move(o));
        continue;
      }
      if (d.device) {
        all.resize(n + 2 * kGuard);
        be_.read_floats(d.device->floats(), all.data(), static_cast<int64_t>(all.size()));
      }
      o.guards_intact = true;
      for (size_t i = 0; i < kGuard; ++i)
        o.guards_intact &= std::memcmp(&all[i], &cpu::testing::kCanaryBits, 4) == 0 &&
                           std::memcmp(&all[kGuard + n + i], &cpu::testing::kCanaryBits, 4) == 0;
      o.values.assign(all.begin() + kGuard, all.begin() + kGuard + static_cast<ptrdiff_t>(n));
      if (d.ints)
        for (float& v : o.values) {
          int32_t id;
          std::memcpy(&id, &v, 4);
          v = static_cast<float>(id);
        }
    }
    outs.push_back(std::move(o));
  }
  return outs;
}

OpOutputs run_case(OpCase& c, Backend& be, bool prepare, int64_t t0, int64_t n) {
  OpRun r(be, prepare);
  c.run(r, t0, n);
  return r.finish();
}

namespace {

bool all_finite(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float f) { return std::isfinite(f); });
}

bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

// nmse over the elements the reference wrote (both NaN: not written by either).
double nmse_where_written(const std::vector<float>& a, const std::vector<float>& ref) {
  std::vector<float> x, y;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(ref[i])) continue;
    x.push_back(a[i]);
    y.push_back(ref[i]);
  }
  return nmse(x.data(), y.data(), x.size());
}

}  // namespace

// The backend's outputs against the reference's, each by its tolerance.
void compare(const OpOutputs& got, const OpOutputs& want) {
  ASSERT_EQ(got.size(), want.size());
  for (const OpOutput& g : got) {
    const OpOutput* w = find_output(want, g.name);
    ASSERT_TRUE(w != nullptr) << g.name;
    ASSERT_EQ(g.values.size(), w->values.size()) << g.name;
    EXPECT_TRUE(g.guards_intact) << g.name << ": written out of bounds";
    switch (g.tol.kind) {
      case Tol::kBits:
        EXPECT_TRUE(same_bits(g.values.data(), w->values.data(), g.values.size())) << g.name << ": not the reference's bits";
        break;
      case Tol::kWritten:
        EXPECT_TRUE(all_finite(g.values)) << g.name << ": not every element written";
        break;
      case Tol::kNmse: {
        const double e = g.tol.skip_unwritten ? nmse_where_written(g.values, w->values)
                                              : nmse(g.values.data(), w->values.data(), g.values.size());
        if (std::getenv("SLUICE_OP_CASES_VERBOSE"))
          std::printf("  %-8s nmse %.3g (tolerance %.3g)\n", g.name.c_str(), e, g.tol.max_nmse);
        EXPECT_LT(e, g.tol.max_nmse) << g.name;
        break;
      }
    }
  }
}

namespace {

// How far two outputs may lie apart when each lies within its own tolerance
// of the reference (a token alone and in a batch may round differently: CUDA
// rounds to int8 for one token and to BF16 for many): for errors measured as
// nmse, sqrt(nmse) is a norm, so the triangle inequality bounds it.
Tol between(const Tol& a, const Tol& b) {
  if (a.kind != Tol::kNmse || b.kind != Tol::kNmse) return b;
  const double r = std::sqrt(a.max_nmse) + std::sqrt(b.max_nmse);
  Tol t = a;
  t.max_nmse = r * r;
  t.skip_unwritten = a.skip_unwritten || b.skip_unwritten;
  return t;
}

// Each token alone gives its rows of the batch, bit for bit.
void check_per_token(OpCase& c, Backend& be, const OpOutputs& batch) {
  // Past the backend's batch-invariant size the whole batch may round
  // differently (backend.h): then the tokens alone, put together, must be as
  // close to the batch as each output's tolerance asks of the reference.
  const bool bits = c.n_tok() <= be.batch_invariant_tokens();
  OpOutputs alone;
  for (int64_t t = 0; t < c.n_tok(); ++t) {
    for (const OpOutput& a : run_case(c, be, true, t, 1)) {
      const OpOutput* b = find_output(batch, a.name);
      ASSERT_TRUE(b != nullptr && a.n_rows == 1 && b->n_rows == c.n_tok()) << a.name << ": not one row per token";
      if (bits) {
        ASSERT_TRUE(same_bits(a.values.data(), b->values.data() + t * a.row_len, static_cast<size_t>(a.row_len)))
            << a.name << ": token " << t << " alone differs from the batch";
        continue;
      }
      if (t == 0) alone.push_back({.name = a.name, .n_rows = c.n_tok(), .row_len = a.row_len,
                                   .tol = between(a.tol, b->tol), .values = {}, .guards_intact = true});
      OpOutput* o = nullptr;
      for (OpOutput& x : alone) o = x.name == a.name ? &x : o;
      ASSERT_TRUE(o != nullptr) << a.name << ": not an output of token 0";
      o->values.insert(o->values.end(), a.values.begin(), a.values.end());
      o->guards_intact = o->guards_intact && a.guards_intact;
    }
  }
  if (!bits) {
    SCOPED_TRACE("tokens alone against the batch (past the backend's batch-invariant size)");
    compare(alone, batch);
  }
}

// Every registered backend but the yardstick.
std::vector<std::string> backends_under_test() {
  std::vector<std::string> names;
  for (const RegisteredBackend& b : registered_backends())
    if (std::string(b.name) != "reference") names.push_back(b.name);
  return names;
}

std::vector<std::string> all_backends() {
  std::vector<std::string> names;
  for (const RegisteredBackend& b : registered_backends()) names.push_back(b.name);
  return names;
}

// The backend, or why it cannot run here.
std::shared_ptr<Backend> backend_or_skip_reason(const std::string& name, std::string* why) {
  const RegisteredBackend* rb = find_backend(name);
  *why = rb->unavailable();
  if (!why->empty()) return nullptr;
  StatusOr<std::shared_ptr<Backend>> be = rb->create({.name = name, .n_threads = 2});
  if (!be.ok()) *why = be.status().to_string();
  return be.ok() ? *be : nullptr;
}

// One case on a backend that supports it, against the reference backend:
// with the weights prepared and (host memory) as GGUF rows, then token by token.
void check_case(OpCase& c, Backend& be) {
  ReferenceBackend ref;
  ASSERT_TRUE(c.supported_by(ref));
  const OpOutputs want = run_case(c, ref, true, 0, c.n_tok());
  OpOutputs prepared;
  for (bool prepare : {true, false}) {
    if (!prepare && !be.host_visible()) continue;  // a device's kernels read prepared weights only
    SCOPED_TRACE(prepare ? "weights prepared" : "weights as GGUF rows");
    const OpOutputs got = run_case(c, be, prepare, 0, c.n_tok());
    compare(got, want);
    c.check(got);
    if (prepare) prepared = got;
  }
  if (c.n_tok() > 0) check_per_token(c, be, prepared);
}

class BackendOps : public ::testing::TestWithParam<std::tuple<std::string, size_t>> {};

TEST_P(BackendOps, MatchTheReference) {
  const auto [name, index] = GetParam();
  std::string why;
  std::shared_ptr<Backend> be = backend_or_skip_reason(name, &why);
  if (!be) GTEST_SKIP() << name << " cannot run here: " << why;
  std::unique_ptr<OpCase> c = op_case_list()[index].make();
  if (!c->supported_by(*be)) GTEST_SKIP() << be->name() << " does not run " << op_name(c->ops()[0]) << " with these types";
  check_case(*c, *be);
}

// The CPU's reference matmul (backend/cpu/matmul.h), which runs a quant type
// that has no kernels from its traits row: forced onto types that have
// kernels, their matmul-family cases run through it against the reference backend.
TEST(CpuReferenceMatmul, RunsTheMatmulCasesOfTypesWithoutKernels) {
  std::string why;
  std::shared_ptr<Backend> be = backend_or_skip_reason("cpu", &why);
  ASSERT_TRUE(be) << why;
  for (DType type : {DType::kQ4_1, DType::kQ5_K, DType::kIQ4_XS}) {
    SCOPED_TRACE(dtype_name(type));
    ASSERT_NE(be->matmul_act_rounding(type, 1), ActRounding::kNone);  // int8 kernels without the hook
    const cpu::ScopedReferenceMatmul force(type);
    EXPECT_EQ(be->matmul_act_rounding(type, 1), ActRounding::kNone);   // f32 activations through the fallback
    EXPECT_STREQ(cpu::matmul_kernel(type, cpu::Isa::kScalar).name, "reference");
    int n_cases = 0;
    for (const OpCaseEntry& e : op_case_list()) {
      const std::string ty = std::string("_") + dtype_name(type) + "_";
      // Not the training matmul (kernels only) nor the long prefill (the scalar dot is slow).
      if (e.name.find(ty) == std::string::npos || e.name.rfind("matmul_t_", 0) == 0 ||
          e.name.find("prefill") != std::string::npos)
        continue;
      SCOPED_TRACE(e.name);
      std::unique_ptr<OpCase> c = e.make();
      ASSERT_TRUE(c->supported_by(*be));
      check_case(*c, *be);
      ++n_cases;
    }
    EXPECT_GE(n_cases, 5);  // matmul, norm_glu, glu cases of the type
  }
  EXPECT_TRUE(cpu::matmul_supports(DType::kQ4_1));  // the hook left the kernels as they were
  EXPECT_NE(be->matmul_act_rounding(DType::kQ4_1, 1), ActRounding::kNone);
}

INSTANTIATE_TEST_SUITE_P(OpCases, BackendOps,
                         ::testing::Combine(::testing::ValuesIn(backends_under_test()),
                                            ::testing::Range(size_t{0}, op_case_list().size())),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" +
                                  op_case_list()[std::get<1>(info.param)].name;
                         });

TEST(OpCaseList, CoversEveryOperatorWithUniqueNames) {
  std::set<Op> covered;
  std::set<std::string> names;
  for (const OpCaseEntry& e : op_case_list()) {
    EXPECT_TRUE(names.insert(e.name).second) << e.name;
    covered.insert(e.ops.begin(), e.ops.end());
  }
  for (Op op : kAllOps) EXPECT_TRUE(covered.count(op)) << op_name(op) << " has no case in the op-case list";
}

TEST(ReferenceBackend, GegluIsNotSwiglu) {
  const int64_t n_ff = 512, n_embd = 64, n_tok = 2;
  ReferenceBackend ref;
  ref.reserve({.n_tok = n_tok, .n_in_max = n_ff});
  Matrix down(DType::kF32, n_ff, n_embd, 11);
  const auto g0 = random_floats(static_cast<size_t>(n_tok * n_ff), 12, 3.0f);
  const auto u = random_floats(static_cast<size_t>(n_tok * n_ff), 13);
  std::vector<float> g = g0, s = g0, y(static_cast<size_t>(n_tok * n_embd));
  ref.glu_matmul({.gate = g.data(), .up = u.data(), .n_ff = n_ff, .n_tok = n_tok, .act = Activation::kGelu,
                  .out = {down.view, y.data()}});
  ref.glu_matmul({.gate = s.data(), .up = u.data(), .n_ff = n_ff, .n_tok = n_tok, .out = {down.view, y.data()}});
  EXPECT_GT(nmse(s.data(), g.data(), s.size()), 1e-3);
}

class BackendKv : public ::testing::TestWithParam<std::string> {};

TEST_P(BackendKv, BlocksCopyAndSwapThroughTheHost) {
  std::string why;
  std::shared_ptr<Backend> be = backend_or_skip_reason(GetParam(), &why);
  if (!be) GTEST_SKIP() << GetParam() << " cannot run here: " << why;
  const KvLayout layout{.n_layer = 2, .n_embd_kv = 64, .block_size = 16, .dtype = KvDtype::kF16, .n_head_kv = 2};
  KvStore dev = be->create_kv(layout, 4).value();
  KvStore host = KvStore::create(layout, 4).value();
  EXPECT_EQ(dev.host_memory(), be->host_visible());
  const auto rowsf = random_floats(64, 5);
  host.store_row(rowsf.data(), host.k_layer(1), 16 + 3);  // block 1
  be->move_kv_block(host, 1, dev, 2);                     // swap in to block 2
  be->copy_kv_block(dev, 2, 0);                           // copy-on-write to block 0
  KvStore back = KvStore::create(layout, 4).value();
  be->move_kv_block(dev, 0, back, 3);                     // swap out to block 3
  std::vector<float> got(64), want(64);
  back.load_row(back.k_layer(1), 48 + 3, got.data());
  host.load_row(host.k_layer(1), 16 + 3, want.data());
  EXPECT_EQ(got, want);
  // A KV dtype the backend's attention does not read is refused with a reason.
  const KvLayout q8{.n_layer = 1, .n_embd_kv = 64, .block_size = 16, .dtype = KvDtype::kQ8_0, .n_head_kv = 2};
  if (!be->supports(Op::kAttention, {.kv = KvDtype::kQ8_0})) {
    EXPECT_FALSE(be->create_kv(q8, 4).ok());
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, BackendKv, ::testing::ValuesIn(all_backends()),
                         [](const auto& info) { return info.param; });

// alloc_host: zero-filled host memory of the size asked, 64-byte aligned at
// least, that the host writes and reads and read_floats fills from a buffer
// of alloc() (where the logits land each step).
class BackendMemory : public ::testing::TestWithParam<std::string> {};

TEST_P(BackendMemory, HostMemoryTakesReadsFromBuffers) {
  std::string why;
  std::shared_ptr<Backend> be = backend_or_skip_reason(GetParam(), &why);
  if (!be) GTEST_SKIP() << GetParam() << " cannot run here: " << why;
  constexpr int64_t kN = 1000;
  std::unique_ptr<Buffer> host = be->alloc_host(kN * sizeof(float));
  ASSERT_EQ(host->size(), kN * sizeof(float));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(host->data()) % 64, 0u);
  for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(host->floats()[i], 0.0f) << i;
  const std::vector<float> want = random_floats(static_cast<size_t>(kN), 9);
  std::unique_ptr<Buffer> buf = be->alloc(kN * sizeof(float));
  be->write_floats(want.data(), buf->floats(), kN);
  be->read_floats(buf->floats(), host->floats(), kN);
  EXPECT_EQ(std::vector<float>(host->floats(), host->floats() + kN), want);
  EXPECT_EQ(be->alloc_host(0)->size(), 0u);  // an empty request is an empty buffer, not a failure
}

INSTANTIATE_TEST_SUITE_P(Backends, BackendMemory, ::testing::ValuesIn(all_backends()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace sluice::op_cases
