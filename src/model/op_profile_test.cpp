#include "model/op_profile.h"

#include <gtest/gtest.h>

#include "base/timer.h"

namespace sluice {
namespace {

// A clock whose marks read as scripted times, and which holds few marks.
class ScriptedClock final : public OpClock {
 public:
  ScriptedClock(std::vector<double> times, int capacity) : times_(std::move(times)), capacity_(capacity) {}
  void mark() override {
    ASSERT_LT(static_cast<int>(held_.size()), capacity_);
    held_.push_back(next_++);
  }
  int capacity() const override { return capacity_; }
  void read(std::vector<double>& at) override {
    at.clear();
    for (size_t i : held_) at.push_back(times_[i] - times_[held_.front()]);
    if (!held_.empty()) held_.erase(held_.begin(), held_.end() - 1);  // the last is the next read's first
  }

 private:
  std::vector<double> times_;  // every mark's time, in order
  int capacity_;
  size_t next_ = 0;
  std::vector<size_t> held_;  // indices into times_
};

TEST(OpProfile, TimeBetweenMarksGoesToTheLaterLabel) {
  // begin 0, a 1, b 3, (host between steps) begin 10, a 10.5, b 13.
  OpProfile p(std::make_unique<ScriptedClock>(std::vector<double>{0, 1, 3, 10, 10.5, 13}, 64));
  const char* a = "a";
  p.begin();
  p.mark(a, {.flops = 2, .bytes = 1});
  p.mark("b");
  p.begin();
  p.mark(std::string("a").c_str(), {.flops = 2, .bytes = 1});  // compared by content
  p.mark("b");
  const std::vector<OpProfile::Row>& rows = p.rows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].label, "a");
  EXPECT_EQ(rows[0].calls, 2);
  EXPECT_DOUBLE_EQ(rows[0].seconds, 1.5);
  EXPECT_EQ(rows[0].work.flops, 4);
  EXPECT_EQ(rows[0].work.bytes, 2);
  EXPECT_EQ(rows[1].label, "b");
  EXPECT_EQ(rows[1].calls, 2);
  EXPECT_DOUBLE_EQ(rows[1].seconds, 4.5) << "the 7 s between the steps are no operator's";
  p.clear();
  EXPECT_TRUE(p.rows().empty());
}

TEST(OpProfile, AFullClockIsReadWithoutLosingACall) {
  // Capacity 3: begin 0, a 1, b 2 | full: read, b kept; c 4, a 7 | full again: read, a kept; b 8.
  OpProfile p(std::make_unique<ScriptedClock>(std::vector<double>{0, 1, 2, 4, 7, 8}, 3));
  p.begin();
  p.mark("a");
  p.mark("b");
  p.mark("c");
  p.mark("a");
  p.mark("b");
  const std::vector<OpProfile::Row>& rows = p.rows();
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].label, "a");
  EXPECT_EQ(rows[0].calls, 2);
  EXPECT_DOUBLE_EQ(rows[0].seconds, 1 + 3);
  EXPECT_EQ(rows[1].label, "b");
  EXPECT_EQ(rows[1].calls, 2);
  EXPECT_DOUBLE_EQ(rows[1].seconds, 1 + 1);
  EXPECT_EQ(rows[2].label, "c");
  EXPECT_EQ(rows[2].calls, 1);
  EXPECT_DOUBLE_EQ(rows[2].seconds, 2);
  // Read again: nothing counted twice.
  EXPECT_EQ(p.rows()[0].calls, 2);
}

TEST(OpProfile, HostClockTimesSleeps) {
  OpProfile p(std::make_unique<HostOpClock>(8));
  p.begin();
  const double t0 = now_seconds();
  while (now_seconds() - t0 < 0.002) {
  }
  p.mark("spin");
  const std::vector<OpProfile::Row>& rows = p.rows();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_GE(rows[0].seconds, 0.002);
  EXPECT_LT(rows[0].seconds, 1.0);
}

TEST(OpProfile, MatmulAndAttentionWork) {
  const WeightView q8{.type = DType::kQ8_0, .n_in = 64, .n_out = 3};
  const WeightView f32{.type = DType::kF32, .n_in = 4, .n_out = 5};
  const MatmulOut outs[2] = {{q8, nullptr}, {f32, nullptr}};
  const OpWork m = matmul_work(outs, 7);
  EXPECT_EQ(m.flops, 2.0 * 7 * (64 * 3 + 4 * 5));
  EXPECT_EQ(m.bytes, 3 * 2 * 34 + 5 * 4 * 4);

  // Queries at positions 5..7 see 6, 7, 8 keys and rows 0..7; under a window
  // of 4, 4 keys each and rows 2..7.
  const AttentionSeq seq{.n_tok = 3, .pos0 = 5};
  const OpWork all = attention_work(std::span(&seq, 1), 2, 8, 0, 10);
  EXPECT_EQ(all.flops, 4.0 * 2 * 8 * (6 + 7 + 8));
  EXPECT_EQ(all.bytes, 2.0 * 10 * 8);
  const OpWork windowed = attention_work(std::span(&seq, 1), 2, 8, 4, 10);
  EXPECT_EQ(windowed.flops, 4.0 * 2 * 8 * (4 + 4 + 4));
  EXPECT_EQ(windowed.bytes, 2.0 * 10 * 6);
}

}  // namespace
}  // namespace sluice
