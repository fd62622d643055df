#include "dist/link_probe.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "dist/protocol.h"

namespace sluice::dist {
namespace {

constexpr int kLatencyTrips = 16;
constexpr double kLatencyQuiet = 1e-3;
constexpr int kBandwidthTrips = 4;
constexpr size_t kBandwidthBytes = 4u << 20;

double fastest(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// Seconds of each of n round trips of `bytes` to `peer` (after one warm-up),
// each after `quiet` seconds without messages.
StatusOr<std::vector<double>> round_trips(Comm& comm, int peer, size_t bytes, int n, double quiet = 0) {
  std::vector<uint8_t> out(bytes, 0x5a), back(bytes);
  std::vector<double> s;
  for (int i = 0; i <= n; ++i) {
    if (quiet > 0) std::this_thread::sleep_for(std::chrono::duration<double>(quiet));
    const double t0 = Comm::wtime();
    ASSIGN_OR_RETURN(Pending r, comm.irecv(peer, kTagProbe, back.data(), back.size()));
    RETURN_IF_ERROR(comm.send(peer, kTagProbe, out.data(), out.size(), "the link probe"));
    RETURN_IF_ERROR(comm.wait(r, "the link probe's echo"));
    if (i > 0) s.push_back(Comm::wtime() - t0);
  }
  return s;
}

}  // namespace

StatusOr<std::vector<plan::LinkFigures>> probe_links(Comm& comm) {
  std::vector<plan::LinkFigures> links(static_cast<size_t>(comm.size()));
  for (int r = 1; r < comm.size(); ++r) {
    ASSIGN_OR_RETURN(const std::vector<double> small, round_trips(comm, r, 8, kLatencyTrips, kLatencyQuiet));
    ASSIGN_OR_RETURN(const std::vector<double> large, round_trips(comm, r, kBandwidthBytes, kBandwidthTrips));
    plan::LinkFigures& l = links[static_cast<size_t>(r)];
    l.latency_s = median(small) / 2;
    l.gbps = static_cast<double>(kBandwidthBytes) / (fastest(large) / 2 * 1e9);
    RETURN_IF_ERROR(comm.send(r, kTagProbe, nullptr, 0, "the end of the link probe"));
  }
  return links;
}

Status answer_link_probe(Comm& comm) {
  std::vector<uint8_t> msg;
  for (;;) {
    RETURN_IF_ERROR(comm.recv_message(0, kTagProbe, &msg, "the link probe", comm.timeout_s()));
    if (msg.empty()) return Status();
    RETURN_IF_ERROR(comm.send(0, kTagProbe, msg.data(), msg.size(), "the link probe's echo"));
  }
}

}  // namespace sluice::dist
