// CpuBackend::lora: the adapters' low-rank terms (LoraArgs) in two passes.
//
//   down:  items (segment, token, rank row r)        u[t][r] = A[r] . x[t]
//   up:    items (segment, token, 64 outputs)        y[t][o] += scale * B[o] . u[t]
//
// Items are numbered segment by segment, token by token, and each pass splits
// them into one contiguous run per thread (a run of one token's items is one
// kernel call). Every element's arithmetic is fixed by its index
// (lora_kernels.h), so the split changes no bit. A call of few multiply-adds
// (decode: rank x (n_in + n_out) per token) runs on the calling thread: the
// two pool dispatches would cost more than the work.
#include <algorithm>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/lora_kernels.h"
#include "base/check.h"

namespace sluice::cpu {
namespace {

// Outputs per item of the up pass (a multiple of kLoraUpAlign).
constexpr int64_t kUpChunk = 64;
static_assert(kUpChunk % kLoraUpAlign == 0);

// Below this many multiply-adds a call stays on the calling thread. A pool
// dispatch costs about a microsecond; one core does this many in a few.
constexpr int64_t kInlineFmas = int64_t{1} << 16;

int64_t up_chunks(int64_t n_out) { return (n_out + kUpChunk - 1) / kUpChunk; }

// Calls f(segment, token, j0, j1) for items [i0, i1) of a pass in which each
// token of segment sg has width(sg) items j = 0 .. width - 1.
template <typename Width, typename F>
void walk_items(std::span<const LoraSegment> segs, Width width, int64_t i0, int64_t i1, F&& f) {
  int64_t base = 0;
  for (const LoraSegment& sg : segs) {
    if (base >= i1) break;
    const int64_t w = width(sg), n = sg.n_tok * w;
    if (i0 < base + n) {
      const int64_t k1 = std::min(i1 - base, n);
      for (int64_t k = std::max<int64_t>(i0 - base, 0); k < k1;) {
        const int64_t j0 = k % w, j1 = std::min(w, j0 + (k1 - k));
        f(sg, sg.tok0 + k / w, j0, j1);
        k += j1 - j0;
      }
    }
    base += n;
  }
}

}  // namespace

void CpuBackend::lora(const LoraArgs& a) {
  int64_t n_down = 0, n_up = 0, n_fma = 0, rank_max = 0, tok_end = 0;
  for (const LoraSegment& sg : a.segs) {
    CHECK(sg.rank > 0 && sg.n_tok >= 0 && sg.tok0 >= tok_end && "segments disjoint and ascending");
    n_down += sg.n_tok * sg.rank;
    n_up += sg.n_tok * up_chunks(a.n_out);
    n_fma += sg.n_tok * sg.rank * (a.n_in + a.n_out);
    rank_max = std::max(rank_max, sg.rank);
    tok_end = sg.tok0 + sg.n_tok;
  }
  float* u = a.u;
  int64_t u_stride = a.u_stride;
  if (u == nullptr) {
    CHECK(rank_max <= needs_.lora_rank && tok_end <= needs_.n_tok && "lora() past what reserve() sized");
    u = lora_u_.data();
    u_stride = rank_max;
  }
  CHECK(u_stride >= rank_max);
  const int64_t n_in = a.n_in, n_out = a.n_out;
  auto rank_of = [](const LoraSegment& sg) { return sg.rank; };
  auto chunks_of = [n_out](const LoraSegment&) { return up_chunks(n_out); };
  auto down = [&](int64_t i0, int64_t i1) {
    walk_items(a.segs, rank_of, i0, i1, [&](const LoraSegment& sg, int64_t t, int64_t r0, int64_t r1) {
      lora_down(sg.a, a.x + t * n_in, n_in, r0, r1, u + t * u_stride, isa_);
    });
  };
  auto up = [&](int64_t i0, int64_t i1) {
    walk_items(a.segs, chunks_of, i0, i1, [&](const LoraSegment& sg, int64_t t, int64_t c0, int64_t c1) {
      lora_up(sg.b, u + t * u_stride, sg.rank, sg.scale, c0 * kUpChunk, std::min(n_out, c1 * kUpChunk),
              a.y + t * n_out, isa_);
    });
  };
  if (n_fma < kInlineFmas || pool_->n_threads() == 1) {
    down(0, n_down);
    up(0, n_up);
    return;
  }
  pool_->parallel_for(n_down, down);
  pool_->parallel_for(n_up, up);
}

}  // namespace sluice::cpu
