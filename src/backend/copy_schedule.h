// CopySchedule: the order in which a device backend's copies between host and
// device memory are issued, when several kinds of traffic share one copy
// engine (the three tiers on a GPU: weights about to run, predicted experts,
// KV swap). The policy only, with no device API, so that it is tested on any
// machine; cuda/cuda_copy_queue.h issues what it picks.
//
// A transfer is a list of pieces (dst, src, n) of one class. Transfers are cut
// into chunks of at most chunk_bytes and issued one chunk at a time, always
// the next chunk of the most urgent transfer:
//
//   promoted (someone waits for it)  >  kCritical  >  kPredicted  >  kSwap  >  kReadAhead
//   then the oldest first; a transfer's chunks in order
//
// so a critical copy submitted behind a long predicted one waits for at most
// the chunks already issued, not for the whole of it. reprioritize() moves a
// transfer to another class (a prediction that turned out right becomes
// critical); cancel() drops what is not issued yet (one that turned out
// wrong). Retiring (retire(), or cancel()) frees a transfer's record; an id
// must not be used after that.
//
// Not thread-safe (the queue that owns it locks); nothing allocates after
// construction.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace sluice {

enum class CopyClass : int { kCritical = 0, kPredicted = 1, kSwap = 2, kReadAhead = 3 };
inline constexpr int kNumCopyClasses = 4;
const char* copy_class_name(CopyClass c);

struct CopyPiece {
  void* dst = nullptr;
  const void* src = nullptr;
  size_t n = 0;
};

class CopySchedule {
 public:
  using Id = uint64_t;  // 0 is never a valid id; (use << 20) | record
  // Records for max_transfers transfers alive at once, each of at most
  // max_pieces pieces.
  CopySchedule(size_t chunk_bytes, int max_transfers, int max_pieces);

  size_t chunk_bytes() const { return chunk_bytes_; }
  // A new transfer (its pieces copied in); 0 when every record is in use or
  // it has more than max_pieces pieces. A transfer of no bytes is issued
  // at once (fully_issued) and has no chunks.
  Id submit(CopyClass c, std::span<const CopyPiece> pieces);
  // Moves a transfer to class c (its chunks not issued yet follow the new class).
  void reprioritize(Id id, CopyClass c);
  // Its remaining chunks go before every other transfer's (someone waits for it).
  void promote(Id id);
  // Drops the chunks not issued yet and frees the record; returns the bytes
  // that were already issued (0: nothing of it was copied).
  size_t cancel(Id id);
  // Frees the record of a transfer (fully issued, or abandoned like cancel).
  void retire(Id id);
  // Drops the chunks not issued yet but keeps the record (fully_issued from
  // now on): an owner that must wait for the chunks in flight before it
  // retires it. Returns the bytes issued.
  size_t drop_rest(Id id);

  struct Chunk {
    Id id = 0;
    CopyPiece piece;     // a part of one of the transfer's pieces
    bool first = false;  // the transfer's first chunk
    bool last = false;   // its last: the transfer is fully issued after it
    CopyClass cls = CopyClass::kCritical;
  };
  // The next chunk to issue, taken off the schedule; false when none is left.
  bool next(Chunk* out);
  // The next chunk of transfer `id` only (a waiter issuing its own); false when
  // it has none left.
  bool next_of(Id id, Chunk* out);

  bool alive(Id id) const { return find(id) >= 0; }
  // The record an alive transfer uses, in [0, max_transfers): an owner's
  // per-transfer state can live in an array beside the schedule.
  int record_of(Id id) const { return find(id); }
  bool fully_issued(Id id) const;
  // Bytes of the transfer's chunks issued so far.
  size_t issued_bytes(Id id) const;
  CopyClass class_of(Id id) const;
  int n_alive() const { return n_alive_; }
  // Bytes issued per class, over the schedule's life.
  const std::array<uint64_t, kNumCopyClasses>& bytes_issued() const { return bytes_issued_; }

 private:
  struct Transfer {
    Id id = 0;  // 0: free record
    CopyClass cls = CopyClass::kCritical;
    bool promoted = false;
    uint64_t seq = 0;  // submission order (promotion order for promoted ones)
    int n_pieces = 0;
    int piece = 0;       // the next piece to issue from
    size_t offset = 0;   //   and where in it
    size_t issued = 0;   // bytes
  };
  int find(Id id) const;
  // Takes the next chunk of record r.
  void take(int r, Chunk* out);

  size_t chunk_bytes_;
  int max_pieces_;
  std::vector<Transfer> transfers_;
  std::vector<CopyPiece> pieces_;  // [max_transfers, max_pieces]
  uint64_t next_use_ = 1;
  uint64_t next_seq_ = 1;
  int n_alive_ = 0;
  std::array<uint64_t, kNumCopyClasses> bytes_issued_{};
};

}  // namespace sluice
