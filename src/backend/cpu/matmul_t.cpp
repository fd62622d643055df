#include "backend/cpu/matmul_t.h"

#include <algorithm>
#include <cstring>

#include "backend/cpu/matmul.h"
#include "backend/cpu/repack.h"
#include "base/check.h"
#include "quant/quant.h"

namespace sluice::cpu {
namespace {

// Per thread, after the gemm scratch: one dequantized row segment of a panel
// and the GGUF bytes gathered from a repacked layout.
constexpr int64_t kRowFloats = kGemmNc;
constexpr size_t kGatherBytes = 1024;  // >= row_bytes of kGemmNc elements of Q8_0 / Q4_0
constexpr int64_t kThreadExtraFloats = kRowFloats + static_cast<int64_t>(kGatherBytes / sizeof(float));

// Row r's GGUF blocks [b0, b0 + nb) when the matrix is in one of the
// record-per-block layouts (Q8_0x8, Q4_0x8, Q8_0x16; repack.h): rows side by
// side in groups of `rows`, a record per block of [d: rows f16][quant bytes
// in 4-byte lanes, row i in lane i], quants xored with `bias`.
void gather_lanes(const uint8_t* w, size_t rb, int64_t rows, size_t block_bytes, uint8_t bias, int64_t r, int64_t b0,
                  int64_t nb, uint8_t* out) {
  const size_t record = static_cast<size_t>(rows) * block_bytes;
  const int64_t i = r % rows;
  const uint8_t* rec = w + static_cast<size_t>(r / rows * rows) * rb + static_cast<size_t>(b0) * record;
  const size_t n_quant = block_bytes - 2;
  for (int64_t b = 0; b < nb; ++b, rec += record, out += block_bytes) {
    std::memcpy(out, rec + 2 * i, 2);
    const uint8_t* lanes = rec + 2 * rows + 4 * i;
    for (size_t c = 0; c < n_quant / 4; ++c)
      for (int e = 0; e < 4; ++e) out[2 + 4 * c + e] = lanes[c * 4 * rows + e] ^ bias;
  }
}

// The same for Q4_0x4 (repack.h): a record per pair of blocks of 4 rows,
// [d: 4 rows x 2 blocks f16][32 nibble bytes per row: block 2p low, 2p+1 high].
// b0 and nb are even.
void gather_q4_0x4(const uint8_t* w, size_t rb, int64_t r, int64_t b0, int64_t nb, uint8_t* out) {
  const int64_t i = r % kQ4_0x4Rows;
  const uint8_t* rec = w + static_cast<size_t>(r / kQ4_0x4Rows * kQ4_0x4Rows) * rb +
                       static_cast<size_t>(b0 / 2) * kQ4_0x4RecordBytes;
  for (int64_t p = 0; p < nb / 2; ++p, rec += kQ4_0x4RecordBytes, out += 36) {
    std::memcpy(out, rec + 4 * i, 2);
    std::memcpy(out + 18, rec + 4 * i + 2, 2);
    const uint8_t* nib = rec + 16 + 32 * i;
    for (int k = 0; k < 16; ++k) {
      out[2 + k] = static_cast<uint8_t>((nib[k] & 0x0F) | (nib[16 + k] << 4));
      out[20 + k] = static_cast<uint8_t>((nib[k] >> 4) | (nib[16 + k] & 0xF0));
    }
  }
}

// Row r's GGUF blocks [b0, b0 + nb): a pointer into w for GGUF rows, else
// gathered into tmp.
const uint8_t* row_blocks(const WeightView& w, size_t rb, size_t block_bytes, int64_t r, int64_t b0, int64_t nb,
                          uint8_t* tmp) {
  switch (w.layout) {
    case WeightLayout::kRows: return w.data + static_cast<size_t>(r) * rb + static_cast<size_t>(b0) * block_bytes;
    case WeightLayout::kQ8_0x8: gather_lanes(w.data, rb, kX8Rows, block_bytes, 0, r, b0, nb, tmp); return tmp;
    case WeightLayout::kQ4_0x8: gather_lanes(w.data, rb, kX8Rows, block_bytes, 0, r, b0, nb, tmp); return tmp;
    case WeightLayout::kQ8_0x16: gather_lanes(w.data, rb, kX16Rows, block_bytes, 0x80, r, b0, nb, tmp); return tmp;
    case WeightLayout::kQ4_0x4: gather_q4_0x4(w.data, rb, r, b0, nb, tmp); return tmp;
    case WeightLayout::kSplitScales: break;
  }
  CHECK(false && "matmul_t: unsupported layout");
  return nullptr;
}

}  // namespace

bool matmul_t_supports(DType type, WeightLayout layout) {
  if (!matmul_supports(type)) return false;
  if (layout == WeightLayout::kRows) return true;
  for (WeightLayout l : kRepackedLayouts)
    if (l == layout) return repacked_type(l) == type;
  return false;
}

size_t matmul_t_scratch_floats(int n_threads) {
  return static_cast<size_t>(n_threads) * (kGemmScratchFloats + kThreadExtraFloats);
}

void matmul_t(const TrainKernels& kn, ThreadPool& pool, const MatmulTArgs& a, float* scratch) {
  const WeightView& w = a.w;
  CHECK(matmul_t_supports(w.type, w.layout));
  CHECK(w.n_out % repack_group_rows(w.layout) == 0);
  const DTypeTraits& tr = dtype_traits(w.type);
  CHECK(kGemmNc % tr.block_size == 0 && w.n_in % tr.block_size == 0);
  CHECK(static_cast<size_t>(kGemmNc / tr.block_size * tr.block_bytes) <= kGatherBytes);
  const size_t rb = row_bytes(w.type, w.n_in);
  float* extra = scratch + static_cast<size_t>(pool.n_threads()) * kGemmScratchFloats;
  const int64_t nr = kn.nr;

  // B panel: rows [k0, k0 + kc) of W, columns [j0, j0 + nb), as strips of nr.
  auto panel = [&](int ti, int64_t k0, int64_t kc, int64_t j0, int64_t nb, float* bp) {
    float* row = extra + static_cast<size_t>(ti) * kThreadExtraFloats;
    auto* tmp = reinterpret_cast<uint8_t*>(row + kRowFloats);
    const int64_t b0 = j0 / tr.block_size, n_blk = nb / tr.block_size;
    for (int64_t kk = 0; kk < kc; ++kk) {
      const uint8_t* src = row_blocks(w, rb, static_cast<size_t>(tr.block_bytes), k0 + kk, b0, n_blk, tmp);
      if (!kn.dequantize(w.type, src, n_blk, row)) dequantize_row(w.type, src, row, nb);
      for (int64_t s = 0; s < nb; s += nr) {
        float* dst = bp + s * kc + kk * nr;
        const int64_t cols = std::min(nr, nb - s);
        std::memcpy(dst, row + s, static_cast<size_t>(cols) * sizeof(float));
        std::fill(dst + cols, dst + nr, 0.0f);
      }
    }
  };
  gemm_parallel(kn, pool, a.n_tok, w.n_in, w.n_out, StridedMatrix{.p = a.dy, .rs = w.n_out, .cs = 1}, panel, a.dx,
                w.n_in, a.accumulate, scratch);
}

}  // namespace sluice::cpu
