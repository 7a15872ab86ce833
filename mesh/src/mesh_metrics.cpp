#include "mesh_metrics.h"

#include <algorithm>

namespace ibprobe::mesh {
namespace {

using prometheus::MetricType;

std::string_view to_string(MeshClock clock) {
  return clock == MeshClock::kDevice ? "device" : "software";
}

constexpr MeshClock kClocks[] = {MeshClock::kSoftware, MeshClock::kDevice};
constexpr MeshReason kReasons[] = {MeshReason::kSameTor, MeshReason::kCrossTor};

}  // namespace

void MeshMetrics::Histogram::add(double rtt_seconds) {
  ++answered;
  rtt_sum += rtt_seconds;
  const auto bucket =
      std::lower_bound(kMeshRttBuckets.begin(), kMeshRttBuckets.end(), rtt_seconds) -
      kMeshRttBuckets.begin();
  if (bucket < static_cast<std::ptrdiff_t>(kMeshRttBuckets.size())) ++buckets[bucket];
}

MeshMetrics::MeshMetrics(std::string local_tor, double budget_hz, MeshClock usual_clock,
                         bool per_peer_rtt)
    : local_tor_(std::move(local_tor)),
      budget_hz_(budget_hz),
      usual_clock_(usual_clock),
      per_peer_rtt_(per_peer_rtt) {}

void MeshMetrics::set_plan(const MeshFabric& fabric, const std::vector<PlannedPing>& plan) {
  const std::lock_guard lock(mutex_);
  std::map<std::string, Peer, std::less<>> next;
  for (const auto& ping : plan) {
    const auto& peer = fabric.peers()[ping.peer];
    auto node = peers_.extract(peer.target);
    Peer state = node.empty() ? Peer{} : std::move(node.mapped());
    state.tor = peer.tor;
    state.reason = ping.reason;
    state.rate_hz = ping.rate_hz;
    next.emplace(peer.target, std::move(state));
  }
  peers_ = std::move(next);
}

void MeshMetrics::record(const std::string& peer, const MeshPingResult& result) {
  const std::lock_guard lock(mutex_);
  const auto it = peers_.find(peer);
  if (it == peers_.end()) return;
  auto& state = it->second;
  ++state.sent;
  if (!result.answered) {
    ++state.lost;
    return;
  }
  const auto clock = static_cast<std::size_t>(result.clock);
  class_rtt_[static_cast<std::size_t>(state.reason)][clock].add(result.rtt_seconds);
  if (per_peer_rtt_) state.rtt[clock].add(result.rtt_seconds);
}

collectors::MetricSet MeshMetrics::collect() const {
  const std::lock_guard lock(mutex_);
  collectors::MetricSet out;
  constexpr std::string_view kSent = "rdma_mesh_pings_sent_total";
  constexpr std::string_view kSentHelp = "Mesh pings sent to the peer.";
  constexpr std::string_view kLost = "rdma_mesh_pings_lost_total";
  constexpr std::string_view kLostHelp =
      "Mesh pings to the peer that got no answer within the timeout.";
  constexpr std::string_view kClassRtt = "rdma_mesh_class_rtt_seconds";
  constexpr std::string_view kClassRttHelp =
      "Mesh ping round-trip time of every peer of a path class (reason: same_tor, cross_tor), the "
      "responder's turnaround subtracted; clock says whether the RNICs' completion timestamps or "
      "the host's clock measured it.";
  constexpr std::string_view kPeerRtt = "rdma_mesh_rtt_seconds";
  constexpr std::string_view kPeerRttHelp =
      "Mesh ping round-trip time per peer (mesh.per_peer_rtt), the responder's turnaround "
      "subtracted; clock says whether the RNICs' completion timestamps or the host's clock "
      "measured it.";
  // Written before the first plan too, without series.
  out.declare(kSent, kSentHelp, MetricType::Counter);
  out.declare(kLost, kLostHelp, MetricType::Counter);
  out.declare(kClassRtt, kClassRttHelp, MetricType::Histogram);
  if (per_peer_rtt_) out.declare(kPeerRtt, kPeerRttHelp, MetricType::Histogram);

  // Histograms on the usual clock are written from the start (when their peer or path class is in
  // the plan), the other clock's once it measured a ping.
  std::array<std::uint64_t, kMeshRttBuckets.size()> cumulative{};
  const auto add_histograms = [&](std::string_view name, std::string_view help,
                                  const collectors::MetricSet::Labels& labels,
                                  const ByClock& by_clock, bool planned) {
    for (const auto clock : kClocks) {
      const auto& measured = by_clock[static_cast<std::size_t>(clock)];
      if (measured.answered == 0 && !(planned && clock == usual_clock_)) continue;
      auto with_clock = labels;
      with_clock.emplace_back("clock", std::string(to_string(clock)));
      std::uint64_t at_or_below = 0;
      for (std::size_t i = 0; i < kMeshRttBuckets.size(); ++i) {
        at_or_below += measured.buckets[i];
        cumulative[i] = at_or_below;
      }
      out.add_histogram(name, help, with_clock, kMeshRttBuckets, cumulative, measured.answered,
                        measured.rtt_sum);
    }
  };

  double rate = 0;
  std::array<double, 2> peers_by_reason{};  // by MeshReason
  for (const auto& [target, state] : peers_) {
    const collectors::MetricSet::Labels labels = {{"local_tor", local_tor_},
                                                  {"peer", target},
                                                  {"peer_tor", state.tor},
                                                  {"reason", std::string(to_string(state.reason))}};
    out.add(kSent, kSentHelp, MetricType::Counter, labels, static_cast<double>(state.sent));
    out.add(kLost, kLostHelp, MetricType::Counter, labels, static_cast<double>(state.lost));
    if (per_peer_rtt_) add_histograms(kPeerRtt, kPeerRttHelp, labels, state.rtt, true);
    rate += state.rate_hz;
    peers_by_reason[static_cast<std::size_t>(state.reason)] += 1;
  }
  for (const auto reason : kReasons) {
    const auto index = static_cast<std::size_t>(reason);
    add_histograms(kClassRtt, kClassRttHelp,
                   {{"local_tor", local_tor_}, {"reason", std::string(to_string(reason))}},
                   class_rtt_[index], peers_by_reason[index] > 0);
  }
  // cross_tor before same_tor, as they always were written.
  for (const auto reason : {MeshReason::kCrossTor, MeshReason::kSameTor}) {
    out.add("rdma_mesh_plan_peers", "Peers in this host's current mesh plan.", MetricType::Gauge,
            {{"local_tor", local_tor_}, {"reason", std::string(to_string(reason))}},
            peers_by_reason[static_cast<std::size_t>(reason)]);
  }
  out.add("rdma_mesh_plan_rate_pings_per_second",
          "Pings per second the current plan sends, all peers together.", MetricType::Gauge,
          {{"local_tor", local_tor_}}, rate);
  out.add("rdma_mesh_budget_pings_per_second", "The host's mesh budget (mesh.host_budget).",
          MetricType::Gauge, {{"local_tor", local_tor_}}, budget_hz_);
  return out;
}

}  // namespace ibprobe::mesh
