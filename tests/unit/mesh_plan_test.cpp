#include "ibprobe/mesh_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace ibprobe::testing {
namespace {

using mesh::cross_tor_coverage_epochs;
using mesh::MeshFabric;
using mesh::MeshPeer;
using mesh::MeshPolicy;
using mesh::MeshReason;
using mesh::plan_mesh;
using mesh::PlannedPing;
using Clock = std::chrono::system_clock;

Clock::time_point at(std::int64_t seconds) {
  return Clock::time_point(std::chrono::seconds(seconds));
}

// `tors` ToRs named t0, t1, ... of `hosts` hosts each, named h<tor>-<host>:9470.
std::vector<MeshPeer> fabric_of(int tors, int hosts, const std::string& family = "ipv4") {
  std::vector<MeshPeer> peers;
  for (int t = 0; t < tors; ++t) {
    for (int h = 0; h < hosts; ++h) {
      peers.push_back({"h" + std::to_string(t) + "-" + std::to_string(h) + ":9470",
                       "t" + std::to_string(t), family});
    }
  }
  return peers;
}

std::size_t index_of(const MeshFabric& fabric, const std::string& target) {
  const auto found = fabric.find(target);
  EXPECT_TRUE(found) << target;
  return found.value_or(0);
}

double total_rate(const std::vector<PlannedPing>& plan) {
  double total = 0;
  for (const auto& ping : plan) total += ping.rate_hz;
  return total;
}

TEST(MeshPlan, FullMeshWithinATorAtThePeerRate) {
  const MeshFabric fabric(fabric_of(1, 5));
  for (std::size_t self = 0; self < 5; ++self) {
    const auto plan = plan_mesh(fabric, self, at(0), MeshPolicy{});
    ASSERT_EQ(plan.size(), 4u);
    for (const auto& ping : plan) {
      EXPECT_NE(ping.peer, self);
      EXPECT_EQ(ping.reason, MeshReason::kSameTor);
      EXPECT_DOUBLE_EQ(ping.rate_hz, 1.0);
    }
  }
}

TEST(MeshPlan, PeerRateIsApplied) {
  const MeshFabric fabric(fabric_of(1, 3));
  MeshPolicy policy;
  policy.peer_rate_hz = 2.5;
  for (const auto& ping : plan_mesh(fabric, 0, at(0), policy)) EXPECT_DOUBLE_EQ(ping.rate_hz, 2.5);
}

TEST(MeshPlan, ABigTorKeepsItsFullMeshWithinTheBudgetAtALowerRate) {
  const MeshFabric alone(fabric_of(1, 201));
  const auto plan = plan_mesh(alone, 0, at(0), MeshPolicy{});
  ASSERT_EQ(plan.size(), 200u);
  EXPECT_DOUBLE_EQ(plan.front().rate_hz, 100.0 / 200);
  EXPECT_LE(total_rate(plan), 100.0 + 1e-9);

  // With other ToRs to sample, the same-ToR mesh takes 80 of the 100 pings per second.
  auto peers = fabric_of(1, 201);
  peers.push_back({"other:9470", "t-other", "ipv4"});
  const MeshFabric with_other(peers);
  const auto mixed = plan_mesh(with_other, index_of(with_other, "h0-0:9470"), at(0), MeshPolicy{});
  for (const auto& ping : mixed) {
    if (ping.reason == MeshReason::kSameTor) {
      EXPECT_DOUBLE_EQ(ping.rate_hz, 80.0 / 200);
    }
  }
  EXPECT_LE(total_rate(mixed), 100.0 + 1e-9);

  MeshPolicy small_budget;
  small_budget.host_budget_hz = 20;
  EXPECT_DOUBLE_EQ(plan_mesh(alone, 0, at(0), small_budget).front().rate_hz, 20.0 / 200);
}

TEST(MeshPlan, NeverPairsGidFamiliesOrSelf) {
  auto peers = fabric_of(2, 3, "ipv4");
  peers.push_back({"v6-a:9470", "t0", "ipv6"});
  peers.push_back({"v6-b:9470", "t1", "ipv6"});
  const MeshFabric fabric(peers);
  for (std::size_t self = 0; self < fabric.peers().size(); ++self) {
    for (const auto& ping : plan_mesh(fabric, self, at(1000), MeshPolicy{})) {
      EXPECT_NE(ping.peer, self);
      EXPECT_EQ(fabric.peers()[ping.peer].gid_family, fabric.peers()[self].gid_family)
          << fabric.peers()[self].target << " -> " << fabric.peers()[ping.peer].target;
    }
  }
  // The two IPv6 hosts are each other's only peer.
  const auto v6 = plan_mesh(fabric, index_of(fabric, "v6-a:9470"), at(0), MeshPolicy{});
  ASSERT_EQ(v6.size(), 1u);
  EXPECT_EQ(fabric.peers()[v6[0].peer].target, "v6-b:9470");
}

// Host pairs (prober, target) from ToR `from` to ToR `to` at `when`.
std::set<std::pair<std::string, std::string>> cross_pairs(const MeshFabric& fabric,
                                                          const std::string& from,
                                                          const std::string& to,
                                                          Clock::time_point when,
                                                          const MeshPolicy& policy) {
  std::set<std::pair<std::string, std::string>> pairs;
  for (std::size_t self = 0; self < fabric.peers().size(); ++self) {
    if (fabric.peers()[self].tor != from) continue;
    for (const auto& ping : plan_mesh(fabric, self, when, policy)) {
      if (fabric.peers()[ping.peer].tor == to) {
        EXPECT_EQ(ping.reason, MeshReason::kCrossTor);
        pairs.emplace(fabric.peers()[self].target, fabric.peers()[ping.peer].target);
      }
    }
  }
  return pairs;
}

TEST(MeshPlan, EachTorPairGetsTheConfiguredNumberOfDistinctHostPairs) {
  const MeshFabric fabric(fabric_of(2, 10));
  for (const int pairs_wanted : {1, 2, 3}) {
    MeshPolicy policy;
    policy.host_pairs_per_tor_pair = pairs_wanted;
    const auto pairs = cross_pairs(fabric, "t0", "t1", at(5000), policy);
    ASSERT_EQ(pairs.size(), static_cast<std::size_t>(pairs_wanted));
    std::set<std::string> probers, targets;
    for (const auto& [prober, target] : pairs) {
      probers.insert(prober);
      targets.insert(target);
    }
    EXPECT_EQ(probers.size(), pairs.size());
    EXPECT_EQ(targets.size(), pairs.size());
  }
}

TEST(MeshPlan, TheSampleIsConstantWithinAnEpochAndRotatesAcrossEpochs) {
  const MeshFabric fabric(fabric_of(2, 10));
  MeshPolicy policy;
  policy.epoch = std::chrono::seconds(60);
  const auto first = cross_pairs(fabric, "t0", "t1", at(600), policy);
  EXPECT_EQ(cross_pairs(fabric, "t0", "t1", at(659), policy), first);
  std::set<std::set<std::pair<std::string, std::string>>> seen;
  for (int epoch = 10; epoch < 30; ++epoch) {
    seen.insert(cross_pairs(fabric, "t0", "t1", at(epoch * 60), policy));
  }
  // Two pairs drawn from 10 x 10 hosts: twenty epochs all alike would mean no rotation at all.
  EXPECT_GT(seen.size(), 10u);

  // The epoch knob: with 600 s epochs, 600 and 1199 are one epoch, with 60 s ones they are not.
  policy.epoch = std::chrono::seconds(600);
  EXPECT_EQ(cross_pairs(fabric, "t0", "t1", at(600), policy),
            cross_pairs(fabric, "t0", "t1", at(1199), policy));
}

TEST(MeshPlan, HostsOfSmallTorsGetTheMinimumNumberOfWatchers) {
  auto peers = fabric_of(4, 8);
  peers.push_back({"lonely:9470", "t-lonely", "ipv4"});
  const MeshFabric fabric(peers);
  const auto lonely = index_of(fabric, "lonely:9470");
  for (const int min_watchers : {3, 5}) {
    MeshPolicy policy;
    policy.min_watchers = min_watchers;
    for (std::int64_t when : {0, 600, 1200, 99999}) {
      int watchers = 0;
      for (std::size_t self = 0; self < fabric.peers().size(); ++self) {
        for (const auto& ping : plan_mesh(fabric, self, at(when), policy)) {
          if (ping.peer == lonely) ++watchers;
        }
      }
      EXPECT_GE(watchers, min_watchers) << "at " << when;
    }
  }
}

TEST(MeshPlan, EveryRemoteTorComesRoundWithinTheCoverageBound) {
  // 60 ToRs of 2 hosts, 10 pings/s: one same-ToR ping, the rest too few for 59 remote ToRs at once.
  const MeshFabric fabric(fabric_of(60, 2));
  MeshPolicy policy;
  policy.host_budget_hz = 10;
  policy.min_watchers = 0;
  const auto self = index_of(fabric, "h0-0:9470");
  const auto bound = cross_tor_coverage_epochs(fabric, self, policy);
  ASSERT_TRUE(bound);
  EXPECT_GT(*bound, 1);
  for (std::int64_t first = 0; first < 5; ++first) {
    std::set<std::string> covered;
    for (std::int64_t epoch = first; epoch < first + *bound; ++epoch) {
      for (const std::string host : {"h0-0:9470", "h0-1:9470"}) {
        for (const auto& ping :
             plan_mesh(fabric, index_of(fabric, host), at(epoch * 600), policy)) {
          covered.insert(fabric.peers()[ping.peer].tor);
        }
      }
      for (const std::string host : {"h0-0:9470", "h0-1:9470"}) {
        EXPECT_LE(total_rate(plan_mesh(fabric, index_of(fabric, host), at(epoch * 600), policy)),
                  10 + 1e-9);
      }
    }
    covered.erase("t0");
    EXPECT_EQ(covered.size(), 59u) << "epochs " << first << ".." << first + *bound - 1;
  }
}

TEST(MeshPlan, DoesNotDependOnTheOrderOfThePeerList) {
  auto peers = fabric_of(7, 5);
  const MeshFabric sorted(peers);
  std::mt19937 shuffle(42);
  std::shuffle(peers.begin(), peers.end(), shuffle);
  const MeshFabric shuffled(peers);
  for (const auto& peer : sorted.peers()) {
    auto targets = [&](const MeshFabric& fabric) {
      std::vector<std::string> result;
      for (const auto& ping :
           plan_mesh(fabric, index_of(fabric, peer.target), at(123456), MeshPolicy{})) {
        result.push_back(fabric.peers()[ping.peer].target);
      }
      return result;
    };
    EXPECT_EQ(targets(sorted), targets(shuffled)) << peer.target;
  }
}

TEST(MeshPlan, RefusesDuplicateAndEmptyTargets) {
  EXPECT_THROW(MeshFabric({{"a:1", "t", ""}, {"a:1", "u", ""}}), std::invalid_argument);
  EXPECT_THROW(MeshFabric({{"", "t", ""}}), std::invalid_argument);
}

}  // namespace
}  // namespace ibprobe::testing
