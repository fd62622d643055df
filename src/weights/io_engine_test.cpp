// IoEngine: exact bytes at unaligned offsets on both backends, end of file,
// queue depth, O_DIRECT fallback reporting, the read-rate cap.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include <gtest/gtest.h>

#include "base/timer.h"
#include "weights/extent_layout.h"
#include "weights/io_engine.h"
#include "weights/weights_test_util.h"

namespace sluice::weights {
namespace {

class IoEngineTest : public ::testing::TestWithParam<IoBackend> {
 protected:
  static void SetUpTestSuite() {
    path_ = testing::scratch_dir() + "/io_engine_data.bin";
    bytes_ = testing::write_random_file(path_, (3u << 20) + 12345);
  }
  std::unique_ptr<IoEngine> open_engine(int queue_depth, double rate_cap_bytes_per_s = 0) {
    auto e = IoEngine::open({.path = path_, .backend = GetParam(), .queue_depth = queue_depth, .direct = true,
                             .rate_cap_bytes_per_s = rate_cap_bytes_per_s});
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    if (!(*e)->direct()) std::fprintf(stderr, "[io engine test] O_DIRECT unsupported here: %s\n", (*e)->describe().c_str());
    return std::move(*e);
  }
  static std::string path_;
  static std::vector<uint8_t> bytes_;
};
std::string IoEngineTest::path_;
std::vector<uint8_t> IoEngineTest::bytes_;

TEST_P(IoEngineTest, ReadsExactBytesAtUnalignedOffsets) {
  auto engine = open_engine(8);
  EXPECT_EQ(engine->backend(), GetParam());
  EXPECT_EQ(engine->file_size(), bytes_.size());
  const uint64_t n = bytes_.size();
  const std::vector<std::pair<uint64_t, uint64_t>> cases = {
      {0, 1}, {1, 4095}, {4095, 2}, {4096, 4096}, {123, 1 << 20}, {777777, 2'000'001}, {n - 1, 1}, {n - 5000, 5000},
      {0, n}, {4097, n - 4097}};
  for (uint64_t chunk : {uint64_t{4096}, uint64_t{64 << 10}, uint64_t{1 << 20}}) {
    for (auto [off, len] : cases) {
      std::vector<uint8_t> got(len + 2, 0xAB);
      ASSERT_TRUE(read_exact(*engine, off, len, got.data() + 1, chunk).ok()) << off << "+" << len;
      // Compare with a plain pread of the same range.
      std::vector<uint8_t> want(len);
      const int fd = ::open(path_.c_str(), O_RDONLY);
      ASSERT_EQ(::pread(fd, want.data(), len, static_cast<off_t>(off)), static_cast<ssize_t>(len));
      ::close(fd);
      EXPECT_EQ(std::memcmp(got.data() + 1, want.data(), len), 0) << off << "+" << len << " chunk " << chunk;
      EXPECT_EQ(got.front(), 0xAB);  // guard bytes untouched
      EXPECT_EQ(got.back(), 0xAB);
      EXPECT_EQ(engine->in_flight(), 0);
    }
  }
}

TEST_P(IoEngineTest, ReadPastEndOfFileIsAnError) {
  auto engine = open_engine(4);
  std::vector<uint8_t> got(100);
  const Status st = read_exact(*engine, bytes_.size() - 50, 100, got.data());
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st.to_string();
}

TEST_P(IoEngineTest, AlignedReadOfTheLastBlockStopsAtEndOfFile) {
  auto engine = open_engine(2);
  auto buf = AlignedBuffer::allocate(2 * kDirectAlign);
  ASSERT_TRUE(buf.ok());
  const uint64_t last_block = align_down(bytes_.size(), kDirectAlign);
  engine->submit({.offset = last_block, .length = 2 * kDirectAlign, .dst = buf->data(), .tag = 42});
  std::vector<IoCompletion> done;
  while (done.empty()) engine->wait(done, -1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].tag, 42u);
  ASSERT_TRUE(done[0].status.ok()) << done[0].status.to_string();
  EXPECT_EQ(done[0].bytes, bytes_.size() - last_block);
  EXPECT_EQ(std::memcmp(buf->data(), bytes_.data() + last_block, done[0].bytes), 0);
}

TEST_P(IoEngineTest, KeepsManyReadsInFlightAndInterruptWakesAWait) {
  auto engine = open_engine(16);
  auto buf = AlignedBuffer::allocate(16 * 65536);
  ASSERT_TRUE(buf.ok());
  for (int i = 0; i < 16; ++i)
    engine->submit({.offset = static_cast<uint64_t>(i) * 65536, .length = 65536,
                    .dst = buf->data() + static_cast<uint64_t>(i) * 65536, .tag = static_cast<uint64_t>(i)});
  EXPECT_LE(engine->in_flight(), 16);
  std::vector<IoCompletion> done;
  while (done.size() < 16) engine->wait(done, -1);
  EXPECT_EQ(engine->in_flight(), 0);
  EXPECT_EQ(std::memcmp(buf->data(), bytes_.data(), 16 * 65536), 0);
  // Nothing in flight: an interrupt makes a blocking wait return with nothing.
  engine->interrupt();
  done.clear();
  EXPECT_EQ(engine->wait(done, -1), 0);
  EXPECT_EQ(engine->wait(done, 0.01), 0);  // a timeout also returns
}

TEST_P(IoEngineTest, ReadProbeGivesAPositiveRateAndLeavesNothingInFlight) {
  auto engine = open_engine(4);
  const auto gbps = probe_read_gbps(*engine, 64 << 10, 4096, 2u << 20);
  ASSERT_TRUE(gbps.ok()) << gbps.status().to_string();
  EXPECT_GT(*gbps, 0);
  EXPECT_TRUE(std::isfinite(*gbps));
  EXPECT_EQ(engine->in_flight(), 0);
  EXPECT_FALSE(probe_read_gbps(*engine, 1 << 20, 0, 4096).ok());  // less than one read
}

// Capped at 8 MB/s, 16 reads of 64 KiB submitted at once come back no faster
// than the cap at any moment (bytes returned by t <= rate x t since the
// submission), and the whole MiB takes its 131 ms, not much more. The bytes
// are the file's.
TEST_P(IoEngineTest, RateCapHoldsAtEveryCompletionAndCostsNoMore) {
  const double rate = 8e6;
  auto engine = open_engine(16, rate);
  EXPECT_EQ(engine->rate_cap_bytes_per_s(), rate);
  EXPECT_NE(engine->describe().find("reads capped at 8 MB/s"), std::string::npos) << engine->describe();
  auto buf = AlignedBuffer::allocate(16 * 65536);
  ASSERT_TRUE(buf.ok());
  const double t0 = now_seconds();
  for (int i = 0; i < 16; ++i)
    engine->submit({.offset = static_cast<uint64_t>(i) * 65536, .length = 65536,
                    .dst = buf->data() + static_cast<uint64_t>(i) * 65536, .tag = static_cast<uint64_t>(i)});
  EXPECT_EQ(engine->in_flight(), 16);
  std::vector<IoCompletion> done;
  uint64_t bytes = 0;
  while (done.size() < 16) {
    const size_t before = done.size();
    engine->wait(done, -1);
    const double t = now_seconds() - t0;
    for (size_t k = before; k < done.size(); ++k) {
      ASSERT_TRUE(done[k].status.ok());
      bytes += done[k].bytes;
    }
    EXPECT_LE(static_cast<double>(bytes), rate * t + 1.0) << "at " << t << " s";
  }
  const double total_s = now_seconds() - t0;
  const double floor_s = 16 * 65536 / rate;
  EXPECT_GE(total_s, floor_s);
  EXPECT_LT(total_s, floor_s + 1.0);  // the cap costs no more than it must (loose: a shared disk)
  EXPECT_EQ(engine->in_flight(), 0);
  EXPECT_EQ(std::memcmp(buf->data(), bytes_.data(), 16 * 65536), 0);
  // The probe the planner uses sees the capped disk.
  const auto gbps = probe_read_gbps(*engine, 64 << 10, 0, 1u << 20);
  ASSERT_TRUE(gbps.ok());
  EXPECT_LE(*gbps, rate / 1e9 * 1.001);
  EXPECT_GT(*gbps, rate / 1e9 * 0.25);
  // read_exact through the cap: unaligned, exact.
  std::vector<uint8_t> got(300000);
  ASSERT_TRUE(read_exact(*engine, 5000, got.size(), got.data(), 64 << 10).ok());
  EXPECT_EQ(std::memcmp(got.data(), bytes_.data() + 5000, got.size()), 0);
}

// A read held back by the cap (64 KiB at 100 KB/s: due in 655 ms) does not
// keep interrupt() from ending a blocked wait(); it stays in flight and comes
// back when due. With nothing in flight, interrupt() and timeouts behave as
// without the cap.
TEST_P(IoEngineTest, RateCapStillLetsInterruptWakeAWait) {
  auto engine = open_engine(4, 100e3);
  auto buf = AlignedBuffer::allocate(65536);
  ASSERT_TRUE(buf.ok());
  const double t0 = now_seconds();
  engine->submit({.offset = 0, .length = 65536, .dst = buf->data(), .tag = 7});
  std::thread waker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    engine->interrupt();
  });
  std::vector<IoCompletion> done;
  EXPECT_EQ(engine->wait(done, -1), 0);
  waker.join();
  EXPECT_LT(now_seconds() - t0, 0.4);
  EXPECT_EQ(engine->in_flight(), 1);
  EXPECT_EQ(engine->wait(done, 0.05), 0);  // a timeout before it is due
  while (done.empty()) engine->wait(done, -1);
  EXPECT_GE(now_seconds() - t0, 65536 / 100e3);
  EXPECT_EQ(done[0].tag, 7u);
  EXPECT_EQ(done[0].bytes, 65536u);
  EXPECT_EQ(engine->in_flight(), 0);
  engine->interrupt();
  EXPECT_EQ(engine->wait(done, -1), 0);
  EXPECT_EQ(engine->wait(done, 0.01), 0);
}

INSTANTIATE_TEST_SUITE_P(Backends, IoEngineTest, ::testing::Values(IoBackend::kUring, IoBackend::kPread),
                         [](const auto& info) { return std::string(info.param == IoBackend::kUring ? "uring" : "pread"); });

TEST(IoEngine, OpenErrorsAndNames) {
  EXPECT_EQ(IoEngine::open({.path = "/nonexistent/file.gguf"}).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(IoEngine::open({.path = testing::scratch_dir()}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(IoEngine::open({.path = "/dev/null", .queue_depth = 0}).ok());
  EXPECT_EQ(*parse_io_backend("uring"), IoBackend::kUring);
  EXPECT_EQ(*parse_io_backend("pread"), IoBackend::kPread);
  EXPECT_FALSE(parse_io_backend("aio").ok());
}

TEST(IoEngine, BufferedWhenDirectIsNotAsked) {
  const std::string path = testing::scratch_dir() + "/io_engine_small.bin";
  const std::vector<uint8_t> bytes = testing::write_random_file(path, 10000, 3);
  auto e = IoEngine::open({.path = path, .direct = false});
  ASSERT_TRUE(e.ok());
  EXPECT_FALSE((*e)->direct());
  EXPECT_NE((*e)->describe().find("buffered"), std::string::npos) << (*e)->describe();
  // No cap asked (0): none in place, none described.
  EXPECT_EQ((*e)->rate_cap_bytes_per_s(), 0);
  EXPECT_EQ((*e)->describe().find("capped"), std::string::npos) << (*e)->describe();
  EXPECT_EQ(IoEngine::open({.path = path, .rate_cap_bytes_per_s = -1}).status().code(), StatusCode::kInvalidArgument);
  std::vector<uint8_t> got(9000);
  ASSERT_TRUE(read_exact(**e, 1000, 9000, got.data()).ok());
  EXPECT_EQ(std::memcmp(got.data(), bytes.data() + 1000, 9000), 0);
}

TEST(ExtentLayoutTest, MergesNearbyRangesAndPointsInsideThem) {
  // Two tensors back to back, one far away, one inside the gap limit.
  const std::vector<TensorRange> t = {{10000, 5000}, {15000, 100}, {1'000'000, 10}, {30000, 8}};
  const ExtentLayout lay = layout_extents(t, 4096, 64 << 10);
  ASSERT_EQ(lay.extents.size(), 2u);
  EXPECT_EQ(lay.extents[0].file_offset, 8192u);
  EXPECT_EQ(lay.extents[0].length, 32768u - 8192u);  // through the end of [30000, 30008)
  EXPECT_EQ(lay.extents[1].file_offset, 999424u);
  EXPECT_EQ(lay.extents[1].dst_offset, lay.extents[0].length);
  EXPECT_EQ(lay.tensor_offsets[0], 10000u - 8192u);
  EXPECT_EQ(lay.tensor_offsets[1], 15000u - 8192u);
  EXPECT_EQ(lay.tensor_offsets[3], 30000u - 8192u);
  EXPECT_EQ(lay.tensor_offsets[2], lay.extents[0].length + (1'000'000u - 999424u));
  EXPECT_EQ(lay.buffer_bytes % 4096, 0u);
  EXPECT_EQ(lay.tensor_bytes, 5118u);
  // No gap allowance: the third tensor starts its own extent.
  EXPECT_EQ(layout_extents(t, 4096, 0).extents.size(), 3u);
}

}  // namespace
}  // namespace sluice::weights
