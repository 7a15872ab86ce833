#include "mesh_metrics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <iostream>

#include "mesh_fabrics.h"

namespace ibprobe::testing {
namespace {

using mesh::MeshClock;
using mesh::MeshFabric;
using mesh::MeshMetrics;
using mesh::MeshPeer;
using mesh::MeshPingResult;
using mesh::MeshReason;
using mesh::PlannedPing;

std::string text_of(const MeshMetrics& metrics) {
  std::string text;
  metrics.collect().append_text(text);
  return text;
}

// Samples in the exposition: every line that is not a comment.
std::size_t sample_lines(const std::string& text) {
  std::size_t count = 0;
  std::size_t start = 0;
  while (start < text.size()) {
    const auto end = text.find('\n', start);
    if (text[start] != '#' && end != start) ++count;
    start = end == std::string::npos ? text.size() : end + 1;
  }
  return count;
}

const MeshFabric& small_fabric() {
  static const MeshFabric fabric(
      {{"a1:9470", "leaf-a", ""}, {"a2:9470", "leaf-a", ""}, {"b1:9470", "leaf-b", ""}});
  return fabric;
}

std::vector<PlannedPing> plan_of_a1() {
  const auto& f = small_fabric();
  return {{*f.find("a2:9470"), MeshReason::kSameTor, 1.0},
          {*f.find("b1:9470"), MeshReason::kCrossTor, 2.0}};
}

TEST(MeshMetrics, CountsSentAndLostPerPeerWithBothTorsAndRttPerPathClass) {
  MeshMetrics metrics("leaf-a", 100);
  metrics.set_plan(small_fabric(), plan_of_a1());
  metrics.record("b1:9470", {true, 7e-6, MeshClock::kDevice});
  metrics.record("b1:9470", {true, 30e-6, MeshClock::kDevice});
  metrics.record("b1:9470", {false, 0, MeshClock::kDevice});
  metrics.record("a2:9470", {true, 3e-6, MeshClock::kSoftware});
  metrics.record("stranger:9470", {true, 1e-6, MeshClock::kSoftware});
  const auto text = text_of(metrics);
  const std::string b1 =
      R"(local_tor="leaf-a",peer="b1:9470",peer_tor="leaf-b",reason="cross_tor")";
  EXPECT_NE(text.find("rdma_mesh_pings_sent_total{" + b1 + "} 3"), std::string::npos) << text;
  EXPECT_NE(text.find("rdma_mesh_pings_lost_total{" + b1 + "} 1"), std::string::npos);
  const std::string cross = R"(local_tor="leaf-a",reason="cross_tor")";
  EXPECT_NE(
      text.find("rdma_mesh_class_rtt_seconds_bucket{" + cross + R"(,clock="device",le="5e-06"} 0)"),
      std::string::npos);
  EXPECT_NE(
      text.find("rdma_mesh_class_rtt_seconds_bucket{" + cross + R"(,clock="device",le="1e-05"} 1)"),
      std::string::npos);
  EXPECT_NE(
      text.find("rdma_mesh_class_rtt_seconds_bucket{" + cross + R"(,clock="device",le="5e-05"} 2)"),
      std::string::npos);
  EXPECT_NE(text.find("rdma_mesh_class_rtt_seconds_count{" + cross + R"(,clock="device"} 2)"),
            std::string::npos);
  EXPECT_NE(
      text.find(
          R"(rdma_mesh_class_rtt_seconds_bucket{local_tor="leaf-a",reason="same_tor",clock="software",le="5e-06"} 1)"),
      std::string::npos);
  // No histogram names a peer without mesh.per_peer_rtt.
  EXPECT_EQ(text.find("rdma_mesh_rtt_seconds"), std::string::npos) << text;
  EXPECT_EQ(text.find("stranger"), std::string::npos);
  EXPECT_NE(text.find(R"(rdma_mesh_plan_peers{local_tor="leaf-a",reason="cross_tor"} 1)"),
            std::string::npos);
  EXPECT_NE(text.find(R"(rdma_mesh_plan_rate_pings_per_second{local_tor="leaf-a"} 3)"),
            std::string::npos);
  EXPECT_NE(text.find(R"(rdma_mesh_budget_pings_per_second{local_tor="leaf-a"} 100)"),
            std::string::npos);
}

TEST(MeshMetrics, APathClassSumsItsPeersAndOutlivesThem) {
  const MeshFabric fabric({{"a1:9470", "leaf-a", ""},
                           {"b1:9470", "leaf-b", ""},
                           {"b2:9470", "leaf-b", ""},
                           {"c1:9470", "leaf-c", ""}});
  MeshMetrics metrics("leaf-a", 100);
  metrics.set_plan(fabric, {{*fabric.find("b1:9470"), MeshReason::kCrossTor, 1.0},
                            {*fabric.find("c1:9470"), MeshReason::kCrossTor, 1.0}});
  metrics.record("b1:9470", {true, 8e-6, MeshClock::kSoftware});
  metrics.record("c1:9470", {true, 40e-6, MeshClock::kSoftware});
  // The next epoch's sample: another remote host, the class's counts go on.
  metrics.set_plan(fabric, {{*fabric.find("b2:9470"), MeshReason::kCrossTor, 1.0}});
  metrics.record("b2:9470", {true, 9e-6, MeshClock::kSoftware});
  const auto text = text_of(metrics);
  const std::string cross = R"(local_tor="leaf-a",reason="cross_tor",clock="software")";
  EXPECT_NE(text.find("rdma_mesh_class_rtt_seconds_count{" + cross + "} 3"), std::string::npos)
      << text;
  EXPECT_NE(text.find("rdma_mesh_class_rtt_seconds_bucket{" + cross + R"(,le="1e-05"} 2)"),
            std::string::npos);
  EXPECT_NE(text.find("rdma_mesh_class_rtt_seconds_bucket{" + cross + R"(,le="5e-05"} 3)"),
            std::string::npos);
  // No same-ToR peer planned and none answered: no same-ToR histogram.
  EXPECT_EQ(text.find(R"(reason="same_tor",clock=)"), std::string::npos);
}

TEST(MeshMetrics, EachClockKeepsItsOwnHistogramAndTheUsualOneShowsFromTheStart) {
  MeshMetrics metrics("leaf-a", 100, MeshClock::kDevice);
  metrics.set_plan(small_fabric(), plan_of_a1());
  const std::string same = R"(local_tor="leaf-a",reason="same_tor")";
  const std::string cross = R"(local_tor="leaf-a",reason="cross_tor")";
  auto text = text_of(metrics);
  // Nothing answered yet: the device clock's empty histogram per path class, no software one.
  EXPECT_NE(text.find("rdma_mesh_class_rtt_seconds_count{" + same + R"(,clock="device"} 0)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("rdma_mesh_class_rtt_seconds_count{" + cross + R"(,clock="device"} 0)"),
            std::string::npos);
  EXPECT_EQ(text.find(R"(clock="software")"), std::string::npos) << text;

  // b1: two pings on the device clock (8 us, 9 us), one whose follow-up was lost (40 us).
  metrics.record("b1:9470", {true, 8e-6, MeshClock::kDevice});
  metrics.record("b1:9470", {true, 40e-6, MeshClock::kSoftware});
  metrics.record("b1:9470", {true, 9e-6, MeshClock::kDevice});
  text = text_of(metrics);
  EXPECT_NE(text.find("rdma_mesh_class_rtt_seconds_count{" + cross + R"(,clock="device"} 2)"),
            std::string::npos)
      << text;
  EXPECT_NE(
      text.find("rdma_mesh_class_rtt_seconds_bucket{" + cross + R"(,clock="device",le="1e-05"} 2)"),
      std::string::npos);
  EXPECT_NE(text.find("rdma_mesh_class_rtt_seconds_count{" + cross + R"(,clock="software"} 1)"),
            std::string::npos);
  EXPECT_NE(text.find("rdma_mesh_class_rtt_seconds_bucket{" + cross +
                      R"(,clock="software",le="2e-05"} 0)"),
            std::string::npos);
  EXPECT_NE(text.find("rdma_mesh_class_rtt_seconds_bucket{" + cross +
                      R"(,clock="software",le="5e-05"} 1)"),
            std::string::npos);
  EXPECT_NE(
      text.find(
          R"(rdma_mesh_pings_sent_total{local_tor="leaf-a",peer="b1:9470",peer_tor="leaf-b",reason="cross_tor"} 3)"),
      std::string::npos);
  // Same ToR answered nothing on the host clock, so it still has the device histogram alone.
  EXPECT_EQ(text.find("rdma_mesh_class_rtt_seconds_count{" + same + R"(,clock="software")"),
            std::string::npos);
}

// mesh.per_peer_rtt: the per-peer histograms are there with it, each clock apart, and absent
// without it; the path classes' are there either way.
TEST(MeshMetrics, PerPeerRttHistogramsOnlyWithTheKnob) {
  const std::string a2 = R"(local_tor="leaf-a",peer="a2:9470",peer_tor="leaf-a",reason="same_tor")";
  const std::string b1 =
      R"(local_tor="leaf-a",peer="b1:9470",peer_tor="leaf-b",reason="cross_tor")";
  for (const bool per_peer_rtt : {false, true}) {
    MeshMetrics metrics("leaf-a", 100, MeshClock::kDevice, per_peer_rtt);
    metrics.set_plan(small_fabric(), plan_of_a1());
    metrics.record("b1:9470", {true, 7e-6, MeshClock::kDevice});
    metrics.record("b1:9470", {true, 30e-6, MeshClock::kDevice});
    metrics.record("b1:9470", {true, 40e-6, MeshClock::kSoftware});
    metrics.record("b1:9470", {false, 0, MeshClock::kDevice});
    const auto text = text_of(metrics);
    EXPECT_NE(
        text.find(
            R"(rdma_mesh_class_rtt_seconds_count{local_tor="leaf-a",reason="cross_tor",clock="device"} 2)"),
        std::string::npos)
        << text;
    if (!per_peer_rtt) {
      EXPECT_EQ(text.find("rdma_mesh_rtt_seconds"), std::string::npos) << text;
      continue;
    }
    EXPECT_NE(text.find("# TYPE rdma_mesh_rtt_seconds histogram"), std::string::npos) << text;
    EXPECT_NE(text.find("rdma_mesh_rtt_seconds_count{" + b1 + R"(,clock="device"} 2)"),
              std::string::npos);
    EXPECT_NE(text.find("rdma_mesh_rtt_seconds_bucket{" + b1 + R"(,clock="device",le="1e-05"} 1)"),
              std::string::npos);
    EXPECT_NE(text.find("rdma_mesh_rtt_seconds_bucket{" + b1 + R"(,clock="device",le="5e-05"} 2)"),
              std::string::npos);
    EXPECT_NE(text.find("rdma_mesh_rtt_seconds_count{" + b1 + R"(,clock="software"} 1)"),
              std::string::npos);
    // a2 answered nothing: its usual clock's empty histogram, no software one.
    EXPECT_NE(text.find("rdma_mesh_rtt_seconds_count{" + a2 + R"(,clock="device"} 0)"),
              std::string::npos);
    EXPECT_EQ(text.find("rdma_mesh_rtt_seconds_count{" + a2 + R"(,clock="software")"),
              std::string::npos);
  }
}

TEST(MeshMetrics, PeersLeavingThePlanLoseTheirSeriesAndStayingOnesKeepTheirCounts) {
  for (const bool per_peer_rtt : {false, true}) {
    MeshMetrics metrics("leaf-a", 100, MeshClock::kSoftware, per_peer_rtt);
    metrics.set_plan(small_fabric(), plan_of_a1());
    metrics.record("a2:9470", {false, 0, MeshClock::kSoftware});
    metrics.record("b1:9470", {false, 0, MeshClock::kSoftware});
    metrics.record("b1:9470", {true, 7e-6, MeshClock::kSoftware});
    metrics.set_plan(small_fabric(), {plan_of_a1()[0]});
    const auto text = text_of(metrics);
    EXPECT_EQ(text.find("b1:9470"), std::string::npos) << text;
    EXPECT_NE(
        text.find(
            R"(rdma_mesh_pings_lost_total{local_tor="leaf-a",peer="a2:9470",peer_tor="leaf-a",reason="same_tor"} 1)"),
        std::string::npos);
  }
}

// Series a host writes for a plan: sent and lost per peer, the path classes' histograms on both
// clocks (the worst case: every class also measured a ping on the other clock), 4 per host.
std::size_t series_of_plan(const MeshFabric& fabric, std::size_t self,
                           const std::vector<PlannedPing>& plan, bool per_peer_rtt) {
  MeshMetrics metrics(fabric.peers()[self].tor, 100, MeshClock::kDevice, per_peer_rtt);
  metrics.set_plan(fabric, plan);
  for (const auto& ping : plan) {
    metrics.record(fabric.peers()[ping.peer].target, {true, 8e-6, MeshClock::kSoftware});
  }
  return sample_lines(text_of(metrics));
}

// The 10,000-host fabrics of the simulation, every host's plan written by the metric writer: at
// most 300 mesh series on any host, at most 3 million across the fabric, whatever the fabric's
// size beyond its ToRs. Before the path classes it was 16 per peer plus 4 (1,108 at 69 peers).
TEST(MeshMetrics, SeriesPerHostAreBoundedByTheFabricsShapeInATenThousandHostFabric) {
  const auto at = std::chrono::system_clock::time_point(std::chrono::seconds(1780000000));
  const std::pair<const char*, std::vector<MeshPeer>> fabrics[] = {
      {"500 ToRs of 20", uniform_mesh_fabric(500, 20)},
      {"500 ToRs of 1 to 40", uneven_mesh_fabric()}};
  for (const auto& [name, peers] : fabrics) {
    const MeshFabric fabric(peers);
    std::size_t total = 0, most = 0, most_peers = 0, planned = 0;
    for (std::size_t self = 0; self < fabric.peers().size(); ++self) {
      const auto plan = mesh::plan_mesh(fabric, self, at, {});
      const auto series = series_of_plan(fabric, self, plan, false);
      // Per peer: sent and lost; per path class and clock 12 buckets, sum and count; then 2
      // plan_peers, rate and budget.
      std::size_t classes = 0;
      for (const auto reason : {MeshReason::kSameTor, MeshReason::kCrossTor}) {
        classes += std::ranges::any_of(plan, [&](const auto& p) { return p.reason == reason; });
      }
      EXPECT_EQ(series, plan.size() * 2 + classes * 2 * 14 + 4) << fabric.peers()[self].target;
      total += series;
      planned += plan.size();
      if (series > most) {
        most = series;
        most_peers = plan.size();
      }
    }
    EXPECT_LE(most, 300u) << name;
    EXPECT_LE(total, 3'000'000u) << name;
    // The same plans as the series were before: 16 per peer (one clock) plus 4.
    const auto before = planned * 16 + fabric.peers().size() * 4;
    std::cout << "10,000 hosts in " << name << ": at most " << most << " mesh series on a host ("
              << most_peers << " peers), " << total << " across the fabric; 16 per peer plus 4 "
              << "would be " << before << "\n";
  }

  // One host of the uniform fabric, as before: 69 peers.
  const MeshFabric fabric(uniform_mesh_fabric(500, 20));
  const auto self = *fabric.find(mesh_host_name(123, 4));
  const auto plan = mesh::plan_mesh(fabric, self, at, {});
  const auto series = series_of_plan(fabric, self, plan, false);
  // With mesh.per_peer_rtt, 14 more per peer and clock that measured it: here both.
  const auto with_knob = series_of_plan(fabric, self, plan, true);
  EXPECT_EQ(with_knob, series + plan.size() * 2 * 14);
  std::cout << "host 10.0.123.5: " << plan.size() << " peers planned, " << series
            << " mesh series; with mesh.per_peer_rtt " << with_knob << "\n";
}

}  // namespace
}  // namespace ibprobe::testing
