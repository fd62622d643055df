#include "backend/copy_schedule.h"

#include <algorithm>

#include "base/check.h"

namespace sluice {

const char* copy_class_name(CopyClass c) {
  switch (c) {
    case CopyClass::kCritical: return "critical";
    case CopyClass::kPredicted: return "predicted";
    case CopyClass::kSwap: return "kv swap";
    case CopyClass::kReadAhead: return "read-ahead";
  }
  return "?";
}

CopySchedule::CopySchedule(size_t chunk_bytes, int max_transfers, int max_pieces)
    : chunk_bytes_(chunk_bytes), max_pieces_(max_pieces) {
  CHECK(chunk_bytes > 0 && max_transfers > 0 && max_transfers < (1 << 20) && max_pieces > 0);
  transfers_.resize(static_cast<size_t>(max_transfers));
  pieces_.resize(static_cast<size_t>(max_transfers) * static_cast<size_t>(max_pieces));
}

int CopySchedule::find(Id id) const {
  const uint64_t r = id & ((uint64_t{1} << 20) - 1);
  if (id == 0 || r >= transfers_.size() || transfers_[r].id != id) return -1;
  return static_cast<int>(r);
}

CopySchedule::Id CopySchedule::submit(CopyClass c, std::span<const CopyPiece> pieces) {
  if (pieces.size() > static_cast<size_t>(max_pieces_)) return 0;
  for (size_t r = 0; r < transfers_.size(); ++r) {
    Transfer& t = transfers_[r];
    if (t.id != 0) continue;
    t = Transfer{.id = (next_use_++ << 20) | r, .cls = c, .seq = next_seq_++};
    for (const CopyPiece& p : pieces) {
      if (p.n == 0) continue;  // nothing to copy
      pieces_[r * static_cast<size_t>(max_pieces_) + static_cast<size_t>(t.n_pieces++)] = p;
    }
    ++n_alive_;
    return t.id;
  }
  return 0;
}

void CopySchedule::reprioritize(Id id, CopyClass c) {
  const int r = find(id);
  CHECK(r >= 0);
  transfers_[static_cast<size_t>(r)].cls = c;
}

void CopySchedule::promote(Id id) {
  const int r = find(id);
  CHECK(r >= 0);
  Transfer& t = transfers_[static_cast<size_t>(r)];
  if (!t.promoted) t.promoted = true, t.seq = next_seq_++;
}

size_t CopySchedule::cancel(Id id) {
  const int r = find(id);
  CHECK(r >= 0);
  const size_t issued = transfers_[static_cast<size_t>(r)].issued;
  retire(id);
  return issued;
}

void CopySchedule::retire(Id id) {
  const int r = find(id);
  CHECK(r >= 0);
  transfers_[static_cast<size_t>(r)] = Transfer{};
  --n_alive_;
}

size_t CopySchedule::drop_rest(Id id) {
  const int r = find(id);
  CHECK(r >= 0);
  Transfer& t = transfers_[static_cast<size_t>(r)];
  t.piece = t.n_pieces;
  t.offset = 0;
  return t.issued;
}

bool CopySchedule::fully_issued(Id id) const {
  const int r = find(id);
  CHECK(r >= 0);
  const Transfer& t = transfers_[static_cast<size_t>(r)];
  return t.piece >= t.n_pieces;
}

size_t CopySchedule::issued_bytes(Id id) const {
  const int r = find(id);
  CHECK(r >= 0);
  return transfers_[static_cast<size_t>(r)].issued;
}

CopyClass CopySchedule::class_of(Id id) const {
  const int r = find(id);
  CHECK(r >= 0);
  return transfers_[static_cast<size_t>(r)].cls;
}

void CopySchedule::take(int r, Chunk* out) {
  Transfer& t = transfers_[static_cast<size_t>(r)];
  const size_t at = static_cast<size_t>(r) * static_cast<size_t>(max_pieces_) + static_cast<size_t>(t.piece);
  const CopyPiece& p = pieces_[at];
  const size_t n = std::min(chunk_bytes_, p.n - t.offset);
  out->id = t.id;
  out->cls = t.cls;
  out->first = t.issued == 0;
  out->piece = CopyPiece{static_cast<uint8_t*>(p.dst) + t.offset, static_cast<const uint8_t*>(p.src) + t.offset, n};
  t.offset += n;
  t.issued += n;
  bytes_issued_[static_cast<size_t>(t.cls)] += n;
  if (t.offset == p.n) ++t.piece, t.offset = 0;
  out->last = t.piece >= t.n_pieces;
}

bool CopySchedule::next(Chunk* out) {
  int best = -1;
  for (size_t r = 0; r < transfers_.size(); ++r) {
    const Transfer& t = transfers_[r];
    if (t.id == 0 || t.piece >= t.n_pieces) continue;
    if (best < 0) {
      best = static_cast<int>(r);
      continue;
    }
    const Transfer& b = transfers_[static_cast<size_t>(best)];
    // promoted first, then the class, then the oldest
    const bool better = t.promoted != b.promoted ? t.promoted
                        : t.cls != b.cls         ? static_cast<int>(t.cls) < static_cast<int>(b.cls)
                                                 : t.seq < b.seq;
    if (better) best = static_cast<int>(r);
  }
  if (best < 0) return false;
  take(best, out);
  return true;
}

bool CopySchedule::next_of(Id id, Chunk* out) {
  const int r = find(id);
  CHECK(r >= 0);
  const Transfer& t = transfers_[static_cast<size_t>(r)];
  if (t.piece >= t.n_pieces) return false;
  take(r, out);
  return true;
}

}  // namespace sluice
