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
    case WeightLayout::kRows: break;
  }
  return 1;
}

const char* layout_name(WeightLayout layout) {
  switch (layout) {
    case WeightLayout::kQ4_0x4: return "q4_0x4";
    case WeightLayout::kQ8_0x8: return "q8_0x8";
    case WeightLayout::kQ4_0x8: return "q4_0x8";
    case WeightLayout::kQ8_0x16: return "q8_0x16";
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
    case WeightLayout::kRows: break;
  }
  CHECK(false && "repack_rows: not a repacked layout");
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

void repack_q8_0x8(const uint8_t* src, uint8_t* dst, int64_t n_in, int64_t r0, int64_t r1) {
  CHECK(n_in % 32 == 0 && r0 % kX8Rows == 0 && r1 % kX8Rows == 0);
  const size_t rb = row_bytes(DType::kQ8_0, n_in);
  for (int64_t g = r0 / kX8Rows; g < r1 / kX8Rows; ++g) {
    uint8_t* rec = dst + static_cast<size_t>(g) * kX8Rows * rb;
    for (int64_t b = 0; b < n_in / 32; ++b, rec += kQ8_0x8RecordBytes) {
      for (int i = 0; i < kX8Rows; ++i) {
        const BlockQ8_0& blk = reinterpret_cast<const BlockQ8_0*>(src + static_cast<size_t>(8 * g + i) * rb)[b];
        std::memcpy(rec + 2 * i, &blk.d, 2);
        for (int e = 0; e < 32; ++e) rec[16 + 32 * (e / 4) + 4 * i + e % 4] = static_cast<uint8_t>(blk.qs[e]);
      }
    }
  }
}

void unpack_q8_0x8_row(const uint8_t* src, uint8_t* dst, int64_t n_in, int64_t r) {
  CHECK(n_in % 32 == 0);
  const size_t rb = row_bytes(DType::kQ8_0, n_in);
  const int i = static_cast<int>(r % kX8Rows);
  const uint8_t* rec = src + static_cast<size_t>(r / kX8Rows) * kX8Rows * rb;
  auto* out = reinterpret_cast<BlockQ8_0*>(dst);
  for (int64_t b = 0; b < n_in / 32; ++b, rec += kQ8_0x8RecordBytes) {
    std::memcpy(&out[b].d, rec + 2 * i, 2);
    for (int e = 0; e < 32; ++e) out[b].qs[e] = static_cast<int8_t>(rec[16 + 32 * (e / 4) + 4 * i + e % 4]);
  }
}

void repack_q4_0x8(const uint8_t* src, uint8_t* dst, int64_t n_in, int64_t r0, int64_t r1) {
  CHECK(n_in % 32 == 0 && r0 % kX8Rows == 0 && r1 % kX8Rows == 0);
  const size_t rb = row_bytes(DType::kQ4_0, n_in);
  for (int64_t g = r0 / kX8Rows; g < r1 / kX8Rows; ++g) {
    uint8_t* rec = dst + static_cast<size_t>(g) * kX8Rows * rb;
    for (int64_t b = 0; b < n_in / 32; ++b, rec += kQ4_0x8RecordBytes) {
      for (int i = 0; i < kX8Rows; ++i) {
        const BlockQ4_0& blk = reinterpret_cast<const BlockQ4_0*>(src + static_cast<size_t>(8 * g + i) * rb)[b];
        std::memcpy(rec + 2 * i, &blk.d, 2);
        for (int c = 0; c < 4; ++c) std::memcpy(rec + 16 + 32 * c + 4 * i, blk.qs + 4 * c, 4);
      }
    }
  }
}

void unpack_q4_0x8_row(const uint8_t* src, uint8_t* dst, int64_t n_in, int64_t r) {
  CHECK(n_in % 32 == 0);
  const size_t rb = row_bytes(DType::kQ4_0, n_in);
  const int i = static_cast<int>(r % kX8Rows);
  const uint8_t* rec = src + static_cast<size_t>(r / kX8Rows) * kX8Rows * rb;
  auto* out = reinterpret_cast<BlockQ4_0*>(dst);
  for (int64_t b = 0; b < n_in / 32; ++b, rec += kQ4_0x8RecordBytes) {
    std::memcpy(&out[b].d, rec + 2 * i, 2);
    for (int c = 0; c < 4; ++c) std::memcpy(out[b].qs + 4 * c, rec + 16 + 32 * c + 4 * i, 4);
  }
}

void repack_q8_0x16(const uint8_t* src, uint8_t* dst, int64_t n_in, int64_t r0, int64_t r1) {
  CHECK(n_in % 32 == 0 && r0 % kX16Rows == 0 && r1 % kX16Rows == 0);
  const size_t rb = row_bytes(DType::kQ8_0, n_in);
  for (int64_t g = r0 / kX16Rows; g < r1 / kX16Rows; ++g) {
    uint8_t* rec = dst + static_cast<size_t>(g) * kX16Rows * rb;
    for (int64_t b = 0; b < n_in / 32; ++b, rec += kQ8_0x16RecordBytes) {
      for (int i = 0; i < kX16Rows; ++i) {
        const BlockQ8_0& blk = reinterpret_cast<const BlockQ8_0*>(src + static_cast<size_t>(16 * g + i) * rb)[b];
        std::memcpy(rec + 2 * i, &blk.d, 2);
        for (int e = 0; e < 32; ++e) rec[32 + 64 * (e / 4) + 4 * i + e % 4] = static_cast<uint8_t>(blk.qs[e]) ^ 0x80;
      }
    }
  }
}

void unpack_q8_0x16_row(const uint8_t* src, uint8_t* dst, int64_t n_in, int64_t r) {
  CHECK(n_in % 32 == 0);
  const size_t rb = row_bytes(DType::kQ8_0, n_in);
  const int i = static_cast<int>(r % kX16Rows);
  const uint8_t* rec = src + static_cast<size_t>(r / kX16Rows) * kX16Rows * rb;
  auto* out = reinterpret_cast<BlockQ8_0*>(dst);
  for (int64_t b = 0; b < n_in / 32; ++b, rec += kQ8_0x16RecordBytes) {
    std::memcpy(&out[b].d, rec + 2 * i, 2);
    for (int e = 0; e < 32; ++e) out[b].qs[e] = static_cast<int8_t>(rec[32 + 64 * (e / 4) + 4 * i + e % 4] ^ 0x80);
  }
}

}  // namespace sluice::cpu
