// StepGraph (cuda_step_graph.h) with the staging ring: sends recorded in a
// step land when its graph runs, each with its own bytes (more sends than
// the ring has buffers: the recording is launched where the ring comes round
// to a buffer it reads, and the ring grows for the next step); each later step of as many tokens updates the kept
// graph; a shape that keeps changing rests; a settle mid-step launches what
// was recorded and lets the rest run as it comes; two models' steps keep
// graphs of their own. On the emulator with
// deferred streams a buffer reused before its graph ran shows.
// Without a usable GPU every test skips.
#ifdef SLUICE_HAVE_CUDA

#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_step_graph.h"
#include "backend/cuda/cuda_test_util.h"

namespace sluice::cuda::testing {
namespace {

constexpr size_t kBytes = 4096;

struct Sends {
  cudaStream_t s = nullptr;
  uint8_t* dev = nullptr;
  explicit Sends(int n_sends) {
    EXPECT_EQ(cudaSuccess, cudaStreamCreate(&s));
    dev = static_cast<uint8_t*>(device_alloc(kBytes * static_cast<size_t>(n_sends)));
  }
  ~Sends() {
    device_free(dev);
    cudaStreamDestroy(s);
  }
  // Send i of a step: kBytes of `value` to the i-th kBytes of dev.
  void send(Staging& st, int i, int value) {
    std::memset(st.host(kBytes), value, kBytes);
    st.send(dev + static_cast<size_t>(i) * kBytes, kBytes, s);
  }
  void expect_landed(int n_sends, int first_value) {
    ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(s));
    std::vector<uint8_t> back(kBytes * static_cast<size_t>(n_sends));
    copy_to_host(back.data(), dev, back.size());
    for (int i = 0; i < n_sends; ++i)
      for (size_t j = 0; j < kBytes; j += 511)
        ASSERT_EQ(back[static_cast<size_t>(i) * kBytes + j], first_value + i) << "send " << i << " byte " << j;
  }
};

// A stream's sends through a staging ring attached to a step graph.
struct Rig {
  Sends t;
  StepGraph g;
  Staging st;
  explicit Rig(int n_sends) : t(n_sends), g(t.s) {
    StepGraph::set_enabled(true);
    st.attach(&g);  // the ring's buffers are there from here
  }
};

TEST(CudaStepGraph, RecordedSendsLandWhenTheGraphRunsAndLaterStepsUpdateIt) {
  SKIP_WITHOUT_GPU();
  constexpr int kSends = 7;  // more than the ring's 4 buffers
  Rig r(kSends);
  auto& [t, g, st] = r;
  for (int step = 0; step < 6; ++step) {
    g.begin(3);
    ASSERT_TRUE(g.recording());
    for (int i = 0; i < kSends; ++i) t.send(st, i, step * 10 + i + 1);
    // The first step comes round to a buffer it reads at its 5th send: launched there, the ring doubles.
    EXPECT_EQ(g.recording(), step > 0);
    g.end();
    ASSERT_FALSE(g.recording());
    t.expect_landed(kSends, step * 10 + 1);
  }
  EXPECT_EQ(g.counts().steps, 6);
  EXPECT_EQ(g.counts().built, 2);  // the first step's 4 sends, then the whole step's 7
  EXPECT_EQ(g.counts().updated, 4);
  EXPECT_EQ(g.counts().partial, 1);
  EXPECT_NE(g.summary().find("6 in 6 launches (2 built, 4 updated in place, 1 only up to a wait)"), std::string::npos)
      << g.summary();
  // Not recorded: more tokens than a decode step's, or recording turned off.
  g.begin(StepGraph::kMaxTokens + 1);
  EXPECT_FALSE(g.recording());
  g.end();
  StepGraph::set_enabled(false);
  g.begin(1);
  EXPECT_FALSE(g.recording());
  g.end();
  StepGraph::set_enabled(true);
}

TEST(CudaStepGraph, ASettleMidStepLaunchesTheRecordingAndTheRestRunsAsItComes) {
  SKIP_WITHOUT_GPU();
  Rig r(4);
  auto& [t, g, st] = r;
  g.begin(1);
  t.send(st, 0, 1);
  t.send(st, 1, 2);
  g.settle();  // as before a wait for the stream
  EXPECT_FALSE(g.recording());
  t.send(st, 2, 3);
  t.send(st, 3, 4);
  g.end();
  t.expect_landed(4, 1);
  EXPECT_EQ(g.counts().partial, 1);
  EXPECT_EQ(g.counts().built, 1);
}

TEST(CudaStepGraph, AStepShapeThatKeepsChangingRestsThenIsRecordedAgain) {
  SKIP_WITHOUT_GPU();
  Rig r(4);
  auto& [t, g, st] = r;
  int64_t steps = 0;
  auto step = [&](int n_sends) {
    g.begin(2);
    for (int i = 0; i < n_sends; ++i) t.send(st, i, 5 + i);
    g.end();
    t.expect_landed(n_sends, 5);
    ++steps;
  };
  // One copy more or less each step: every step builds its graph.
  int64_t built = 0;
  while (g.counts().resting == 0 && steps < 20) {
    step(steps % 2 == 0 ? 2 : 3);
    built = g.counts().built;
  }
  EXPECT_GT(g.counts().resting, 0) << "never rested after " << built << " builds";
  EXPECT_EQ(built, steps - 1) << "a build per step until resting (the resting step not recorded)";
  // The rest ends: recorded again, and a steady shape is updated in place.
  const int64_t recorded = g.counts().steps;
  for (int i = 0; i < 100 && g.counts().steps == recorded; ++i) step(2);
  EXPECT_GT(g.counts().steps, recorded) << "still resting after 100 steps";
  for (int i = 0; i < 3; ++i) step(2);
  EXPECT_GE(g.counts().updated, 3);
}

TEST(CudaStepGraph, TwoModelsOnOneBackendKeepTheirOwnGraphs) {
  SKIP_WITHOUT_GPU();
  Rig r(3);
  auto& [t, g, st] = r;
  const int draft = 0, target = 0;  // their addresses name them
  for (int i = 0; i < 5; ++i) {  // steps of one token each, of two shapes, alternating
    g.begin(1, &draft);
    t.send(st, 0, 1);
    t.send(st, 1, 2);
    g.end();
    t.expect_landed(2, 1);
    g.begin(1, &target);
    for (int j = 0; j < 3; ++j) t.send(st, j, 7 + j);
    g.end();
    t.expect_landed(3, 7);
  }
  EXPECT_EQ(g.counts().built, 2) << g.summary();
  EXPECT_EQ(g.counts().updated, 8) << g.summary();
}

}  // namespace
}  // namespace sluice::cuda::testing

#endif  // SLUICE_HAVE_CUDA
