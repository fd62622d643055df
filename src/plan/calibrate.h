// Calibration probes: measure this machine so the performance model predicts
// the engine here, not a datasheet.
//
//   memory read  a large buffer summed by every thread (GB/s): the machine's
//                plain figure, printed beside the weight read; the memory roof
//                only when no weight read was probed
//   weight read  the engine's own batch-1 matmuls (cpu::matmul_group, one
//                token) dispatched as decode dispatches them: a layer's groups
//                (q/k/v, o, gate/up, down) with the model's weight types and
//                shapes, over synthetic copies of the layer as large as the
//                model's own layers (what decode sweeps per token), up to twice
//                the last-level cache (memory_span_bytes): weight bytes read
//                per second (GB/s). This is the memory roof of the roofline
//                (as_hardware()).
//   matmul       the engine's own cpu::matmul_group on the model's weight type
//                at a prefill-like shape ([n_out, n_in] x n_tokens), over the
//                same copies as the weight read when a model is given, so its
//                weights come from where prefill's do (TFLOP/s)
//   disk read    sequential O_DIRECT reads of the model file, or of a temporary
//                file written for the purpose; when the filesystem refuses
//                O_DIRECT, a buffered read after dropping the file's cached
//                pages, and the result says so (`disk_direct` = false). The
//                weight store measures its own reads instead
//                (weights::calibrate_for_model).
//
// Why the decode roof is the weight read and not the memory read: decode at
// batch 1 is the matmul kernels streaming every weight once, so what bounds it
// is the rate those kernels stream at, dispatched the way the forward pass
// dispatches them. That is not the rate of one sequential sum per thread: a
// kernel walks several rows at once and dequantizes as it goes, the pool
// splits each matrix's rows in 16-row steps, and every dispatch starts cold
// (prefetchers ramp up again, threads meet at a barrier; a k or v matrix is
// only a few hundred kB). Measuring the kernels themselves takes all of that in
// without a model of any of it, and stays right where a weight type's
// dequantization, not memory, is the limit. Tuning the plain sum towards the
// kernels (more streams, prefetch, non-temporal loads) would be guessing at
// what they do. Measured here (2 threads, AVX-512, a quiet moment, each probe
// interleaved with 32 decode tokens of synth 1b q8_0 in one process, medians
// of 8-10 pairs): decode read 0.75-0.88x the plain sum and 0.83x one large
// matrix, but 0.98-1.0x the layer-shaped dispatches.
// What the roof leaves out is per-token work outside the layer matmuls
// (attention, norms, the output matrix, embedding); on a model as small as
// 110m it is ~15% of a token, and decode lands that much below the prediction.
//
// Every probe takes the median pass over a window of at least
// min_probe_seconds, not a fixed handful of passes: on a machine shared with
// other work the memory rate moves on a scale of 100 ms to seconds, and a
// measured decode (tens of tokens) sees a window that long too. The probes
// take about a second together. Probes use the ThreadPool they are given, so
// pass the thread count the engine will use. Not for the per-token path; call
// once at start.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "format/model_file.h"
#include "plan/hardware.h"
#include "plan/rate_curve.h"
#include "quant/dtype.h"
#include "sluice/status.h"

namespace sluice::plan {

// One weight matrix as decode multiplies it: [n_out, n_in] of `type`.
struct MatmulShape {
  DType type = DType::kQ8_0;
  int64_t n_in = 0;
  int64_t n_out = 0;
};
// Matrices the forward pass multiplies in one cpu::matmul_group dispatch: they
// share one input (q/k/v; gate/up), so the same n_in; at most 4.
using MatmulGroup = std::vector<MatmulShape>;
// A llama layer at n_embd 2048 (q/k/v 2048 -> 2048/256/256; o; gate/up 2048 ->
// 5632; down 5632 -> 2048) of `type`: the probe's layer when no model is given.
std::vector<MatmulGroup> default_layer(DType type);

// Bytes a probe sweeps to read from memory rather than from cache: twice the
// last-level cache the OS reports (sysconf), and at least 256 MiB (guests that
// report no cache size).
uint64_t memory_span_bytes();

// The matmul probe's further sizes where a pipeline plans micro-batches.
inline const std::vector<int64_t> kMatmulCurveTokens = {8, 16, 32, 128};

struct CalibrateOptions {
  int n_threads = 0;                          // <= 0: one per core
  int n_repeats = 5;
  uint64_t mem_bytes = memory_span_bytes();   // memory probe buffer
  int64_t matmul_n_in = 2048;
  int64_t matmul_n_out = 2048;
  int64_t matmul_n_tokens = 64;
  // Further sizes the matmul probe runs at, for matmul_curve (empty: only
  // matmul_n_tokens). A pipeline's micro-batches multiply a few rows at once.
  std::vector<int64_t> matmul_curve_tokens;
  bool probe_disk = true;
  std::string disk_path;                      // file to read; empty: a temp file in temp_dir
  std::string temp_dir = "/tmp";
  uint64_t disk_bytes = 256ull << 20;         // bytes to read (at most the file's size)
  DType matmul_type = DType::kQ8_0;           // weight type the matmul probe runs (and the default layer's)
  // The weight-read and layer matmul probes sweep copies of the layer making
  // at least this many bytes (0: skip the weight read; one copy for the matmul).
  uint64_t weight_read_bytes = memory_span_bytes();
  std::vector<MatmulGroup> weight_read_layer; // one layer's dispatches; empty: default_layer(matmul_type)
  double min_probe_seconds = 0.25;            // each probe's window (see above)
};

struct Calibration {
  int n_threads = 0;
  double mem_read_gbps = 0;                   // streaming sum
  double weight_read_gbps = 0;                // engine's batch-1 matmuls in decode's dispatches; 0 when not probed
  double matmul_tflops = 0;                   // of the engine's kernels on matmul_type weights
  bool matmul_model_layer = false;            // matmul_tflops is the model's layer dispatches (else one matrix)
  int64_t matmul_n_tokens = 0;                // tokens the matmul probe multiplied at once
  RateCurve matmul_curve;                     // TFLOP/s at matmul_n_tokens and each matmul_curve_tokens
  DType matmul_type = DType::kQ8_0;
  double disk_read_gbps = 0;                  // 0 when not probed
  bool disk_direct = false;                   // O_DIRECT was honoured
  std::string disk_note;                      // what was read, and how
  double mem_capacity_gb = 0;                 // physical memory

  // The memory roof decode is predicted with: weight_read_gbps when probed,
  // else mem_read_gbps.
  double decode_read_gbps() const;
  // This machine as a compute device for the roofline (memory roof:
  // decode_read_gbps()).
  Hardware as_hardware() const;
};

// Each probe returns the median pass of at least n_repeats passes lasting at
// least min_seconds together.
//
// Every thread sums its share of a `bytes` buffer (GB/s).
double probe_memory_read_gbps(ThreadPool& pool, uint64_t bytes, int n_repeats, double min_seconds = 0);
// The engine's batch-1 matmul (cpu::matmul_group, one token, at the active
// instruction set) dispatched as decode dispatches it: `layer`'s groups in
// order, over as many copies of the layer as make `bytes` or more (synthetic
// weights, each n_in a multiple of its type's block size, in the layout and on
// the huge pages the engine's load gives them): weight bytes read per second
// (GB/s).
double probe_weight_read_gbps(ThreadPool& pool, std::span<const MatmulGroup> layer, uint64_t bytes, int n_repeats,
                              double min_seconds = 0);
// The engine's batch matmuls over `layer`'s dispatches at n_tokens tokens, over
// as many copies of the layer as make `bytes` (at least one; in the engine's
// layouts): FLOPs of the layer's matrices per second (TFLOP/s), what a prefill
// of that model's layers gets when its weights come from where the model's do.
double probe_layer_matmul_tflops(ThreadPool& pool, std::span<const MatmulGroup> layer, int64_t n_tokens,
                                 uint64_t bytes, int n_repeats, double min_seconds = 0);
// The engine's own matmul (cpu::matmul_group at the active instruction set) on
// one matrix of `type` in the layout the engine repacks it to; the matmul probe
// when no model's layer is known.
double probe_matmul_tflops(ThreadPool& pool, int64_t n_in, int64_t n_out, int64_t n_tokens, int n_repeats,
                           DType type = DType::kQ8_0, double min_seconds = 0);
struct DiskProbe {
  double gbps = 0;
  bool direct = false;
  std::string note;
};
// Errors: the file cannot be created, opened or read.
StatusOr<DiskProbe> probe_disk_read(const std::string& path, const std::string& temp_dir, uint64_t bytes);

// `options` with the probes set to the model's own weights, so every caller
// probes a model the same way: the matmul probe on blk.0.ffn_up.weight's type
// (the up projection, or phi3's fused gate/up, or a routed block's shared
// expert's up; else the layer's largest matrix's type),
// the weight-read probe on layer 0's matrices (types and shapes) in the
// forward pass's dispatches (q/k/v, o, gate/up, down), and both it and the
// layer matmul probe over the model's own working set: its block matrices'
// bytes, up to options.weight_read_bytes (a model smaller than the cache is
// decoded from the cache, and probed there). A file without those tensors
// leaves the weight-read layer at the default.
CalibrateOptions with_model_weights(CalibrateOptions options, const ModelFile& file);

// Runs every probe.
StatusOr<Calibration> calibrate(const CalibrateOptions& options);

}  // namespace sluice::plan
