#include "mesh_metrics.h"

#include <gtest/gtest.h>

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
std::size_t series_count(const std::string& text) {
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

TEST(MeshMetrics, CountsSentLostAndRttPerPeerWithBothTors) {
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
  EXPECT_NE(text.find("rdma_mesh_rtt_seconds_bucket{" + b1 + R"(,clock="device",le="5e-06"} 0)"),
            std::string::npos);
  EXPECT_NE(text.find("rdma_mesh_rtt_seconds_bucket{" + b1 + R"(,clock="device",le="1e-05"} 1)"),
            std::string::npos);
  EXPECT_NE(text.find("rdma_mesh_rtt_seconds_bucket{" + b1 + R"(,clock="device",le="5e-05"} 2)"),
            std::string::npos);
  EXPECT_NE(text.find("rdma_mesh_rtt_seconds_count{" + b1 + R"(,clock="device"} 2)"),
            std::string::npos);
  EXPECT_NE(
      text.find(
          R"(peer="a2:9470",peer_tor="leaf-a",reason="same_tor",clock="software",le="5e-06"} 1)"),
      std::string::npos);
  EXPECT_EQ(text.find("stranger"), std::string::npos);
  EXPECT_NE(text.find(R"(rdma_mesh_plan_peers{local_tor="leaf-a",reason="cross_tor"} 1)"),
            std::string::npos);
  EXPECT_NE(text.find(R"(rdma_mesh_plan_rate_pings_per_second{local_tor="leaf-a"} 3)"),
            std::string::npos);
  EXPECT_NE(text.find(R"(rdma_mesh_budget_pings_per_second{local_tor="leaf-a"} 100)"),
            std::string::npos);
}

TEST(MeshMetrics, EachClockKeepsItsOwnHistogramAndTheUsualOneShowsFromTheStart) {
  MeshMetrics metrics("leaf-a", 100, MeshClock::kDevice);
  metrics.set_plan(small_fabric(), plan_of_a1());
  const std::string a2 = R"(local_tor="leaf-a",peer="a2:9470",peer_tor="leaf-a",reason="same_tor")";
  const std::string b1 =
      R"(local_tor="leaf-a",peer="b1:9470",peer_tor="leaf-b",reason="cross_tor")";
  auto text = text_of(metrics);
  // Nothing answered yet: the device clock's empty histogram per peer, no software one.
  EXPECT_NE(text.find("rdma_mesh_rtt_seconds_count{" + a2 + R"(,clock="device"} 0)"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find(R"(clock="software")"), std::string::npos) << text;

  // b1: two pings on the device clock (8 us, 9 us), one whose follow-up was lost (40 us).
  metrics.record("b1:9470", {true, 8e-6, MeshClock::kDevice});
  metrics.record("b1:9470", {true, 40e-6, MeshClock::kSoftware});
  metrics.record("b1:9470", {true, 9e-6, MeshClock::kDevice});
  text = text_of(metrics);
  EXPECT_NE(text.find("rdma_mesh_rtt_seconds_count{" + b1 + R"(,clock="device"} 2)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("rdma_mesh_rtt_seconds_bucket{" + b1 + R"(,clock="device",le="1e-05"} 2)"),
            std::string::npos);
  EXPECT_NE(text.find("rdma_mesh_rtt_seconds_count{" + b1 + R"(,clock="software"} 1)"),
            std::string::npos);
  EXPECT_NE(text.find("rdma_mesh_rtt_seconds_bucket{" + b1 + R"(,clock="software",le="2e-05"} 0)"),
            std::string::npos);
  EXPECT_NE(text.find("rdma_mesh_rtt_seconds_bucket{" + b1 + R"(,clock="software",le="5e-05"} 1)"),
            std::string::npos);
  EXPECT_NE(text.find("rdma_mesh_pings_sent_total{" + b1 + "} 3"), std::string::npos);
  // a2 answered nothing on the host clock, so it still has the device histogram alone.
  EXPECT_EQ(text.find("rdma_mesh_rtt_seconds_count{" + a2 + R"(,clock="software")"),
            std::string::npos);
}

TEST(MeshMetrics, PeersLeavingThePlanLoseTheirSeriesAndStayingOnesKeepTheirCounts) {
  MeshMetrics metrics("leaf-a", 100);
  metrics.set_plan(small_fabric(), plan_of_a1());
  metrics.record("a2:9470", {false, 0, MeshClock::kSoftware});
  metrics.record("b1:9470", {false, 0, MeshClock::kSoftware});
  metrics.set_plan(small_fabric(), {plan_of_a1()[0]});
  const auto text = text_of(metrics);
  EXPECT_EQ(text.find("b1:9470"), std::string::npos);
  EXPECT_NE(
      text.find(
          R"(rdma_mesh_pings_lost_total{local_tor="leaf-a",peer="a2:9470",peer_tor="leaf-a",reason="same_tor"} 1)"),
      std::string::npos);
}

TEST(MeshMetrics, SeriesPerHostAreBoundedByThePlanInATenThousandHostFabric) {
  const MeshFabric fabric(uniform_mesh_fabric(500, 20));
  const auto self = *fabric.find(mesh_host_name(123, 4));
  const auto plan = mesh::plan_mesh(fabric, self, std::chrono::system_clock::now(), {});
  MeshMetrics metrics("leaf123", 100);
  metrics.set_plan(fabric, plan);
  const auto series = series_count(text_of(metrics));
  // Per peer: sent, lost, 12 histogram buckets, sum and count; then 2 plan_peers, rate, budget.
  EXPECT_EQ(series, plan.size() * 16 + 4);
  std::cout << "10,000 hosts in 500 ToRs: " << plan.size() << " peers planned, " << series
            << " mesh series on this host's /metrics\n";
}

}  // namespace
}  // namespace ibprobe::testing
