// The op-case list: every operator of the Backend interface (backend.h), as
// cases of shapes, types and variants, run on every registered backend that
// can run here and compared with the reference backend (backend_test.cpp runs
// them, one test per backend and case).
//
// A case builds its inputs once, from fixed seeds, and runs its operators on
// the backend an OpRun wraps. Through the OpRun it declares where things live,
// as the Backend contract has them: activations in buffers of the backend
// (in(), out()), norm and bias vectors in host memory (the case's own vectors),
// weights prepared by the backend (weights()), K/V in a store of the backend
// (kv()). Every output it declares is poisoned with NaN before the run and has
// guard floats on both sides; after the run the harness reads them back and
// checks, per output:
//   - the guards are intact (nothing written out of bounds);
//   - the values are finite (nothing skipped: a NaN fails the comparison);
//   - the normalized squared error against the reference backend's output of
//     the same name is below the output's tolerance (or the bits are equal).
// A case with n_tok() > 0 is also run one token at a time on the backend under
// test: each token's rows must equal its rows in the whole batch, bit for bit
// (backend.h, per-token determinism). On backends whose buffers are host
// memory, cases run twice: with the weights prepared and as GGUF rows.
//
// Adding an operator: docs/ARCHITECTURE.md, "adding an operator".
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <initializer_list>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/backend.h"
#include "backend/cpu/op_test_util.h"
#include "kv/kv_store.h"
#include "quant/quant.h"

namespace sluice::op_cases {

using cpu::testing::nmse;
using cpu::testing::random_floats;

// How close an output of the backend under test must be to the reference's.
struct Tol {
  enum Kind { kNmse, kBits, kWritten };
  Kind kind = kNmse;
  double max_nmse = 0;
  bool skip_unwritten = false;  // elements the reference leaves NaN are not compared
  static Tol nmse(double e) { return {.kind = kNmse, .max_nmse = e}; }
  // By normalized error where the reference writes: for an operator that
  // leaves rows outside its call as they were (training attention's rows in
  // no sequence), which both backends then leave NaN.
  static Tol nmse_where_written(double e) { return {.kind = kNmse, .max_nmse = e, .skip_unwritten = true}; }
  // The same bits.
  static Tol bits() { return {.kind = kBits}; }
  // Only written (finite, guards intact): an intermediate no bound is set
  // for (act(gate) * up, between two matmuls' errors).
  static Tol written() { return {.kind = kWritten}; }
};

// The normalized squared error a matmul output may have against the reference
// (which multiplies float activations): what rounding the activations costs.
// depth 1: y = W x; depth 2: y = W2 act(W1 x), the second matmul's input
// (activation times up) heavier-tailed and carrying the first one's error.
double matmul_tolerance(DType weight, ActRounding rounding, int depth);

// A random matrix [n_out, n_in] of a weight type, and its view (GGUF rows).
struct Matrix {
  std::vector<uint8_t> bytes;
  WeightView view;
  Matrix(DType type, int64_t n_in, int64_t n_out, uint32_t seed, float scale = 0.05f) {
    const auto f = random_floats(static_cast<size_t>(n_in * n_out), seed, scale);
    bytes.resize(row_bytes(type, n_in) * static_cast<size_t>(n_out));
    quantize_tensor(type, f.data(), bytes.data(), n_out, n_in);
    view = WeightView{.type = type, .data = bytes.data(), .n_in = n_in, .n_out = n_out};
  }
};

// One output as read back after a run.
struct OpOutput {
  std::string name;
  int64_t n_rows = 0;   // rows (tokens, for a case with n_tok() > 0)
  int64_t row_len = 0;
  Tol tol;
  std::vector<float> values;  // [n_rows, row_len]
  bool guards_intact = false;
};
using OpOutputs = std::vector<OpOutput>;
const OpOutput* find_output(const OpOutputs& outs, const std::string& name);

// Rows t0 .. t0 + n - 1 of v, rows of len elements: the part of a case's
// [n_tok, len] input that a run over those tokens reads.
template <typename T>
std::span<const T> rows(const std::vector<T>& v, int64_t t0, int64_t n, int64_t len = 1) {
  return std::span(v).subspan(static_cast<size_t>(t0 * len), static_cast<size_t>(n * len));
}

// One run of a case on one backend: the memory it declares, and its outputs.
class OpRun {
 public:
  // prepare: weights() prepares matrices the way the model does; else they stay GGUF rows.
  OpRun(Backend& be, bool prepare) : be_(be), prepare_(prepare) {}
  OpRun(const OpRun&) = delete;
  OpRun& operator=(const OpRun&) = delete;

  Backend& be() { return be_; }
  // How the backend's matmuls of n_tok tokens round their activations.
  ActRounding rounding(DType weight, int64_t n_tok) const { return be_.matmul_act_rounding(weight, n_tok); }

  // A buffer of the backend holding these floats (an input).
  float* in(std::span<const float> values);
  // A buffer of the backend for an output [n_rows, row_len]: NaN-poisoned,
  // guarded, compared with the reference's output `name` by tol.
  float* out(const std::string& name, int64_t n_rows, int64_t row_len, Tol tol);
  // The same, holding these values first (an operator that writes in place).
  float* inout(const std::string& name, std::span<const float> values, int64_t row_len, Tol tol);
  // The same in host memory (logits, routing), floats or int32.
  float* host_out(const std::string& name, int64_t n_rows, int64_t row_len, Tol tol);
  int32_t* host_ints(const std::string& name, int64_t n_rows, int64_t row_len);
  // The same in doubles (compared as floats; cross-entropy's losses), NaN-poisoned.
  double* host_doubles(const std::string& name, int64_t n_rows, int64_t row_len, Tol tol);
  // An output taken now, from a buffer a later operator overwrites.
  void snapshot(const std::string& name, const float* data, int64_t n_rows, int64_t row_len, Tol tol);
  // Copies of the views of one dispatch group, prepared by the backend (when
  // the run prepares); valid until the run ends.
  std::span<const WeightView> weights(std::initializer_list<WeightView> group);
  // A K/V store of the backend.
  KvStore& kv(const KvLayout& layout, int64_t n_blocks);

  // After the case ran: every output, read back.
  OpOutputs finish();

 private:
  static constexpr int64_t kGuard = 64;  // floats each side
  static constexpr double kDoubleCanary = -1.2345e300;  // host_doubles' guards
  struct Declared {
    OpOutput out;
    std::unique_ptr<Buffer> device;    // [guard][n][guard] in the backend's memory, or
    std::vector<float> host;           // the same in host memory
    std::vector<double> doubles;       // or [guard][n][guard] doubles
    bool ints = false;
    bool taken = false;                // a snapshot: out.values already read
  };
  float* guarded(Declared& d, std::span<const float> init);

  Backend& be_;
  bool prepare_;
  std::deque<Declared> outs_;
  std::vector<std::unique_ptr<Buffer>> ins_;
  std::deque<std::vector<WeightView>> views_;
  std::vector<PreparedWeights> prepared_;
  std::deque<KvStore> kvs_;
};

// One instance of one or more operators.
class OpCase {
 public:
  virtual ~OpCase() = default;
  // The operators it runs, in order: the class's kOps (see add()).
  virtual std::span<const Op> ops() const = 0;
  // The types they see, for supports().
  virtual OpTypes types() const { return {}; }
  // Whether the backend runs this case: by default, supports() of each op.
  virtual bool supported_by(const Backend& be) const {
    for (Op op : ops())
      if (!be.supports(op, types())) return false;
    return true;
  }
  // Tokens of a case whose outputs are all [tokens, ...] and whose token t
  // depends only on its own inputs (0: not split by token).
  virtual int64_t n_tok() const { return 0; }
  // Runs the operators over tokens t0 .. t0 + n - 1 (the whole case when n_tok() is 0).
  virtual void run(OpRun& r, int64_t t0, int64_t n) = 0;
  // Checks of one backend's outputs beyond the comparison (gtest assertions).
  virtual void check(const OpOutputs& outs) const {}
};

struct OpCaseEntry {
  std::string name;        // [A-Za-z0-9_], unique
  std::span<const Op> ops; // what make()'s case runs, known without building it
  std::function<std::unique_ptr<OpCase>()> make;
};
using OpCaseList = std::vector<OpCaseEntry>;

// Adds a case of class C, built from args when a test runs it. C declares
// `static constexpr Op kOps[]` (the operators it runs) and returns it from ops().
template <typename C, typename... Args>
void add(OpCaseList& list, std::string name, Args... args) {
  list.push_back({std::move(name), C::kOps, [=] { return std::unique_ptr<OpCase>(new C(args...)); }});
}

// The families of the list (op_cases_*_test.cpp), and the whole list.
void add_matmul_cases(OpCaseList& list);     // embed, matmul, norm_matmul, glu_matmul, logits, lora
void add_attention_cases(OpCaseList& list);  // rope_tables, qkv_store, attention
void add_moe_cases(OpCaseList& list);        // route, expert_ffn
void add_norm_cases(OpCaseList& list);       // add, rmsnorm
void add_train_cases(OpCaseList& list);      // TrainOps but attention: matmul_t, backward ops, cross-entropy, AdamW
void add_train_attention_cases(OpCaseList& list);  // TrainOps' attention and its backward
void add_train_moe_cases(OpCaseList& list);        // TrainOps' routed rows: gather_rows, slot_sum, gated_add
const OpCaseList& op_case_list();

// The harness, for tests that run cases in other ways (cpu/cpu_levels_test.cpp:
// at every instruction-set level): one run of a case over tokens t0 .. t0 + n - 1,
// and the comparison of a backend's outputs with the reference's.
OpOutputs run_case(OpCase& c, Backend& be, bool prepare, int64_t t0, int64_t n);
void compare(const OpOutputs& got, const OpOutputs& want);

// A prefill-size token count: past the token tiles of the CPU's and the GPU's
// matmuls and attention, where kernels take their batched paths. A kernel
// that switches path at another count gets a case at it (one add() line).
inline constexpr int64_t kPrefillTokens = 128;

// The weight types every matmul-like operator is tested with.
inline constexpr DType kWeightTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16,   DType::kQ8_0,  DType::kQ4_0,
                                         DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,   DType::kQ2_K,  DType::kQ3_K,
                                         DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_NL, DType::kIQ4_XS};

}  // namespace sluice::op_cases
