// A decode step's work recorded as CUDA graphs and launched a few at once.
//
// A decode step is about ten short kernels a layer. Launched one by one, each
// costs the host a launch and the GPU a gap between kernels; for an 8B Q4_0
// model on an H200 the step's weights take about 1 ms to read, and 300 gaps
// of a few microseconds are a large share of it. StepGraph records the
// step's work on the backend's stream (stream capture, relaxed mode) and
// launches it as one graph; the next step of as many tokens updates that graph
// in place (cudaGraphExecUpdate: the same kernels and copies, new arguments,
// grids and sizes) instead of building another, and builds anew only when
// the step's shape changed (a kernel more or less: a split attention, a
// different batch).
//
// A step is recorded in segments of a few layers (tick() counts them; 8
// layers by default, SLUICE_CUDA_GRAPH_LAYERS=N, 0: the whole step as one):
// each is launched as soon as it is recorded, so the GPU runs the first
// layers while the host records and updates the next, and only the first
// segment's recording is time the GPU waits. Each (model, tokens, segment)
// keeps its own graph.
//
// Nothing runs while a step is recorded, so the host may not wait for the
// stream, use another stream or copy pageable memory until the recording
// ends: the backend calls settle() before any such call (a weight copied in
// from the host, a growing buffer, the logits read back), which launches what
// was recorded so far and lets the rest of the step run as it comes. Pinned
// buffers a recording copies from stay untouched until the graph has run
// (Listener). Steps of more than kMaxTokens tokens (prefill) are not
// recorded: their kernels are long and few. SLUICE_CUDA_GRAPH=0 turns
// recording off (the A/B).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <cuda_runtime.h>

namespace sluice::cuda {

class StepGraph {
 public:
  // Told each time a recording is launched: what it copies from (pinned host
  // memory) may be reused once `s` passes this point.
  class Listener {
   public:
    virtual void launched(cudaStream_t s) = 0;

   protected:
    ~Listener() = default;
  };

  static constexpr int64_t kMaxTokens = 64;

  explicit StepGraph(cudaStream_t s);
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // Whether steps are recorded at all (SLUICE_CUDA_GRAPH, on unless "0"),
  // and the choice made for the whole process instead (tests: the A/B).
  static bool enabled();
  static void set_enabled(bool on);
  // A step of n_tok tokens of `who` (a model) begins: its work is recorded
  // from here, when recording is on, n_tok is in [1, kMaxTokens] and the
  // graphs of its size are not resting (below). Graphs are kept by who
  // (kMaxOwners of them; the later ones share the last's), tokens and segment.
  void begin(int64_t n_tok, const void* who = nullptr);
  // A layer begins its attention (the backend calls it once a layer): every
  // segment's worth, the segment recorded so far is launched and the next one
  // recorded.
  void tick();
  bool recording() const { return recording_; }
  // Ends the recording under way, if any, and launches it: the kept graph
  // of that many tokens updated to it, else one built. Work after it runs as
  // it is enqueued until the step ends.
  void settle();
  // The step ends: settle(), and the step counted.
  void end();
  void listen(Listener* l) { listeners_.push_back(l); }

  struct Counts {
    int64_t steps = 0;    // steps recorded (whole or in part)
    int64_t built = 0;    // graphs instantiated
    int64_t updated = 0;  // launches of a kept graph updated in place (launches: built + updated)
    int64_t partial = 0;  // steps whose recording ended before the step did
    int64_t resting = 0;  // steps not recorded while their size rested
  };
  const Counts& counts() const { return counts_; }
  // One line of the counts; "" when no step was recorded.
  std::string summary() const;

 private:
  // After this many builds in a row for one size (its steps keep changing
  // shape), that size rests for kRestSteps steps: built graphs cost more
  // than they save.
  static constexpr int kBuildsBeforeRest = 4;
  static constexpr int kRestSteps = 64;
  static constexpr int kMaxSegments = 32;  // a step's later segments go in the last
  static constexpr int kMaxOwners = 4;
  struct Kept {
    cudaGraphExec_t exec = nullptr;
  };
  // Ends the capture and launches it as segment `segment_` of the step's
  // graphs: its kept graph updated in place, else one built.
  void launch_recording();
  void start_capture();
  // The step's size: by owner and tokens.
  size_t size_index() const { return static_cast<size_t>(owner_ * (kMaxTokens + 1) + n_tok_); }
  Kept& kept(int segment) {
    return kept_[size_index() * kMaxSegments + static_cast<size_t>(std::min(segment, kMaxSegments - 1))];
  }
  cudaStream_t stream_;
  int ticks_per_segment_;
  bool recording_ = false;
  bool in_step_ = false;      // between begin() and end() of a recorded step
  bool settled_early_ = false;
  int64_t n_tok_ = 0;
  int owner_ = 0;             // the step's owner, in owners_
  std::vector<const void*> owners_;
  int segment_ = 0;           // of the step being recorded
  int ticks_ = 0;             //   ticks in that segment
  bool step_built_ = false;   // a segment of the step was built, not updated
  std::vector<Kept> kept_;    // [kMaxOwners][kMaxTokens + 1][kMaxSegments]
  std::vector<int> rest_;          // [kMaxOwners][kMaxTokens + 1]: steps of that size left unrecorded
  std::vector<int> builds_in_row_;  // [kMaxOwners][kMaxTokens + 1]: its last steps that built a graph
  std::vector<Listener*> listeners_;
  Counts counts_;
};

}  // namespace sluice::cuda
