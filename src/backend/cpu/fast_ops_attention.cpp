// Attention work split (items or split-KV), the fold of chunk states, and the
// partials buffer layout. The per-level chunk kernels are in fast_ops*.cpp.
//
// partials buffer:
//
//   [ per thread: running state + chunk state, each n_group x (head_dim + 2) ]  x n_threads
//   [ split-KV states: [min(n_tokens_max, 4)][n_head][n_chunks_max][head_dim + 2] ]
//
// A state is [m, l, acc[head_dim]] (see fast_ops.h).
#include <cmath>
#include <limits>

#include "backend/cpu/fast_ops.h"
#include "backend/cpu/fast_ops_isa.h"
#include "base/check.h"

namespace sluice::cpu::fast {
namespace {

int64_t n_chunks(int64_t n_pos) { return (n_pos + kAttnKvChunk - 1) / kAttnKvChunk; }
int64_t state_floats(const AttentionArgs& a) { return a.head_dim + 2; }
int64_t group_of(const AttentionArgs& a) { return a.n_head / a.n_head_kv; }

// Floats of one thread's scratch: a running state and a chunk state per group head.
int64_t thread_scratch_floats(const AttentionArgs& a) { return 2 * group_of(a) * state_floats(a); }

// Chunks per (token, head) row of the split-KV region, sized for the longest token.
int64_t split_row_chunks(const AttentionArgs& a) { return n_chunks(a.pos0 + a.n_tokens); }

void run_chunk(Isa isa, const AttnChunk& c) {
  switch (isa) {
    case Isa::kAvx512: return attn_chunk_avx512(c);
    case Isa::kAvx2: return attn_chunk_avx2(c);
    case Isa::kScalar: return attn_chunk_scalar(c);
  }
}

// The chunk kernel's arguments for token t, KV head kvh, chunk ch.
AttnChunk chunk_args(const AttentionArgs& a, int64_t t, int64_t kvh, int64_t ch, float* state,
                     int64_t state_stride) {
  const int64_t group = group_of(a);
  const int64_t n_pos = a.pos0 + t + 1;
  const int64_t j0 = ch * kAttnKvChunk;
  const int64_t j1 = j0 + kAttnKvChunk < n_pos ? j0 + kAttnKvChunk : n_pos;
  return AttnChunk{.q = a.q + (t * a.n_head + kvh * group) * a.head_dim,
                   .q_stride = a.head_dim,
                   .k = a.k + kvh * a.head_dim,
                   .v = a.v + kvh * a.head_dim,
                   .kv_stride = a.n_head_kv * a.head_dim,
                   .head_dim = a.head_dim,
                   .n_q = group,
                   .j0 = j0,
                   .j1 = j1,
                   .scale = a.scale,
                   .state = state,
                   .state_stride = state_stride};
}

// run <- fold(run, part): the one merge used by both work splits.
void merge(float* run, const float* part, int64_t head_dim) {
  const float m = run[0] > part[0] ? run[0] : part[0];
  const float a1 = std::exp(run[0] - m);
  const float a2 = std::exp(part[0] - m);
  run[0] = m;
  run[1] = run[1] * a1 + part[1] * a2;
  for (int64_t d = 0; d < head_dim; ++d) run[2 + d] = run[2 + d] * a1 + part[2 + d] * a2;
}

void finish(const float* state, float* out, int64_t head_dim) {
  const float inv = 1.0f / state[1];
  for (int64_t d = 0; d < head_dim; ++d) out[d] = state[2 + d] * inv;
}

// Item mode: thread ti takes (token, kv head) items ti, ti + nt, ...
void partial_items(const AttentionArgs& a, float* partials, int ti, int nt, Isa isa) {
  const int64_t group = group_of(a);
  const int64_t sf = state_floats(a);
  float* run = partials + ti * thread_scratch_floats(a);
  float* part = run + group * sf;
  const int64_t n_items = a.n_tokens * a.n_head_kv;
  for (int64_t item = ti; item < n_items; item += nt) {
    const int64_t t = item / a.n_head_kv;
    const int64_t kvh = item % a.n_head_kv;
    const int64_t nc = n_chunks(a.pos0 + t + 1);
    run_chunk(isa, chunk_args(a, t, kvh, 0, run, sf));
    for (int64_t ch = 1; ch < nc; ++ch) {
      run_chunk(isa, chunk_args(a, t, kvh, ch, part, sf));
      for (int64_t g = 0; g < group; ++g) merge(run + g * sf, part + g * sf, a.head_dim);
    }
    for (int64_t g = 0; g < group; ++g)
      finish(run + g * sf, a.out + (t * a.n_head + kvh * group + g) * a.head_dim, a.head_dim);
  }
}

float* split_region(const AttentionArgs& a, float* partials, int nt) { return partials + nt * thread_scratch_floats(a); }

// Split-KV: items (token, kv head, chunk) in that order, contiguous ranges per thread.
void partial_split(const AttentionArgs& a, float* partials, int ti, int nt, Isa isa) {
  const int64_t group = group_of(a);
  const int64_t sf = state_floats(a);
  const int64_t row_chunks = split_row_chunks(a);
  float* region = split_region(a, partials, nt);
  int64_t n_items = 0;
  for (int64_t t = 0; t < a.n_tokens; ++t) n_items += a.n_head_kv * n_chunks(a.pos0 + t + 1);
  const int64_t begin = n_items * ti / nt;
  const int64_t end = n_items * (ti + 1) / nt;
  int64_t first = 0;  // index of the token's first item
  for (int64_t t = 0; t < a.n_tokens; ++t) {
    const int64_t nc = n_chunks(a.pos0 + t + 1);
    const int64_t count = a.n_head_kv * nc;
    const int64_t lo = begin > first ? begin : first;
    const int64_t hi = end < first + count ? end : first + count;
    for (int64_t item = lo; item < hi; ++item) {
      const int64_t kvh = (item - first) / nc;
      const int64_t ch = (item - first) % nc;
      // State of head h, chunk ch at region[((t * n_head + h) * row_chunks + ch) * sf].
      float* state = region + ((t * a.n_head + kvh * group) * row_chunks + ch) * sf;
      run_chunk(isa, chunk_args(a, t, kvh, ch, state, row_chunks * sf));
    }
    first += count;
  }
}

}  // namespace

size_t attention_partials_floats(const AttentionArgs& a_max, int n_threads) {
  const int64_t split_tokens = a_max.n_tokens < kAttnSplitMaxTokens ? a_max.n_tokens : kAttnSplitMaxTokens;
  const int64_t split = split_tokens * a_max.n_head * split_row_chunks(a_max) * state_floats(a_max);
  return static_cast<size_t>(n_threads * thread_scratch_floats(a_max) + split);
}

bool attention_uses_split(const AttentionArgs& a) {
  return a.n_tokens <= kAttnSplitMaxTokens && n_chunks(a.pos0 + a.n_tokens) > 1;
}

void attention_partial(const AttentionArgs& a, float* partials, int ti, int nt, Isa isa) {
  CHECK(a.n_head_kv > 0 && a.n_head % a.n_head_kv == 0);
  if (attention_uses_split(a)) partial_split(a, partials, ti, nt, isa);
  else partial_items(a, partials, ti, nt, isa);
}

void attention_combine(const AttentionArgs& a, float* partials, int ti, int nt) {
  if (!attention_uses_split(a)) return;
  const int64_t sf = state_floats(a);
  const int64_t row_chunks = split_row_chunks(a);
  float* region = split_region(a, partials, nt);
  const int64_t n_rows = a.n_tokens * a.n_head;
  for (int64_t row = ti; row < n_rows; row += nt) {
    const int64_t t = row / a.n_head;
    float* run = region + row * row_chunks * sf;
    const int64_t nc = n_chunks(a.pos0 + t + 1);
    for (int64_t ch = 1; ch < nc; ++ch) merge(run, run + ch * sf, a.head_dim);
    finish(run, a.out + row * a.head_dim, a.head_dim);
  }
}

void attention(const AttentionArgs& a, float* partials, ThreadPool& pool, Isa isa) {
  struct Job {
    const AttentionArgs* a;
    float* partials;
    Isa isa;
  } job{&a, partials, isa};
  // One pointer captured: fits std::function's inline storage (no allocation).
  pool.run_on_all([j = &job](int ti, int nt) { attention_partial(*j->a, j->partials, ti, nt, j->isa); });
  if (attention_uses_split(a)) {
    pool.run_on_all([j = &job](int ti, int nt) { attention_combine(*j->a, j->partials, ti, nt); });
  }
}

}  // namespace sluice::cpu::fast
