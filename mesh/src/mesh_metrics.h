// The mesh's results on /metrics, built to aggregate and to stay small: per planned peer the pings
// sent and lost, each series labelled with both ToRs so recording rules sum them into ToR pairs
// and tell a host from a ToR pair from a path; RTT histograms per path class (same ToR, cross
// ToR), so their number does not grow with the plan; and the plan's size, rate and budget.
// Per-peer RTT histograms (14 series a peer) only where the site asks for them (per_peer_rtt).
// Series exist only for peers in the current plan, so their number is bounded by the plan, not by
// the fabric. RTTs are kept apart by the clock that measured them: the host's clock reads the
// hosts' delays too, and one histogram of both would mix two quantities.
#pragma once

#include <array>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "ibprobe/collectors.h"
#include "ibprobe/mesh_plan.h"

namespace ibprobe::mesh {

// Which clock measured an RTT: the RNICs' completion timestamps (both ends), or the host's.
enum class MeshClock { kSoftware = 0, kDevice = 1 };  // also the index of its histogram

struct MeshPingResult {
  bool answered = false;
  double rtt_seconds = 0;  // responder turnaround already subtracted; only when answered
  MeshClock clock = MeshClock::kSoftware;
};

// Upper bounds of the RTT histograms: 5 µs (one switch hop on a quiet fabric) to 10 ms.
inline constexpr std::array<double, 11> kMeshRttBuckets = {
    5e-6, 10e-6, 20e-6, 50e-6, 100e-6, 200e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3};

class MeshMetrics {
 public:
  // `usual_clock`: the clock this host's pings are measured by when the peer can, whose histogram
  // every path class (and peer) in the plan shows from the start; the other clock's appears once
  // it measured a ping. `per_peer_rtt` (mesh.per_peer_rtt): an RTT histogram per planned peer as
  // well, 14 series a peer and clock.
  MeshMetrics(std::string local_tor, double budget_hz, MeshClock usual_clock = MeshClock::kSoftware,
              bool per_peer_rtt = false);

  // The plan now in force. Series of peers that left it are dropped; a peer that stays keeps its
  // counters, so rates across epoch boundaries stay right. The path classes' histograms are the
  // host's and outlive every plan.
  void set_plan(const MeshFabric& fabric, const std::vector<PlannedPing>& plan);
  // A ping to a planned peer ended; results for peers outside the plan are ignored.
  void record(const std::string& peer, const MeshPingResult& result);
  collectors::MetricSet collect() const;

 private:
  struct Histogram {
    std::array<std::uint64_t, kMeshRttBuckets.size()> buckets{};  // not cumulative
    std::uint64_t answered = 0;
    double rtt_sum = 0;
    void add(double rtt_seconds);
  };
  using ByClock = std::array<Histogram, 2>;  // by MeshClock
  struct Peer {
    std::string tor;
    MeshReason reason = MeshReason::kSameTor;
    double rate_hz = 0;
    std::uint64_t sent = 0;
    std::uint64_t lost = 0;
    ByClock rtt;  // filled with per_peer_rtt only
  };

  const std::string local_tor_;
  const double budget_hz_;
  const MeshClock usual_clock_;
  const bool per_peer_rtt_;
  mutable std::mutex mutex_;
  std::map<std::string, Peer, std::less<>> peers_;
  std::array<ByClock, 2> class_rtt_;  // by MeshReason
};

}  // namespace ibprobe::mesh
