// The mesh planner over whole fabrics, hour by hour: every host's plan within its budget, every
// ToR pair covered within the hour, every host watched by at least min_watchers peers in every
// epoch (plans change only at epoch boundaries, so an epoch is an instant of the mesh).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <set>
#include <vector>

#include "ibprobe/mesh_plan.h"
#include "mesh_fabrics.h"

namespace ibprobe::testing {
namespace {

using mesh::MeshFabric;
using mesh::MeshPolicy;
using mesh::MeshReason;
using mesh::plan_mesh;
using Clock = std::chrono::system_clock;

// An arbitrary instant off an epoch boundary, so the hour checked spans partial epochs.
constexpr std::int64_t kStart = 1'780'000'123;

struct EpochFigures {
  std::vector<std::vector<bool>> covered;  // [tor][tor], either direction
  std::size_t min_watchers = SIZE_MAX;
  std::size_t max_watchers = 0;
  double max_rate = 0;
  std::size_t max_plan = 0;
  std::size_t cross_pings = 0;
};

struct Fabric {
  MeshFabric mesh;
  std::vector<std::size_t> tor_of;  // dense ToR index per peer
  std::size_t tors = 0;
  explicit Fabric(std::vector<mesh::MeshPeer> peers) : mesh(std::move(peers)) {
    std::map<std::string, std::size_t> ids;
    for (const auto& peer : mesh.peers()) {
      const auto& name = peer.tor.empty() ? peer.target : peer.tor;
      tor_of.push_back(ids.try_emplace(name, ids.size()).first->second);
    }
    tors = ids.size();
  }
};

// Plans every host at `when` and checks what must hold of each plan on its own.
EpochFigures plan_epoch(const Fabric& fabric, Clock::time_point when, const MeshPolicy& policy) {
  const auto& peers = fabric.mesh.peers();
  EpochFigures figures;
  figures.covered.assign(fabric.tors, std::vector<bool>(fabric.tors, false));
  std::vector<std::size_t> watchers(peers.size(), 0);
  for (std::size_t self = 0; self < peers.size(); ++self) {
    const auto plan = plan_mesh(fabric.mesh, self, when, policy);
    double rate = 0;
    std::set<std::size_t> distinct;
    for (const auto& ping : plan) {
      rate += ping.rate_hz;
      EXPECT_NE(ping.peer, self);
      EXPECT_EQ(peers[ping.peer].gid_family, peers[self].gid_family);
      EXPECT_EQ(ping.reason == MeshReason::kSameTor,
                !peers[self].tor.empty() && peers[ping.peer].tor == peers[self].tor);
      EXPECT_TRUE(distinct.insert(ping.peer).second) << "peer planned twice";
      ++watchers[ping.peer];
      const auto a = fabric.tor_of[self], b = fabric.tor_of[ping.peer];
      figures.covered[a][b] = figures.covered[b][a] = true;
      if (ping.reason == MeshReason::kCrossTor) ++figures.cross_pings;
    }
    EXPECT_LE(rate, policy.host_budget_hz + 1e-9) << peers[self].target;
    figures.max_rate = std::max(figures.max_rate, rate);
    figures.max_plan = std::max(figures.max_plan, plan.size());
  }
  for (std::size_t host = 0; host < peers.size(); ++host) {
    // A host alone in its GID family has nobody to be watched by.
    figures.min_watchers = std::min(figures.min_watchers, watchers[host]);
    figures.max_watchers = std::max(figures.max_watchers, watchers[host]);
  }
  return figures;
}

// ToR pairs that can be paired at all: both in one GID family.
std::size_t pairable_tor_pairs(const Fabric& fabric, std::vector<std::vector<bool>>* pairable) {
  std::vector<std::string> family(fabric.tors);
  for (std::size_t i = 0; i < fabric.mesh.peers().size(); ++i) {
    family[fabric.tor_of[i]] = fabric.mesh.peers()[i].gid_family;
  }
  pairable->assign(fabric.tors, std::vector<bool>(fabric.tors, false));
  std::size_t count = 0;
  for (std::size_t a = 0; a < fabric.tors; ++a) {
    for (std::size_t b = a + 1; b < fabric.tors; ++b) {
      if (family[a] == family[b]) {
        (*pairable)[a][b] = true;
        ++count;
      }
    }
  }
  return count;
}

// Simulates `epochs` consecutive epochs and checks that every `window` consecutive ones cover
// every pairable ToR pair, and that every host has min_watchers watchers in every epoch.
void simulate(const std::string& name, const Fabric& fabric, const MeshPolicy& policy, int epochs,
              int window) {
  std::vector<std::vector<bool>> pairable;
  const std::size_t pairs = pairable_tor_pairs(fabric, &pairable);
  std::vector<EpochFigures> history;
  const auto started = std::chrono::steady_clock::now();
  for (int e = 0; e < epochs; ++e) {
    const auto when = Clock::time_point(std::chrono::seconds(kStart + e * policy.epoch.count()));
    history.push_back(plan_epoch(fabric, when, policy));
    EXPECT_GE(history.back().min_watchers, static_cast<std::size_t>(policy.min_watchers))
        << name << ": epoch " << e;
  }
  const auto seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::size_t worst_window_covered = pairs;
  for (int first = 0; first + window <= epochs; ++first) {
    std::size_t covered = 0;
    for (std::size_t a = 0; a < fabric.tors; ++a) {
      for (std::size_t b = a + 1; b < fabric.tors; ++b) {
        if (!pairable[a][b]) continue;
        bool seen = false;
        for (int e = first; e < first + window && !seen; ++e) seen = history[e].covered[a][b];
        covered += seen;
      }
    }
    worst_window_covered = std::min(worst_window_covered, covered);
  }
  EXPECT_EQ(worst_window_covered, pairs) << name;
  std::size_t first_epoch_covered = 0, min_watchers = SIZE_MAX, max_watchers = 0, max_plan = 0;
  double max_rate = 0;
  for (std::size_t a = 0; a < fabric.tors; ++a) {
    for (std::size_t b = a + 1; b < fabric.tors; ++b) {
      first_epoch_covered += pairable[a][b] && history[0].covered[a][b];
    }
  }
  for (const auto& figures : history) {
    min_watchers = std::min(min_watchers, figures.min_watchers);
    max_watchers = std::max(max_watchers, figures.max_watchers);
    max_plan = std::max(max_plan, figures.max_plan);
    max_rate = std::max(max_rate, figures.max_rate);
  }
  std::cout << name << ": " << fabric.mesh.peers().size() << " hosts, " << fabric.tors << " ToRs, "
            << pairs << " pairable ToR pairs; " << epochs << " epochs of " << policy.epoch.count()
            << " s planned in " << seconds << " s\n"
            << "  ToR pairs covered: " << first_epoch_covered << " in one epoch, "
            << worst_window_covered << " in every " << window << " consecutive epochs\n"
            << "  watchers per host: min " << min_watchers << ", max " << max_watchers
            << "; largest plan " << max_plan << " peers, highest rate " << max_rate
            << " pings/s (budget " << policy.host_budget_hz << ")\n";
}

// An hour of 600 s epochs starting anywhere contains five whole epochs; covering every ToR pair
// in every five consecutive epochs is covering it within every hour.
constexpr int kEpochsPerHour = 5;

TEST(MeshSimulation, TenThousandHostsInFiveHundredTors) {
  const Fabric fabric(uniform_mesh_fabric(500, 20));
  simulate("uniform", fabric, MeshPolicy{}, 7, kEpochsPerHour);
}

TEST(MeshSimulation, TenThousandHostsInUnevenTorsAndTwoGidFamilies) {
  const Fabric fabric(uneven_mesh_fabric());
  ASSERT_EQ(fabric.mesh.peers().size(), 10000u);
  ASSERT_EQ(fabric.tors, 500u);
  simulate("uneven", fabric, MeshPolicy{}, 7, kEpochsPerHour);
}

TEST(MeshSimulation, UnlabelledPeersFromDnsAreCoveredWithinTheBound) {
  // Without ToRs every host is its own group: the bound is then hosts / budget epochs, longer
  // than an hour, and the simulation checks the planner's own figure rather than the hour.
  const Fabric fabric(unlabelled_mesh_fabric(2000));
  const MeshPolicy policy;
  const auto bound = mesh::cross_tor_coverage_epochs(fabric.mesh, 0, policy);
  ASSERT_TRUE(bound);
  std::cout << "unlabelled: coverage bound " << *bound << " epochs\n";
  simulate("unlabelled", fabric, policy, *bound + 2, *bound);
}

}  // namespace
}  // namespace ibprobe::testing
