// OpProfile: where a forward pass's time goes, operator by operator, on the
// clock of the backend that runs it (backend/op_clock.h). The model marks the
// end of each operator call with a label and the work the call did (its
// matmuls' FLOPs and weight bytes, attention's FLOPs and K/V bytes); the
// profile adds the time since the previous mark to that label's row.
//
//   begin()  [embed] mark("embed")  [rope] mark("rope tables")  [norm, q/k/v] ...
//            |<----- "embed" ----->|<------ "rope tables" ---->|
//
// begin() starts a step: the time before it is no operator's (the host
// between steps: sampling, the caller). Rows keep the order their labels
// first appeared in, a forward pass's order. Labels are compared by content.
// Marks are held until rows() reads the clock, which waits for the work (a
// mark that finds the clock full reads it first; the clock keeps the last
// mark, so no call's time is lost).
//
// Profiling changes what it measures a little: a device backend records no
// graph while profiled (op_clock.h). Not thread-safe; the model's thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/op_clock.h"

namespace sluice {

// What an operator call did, for its rate: FLOPs and the bytes it must read
// (weights, K/V rows) at least once.
struct OpWork {
  double flops = 0;
  double bytes = 0;
  OpWork& operator+=(const OpWork& o) {
    flops += o.flops;
    bytes += o.bytes;
    return *this;
  }
};

// 2 n_tok n_in n_out FLOPs and the matrix's bytes, summed over outs.
OpWork matmul_work(std::span<const MatmulOut> outs, int64_t n_tok);
// Causal attention: 4 head_dim FLOPs per (query head, key) pair (Q K^T and P V),
// and each sequence's K and V rows once (kv_row_bytes each; window 0: all
// earlier positions).
OpWork attention_work(std::span<const AttentionSeq> seqs, int64_t n_head, int64_t head_dim, int64_t window,
                      double kv_row_bytes);

class OpProfile {
 public:
  struct Row {
    std::string label;
    int64_t calls = 0;
    double seconds = 0;
    OpWork work;
  };

  explicit OpProfile(std::unique_ptr<OpClock> clock);

  // A step begins: the next mark's time counts from here.
  void begin();
  // The calls since the previous mark were `label` (a string that outlives the
  // profile, e.g. a literal) and did `work`.
  void mark(const char* label, OpWork work = {});
  // The rows so far, the clock read first (waits for the marked work).
  const std::vector<Row>& rows();
  // Forgets the rows (and marks not read yet).
  void clear();

 private:
  struct Pending {
    const char* label;  // null: begin()
    OpWork work;
  };
  void collect();
  std::unique_ptr<OpClock> clock_;
  std::vector<Pending> pending_;  // [held marks], as the clock holds them
  std::vector<double> at_;        // read()'s times
  std::vector<Row> rows_;
};

}  // namespace sluice
