// The mesh planner: which peers this host pings, and how often, as a pure function of (peer list,
// self, time). Every exporter computes its own plan from the same peer list, so the mesh needs no
// controller and no shared state, and a fabric of any size can be checked by simulation.
//
// The shape is Pingmesh's: a full mesh under each ToR, and across ToRs a sample that rotates
// every epoch so that every ToR pair is covered within a bound (cross_tor_coverage_epochs).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ibprobe::mesh {

struct MeshPeer {
  std::string target;  // HOST:PORT of the peer's exporter, as in the file_sd targets
  // The leaf switch the host hangs off; empty: unknown, and the host is a group of its own (so a
  // peer list without ToRs, e.g. from DNS, is sampled rather than fully meshed).
  std::string tor;
  // Hosts only ping hosts of the same GID family ("ipv4", "ipv6", "ib"; empty: unlabelled, which
  // pairs only with unlabelled hosts), so a RoCE IPv4 port is never paired with an IPv6 one.
  std::string gid_family;
};

struct MeshPolicy {
  double peer_rate_hz = 1.0;        // pings per second to each peer
  double host_budget_hz = 100.0;    // pings per second this host sends, at most
  std::chrono::seconds epoch{600};  // the cross-ToR sample changes at every multiple of this
  // Distinct host pairs per ToR pair and epoch (when both ToRs have that many hosts): with two or
  // more, loss on one path is told apart from loss between the two ToRs.
  int host_pairs_per_tor_pair = 2;
  // Hosts with fewer same-ToR peers than this are watched by extra hosts of other ToRs.
  int min_watchers = 3;
  // Share of the budget the same-ToR mesh may take while there are other ToRs to sample.
  double same_tor_share = 0.8;
};

enum class MeshReason { kSameTor, kCrossTor };
std::string_view to_string(MeshReason reason);

struct PlannedPing {
  std::size_t peer;  // index into MeshFabric::peers()
  MeshReason reason;
  double rate_hz;
  bool operator==(const PlannedPing&) const = default;
};

// The peer list, indexed once: peers sorted by target, grouped by GID family and ToR.
class MeshFabric {
 public:
  // Throws std::invalid_argument for an empty target or a target listed twice.
  explicit MeshFabric(std::vector<MeshPeer> peers);

  const std::vector<MeshPeer>& peers() const { return peers_; }
  std::optional<std::size_t> find(std::string_view target) const;

 private:
  friend std::vector<PlannedPing> plan_mesh(const MeshFabric&, std::size_t,
                                            std::chrono::system_clock::time_point,
                                            const MeshPolicy&);
  friend std::optional<int> cross_tor_coverage_epochs(const MeshFabric&, std::size_t,
                                                      const MeshPolicy&);

  // Watchers the partition's small ToRs lack in total (one ping per second each).
  std::size_t watch_demand(std::size_t partition, std::size_t min_watchers) const;

  // Host pairs from `group` towards all other groups of its partition, `pairs` per group at most.
  std::size_t cross_items(std::size_t group, std::size_t pairs) const;

  struct Group {
    std::uint64_t hash;
    std::size_t partition;
    std::vector<std::size_t> members;  // sorted by target
  };
  struct Partition {
    std::vector<std::size_t> groups;
    std::vector<std::size_t> hosts;  // sorted by target
    // Hosts whose group has fewer than a policy's min_watchers other members: candidates for
    // extra watchers. Kept per partition so a plan visits only these, not the whole fabric.
    std::vector<std::size_t> hosts_by_group_size;  // ascending group size
  };

  std::vector<MeshPeer> peers_;
  std::vector<std::uint64_t> peer_hash_;
  std::vector<std::size_t> group_of_;
  std::vector<Group> groups_;
  std::vector<Partition> partitions_;
};

// The pings `self` sends at time `at`: every same-ToR peer, this epoch's share of the cross-ToR
// sample, and the hosts it watches because their ToR is too small to watch them. The rates add up
// to at most policy.host_budget_hz. Never contains self, nor a peer of another GID family.
std::vector<PlannedPing> plan_mesh(const MeshFabric& fabric, std::size_t self,
                                   std::chrono::system_clock::time_point at,
                                   const MeshPolicy& policy);

// The number of consecutive epochs within which self's ToR pings every other ToR of its family;
// nullopt when the budget leaves the ToR no cross-ToR ping at all.
std::optional<int> cross_tor_coverage_epochs(const MeshFabric& fabric, std::size_t self,
                                             const MeshPolicy& policy);

}  // namespace ibprobe::mesh
