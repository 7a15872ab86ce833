#include "mesh_metrics.h"

#include <algorithm>
#include <limits>

namespace ibprobe::exporter {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
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

std::vector<MetricFamily> MeshMetrics::collect() const {
  const std::lock_guard lock(mutex_);
  MetricFamily sent{
      "rdma_mesh_pings_sent_total", "Mesh pings sent to the peer.", MetricType::Counter, {}};
  MetricFamily lost{"rdma_mesh_pings_lost_total",
                    "Mesh pings to the peer that got no answer within the timeout.",
                    MetricType::Counter,
                    {}};
  MetricFamily rtt{"rdma_mesh_rtt_seconds",
                   "Mesh ping round-trip time, the responder's turnaround subtracted; clock says "
                   "whether the RNICs' completion timestamps or the host's clock measured it.",
                   MetricType::Histogram,
                   {}};
  double rate = 0;
  std::map<std::string, double> peers_by_reason{{"same_tor", 0}, {"cross_tor", 0}};
  for (const auto& [target, state] : peers_) {
    const std::vector<ClientMetric::Label> labels = {
        {"local_tor", local_tor_},
        {"peer", target},
        {"peer_tor", state.tor},
        {"reason", std::string(to_string(state.reason))}};
    ClientMetric metric;
    metric.label = labels;
    metric.counter.value = static_cast<double>(state.sent);
    sent.metric.push_back(metric);
    metric.counter.value = static_cast<double>(state.lost);
    lost.metric.push_back(metric);
    for (const auto clock : {MeshClock::kSoftware, MeshClock::kDevice}) {
      const auto& measured = state.rtt[static_cast<std::size_t>(clock)];
      if (clock != usual_clock_ && measured.answered == 0) continue;
      ClientMetric histogram;
      histogram.label = labels;
      histogram.label.push_back({"clock", std::string(to_string(clock))});
      std::uint64_t cumulative = 0;
      for (std::size_t i = 0; i < kMeshRttBuckets.size(); ++i) {
        cumulative += measured.buckets[i];
        histogram.histogram.bucket.push_back({cumulative, kMeshRttBuckets[i]});
      }
      histogram.histogram.bucket.push_back(
          {measured.answered, std::numeric_limits<double>::infinity()});
      histogram.histogram.sample_count = measured.answered;
      histogram.histogram.sample_sum = measured.rtt_sum;
      rtt.metric.push_back(std::move(histogram));
    }
    rate += state.rate_hz;
    peers_by_reason[std::string(to_string(state.reason))] += 1;
  }
  MetricFamily plan{
      "rdma_mesh_plan_peers", "Peers in this host's current mesh plan.", MetricType::Gauge, {}};
  for (const auto& [reason, count] : peers_by_reason) {
    ClientMetric metric;
    metric.label = {{"local_tor", local_tor_}, {"reason", reason}};
    metric.gauge.value = count;
    plan.metric.push_back(metric);
  }
  auto gauge = [this](std::string name, std::string help, double value) {
    MetricFamily family{std::move(name), std::move(help), MetricType::Gauge, {}};
    ClientMetric metric;
    metric.label = {{"local_tor", local_tor_}};
    metric.gauge.value = value;
    family.metric.push_back(metric);
    return family;
  };
  std::vector<MetricFamily> families = {std::move(sent), std::move(lost), std::move(rtt),
                                        std::move(plan)};
  families.push_back(gauge("rdma_mesh_plan_rate_pings_per_second",
                           "Pings per second the current plan sends, all peers together.", rate));
  families.push_back(gauge("rdma_mesh_budget_pings_per_second",
                           "The host's mesh budget (mesh.host_budget).", budget_hz_));
  return families;
}

}  // namespace ibprobe::exporter
