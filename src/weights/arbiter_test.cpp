// BandwidthArbiter: priority order, reprioritize, cancel, the bandwidth cap,
// data landing intact, and the transfer-record limit.
#include <chrono>
#include <cstring>
#include <thread>

#include <gtest/gtest.h>

#include "base/timer.h"
#include "weights/arbiter.h"
#include "weights/weights_test_util.h"

namespace sluice::weights {
namespace {

class ArbiterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    path_ = testing::scratch_dir() + "/arbiter_data.bin";
    bytes_ = testing::write_random_file(path_, 8u << 20, 11);
  }
  void SetUp() override {
    // Queue depth 1: one read at a time, so the order reads are issued in is the order they land in.
    auto e = IoEngine::open({.path = path_, .backend = IoBackend::kPread, .queue_depth = 1});
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    engine_ = std::move(*e);
  }
  static std::string path_;
  static std::vector<uint8_t> bytes_;
  std::unique_ptr<IoEngine> engine_;
};
std::string ArbiterTest::path_;
std::vector<uint8_t> ArbiterTest::bytes_;

// One extent of `len` bytes at `off`, landing at the start of the buffer.
std::vector<IoExtent> one(uint64_t off, uint64_t len) { return {{.file_offset = off, .length = len, .dst_offset = 0}}; }

TEST_F(ArbiterTest, ServesCriticalThenPredictedThenKvSwapThenPrefetchThenAge) {
  auto buf = AlignedBuffer::allocate(6 * 65536);
  BandwidthArbiter arb(*engine_, {.chunk_bytes = 1u << 20, .start_paused = true});
  ASSERT_TRUE(buf.ok());
  std::vector<std::vector<IoExtent>> e;
  for (uint64_t i = 0; i < 6; ++i) e.push_back(one(i * 65536, 65536));
  uint8_t* b = buf->data();
  // Submitted out of order; each lands in its own 64 KiB of the buffer.
  const TransferId p1 = *arb.submit(TransferClass::kPrefetch, e[0], b);
  const TransferId kv = *arb.submit(TransferClass::kKvSwap, e[1], b + 65536);
  const TransferId pr = *arb.submit(TransferClass::kPredicted, e[2], b + 2 * 65536);
  const TransferId p2 = *arb.submit(TransferClass::kPrefetch, e[3], b + 3 * 65536);
  const TransferId c1 = *arb.submit(TransferClass::kCritical, e[4], b + 4 * 65536);
  const TransferId c2 = *arb.submit(TransferClass::kCritical, e[5], b + 5 * 65536);
  EXPECT_FALSE(arb.landed(c1));  // paused: nothing issued
  arb.resume();
  const TransferResult r_c2 = arb.wait(c2);
  const TransferResult r_p2 = arb.wait(p2);
  const TransferResult r_c1 = arb.wait(c1);
  const TransferResult r_p1 = arb.wait(p1);
  const TransferResult r_kv = arb.wait(kv);
  const TransferResult r_pr = arb.wait(pr);
  EXPECT_EQ(r_c1.done_order, 1u);
  EXPECT_EQ(r_c2.done_order, 2u);
  EXPECT_EQ(r_pr.done_order, 3u);
  EXPECT_EQ(r_kv.done_order, 4u);
  EXPECT_EQ(r_p1.done_order, 5u);
  EXPECT_EQ(r_p2.done_order, 6u);
  for (const TransferResult* r : {&r_c1, &r_c2, &r_pr, &r_kv, &r_p1, &r_p2}) {
    EXPECT_TRUE(r->status.ok());
    EXPECT_EQ(r->bytes, 65536u);
  }
  EXPECT_EQ(std::memcmp(b, bytes_.data(), 6 * 65536), 0);
  const ArbiterStats st = arb.stats();
  EXPECT_EQ(st.bytes[static_cast<size_t>(TransferClass::kCritical)], 2u * 65536);
  EXPECT_EQ(st.bytes[static_cast<size_t>(TransferClass::kPredicted)], 65536u);
  EXPECT_EQ(st.bytes[static_cast<size_t>(TransferClass::kKvSwap)], 65536u);
  EXPECT_EQ(st.bytes[static_cast<size_t>(TransferClass::kPrefetch)], 2u * 65536);
  EXPECT_EQ(st.n_reads, 6u);
  EXPECT_STREQ(transfer_class_name(TransferClass::kPredicted), "predicted");
}

TEST_F(ArbiterTest, ReprioritizeMovesATransferAhead) {
  auto buf = AlignedBuffer::allocate(2 * 65536);
  BandwidthArbiter arb(*engine_, {.start_paused = true});
  const auto e0 = one(0, 65536), e1 = one(65536, 65536);
  const TransferId a = *arb.submit(TransferClass::kPrefetch, e0, buf->data());
  const TransferId b = *arb.submit(TransferClass::kPrefetch, e1, buf->data() + 65536);
  arb.reprioritize(b, TransferClass::kCritical);
  arb.resume();
  EXPECT_EQ(arb.wait(a).done_order, 2u);
  EXPECT_EQ(arb.wait(b).done_order, 1u);
}

TEST_F(ArbiterTest, ChunksLargeTransfersAndLandsEveryExtent) {
  auto e = IoEngine::open({.path = path_, .backend = IoBackend::kUring, .queue_depth = 8});
  ASSERT_TRUE(e.ok());
  auto buf = AlignedBuffer::allocate((4u << 20) + 8192);
  BandwidthArbiter arb(**e, {.chunk_bytes = 256u << 10});
  // Three extents scattered in the file, packed in the buffer.
  const std::vector<IoExtent> ext = {{.file_offset = 4096, .length = 3u << 20, .dst_offset = 0},
                                     {.file_offset = 5u << 20, .length = 8192, .dst_offset = 3u << 20},
                                     {.file_offset = 6u << 20, .length = 1u << 20, .dst_offset = (3u << 20) + 8192}};
  const TransferId id = *arb.submit(TransferClass::kCritical, ext, buf->data());
  const TransferResult r = arb.wait(id);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_EQ(r.bytes, (4u << 20) + 8192);
  for (const IoExtent& x : ext)
    EXPECT_EQ(std::memcmp(buf->data() + x.dst_offset, bytes_.data() + x.file_offset, x.length), 0);
  EXPECT_EQ(arb.stats().n_reads, 12u + 1u + 4u);
}

TEST_F(ArbiterTest, CancelStopsATransferAndRetiresIt) {
  auto buf = AlignedBuffer::allocate(65536);
  BandwidthArbiter arb(*engine_, {.start_paused = true});
  const auto e0 = one(0, 65536);
  const TransferId a = *arb.submit(TransferClass::kPrefetch, e0, buf->data());
  const BandwidthArbiter::Cancelled ca = arb.cancel(a);
  EXPECT_TRUE(ca.was_pending);
  EXPECT_EQ(ca.bytes_read, 0u);
  EXPECT_TRUE(ca.untouched);
  arb.resume();
  // Nothing was read into the buffer.
  for (uint64_t i = 0; i < 65536; ++i) ASSERT_EQ(buf->data()[i], 0);
  EXPECT_EQ(arb.stats().n_cancelled, 1u);
  EXPECT_EQ(arb.stats().n_reads, 0u);
  // A landed transfer cancels as "already done".
  const TransferId b = *arb.submit(TransferClass::kPrefetch, e0, buf->data());
  while (!arb.landed(b)) {
  }
  const BandwidthArbiter::Cancelled cb = arb.cancel(b);
  EXPECT_FALSE(cb.was_pending);
  EXPECT_EQ(cb.bytes_read, 65536u);
  EXPECT_FALSE(cb.untouched);
}

TEST_F(ArbiterTest, CapLimitsBandwidth) {
  const double cap = 16e6;  // 16 MB/s
  auto buf = AlignedBuffer::allocate(4u << 20);
  BandwidthArbiter arb(*engine_, {.chunk_bytes = 256u << 10, .cap_bytes_per_s = cap});
  const auto ext = one(0, 4u << 20);
  Stopwatch sw;
  const TransferResult r = arb.wait(*arb.submit(TransferClass::kCritical, ext, buf->data()));
  const double s = sw.seconds();
  ASSERT_TRUE(r.status.ok());
  // 16 reads of 256 KiB: the last may start (4 MiB - 256 KiB) / cap after the first.
  const double floor_s = static_cast<double>((4u << 20) - (256u << 10)) / cap;
  EXPECT_GE(s, 0.95 * floor_s);
  EXPECT_LT(s, floor_s + 2.0);
  EXPECT_GT(arb.stats().cap_wait_s, 0.5 * floor_s);
  // Reads held back by the cap are not in flight: not busy time (counted,
  // it would be all of s; the margin is for a disk other tests load).
  EXPECT_LT(arb.stats().busy_s, 0.8 * s);
  EXPECT_EQ(std::memcmp(buf->data(), bytes_.data(), 4u << 20), 0);
  // Lifting the cap: the same transfer is no longer held back.
  arb.set_cap(0);
  const double held = arb.stats().cap_wait_s;
  ASSERT_TRUE(arb.wait(*arb.submit(TransferClass::kCritical, ext, buf->data())).status.ok());
  EXPECT_DOUBLE_EQ(arb.stats().cap_wait_s, held);
}

// Busy time covers the periods with reads in flight: positive while a
// transfer runs, never more than the wall time around it, and still once the
// queue has drained.
TEST_F(ArbiterTest, BusyTimeIsTheTimeWithReadsInFlight) {
  auto buf = AlignedBuffer::allocate(8u << 20);
  BandwidthArbiter arb(*engine_, {.chunk_bytes = 64u << 10});
  const auto ext = one(0, 8u << 20);
  EXPECT_EQ(arb.stats().busy_s, 0.0);
  Stopwatch sw;
  ASSERT_TRUE(arb.wait(*arb.submit(TransferClass::kCritical, ext, buf->data())).status.ok());
  const double wall_s = sw.seconds();
  const ArbiterStats a = arb.stats();
  EXPECT_GT(a.busy_s, 0.0);
  EXPECT_LE(a.busy_s, wall_s);
  EXPECT_EQ(a.n_reads, 128u);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // idle: nothing in flight
  EXPECT_DOUBLE_EQ(arb.stats().busy_s, a.busy_s);
}

TEST_F(ArbiterTest, RefusesMoreTransfersThanRecords) {
  auto buf = AlignedBuffer::allocate(3 * 4096);
  BandwidthArbiter arb(*engine_, {.max_transfers = 2, .start_paused = true});
  const auto e0 = one(0, 4096);
  const TransferId a = *arb.submit(TransferClass::kPrefetch, e0, buf->data());
  const TransferId b = *arb.submit(TransferClass::kPrefetch, e0, buf->data() + 4096);
  const auto c = arb.submit(TransferClass::kPrefetch, e0, buf->data() + 8192);
  EXPECT_EQ(c.status().code(), StatusCode::kResourceExhausted);
  arb.resume();
  EXPECT_TRUE(arb.wait(a).status.ok());
  EXPECT_TRUE(arb.wait(b).status.ok());
  EXPECT_TRUE(arb.submit(TransferClass::kPrefetch, e0, buf->data()).ok());  // a record is free again
}

}  // namespace
}  // namespace sluice::weights
