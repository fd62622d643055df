// The per-operator table of `sluice bench --op-times`: the rows of several
// profiled passes of one test (model/op_profile.h, as plain values here),
// merged into one row per operator by the median over the passes, and
// printed with each operator's share of the pass and its rates against the
// machine's roofs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sluice::bench {

struct OpTime {
  std::string op;
  int64_t calls = 0;   // in one pass
  double seconds = 0;  // in one pass
  double flops = 0;    // in one pass (0: not counted for this operator)
  double bytes = 0;    // read at least once in one pass (0: not counted)
};

// One row per operator, in the order operators first appear over the passes:
// the median over the passes of its seconds (a pass without it counts 0), and
// the calls and work of the first pass that has it.
std::vector<OpTime> median_op_times(const std::vector<std::vector<OpTime>>& passes);

struct OpTimesFormat {
  std::string title;        // the line above the table
  double per = 1;           // seconds are shown in ms divided by this (tokens of a tg pass: ms a token)
  std::string per_label;    // the time column's heading ("ms", "ms/token")
  double pass_seconds = 0;  // the passes' median wall time (0: no such line)
  double roof_gbps = 0;     // "of roof" for the bytes' rate (0: unknown)
  double roof_gflops = 0;   // "of roof" for the FLOPs' rate, used when roof_gbps is 0 (0: unknown)
};

// The table, a markdown table with a line above it and the sum of the rows
// (and the pass's wall time) below.
std::string op_times_table(const std::vector<OpTime>& rows, const OpTimesFormat& f);

}  // namespace sluice::bench
