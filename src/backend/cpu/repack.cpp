#include "backend/cpu/repack.h"

#include <cstring>

#include "base/check.h"
#include "quant/blocks.h"

namespace sluice::cpu {

WeightLayout repack_layout(DType type, int64_t n_out, int64_t n_in, Isa isa) {
  if (n_out <= 0) return WeightLayout::kRows;
  if (type == DType::kQ8_0 && isa == Isa::kAvx512)
    return n_out % kX16Rows == 0 && n_in % 32 == 0 ? WeightLayout::kQ8_0x16 : WeightLayout::kRows;
  if (type == DType::kQ4_0 && isa == Isa::kAvx512)
    return n_out % kX4Rows == 0 && n_in % 64 == 0 ? WeightLayout::kQ4_0x4 : WeightLayout::kRows;
  if (n_out % kX8Rows != 0 || n_in % 32 != 0) return WeightLayout::kRows;
  if (type == DType::kQ8_0) return WeightLayout::kQ8_0x8;
  if (type == DType::kQ4_0) return WeightLayout::kQ4_0x8;
  return WeightLayout::kRows;
}

void group_layouts(std::span<const WeightView> group, Isa isa, WeightLayout* layouts) {
  bool all = isa != Isa::kScalar;
  for (size_t i = 0; i < group.size(); ++i) {
    layouts[i] = repack_layout(group[i].type, group[i].n_out, group[i].n_in, isa);
    all = all && layouts[i] != WeightLayout::kRows;
  }
  if (!all)
    for (size_t i = 0; i < group.size(); ++i) layouts[i] = WeightLayout::kRows;
}

int64_t repack_group_rows(WeightLayout layout) {
  switch (layout) {
    case WeightLayout::kQ4_0x4: return kX4Rows;
    case WeightLayout::kQ8_0x8:
    case WeightLayout::kQ4_0x8: return kX8Rows;
    case WeightLayout::kQ8_0x16: return kX16Rows;
    case WeightLayout::kRows:
    case WeightLayout::kSplitScales: break;
  }
  return 1;
}

DType repacked_type(WeightLayout layout) {
  switch (layout) {
    case WeightLayout::kQ4_0x4:
    case WeightLayout::kQ4_0x8: return DType::kQ4_0;
    case WeightLayout::kQ8_0x8:
    case WeightLayout::kQ8_0x16: return DType::kQ8_0;
    case WeightLayout::kRows:
    case WeightLayout::kSplitScales: break;
  }
  CHECK(false && "repacked_type: not a repacked layout");
  return DType::kQ8_0;
}

const char* layout_name(WeightLayout layout) {
  switch (layout) {
    case WeightLayout::kQ4_0x4: return "q4_0x4";
    case WeightLayout::kQ8_0x8: return "q8_0x8";
    case WeightLayout::kQ4_0x8: return "q4_0x8";
    case WeightLayout::kQ8_0x16: return "q8_0x16";
    case WeightLayout::kSplitScales: return "split-scales";
    case WeightLayout::kRows: break;
  }
  return "rows";
}

void repack_rows(WeightLayout layout, const uint8_t* src, uint8_t* dst, int64_t n_in, int64_t r0, int64_t r1) {
  switch (layout) {
    case WeightLayout::kQ4_0x4: repack_q4_0x4(src, dst, n_in, r0, r1); return;
    case WeightLayout::kQ8_0x8: repack_q8_0x8(src, dst, n_in, r0, r1); return;
    case WeightLayout::kQ4_0x8: repack_q4_0x8(src, dst, n_in, r0, r1); return;
    case WeightLayout::kQ8_0x16: repack_q8_0x16(src, dst, n_in, r0, r1); return;
    case WeightLayout::kRows:
    case WeightLayout::kSplitScales: break;
  }
  CHECK(false && "repack_rows: not a repacked layout");
}

void repack_rows_at(Isa isa, WeightLayout layout, const uint8_t* src, uint8_t* dst, int64_t n_in, int64_t r0,
                    int64_t r1) {
  if (isa < Isa::kAvx2) repack_rows(layout, src, dst, n_in, r0, r1);
  else if (layout == WeightLayout::kQ4_0x4) repack_q4_0x4_avx2(src, dst, n_in, r0, r1);
  else repack_lanes_avx2(layout, src, dst, n_in, r0, r1);
}

void repack_q4_0x4(const uint8_t* src, uint8_t* dst, int64_t n_in, int64_t r0, int64_t r1) {
  CHECK(n_in % 64 == 0 && r0 % kQ4_0x4Rows == 0 && r1 % kQ4_0x4Rows == 0);
  const size_t rb = row_bytes(DType::kQ4_0, n_in);
  const int64_t n_pairs = n_in / 64;
  for (int64_t g = r0 / kQ4_0x4Rows; g < r1 / kQ4_0x4Rows; ++g) {
    uint8_t* rec = dst + static_cast<size_t>(g) * kQ4_0x4Rows * rb;
    for (int64_t p = 0; p < n_pairs; ++p, rec += kQ4_0x4RecordBytes) {
      for (int i = 0; i < kQ4_0x4Rows; ++i) {
        const auto* row = reinterpret_cast<const BlockQ4_0*>(src + static_cast<size_t>(4 * g + i) * rb);
        const BlockQ4_0& b0 = row[2 * p];
        const BlockQ4_0& b1 = row[2 * p + 1];
        std::memcpy(rec + 4 * i, &b0.d, 2);
        std::memcpy(rec + 4 * i + 2, &b1.d, 2);
        uint8_t* nib = rec + 16 + 32 * i;
        for (int k = 0; k < 16; ++k) {
          nib[k] = static_cast<uint8_t>((b0.qs[k] & 0x0F) | (b1.qs[k] << 4));        // elements k
          nib[16 + k] = static_cast<uint8_t>((b0.qs[k] >> 4) | (b1.qs[k] & 0xF0));  // elements 16 + k
        }
      }
    }
  }
}

void unpack_q4_0x4_row(const uint8_t* src, uint8_t* dst, int64_t n_in, int64_t r) {
  CHECK(n_in % 64 == 0);
  const size_t rb = row_bytes(DType::kQ4_0, n_in);
  const int64_t g = r / kQ4_0x4Rows;
  const int i = static_cast<int>(r % kQ4_0x4Rows);
  const uint8_t* rec = src + static_cast<size_t>(g) * kQ4_0x4Rows * rb;
  auto* out = reinterpret_cast<BlockQ4_0*>(dst);
  for (int64_t p = 0; p < n_in / 64; ++p, rec += kQ4_0x4RecordBytes) {
    BlockQ4_0& b0 = out[2 * p];
    BlockQ4_0& b1 = out[2 * p + 1];
    std::memcpy(&b0.d, rec + 4 * i, 2);
    std::memcpy(&b1.d, rec + 4 * i + 2, 2);
    const uint8_t* nib = rec + 16 + 32 * i;
    for (int k = 0; k < 16; ++k) {
      b0.qs[k] = static_cast<uint8_t>((nib[k] & 0x0F) | (nib[16 + k] << 4));
      b1.qs[k] = static_cast<uint8_t>((nib[k] >> 4) | (nib[16 + k] & 0xF0));
    }
  }
}

namespace {

// The layouts of one record per block and group of `rows` rows (Q8_0x8, Q4_0x8,
// Q8_0x16, repack.h): the rows' f16 scales, then their quant bytes in 4-byte
// lanes, for e below the block's quant bytes:
//
//   rec[2 * rows + rows * 4 * (e / 4) + 4 * i + e % 4] = (quant byte e of row i) ^ bias
struct PerBlock {
  int64_t rows;  // the quant bytes of a block are whole 4-byte lanes (16 or 32)
  size_t block_bytes;  // GGUF block: f16 d, then block_bytes - 2 quant bytes
  uint8_t bias;
  constexpr size_t record_bytes() const { return static_cast<size_t>(rows) * block_bytes; }
  size_t lane_byte(int64_t i, size_t e) const {
    return static_cast<size_t>(rows) * (2 + 4 * (e / 4)) + 4 * static_cast<size_t>(i) + e % 4;
  }
};
constexpr PerBlock kQ8_0x8Codec{kX8Rows, sizeof(BlockQ8_0), 0};
constexpr PerBlock kQ4_0x8Codec{kX8Rows, sizeof(BlockQ4_0), 0};
constexpr PerBlock kQ8_0x16Codec{kX16Rows, sizeof(BlockQ8_0), 0x80};
static_assert(kQ8_0x8Codec.record_bytes() == kQ8_0x8RecordBytes && kQ4_0x8Codec.record_bytes() == kQ4_0x8RecordBytes &&
                  kQ8_0x16Codec.record_bytes() == kQ8_0x16RecordBytes,
              "a record holds exactly its rows' blocks");

void repack_per_block(const PerBlock& c, const uint8_t* src, uint8_t* dst, int64_t n_in, int64_t r0, int64_t r1) {
  CHECK(n_in % 32 == 0 && r0 % c.rows == 0 && r1 % c.rows == 0);
  const size_t rb = static_cast<size_t>(n_in / 32) * c.block_bytes;
  for (int64_t g = r0 / c.rows; g < r1 / c.rows; ++g) {
    uint8_t* rec = dst + static_cast<size_t>(g * c.rows) * rb;
    for (int64_t b = 0; b < n_in / 32; ++b, rec += c.record_bytes()) {
      // Lane by lane (4 quant bytes at a time), not byte by byte.
      const uint32_t bias = 0x01010101u * c.bias;
      for (int64_t i = 0; i < c.rows; ++i) {
        const uint8_t* blk = src + static_cast<size_t>(g * c.rows + i) * rb + static_cast<size_t>(b) * c.block_bytes;
        std::memcpy(rec + 2 * i, blk, 2);
        uint8_t* lane = rec + c.lane_byte(i, 0);
        for (size_t k = 0; k < (c.block_bytes - 2) / 4; ++k) {
          uint32_t v;
          std::memcpy(&v, blk + 2 + 4 * k, 4);
          v ^= bias;
          std::memcpy(lane + 4 * static_cast<size_t>(c.rows) * k, &v, 4);
        }
      }
    }
  }
}

void unpack_per_block_row(const PerBlock& c, const uint8_t* src, uint8_t* dst, int64_t n_in, int64_t r) {
  CHECK(n_in % 32 == 0);
  const size_t rb = static_cast<size_t>(n_in / 32) * c.block_bytes;
  const int64_t i = r % c.rows;
  const uint8_t* rec = src + static_cast<size_t>(r / c.rows * c.rows) * rb;
  for (int64_t b = 0; b < n_in / 32; ++b, rec += c.record_bytes()) {
    uint8_t* blk = dst + static_cast<size_t>(b) * c.block_bytes;
    std::memcpy(blk, rec + 2 * i, 2);
    for (size_t e = 0; e + 2 < c.block_bytes; ++e) blk[2 + e] = rec[c.lane_byte(i, e)] ^ c.bias;
  }
}

}  // namespace

void repack_q8_0x8(const uint8_t* src, uint8_t* dst, int64_t n_in, int64_t r0, int64_t r1) {
  repack_per_block(kQ8_0x8Codec, src, dst, n_in, r0, r1);
}
void unpack_q8_0x8_row(const uint8_t* src, uint8_t* dst, int64_t n_in, int64_t r) {
  unpack_per_block_row(kQ8_0x8Codec, src, dst, n_in, r);
}
void repack_q4_0x8(const uint8_t* src, uint8_t* dst, int64_t n_in, int64_t r0, int64_t r1) {
  repack_per_block(kQ4_0x8Codec, src, dst, n_in, r0, r1);
}
void unpack_q4_0x8_row(const uint8_t* src, uint8_t* dst, int64_t n_in, int64_t r) {
  unpack_per_block_row(kQ4_0x8Codec, src, dst, n_in, r);
}
void repack_q8_0x16(const uint8_t* src, uint8_t* dst, int64_t n_in, int64_t r0, int64_t r1) {
  repack_per_block(kQ8_0x16Codec, src, dst, n_in, r0, r1);
}
void unpack_q8_0x16_row(const uint8_t* src, uint8_t* dst, int64_t n_in, int64_t r) {
  unpack_per_block_row(kQ8_0x16Codec, src, dst, n_in, r);
}

}  // namespace sluice::cpu
