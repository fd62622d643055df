#include "backend/cpu/paged_attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <utility>

#include "backend/cpu/paged_attention_simd.h"
#include "base/check.h"
#include "base/half.h"

namespace sluice::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

void scores_scalar(const float* q, const float* k, int64_t n, int64_t hd, float scale, float* s) {
  for (int64_t j = 0; j < n; ++j) {
    float d = 0.0f;
    for (int64_t i = 0; i < hd; ++i) d += q[i] * k[j * hd + i];
    s[j] = d * scale;
  }
}
void accumulate_scalar(float* acc, float r, const float* p, const float* v, int64_t n, int64_t hd) {
  for (int64_t i = 0; i < hd; ++i) {
    float a = acc[i] * r;
    for (int64_t j = 0; j < n; ++j) a += p[j] * v[j * hd + i];
    acc[i] = a;
  }
}
void f16_to_f32_scalar(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = sluice::f16_to_f32(src[i]);
}

PagedVecOps vec_ops(Isa isa) {
  if (isa == Isa::kAvx512) return paged_vec_ops_avx512();
  if (isa == Isa::kAvx2) return paged_vec_ops_avx2();
  return PagedVecOps{scores_scalar, accumulate_scalar, f16_to_f32_scalar};
}

// K/V positions converted together (and the unit of a softmax rescale).
constexpr int64_t kKvTile = kPagedTileMax;
// Query tokens of one sequence that share each converted K/V tile.
constexpr int64_t kQueryTile = 8;

// One unit of work: up to kQueryTile consecutive query tokens of a sequence,
// for kv heads [kvh, kvh + n_kvh) (all their query heads). Its states are
// [n_tok][n_kvh][group], one per query head.
struct Item {
  int32_t seq;
  int32_t tok0;
  int32_t n_tok;
  int32_t kvh;
  int32_t n_kvh;
};

// Online-softmax state of one query head: [m, l, acc[head_dim]].
size_t state_floats(int64_t hd) { return static_cast<size_t>(hd + 2); }

class Runner {
 public:
  Runner(const PagedAttentionArgs& a, Isa isa)
      : a_(a), ops_(vec_ops(isa)), group_(a.n_head / a.n_head_kv), hd_(a.head_dim) {}

  int64_t group() const { return group_; }
  // States of an item of at most n_kvh kv heads: [kQueryTile][n_kvh][group] query heads.
  size_t item_state_floats(int64_t n_kvh) const {
    return static_cast<size_t>(kQueryTile * n_kvh * group_) * state_floats(hd_);
  }
  // Scratch of one thread: running + chunk states of an item of every kv head, K/V tile, scores.
  size_t thread_floats() const { return 2 * item_state_floats(a_.n_head_kv) + 2 * kKvTile * hd_ + 2 * kKvTile; }
  // Positions the last query of the item attends to.
  int64_t n_pos(const Item& it) const { return a_.seqs[it.seq].pos0 + it.tok0 + it.n_tok; }
  int64_t n_chunks(const Item& it) const { return (n_pos(it) + kPagedKvChunk - 1) / kPagedKvChunk; }
  // First position a query at position p attends to.
  int64_t lo(int64_t p) const { return a_.window > 0 ? std::max<int64_t>(0, p - a_.window + 1) : 0; }
  // First position any query of the item attends to (its first query's), and its chunk.
  int64_t first_pos(const Item& it) const { return lo(a_.seqs[it.seq].pos0 + it.tok0); }
  int64_t first_chunk(const Item& it) const { return first_pos(it) / kPagedKvChunk; }

  // Address of head `kvh`'s values at position j (through the block table), and
  // the index of its first value there (q8_0 addresses blocks of 32 from it).
  const uint8_t* head_at(const uint8_t* base, const int32_t* table, int64_t j, int64_t kvh, int64_t* first) const {
    const int64_t bs = a_.kv.block_size;
    const int64_t per_slice = a_.n_head_kv / a_.kv.n_slices;  // heads in a slice
    const size_t slice = a_.kv.row_bytes / static_cast<size_t>(a_.kv.n_slices);
    *first = kvh % per_slice * hd_;
    return base + static_cast<size_t>(table[j / bs]) * static_cast<size_t>(bs) * a_.kv.row_bytes +
           static_cast<size_t>((kvh / per_slice) * bs + j % bs) * slice;
  }

  // Head `kvh`'s values of positions [j0, j1) as floats, [j1 - j0, head_dim], in dst.
  // With one head per slice, the positions of one block are consecutive slices:
  // f32 and f16 convert such a run in one call.
  void load_rows(const uint8_t* base, const int32_t* table, int64_t j0, int64_t j1, int64_t kvh, float* dst) const {
    const int64_t bs = a_.kv.block_size;
    const bool runs = a_.kv.n_slices == a_.n_head_kv && a_.kv.type != KvRowType::kQ8_0;
    for (int64_t j = j0; j < j1;) {
      int64_t e0 = 0;
      const uint8_t* r = head_at(base, table, j, kvh, &e0);
      const int64_t n = runs ? std::min(j1, (j / bs + 1) * bs) - j : 1;  // positions converted now
      float* out = dst + (j - j0) * hd_;
      switch (a_.kv.type) {
        case KvRowType::kF32:
          std::memcpy(out, reinterpret_cast<const float*>(r) + e0, static_cast<size_t>(n * hd_) * 4);
          break;
        case KvRowType::kF16:
          ops_.f16_to_f32(reinterpret_cast<const uint16_t*>(r) + e0, out, n * hd_);
          break;
        case KvRowType::kQ8_0:
          for (int64_t i = 0; i < hd_; ++i) {
            const int64_t e = e0 + i;
            const uint8_t* blk = r + (e / 32) * 34;
            uint16_t dh;
            std::memcpy(&dh, blk, 2);
            out[i] = sluice::f16_to_f32(dh) * static_cast<float>(reinterpret_cast<const int8_t*>(blk + 2)[e % 32]);
          }
          break;
      }
      j += n;
    }
  }

  // End of the K/V tile that starts at position b, in a chunk ending at j1: at
  // most kKvTile positions, never across a block (so a head's positions in a
  // tile are equally spaced in memory).
  int64_t tile_end(int64_t b, int64_t j1) const {
    const int64_t bs = a_.kv.block_size;
    return std::min({j1, b + kKvTile, (b / bs + 1) * bs});
  }

  // Asks for head kvh's K and V in the tile at position b (a slice of its
  // block each), one head ahead of its use in the item's (tile, head) order:
  // the jump to another block or head is where the hardware prefetchers lose
  // the stream. One head at a time keeps the requests in flight few enough to
  // be taken: a whole tile of every head at once (24 KiB each of K and V at 12
  // heads) took the 16-sequence step benchmark at 72 positions 1.30 ms against
  // 1.06 ms this way. Always inlined: as a call of its own, GCC finds it free
  // of side effects (prefetches do not count) and drops it.
  [[gnu::always_inline]] inline void prefetch_head(const Item& it, int64_t b, int64_t kvh) const {
    if (a_.kv.n_slices != a_.n_head_kv || a_.kv.type == KvRowType::kQ8_0) return;
    const PagedSeq& s = a_.seqs[it.seq];
    const int64_t bs = a_.kv.block_size;
    const size_t slice = a_.kv.row_bytes / static_cast<size_t>(a_.kv.n_slices);
    const size_t bytes = static_cast<size_t>(std::min(bs - b % bs, kKvTile)) * slice;  // slots b % bs ..
    int64_t e0 = 0;
    const uint8_t* k = head_at(a_.kv.k, s.block_table, b, kvh, &e0);
    const uint8_t* v = head_at(a_.kv.v, s.block_table, b, kvh, &e0);
    for (size_t c = 0; c < bytes; c += 64) {
      __builtin_prefetch(k + c);
      __builtin_prefetch(v + c);
    }
  }

  // One query head's state x = [m, l, acc] advanced over n positions of a tile,
  // composed from scores/accumulate where the level has no fused tile kernel.
  //   k, v: [n, hd] f32 rows;  sc, pr: [kKvTile]
  void tile_composed(const float* q, const float* k, const float* v, int64_t n, float* x, float* sc, float* pr) const {
    ops_.scores(q, k, n, hd_, a_.scale, sc);
    if (a_.softcap > 0.0f) {
      for (int64_t j = 0; j < n; ++j) sc[j] = a_.softcap * std::tanh(sc[j] / a_.softcap);
    }
    const float r = softmax_step(x, sc, pr, n);
    ops_.accumulate(x + 2, r, pr, v, n, hd_);
  }

  // Fresh states over positions [j0, j1) (one chunk) for every query of the item,
  // each query from its window start on. f32/f16 K/V are read in place by the
  // fused tile kernel where the level has one (and scores are not soft-capped);
  // otherwise (and always for q8_0) each tile is first converted to floats.
  //   st: item_state_floats();  work: K tile, V tile, scores, probabilities
  void chunk(const Item& it, int64_t j0, int64_t j1, float* st, float* work) const {
    const PagedSeq& s = a_.seqs[it.seq];
    const size_t sf = state_floats(hd_);
    for (int64_t k = 0; k < it.n_tok * it.n_kvh * group_; ++k) {
      float* x = st + static_cast<size_t>(k) * sf;
      x[0] = kNegInf;
      std::fill(x + 1, x + sf, 0.0f);
    }
    float* kt = work;
    float* vt = kt + kKvTile * hd_;
    float* sc = vt + kKvTile * hd_;
    float* pr = sc + kKvTile;
    const bool fused = ops_.tile != nullptr && a_.softcap == 0.0f;
    const bool in_place = fused && a_.kv.type != KvRowType::kQ8_0;
    const size_t elem = a_.kv.type == KvRowType::kF16 ? 2 : 4;
    const int64_t stride = in_place ? static_cast<int64_t>(a_.kv.row_bytes / static_cast<size_t>(a_.kv.n_slices))
                                    : hd_ * 4;
    const int64_t first = first_pos(it);  // no query of the item reads before it
    for (int64_t b = j0, b1; b < j1; b = b1) {
      b1 = tile_end(b, j1);  // the tile grid, a function of positions only
      if (b1 <= first) continue;
      const int64_t bb = std::max(b, first);  // rows of the tile that are read: [bb, b1)
      // The item's kv heads in order: with head-major blocks their slices of a
      // block are neighbours, read front to back.
      for (int32_t hi = 0; hi < it.n_kvh; ++hi) {
        const int64_t kvh = it.kvh + hi;
        if (hi + 1 < it.n_kvh) prefetch_head(it, bb, kvh + 1);
        else if (b1 < j1) prefetch_head(it, b1, it.kvh);
        const uint8_t* kp;  // row bb of the tile
        const uint8_t* vp;
        if (in_place) {
          int64_t e0 = 0;
          kp = head_at(a_.kv.k, s.block_table, bb, kvh, &e0) + static_cast<size_t>(e0) * elem;
          vp = head_at(a_.kv.v, s.block_table, bb, kvh, &e0) + static_cast<size_t>(e0) * elem;
        } else {
          load_rows(a_.kv.k, s.block_table, bb, b1, kvh, kt);
          load_rows(a_.kv.v, s.block_table, bb, b1, kvh, vt);
          kp = reinterpret_cast<const uint8_t*>(kt);
          vp = reinterpret_cast<const uint8_t*>(vt);
        }
        for (int32_t qi = 0; qi < it.n_tok; ++qi) {
          const int64_t pos = s.pos0 + it.tok0 + qi;
          const int64_t from = std::max(bb, lo(pos));         // window: positions >= from
          const int64_t n = std::min(b1, pos + 1) - from;     // causal: positions <= pos
          if (n <= 0) continue;
          const int64_t skip = from - bb;                     // rows of the tile before the window
          const float* q0 = s.q + ((static_cast<int64_t>(it.tok0) + qi) * a_.n_head + kvh * group_) * hd_;
          for (int64_t g = 0; g < group_; ++g) {
            float* x = st + static_cast<size_t>((qi * it.n_kvh + hi) * group_ + g) * sf;  // [m, l, acc]
            if (fused) {
              ops_.tile(q0 + g * hd_, kp + skip * stride, vp + skip * stride, stride, in_place && elem == 2, n, hd_,
                        a_.scale, x);
            } else {
              tile_composed(q0 + g * hd_, kt + skip * hd_, vt + skip * hd_, n, x, sc, pr);
            }
          }
        }
      }
    }
  }

  // into = fold(into, part) for every query head of the item.
  void merge(const Item& it, float* into, const float* part) const {
    const size_t sf = state_floats(hd_);
    for (int64_t k = 0; k < it.n_tok * it.n_kvh * group_; ++k) {
      float* x = into + static_cast<size_t>(k) * sf;
      const float* y = part + static_cast<size_t>(k) * sf;
      if (y[0] == kNegInf) continue;  // this query saw no position of the chunk
      if (x[0] == kNegInf) {          // nor of the ones before (a window starting later): take the chunk's
        std::copy(y, y + sf, x);
        continue;
      }
      const float m = std::max(x[0], y[0]);
      const float a1 = x[0] == kNegInf ? 0.0f : std::exp(x[0] - m);
      const float a2 = std::exp(y[0] - m);
      x[1] = x[1] * a1 + y[1] * a2;
      ops_.accumulate(x + 2, a1, &a2, y + 2, 1, hd_);
      x[0] = m;
    }
  }

  void write_out(const Item& it, const float* st) const {
    const PagedSeq& s = a_.seqs[it.seq];
    const size_t sf = state_floats(hd_);
    for (int32_t qi = 0; qi < it.n_tok; ++qi) {
      for (int64_t k = 0; k < it.n_kvh * group_; ++k) {  // query heads kvh * group + k
        const float* x = st + static_cast<size_t>(qi * it.n_kvh * group_ + k) * sf;
        float* o = s.out + ((static_cast<int64_t>(it.tok0) + qi) * a_.n_head + it.kvh * group_ + k) * hd_;
        const float inv = 1.0f / x[1];
        for (int64_t d = 0; d < hd_; ++d) o[d] = x[2 + d] * inv;
      }
    }
  }

  // Chunk range of chunk c for the item (the last query's causal limit).
  std::pair<int64_t, int64_t> chunk_range(const Item& it, int64_t c) const {
    return {c * kPagedKvChunk, std::min(n_pos(it), (c + 1) * kPagedKvChunk)};
  }

  // The whole item on one thread: its first chunk, then fold the later ones in order.
  void whole(const Item& it, float* scratch) const {
    float* run = scratch;
    float* part = scratch + item_state_floats(a_.n_head_kv);
    float* work = part + item_state_floats(a_.n_head_kv);
    const int64_t c0 = first_chunk(it);
    auto [j0, j1] = chunk_range(it, c0);
    chunk(it, j0, j1, run, work);
    for (int64_t c = c0 + 1; c < n_chunks(it); ++c) {
      std::tie(j0, j1) = chunk_range(it, c);
      chunk(it, j0, j1, part, work);
      merge(it, run, part);
    }
    write_out(it, run);
  }

 private:
  const PagedAttentionArgs& a_;
  PagedVecOps ops_;
  int64_t group_;
  int64_t hd_;
};

// Most items that take the split-KV path (decode-like steps).
int64_t split_max_items(int n_threads) { return 2 * static_cast<int64_t>(n_threads); }

}  // namespace

size_t paged_attention_partials_floats(int64_t max_items, int64_t max_ctx, int64_t n_head, int64_t n_head_kv,
                                       int64_t head_dim, int n_threads) {
  PagedAttentionArgs a{.n_head = n_head, .n_head_kv = n_head_kv, .head_dim = head_dim};
  Runner run(a, Isa::kScalar);
  const int64_t max_chunks = (max_ctx + kPagedKvChunk - 1) / kPagedKvChunk;
  const int64_t split_items = std::min(max_items, split_max_items(n_threads));
  return static_cast<size_t>(n_threads) * run.thread_floats() +
         static_cast<size_t>(split_items * max_chunks) * run.item_state_floats(1);
}

void paged_attention(const PagedAttentionArgs& a, float* partials, size_t n_partials, ThreadPool& pool, Isa isa) {
  CHECK(a.n_head % a.n_head_kv == 0);
  CHECK(a.kv.n_slices >= 1 && a.n_head_kv % a.kv.n_slices == 0);
  Runner run(a, isa);
  const int nt = pool.n_threads();
  const size_t tsf = run.thread_floats();
  CHECK(n_partials >= static_cast<size_t>(nt) * tsf);

  // Items: per sequence, query tiles of kQueryTile tokens x runs of hpi kv heads.
  int64_t n_tiles = 0;
  int64_t max_chunks = 0;
  for (const PagedSeq& s : a.seqs) {
    n_tiles += (s.n_tokens + kQueryTile - 1) / kQueryTile;
    max_chunks = std::max(max_chunks, (s.pos0 + s.n_tokens + kPagedKvChunk - 1) / kPagedKvChunk);
  }
  auto item_at = [&](int64_t idx, int64_t hpi) {
    const int64_t runs = (a.n_head_kv + hpi - 1) / hpi;  // head runs per query tile
    int32_t si = 0;
    for (;;) {
      const int64_t tiles = (a.seqs[si].n_tokens + kQueryTile - 1) / kQueryTile;
      if (idx < tiles * runs) {
        const int64_t tok0 = idx / runs * kQueryTile;
        const int64_t kvh = idx % runs * hpi;
        return Item{si, static_cast<int32_t>(tok0),
                    static_cast<int32_t>(std::min(kQueryTile, a.seqs[si].n_tokens - tok0)),
                    static_cast<int32_t>(kvh), static_cast<int32_t>(std::min(hpi, a.n_head_kv - kvh))};
      }
      idx -= tiles * runs;
      ++si;
    }
  };

  // Split-KV items are one kv head each.
  const int64_t n_head_items = n_tiles * a.n_head_kv;
  const size_t isf = run.item_state_floats(1);
  float* split_buf = partials + static_cast<size_t>(nt) * tsf;
  const size_t split_need = static_cast<size_t>(n_head_items * max_chunks) * isf;
  const bool split = nt > 1 && max_chunks > 1 && n_head_items <= split_max_items(nt) &&
                     n_partials - static_cast<size_t>(nt) * tsf >= split_need;

  if (!split) {
    // An item takes as many kv heads as still leaves about four items per
    // thread: with head-major blocks, its heads' K/V slices of a block are one
    // run of memory, read front to back. Threads claim items in turn, which
    // evens out sequences of different lengths and a thread slowed by the machine.
    const int64_t runs = std::clamp<int64_t>((4 * nt + n_tiles - 1) / n_tiles, 1, a.n_head_kv);
    const int64_t hpi = (a.n_head_kv + runs - 1) / runs;
    const int64_t n_items = n_tiles * ((a.n_head_kv + hpi - 1) / hpi);
    std::atomic<int64_t> next{0};
    pool.run_on_all([&](int ti, int) {
      float* scratch = partials + static_cast<size_t>(ti) * tsf;
      // Each thread claims its next item before working on the current one,
      // so that the next item's first head slice is prefetched.
      for (int64_t i = next.fetch_add(1, std::memory_order_relaxed), i_next; i < n_items; i = i_next) {
        i_next = next.fetch_add(1, std::memory_order_relaxed);
        const Item it = item_at(i, hpi);
        if (i_next < n_items) {
          const Item next_item = item_at(i_next, hpi);
          run.prefetch_head(next_item, run.first_pos(next_item), next_item.kvh);
        }
        run.whole(it, scratch);
      }
    });
    return;
  }
  // Split-KV: (item, chunk) units over threads, each a fresh chunk state...
  const int64_t n_units = n_head_items * max_chunks;
  pool.run_on_all([&](int ti, int n) {
    float* work = partials + static_cast<size_t>(ti) * tsf + 2 * run.item_state_floats(a.n_head_kv);
    for (int64_t u = ti; u < n_units; u += n) {
      const Item it = item_at(u / max_chunks, 1);
      const int64_t c = u % max_chunks;
      if (c < run.first_chunk(it) || c >= run.n_chunks(it)) continue;
      auto [j0, j1] = run.chunk_range(it, c);
      run.chunk(it, j0, j1, split_buf + static_cast<size_t>(u) * isf, work);
    }
  });
  // ...then folded per item in chunk order, exactly as whole() does.
  pool.run_on_all([&](int ti, int n) {
    for (int64_t i = ti; i < n_head_items; i += n) {
      const Item it = item_at(i, 1);
      const int64_t c0 = run.first_chunk(it);
      float* acc = split_buf + static_cast<size_t>(i * max_chunks + c0) * isf;
      for (int64_t c = c0 + 1; c < run.n_chunks(it); ++c) run.merge(it, acc, split_buf + static_cast<size_t>(i * max_chunks + c) * isf);
      run.write_out(it, acc);
    }
  });
}

}  // namespace sluice::cpu
