#include "backend/cpu/matmul.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <vector>

#include "backend/cpu/repack.h"
#include "base/check.h"

namespace sluice::cpu {
namespace {

MatmulKernel lookup(DType type, Isa isa, WeightLayout layout) {
  for (int level = static_cast<int>(isa); level >= 0; --level) {
    const Isa at = static_cast<Isa>(level);
    const bool is_float = type == DType::kF32 || type == DType::kF16 || type == DType::kBF16;
    MatmulKernel k = is_float ? (layout == WeightLayout::kRows ? float_matmul_kernel(type, at) : MatmulKernel{})
                              : quant_matmul_kernel(type, at, layout);
    if (k.rows) return k;
  }
  return MatmulKernel{};
}

// [type index in all_dtype_traits()][isa], filled once: a type without a
// kernel at any level (rows == nullptr) is one matmul does not support.
const std::vector<std::array<MatmulKernel, 3>>& row_kernels() {
  static const auto table = [] {
    std::vector<std::array<MatmulKernel, 3>> t(all_dtype_traits().size());
    for (size_t j = 0; j < t.size(); ++j)
      for (int i = 0; i < 3; ++i)
        t[j][i] = lookup(all_dtype_traits()[j].type, static_cast<Isa>(i), WeightLayout::kRows);
    return t;
  }();
  return table;
}

// Index of type's row in all_dtype_traits().
size_t type_index(DType type) {
  const auto rows = all_dtype_traits();
  size_t j = 0;
  while (j < rows.size() && rows[j].type != type) ++j;
  return j;
}

// The reference fallback's activations: the f32 values as they are (the
// driver reads them from x; this only sizes and names the format).
size_t reference_act_row_bytes(int64_t n_in) { return static_cast<size_t>(n_in) * sizeof(float); }
constexpr MatmulKernel kReferenceKernel{.act_row_bytes = reference_act_row_bytes, .name = "reference"};

// The type ScopedReferenceMatmul forces onto the fallback (its GGUF id), or -1.
std::atomic<int64_t> forced_reference{-1};

}  // namespace

ScopedReferenceMatmul::ScopedReferenceMatmul(DType type) {
  for (WeightLayout l : kRepackedLayouts) CHECK(repacked_type(l) != type);  // their groups convert as rows do
  CHECK(forced_reference.exchange(static_cast<int64_t>(type)) == -1);
}
ScopedReferenceMatmul::~ScopedReferenceMatmul() { forced_reference.store(-1); }

const MatmulKernel& matmul_kernel(DType type, Isa isa, WeightLayout layout) {
  // The repacked layouts have their own table.
  static const auto packed = [] {  // [isa][layout], every repacked layout
    std::array<std::array<MatmulKernel, std::size(kRepackedLayouts) + 1>, 3> t{};
    for (int i = 0; i < 3; ++i)
      for (WeightLayout l : kRepackedLayouts) t[i][static_cast<size_t>(l)] = lookup(repacked_type(l), static_cast<Isa>(i), l);
    return t;
  }();
  if (layout != WeightLayout::kRows) {
    CHECK(type == repacked_type(layout));
    return packed[static_cast<size_t>(isa)][static_cast<size_t>(layout)];
  }
  const size_t j = type_index(type);
  CHECK(j < row_kernels().size() && "matmul_kernel: unsupported type");
  const MatmulKernel& k = row_kernels()[j][static_cast<size_t>(isa)];
  if (k.rows == nullptr || forced_reference.load(std::memory_order_relaxed) == static_cast<int64_t>(type)) {
    CHECK(dtype_traits(type).dot != nullptr);
    return kReferenceKernel;
  }
  return k;
}

bool matmul_supports(DType type) {
  const size_t j = type_index(type);
  return j < row_kernels().size() && row_kernels()[j][0].rows != nullptr;
}

bool matmul_runs(DType type) {
  const size_t j = type_index(type);
  return j < row_kernels().size() && (row_kernels()[j][0].rows != nullptr || all_dtype_traits()[j].dot != nullptr);
}

size_t matmul_scratch_bytes(int64_t n_tok, int64_t n_in) {
  // The widest activation format is f32 (4 bytes per element); 64 bytes of slack
  // per row cover block headers and alignment.
  return 2 * static_cast<size_t>(n_tok) * (static_cast<size_t>(n_in) * 4 + 64);
}

namespace {

void matmul_group_impl(std::span<const MatmulJob> jobs, const float* x, int64_t n_in, int64_t n_tok,
                       uint8_t* scratch, ThreadPool& pool, Isa isa,
                       const FunctionRef<void(int64_t, int64_t)>* prepare) {
  CHECK(!jobs.empty() && jobs.size() <= 4);
  // Activation buffers: one per distinct activation format (at most two); weight
  // types with the same conversion (Q4_K and Q6_K, say) share one.
  struct Act {
    decltype(MatmulKernel::convert_act) convert;
    const MatmulKernel* k;
    uint8_t* data;
    size_t stride;
  };
  Act acts[2];
  int n_acts = 0;
  int act_of[4];
  const MatmulKernel* kernel_of[4];  // the job's rows(); shares its type's activations
  float (*reference_dot[4])(const void*, const float*, int64_t);  // non-null: the fallback's dot
  uint8_t* next = scratch;
  int64_t job_base = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    CHECK(jobs[j].w.n_in == n_in);
    // A repacked job's rows must start on a group boundary of the split.
    CHECK(job_base % repack_group_rows(jobs[j].w.layout) == 0);
    job_base += jobs[j].w.n_out;
    kernel_of[j] = &matmul_kernel(jobs[j].w.type, isa, jobs[j].w.layout);
    if (kernel_of[j]->rows == nullptr) {  // the reference fallback: reads x itself
      CHECK(jobs[j].w.layout == WeightLayout::kRows);
      reference_dot[j] = dtype_traits(jobs[j].w.type).dot;
      act_of[j] = -1;
      continue;
    }
    reference_dot[j] = nullptr;
    int found = -1;
    const MatmulKernel& k = matmul_kernel(jobs[j].w.type, isa);
    for (int a = 0; a < n_acts; ++a)
      if (acts[a].convert == k.convert_act) found = a;
    if (found < 0) {
      CHECK(n_acts < 2);
      const size_t stride = (k.act_row_bytes(n_in) + 63) & ~size_t{63};
      acts[n_acts] = Act{k.convert_act, &k, next, stride};
      next += stride * static_cast<size_t>(n_tok);
      found = n_acts++;
    }
    act_of[j] = found;
  }

  // Total rows over all jobs, split into contiguous ranges aligned to 16 rows.
  int64_t total = 0;
  for (const MatmulJob& j : jobs) total += j.w.n_out;
  const int n_jobs = static_cast<int>(jobs.size());

  auto convert = [&](int64_t t0, int64_t t1) {
    if (prepare != nullptr) (*prepare)(t0, t1);
    for (int a = 0; a < n_acts; ++a)
      for (int64_t t = t0; t < t1; ++t)
        acts[a].k->convert_act(x + t * n_in, acts[a].data + static_cast<size_t>(t) * acts[a].stride, n_in);
  };
  const bool convert_inside = n_tok >= 4;  // small batches: convert on this thread
  if (!convert_inside) convert(0, n_tok);
  if (convert_inside) pool.parallel_for_claimed(n_tok, 1, convert);

  // Three quarters of the rows are split evenly, one contiguous range per
  // thread (a long sequential weight stream each); the last quarter is claimed
  // in turn, in shrinking runs (1/(2 n_threads) of what is left, multiples of
  // 32 rows = two 16-row groups), so that a thread the machine slowed down (a
  // busy core, an interrupt, a descheduled vCPU) does not hold the others at
  // the barrier. y[t][r] does not depend on which thread computes row r.
  const int nt = pool.n_threads();
  const int64_t fixed = total * 3 / 4 / (32 * nt) * 32;  // rows of each thread's own range
  std::atomic<int64_t> next_row{fixed * nt};
  auto compute = [&](int64_t begin, int64_t end) {
    int64_t base = 0;
    for (int j = 0; j < n_jobs && base < end; ++j) {
      const WeightView& w = jobs[static_cast<size_t>(j)].w;
      const int64_t lo = std::max(begin, base), hi = std::min(end, base + w.n_out);
      if (lo < hi && reference_dot[j] != nullptr) {
        // The reference fallback: y[t][r] = dot(row r, x[t]), one at a time.
        const size_t rb = row_bytes(w.type, n_in);
        float* y = jobs[static_cast<size_t>(j)].y;
        for (int64_t r = lo - base; r < hi - base; ++r)
          for (int64_t t = 0; t < n_tok; ++t)
            y[t * w.n_out + r] = reference_dot[j](w.data + static_cast<size_t>(r) * rb, x + t * n_in, n_in);
      } else if (lo < hi) {
        const Act& a = acts[act_of[j]];
        kernel_of[j]->rows(w.data, row_bytes(w.type, n_in), n_in, a.data, a.stride, n_tok,
                           jobs[static_cast<size_t>(j)].y, w.n_out, lo - base, hi - base);
      }
      base += w.n_out;
    }
  };
  pool.run_on_all([&](int ti, int) {
    if (fixed > 0) compute(ti * fixed, (ti + 1) * fixed);
    int64_t begin = next_row.load(std::memory_order_relaxed);
    for (;;) {
      int64_t end = 0;
      do {
        if (begin >= total) return;
        const int64_t run = std::max<int64_t>(32, ((total - begin) / (2 * nt) + 31) / 32 * 32);
        end = std::min(total, begin + run);
      } while (!next_row.compare_exchange_weak(begin, end, std::memory_order_relaxed));
      compute(begin, end);
      begin = next_row.load(std::memory_order_relaxed);
    }
  });
}

}  // namespace

void matmul_group(std::span<const MatmulJob> jobs, const float* x, int64_t n_in, int64_t n_tok,
                  uint8_t* scratch, ThreadPool& pool, Isa isa) {
  matmul_group_impl(jobs, x, n_in, n_tok, scratch, pool, isa, nullptr);
}

void matmul_group(std::span<const MatmulJob> jobs, const float* x, int64_t n_in, int64_t n_tok,
                  uint8_t* scratch, ThreadPool& pool, Isa isa, FunctionRef<void(int64_t, int64_t)> prepare) {
  matmul_group_impl(jobs, x, n_in, n_tok, scratch, pool, isa, &prepare);
}

}  // namespace sluice::cpu
