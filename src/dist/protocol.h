// The messages between the processes of a pipelined job.
//
//   start (JSON, once):   rank r -> 0  kTagHello   fingerprint, memory, rates
//                         0 <-> r      kTagProbe   the link probe (link_probe.h)
//                         0 -> r       kTagControl setup: the plan, load options (or a refusal)
//                         r -> 0       kTagHello   loaded (or why not)
//   each step:            0 -> r       kTagControl StepMsg (binary, below)
//                         r-1 -> r     kTagHidden  [n_mb_tokens, n_embd] f32 per micro-batch
//                         last -> 0    kTagReturn  [n_mb_logits, n_embd] f32: the rows asking for logits
//   end:                  0 -> r       kTagControl StepMsg of kind kShutdown
//
// A StepMsg is the step's plan as plain arrays: every stage computes the same
// tokens at the same positions through the same block tables, into a KV pool
// of the same shape as rank 0's (block ids name the same block everywhere),
// and applies rank 0's copy-on-write block copies first.
//
//   header | seqs [n_seqs] | micro ends [n_micro] | copies [n_copies][2]
//          | tokens [n_tokens] | block tables (each seq's n_blocks, in order)
//
// Encoding reuses the message's buffer (no allocation once it has grown).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kv/block_manager.h"
#include "model/model.h"
#include "sluice/status.h"

namespace sluice::dist {

// kTagTurn: the rates are measured one rank at a time (rank r-1 -> r: "your
// turn"), so ranks sharing a machine do not halve each other's figures.
enum Tag : int { kTagControl = 1, kTagHello = 2, kTagHidden = 3, kTagReturn = 4, kTagProbe = 5, kTagTurn = 6 };

enum class StepKind : int32_t { kStep = 1, kShutdown = 2 };

struct StepHeader {
  int32_t kind = 0;
  int32_t n_seqs = 0;
  int32_t n_micro = 0;
  int32_t n_copies = 0;
  int64_t n_tokens = 0;
  int64_t n_table = 0;       // block-table entries over all sequences
  int64_t kv_blocks = 0;     // rank 0's pool: blocks, dtype, block size
  int32_t kv_dtype = 0;
  int32_t kv_block_size = 0;
};

struct StepSeq {
  int64_t pos0 = 0;
  int32_t n_tokens = 0;
  int32_t n_logits = 0;
  int32_t n_blocks = 0;
  int32_t pad = 0;
};

// A decoded StepMsg: views into the received bytes.
struct StepView {
  StepHeader h;
  std::span<const StepSeq> seqs;
  std::span<const int32_t> micro_ends;  // [n_micro] sequence index each micro-batch ends at
  std::span<const int32_t> copies;      // [n_copies * 2] (src, dst)
  std::span<const int32_t> tokens;
  std::span<const int32_t> tables;
};

// Encodes a step into *out (resized; its capacity is kept between steps).
void encode_step(std::span<const ForwardSeq> seqs, std::span<const int32_t> micro_ends,
                 std::span<const BlockCopy> copies, const KvStore& kv, std::vector<uint8_t>* out);
void encode_shutdown(std::vector<uint8_t>* out);
// Errors: a message whose sizes do not add up (data loss).
StatusOr<StepView> decode_step(std::span<const uint8_t> msg);

// Micro-batch boundaries: m groups of consecutive sequences with about equal
// token counts (each non-empty; m is capped by the number of sequences).
//   ends: [m] exclusive sequence index of each group
void split_micro_batches(std::span<const ForwardSeq> seqs, int64_t m, std::vector<int32_t>* ends);

// The step's sequences cut where split_micro_batches(.., m, ..) wants its
// boundaries, (g + 1) / m of the tokens, so that one long prompt pipelines
// too: a boundary inside a sequence splits it into two pieces, the same
// sequence (block table, adapters) at consecutive positions with its logits
// in the last piece. A boundary inside the tokens that ask for logits, or one
// that would make more than max_pieces pieces, is left alone. A stage runs a
// sequence's pieces in order, so a piece's attention finds the K/V of the
// ones before it.
//   out: [<= max(seqs.size(), max_pieces)] (cleared; capacity kept)
void cut_sequences(std::span<const ForwardSeq> seqs, int64_t m, size_t max_pieces, std::vector<ForwardSeq>* out);

}  // namespace sluice::dist
