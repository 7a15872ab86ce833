#include "mesh_metrics.h"

#include <algorithm>

namespace ibprobe::mesh {
namespace {

using prometheus::MetricType;

std::string_view to_string(MeshClock clock) {
  return clock == MeshClock::kDevice ? "device" : "software";
}

}  // namespace

MeshMetrics::MeshMetrics(std::string local_tor, double budget_hz, MeshClock usual_clock)
    : local_tor_(std::move(local_tor)), budget_hz_(budget_hz), usual_clock_(usual_clock) {}

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
  auto& histogram = state.rtt[static_cast<std::size_t>(result.clock)];
  ++histogram.answered;
  histogram.rtt_sum += result.rtt_seconds;
  const auto bucket =
      std::lower_bound(kMeshRttBuckets.begin(), kMeshRttBuckets.end(), result.rtt_seconds) -
      kMeshRttBuckets.begin();
  if (bucket < static_cast<std::ptrdiff_t>(kMeshRttBuckets.size())) ++histogram.buckets[bucket];
}

collectors::MetricSet MeshMetrics::collect() const {
  const std::lock_guard lock(mutex_);
  collectors::MetricSet out;
  constexpr std::string_view kSent = "rdma_mesh_pings_sent_total";
  constexpr std::string_view kSentHelp = "Mesh pings sent to the peer.";
  constexpr std::string_view kLost = "rdma_mesh_pings_lost_total";
  constexpr std::string_view kLostHelp =
      "Mesh pings to the peer that got no answer within the timeout.";
  constexpr std::string_view kRtt = "rdma_mesh_rtt_seconds";
  constexpr std::string_view kRttHelp =
      "Mesh ping round-trip time, the responder's turnaround subtracted; clock says whether the "
      "RNICs' completion timestamps or the host's clock measured it.";
  // Written before the first plan too, without series.
  out.declare(kSent, kSentHelp, MetricType::Counter);
  out.declare(kLost, kLostHelp, MetricType::Counter);
  out.declare(kRtt, kRttHelp, MetricType::Histogram);
  double rate = 0;
  std::map<std::string, double> peers_by_reason{{"same_tor", 0}, {"cross_tor", 0}};
  std::array<std::uint64_t, kMeshRttBuckets.size()> cumulative{};
  for (const auto& [target, state] : peers_) {
    const collectors::MetricSet::Labels labels = {{"local_tor", local_tor_},
                                                  {"peer", target},
                                                  {"peer_tor", state.tor},
                                                  {"reason", std::string(to_string(state.reason))}};
    out.add(kSent, kSentHelp, MetricType::Counter, labels, static_cast<double>(state.sent));
    out.add(kLost, kLostHelp, MetricType::Counter, labels, static_cast<double>(state.lost));
    for (const auto clock : {MeshClock::kSoftware, MeshClock::kDevice}) {
      const auto& measured = state.rtt[static_cast<std::size_t>(clock)];
      if (clock != usual_clock_ && measured.answered == 0) continue;
      auto with_clock = labels;
      with_clock.emplace_back("clock", std::string(to_string(clock)));
      std::uint64_t at_or_below = 0;
      for (std::size_t i = 0; i < kMeshRttBuckets.size(); ++i) {
        at_or_below += measured.buckets[i];
        cumulative[i] = at_or_below;
      }
      out.add_histogram(kRtt, kRttHelp, with_clock, kMeshRttBuckets, cumulative, measured.answered,
                        measured.rtt_sum);
    }
    rate += state.rate_hz;
    peers_by_reason[std::string(to_string(state.reason))] += 1;
  }
  for (const auto& [reason, count] : peers_by_reason) {
    out.add("rdma_mesh_plan_peers", "Peers in this host's current mesh plan.", MetricType::Gauge,
            {{"local_tor", local_tor_}, {"reason", reason}}, count);
  }
  out.add("rdma_mesh_plan_rate_pings_per_second",
          "Pings per second the current plan sends, all peers together.", MetricType::Gauge,
          {{"local_tor", local_tor_}}, rate);
  out.add("rdma_mesh_budget_pings_per_second", "The host's mesh budget (mesh.host_budget).",
          MetricType::Gauge, {{"local_tor", local_tor_}}, budget_hz_);
  return out;
}

}  // namespace ibprobe::mesh
