#include "backend/cpu/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cpu/paged_attention_simd.h"
#include "base/check.h"
#include "base/half.h"

namespace sluice::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

float dot_scalar(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}
void scale_add_scalar(float* acc, float s, const float* v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] += s * v[i];
}
void scale_scalar(float* acc, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] *= s;
}
void f16_to_f32_scalar(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = sluice::f16_to_f32(src[i]);
}

PagedVecOps vec_ops(Isa isa) {
  if (isa == Isa::kAvx512) return paged_vec_ops_avx512();
  if (isa == Isa::kAvx2) return paged_vec_ops_avx2();
  return PagedVecOps{dot_scalar, scale_add_scalar, scale_scalar, f16_to_f32_scalar};
}

// One (sequence, token, kv head) unit of work.
struct Item {
  int32_t seq;
  int32_t tok;
  int32_t kvh;
};

// Online-softmax state of the `group` query heads of one kv head:
//   [group] m, [group] l, [group][head_dim] acc
struct State {
  float* m;
  float* l;
  float* acc;
};

State state_at(float* base, int64_t group, int64_t hd) { return State{base, base + group, base + 2 * group}; }
size_t state_floats(int64_t group, int64_t hd) { return static_cast<size_t>(group * (hd + 2)); }

class Runner {
 public:
  Runner(const PagedAttentionArgs& a, Isa isa)
      : a_(a), ops_(vec_ops(isa)), group_(a.n_head / a.n_head_kv), hd_(a.head_dim) {}

  int64_t group() const { return group_; }
  int64_t n_pos(const Item& it) const { return a_.seqs[it.seq].pos0 + it.tok + 1; }
  int64_t n_chunks(const Item& it) const { return (n_pos(it) + kPagedKvChunk - 1) / kPagedKvChunk; }

  // Pointer to head `kvh`'s slice of the row of position p, as floats (converted
  // into buf unless the rows are f32).
  const float* row(const uint8_t* base, const int32_t* table, int64_t p, int64_t kvh, float* buf) const {
    const int64_t bs = a_.kv.block_size;
    const uint8_t* r = base + static_cast<size_t>(table[p / bs] * bs + p % bs) * a_.kv.row_bytes;
    switch (a_.kv.type) {
      case KvRowType::kF32:
        return reinterpret_cast<const float*>(r) + kvh * hd_;
      case KvRowType::kF16:
        ops_.f16_to_f32(reinterpret_cast<const uint16_t*>(r) + kvh * hd_, buf, hd_);
        return buf;
      case KvRowType::kQ8_0:
        for (int64_t i = 0; i < hd_; ++i) {
          const int64_t e = kvh * hd_ + i;
          const uint8_t* blk = r + (e / 32) * 34;
          uint16_t dh;
          std::memcpy(&dh, blk, 2);
          buf[i] = sluice::f16_to_f32(dh) * static_cast<float>(reinterpret_cast<const int8_t*>(blk + 2)[e % 32]);
        }
        return buf;
    }
    return buf;
  }

  // Fresh state over positions [j0, j1) of item `it`. kbuf, vbuf: [head_dim].
  void chunk(const Item& it, int64_t j0, int64_t j1, State st, float* kbuf, float* vbuf) const {
    const PagedSeq& s = a_.seqs[it.seq];
    for (int64_t g = 0; g < group_; ++g) {
      st.m[g] = kNegInf;
      st.l[g] = 0.0f;
    }
    std::fill(st.acc, st.acc + group_ * hd_, 0.0f);
    const float* q0 = s.q + (static_cast<int64_t>(it.tok) * a_.n_head + it.kvh * group_) * hd_;
    for (int64_t j = j0; j < j1; ++j) {
      const float* k = row(a_.kv.k, s.block_table, j, it.kvh, kbuf);
      const float* v = row(a_.kv.v, s.block_table, j, it.kvh, vbuf);
      for (int64_t g = 0; g < group_; ++g) {
        const float sc = ops_.dot(q0 + g * hd_, k, hd_) * a_.scale;
        float* acc = st.acc + g * hd_;
        if (sc > st.m[g]) {
          const float r = std::exp(st.m[g] - sc);  // 0 on the first position
          ops_.scale(acc, r, hd_);
          st.l[g] *= r;
          st.m[g] = sc;
        }
        const float p = std::exp(sc - st.m[g]);
        ops_.scale_add(acc, p, v, hd_);
        st.l[g] += p;
      }
    }
  }

  // into = fold(into, part), per query head.
  void merge(State into, State part) const {
    for (int64_t g = 0; g < group_; ++g) {
      const float m = std::max(into.m[g], part.m[g]);
      const float a1 = into.m[g] == kNegInf ? 0.0f : std::exp(into.m[g] - m);
      const float a2 = part.m[g] == kNegInf ? 0.0f : std::exp(part.m[g] - m);
      into.l[g] = into.l[g] * a1 + part.l[g] * a2;
      float* acc = into.acc + g * hd_;
      ops_.scale(acc, a1, hd_);
      ops_.scale_add(acc, a2, part.acc + g * hd_, hd_);
      into.m[g] = m;
    }
  }

  void write_out(const Item& it, State st) const {
    const PagedSeq& s = a_.seqs[it.seq];
    for (int64_t g = 0; g < group_; ++g) {
      float* o = s.out + (static_cast<int64_t>(it.tok) * a_.n_head + it.kvh * group_ + g) * hd_;
      const float inv = 1.0f / st.l[g];
      for (int64_t d = 0; d < hd_; ++d) o[d] = st.acc[g * hd_ + d] * inv;
    }
  }

  // The whole item on one thread: chunk 0, then fold chunks 1.. in order.
  // scratch: 2 states + 2 rows.
  void whole(const Item& it, float* scratch) const {
    const size_t sf = state_floats(group_, hd_);
    State run = state_at(scratch, group_, hd_), part = state_at(scratch + sf, group_, hd_);
    float* kbuf = scratch + 2 * sf;
    float* vbuf = kbuf + hd_;
    const int64_t n = n_pos(it);
    chunk(it, 0, std::min(n, kPagedKvChunk), run, kbuf, vbuf);
    for (int64_t j0 = kPagedKvChunk; j0 < n; j0 += kPagedKvChunk) {
      chunk(it, j0, std::min(n, j0 + kPagedKvChunk), part, kbuf, vbuf);
      merge(run, part);
    }
    write_out(it, run);
  }

 private:
  const PagedAttentionArgs& a_;
  PagedVecOps ops_;
  int64_t group_;
  int64_t hd_;
};

size_t thread_scratch_floats(int64_t group, int64_t hd) { return 2 * state_floats(group, hd) + 2 * hd; }

// Most items that take the split-KV path (decode-like steps).
int64_t split_max_items(int n_threads) { return 2 * static_cast<int64_t>(n_threads); }

}  // namespace

size_t paged_attention_partials_floats(int64_t max_items, int64_t max_ctx, int64_t n_head, int64_t n_head_kv,
                                       int64_t head_dim, int n_threads) {
  const int64_t group = n_head / n_head_kv;
  const int64_t max_chunks = (max_ctx + kPagedKvChunk - 1) / kPagedKvChunk;
  const int64_t split_items = std::min(max_items, split_max_items(n_threads));
  return static_cast<size_t>(n_threads) * thread_scratch_floats(group, head_dim) +
         static_cast<size_t>(split_items * max_chunks) * state_floats(group, head_dim);
}

void paged_attention(const PagedAttentionArgs& a, float* partials, size_t n_partials, ThreadPool& pool, Isa isa) {
  CHECK(a.n_head % a.n_head_kv == 0);
  Runner run(a, isa);
  const int64_t group = run.group(), hd = a.head_dim;
  const int nt = pool.n_threads();
  const size_t tsf = thread_scratch_floats(group, hd);
  CHECK(n_partials >= static_cast<size_t>(nt) * tsf);

  // Items in (sequence, token, kv head) order; at most a few thousand per step,
  // enumerated arithmetically instead of stored.
  int64_t n_items = 0;
  int64_t max_chunks = 0;
  for (const PagedSeq& s : a.seqs) {
    n_items += s.n_tokens * a.n_head_kv;
    max_chunks = std::max(max_chunks, (s.pos0 + s.n_tokens + kPagedKvChunk - 1) / kPagedKvChunk);
  }
  auto item_at = [&](int64_t idx) {
    int32_t si = 0;
    while (idx >= a.seqs[si].n_tokens * a.n_head_kv) idx -= a.seqs[si++].n_tokens * a.n_head_kv;
    return Item{si, static_cast<int32_t>(idx / a.n_head_kv), static_cast<int32_t>(idx % a.n_head_kv)};
  };

  const size_t sf = state_floats(group, hd);
  float* split_buf = partials + static_cast<size_t>(nt) * tsf;
  const size_t split_need = static_cast<size_t>(n_items * max_chunks) * sf;
  const bool split = nt > 1 && max_chunks > 1 && n_items <= split_max_items(nt) &&
                     n_partials - static_cast<size_t>(nt) * tsf >= split_need;

  if (!split) {
    pool.run_on_all([&](int ti, int n) {
      float* scratch = partials + static_cast<size_t>(ti) * tsf;
      for (int64_t i = ti; i < n_items; i += n) run.whole(item_at(i), scratch);
    });
    return;
  }
  // Split-KV: (item, chunk) units over threads, each a fresh partial state...
  const int64_t n_units = n_items * max_chunks;
  pool.run_on_all([&](int ti, int n) {
    float* kbuf = partials + static_cast<size_t>(ti) * tsf + 2 * sf;
    float* vbuf = kbuf + hd;
    for (int64_t u = ti; u < n_units; u += n) {
      const Item it = item_at(u / max_chunks);
      const int64_t c = u % max_chunks;
      const int64_t j0 = c * kPagedKvChunk, j1 = std::min(run.n_pos(it), j0 + kPagedKvChunk);
      if (j0 >= j1) continue;
      run.chunk(it, j0, j1, state_at(split_buf + static_cast<size_t>(u) * sf, group, hd), kbuf, vbuf);
    }
  });
  // ...then folded per item in chunk order, exactly as whole() does.
  pool.run_on_all([&](int ti, int n) {
    for (int64_t i = ti; i < n_items; i += n) {
      const Item it = item_at(i);
      State acc = state_at(split_buf + static_cast<size_t>(i * max_chunks) * sf, group, hd);
      for (int64_t c = 1; c < run.n_chunks(it); ++c)
        run.merge(acc, state_at(split_buf + static_cast<size_t>(i * max_chunks + c) * sf, group, hd));
      run.write_out(it, acc);
    }
  });
}

}  // namespace sluice::cpu
