#include "ibprobe/mesh_plan.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <utility>

namespace ibprobe::mesh {
namespace {

// Every host must compute the same plan, so the hashes are spelled out here rather than taken
// from std::hash, whose values the standard leaves to each library.
std::uint64_t fnv1a(std::string_view text) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (const unsigned char c : text) {
    hash ^= c;
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

// splitmix64's finaliser: a full-avalanche mix, so nearby epochs and similar names score apart.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  return mix(a ^ mix(b));
}
std::uint64_t mix(std::uint64_t a, std::uint64_t b, std::uint64_t c) {
  return mix(mix(a, b), c);
}

// Salts keep the three per-epoch choices (host order, targets, watchers) independent.
constexpr std::uint64_t kHostOrderSalt = 0x686f73746f726472ULL;
constexpr std::uint64_t kWatcherSalt = 0x7761746368657273ULL;

std::int64_t epoch_index(std::chrono::system_clock::time_point at, std::chrono::seconds epoch) {
  const auto seconds = std::chrono::floor<std::chrono::seconds>(at.time_since_epoch()).count();
  const auto length = std::max<std::int64_t>(1, epoch.count());
  // Floor division, so instants before 1970 still fall into whole epochs.
  return seconds >= 0 ? seconds / length : -((-seconds + length - 1) / length);
}

// How a ToR of `hosts` hosts with `remote_tors` other ToRs spends its budget. Depends only on
// sizes and policy, so every host of the ToR derives the same numbers.
struct TorShares {
  double same_tor_rate = 0;
  std::size_t pairs_per_remote_tor = 0;  // host pairs per remote ToR and epoch, at most
  int cross_slots = 0;                   // cross-ToR pings per host and epoch
  std::size_t items = 0;                 // host pairs towards all remote ToRs
};

std::size_t pairs_per_remote_tor(std::size_t hosts, const MeshPolicy& policy) {
  return std::min<std::size_t>(
      static_cast<std::size_t>(std::max(1, policy.host_pairs_per_tor_pair)), hosts);
}

// `items`: the host pairs towards every remote ToR, pairs_per_remote_tor each but no more than the
// remote ToR has hosts, so that a small ToR is not pinged by more of a ToR's hosts than it has.
TorShares tor_shares(std::size_t hosts, std::size_t remote_tors, std::size_t items,
                     double watch_reserve_hz, const MeshPolicy& policy) {
  TorShares shares;
  const double budget = std::max(0.0, policy.host_budget_hz);
  const double rate = policy.peer_rate_hz;
  if (rate <= 0 || hosts == 0) return shares;
  const std::size_t same_peers = hosts - 1;
  if (same_peers > 0) {
    const double cap =
        remote_tors > 0 ? budget * std::clamp(policy.same_tor_share, 0.0, 1.0) : budget;
    // A ToR too big for the budget keeps its full mesh at a lower rate rather than dropping peers.
    shares.same_tor_rate = std::min(rate, cap / static_cast<double>(same_peers));
  }
  if (remote_tors == 0) return shares;
  shares.pairs_per_remote_tor = pairs_per_remote_tor(hosts, policy);
  shares.items = items;
  const double left =
      budget - shares.same_tor_rate * static_cast<double>(same_peers) - watch_reserve_hz;
  // The epsilon keeps 81.0 / 1.0 from flooring to 80 when the subtraction rounds down.
  const auto affordable = static_cast<std::size_t>(std::max(0.0, std::floor(left / rate + 1e-9)));
  const std::size_t needed = (shares.items + hosts - 1) / hosts;
  shares.cross_slots = static_cast<int>(std::min(affordable, needed));
  return shares;
}

}  // namespace

std::string_view to_string(MeshReason reason) {
  return reason == MeshReason::kSameTor ? "same_tor" : "cross_tor";
}

MeshFabric::MeshFabric(std::vector<MeshPeer> peers) : peers_(std::move(peers)) {
  std::sort(peers_.begin(), peers_.end(),
            [](const MeshPeer& a, const MeshPeer& b) { return a.target < b.target; });
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    if (peers_[i].target.empty()) throw std::invalid_argument("a mesh peer has an empty target");
    if (i > 0 && peers_[i].target == peers_[i - 1].target) {
      throw std::invalid_argument("mesh peer " + peers_[i].target + " is listed twice");
    }
  }
  std::map<std::string, std::size_t, std::less<>> partition_ids;
  std::map<std::pair<std::size_t, std::string>, std::size_t> group_ids;
  peer_hash_.resize(peers_.size());
  group_of_.resize(peers_.size());
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    const auto& peer = peers_[i];
    peer_hash_[i] = fnv1a(peer.target);
    auto [part, new_part] = partition_ids.try_emplace(peer.gid_family, partitions_.size());
    if (new_part) partitions_.emplace_back();
    // The separator cannot occur in a target, so "host:" groups never meet a ToR's name.
    const std::string group_name = peer.tor.empty() ? "\n" + peer.target : peer.tor;
    auto [group, new_group] = group_ids.try_emplace({part->second, group_name}, groups_.size());
    if (new_group) {
      groups_.push_back(Group{fnv1a(group_name), part->second, {}});
      partitions_[part->second].groups.push_back(group->second);
    }
    groups_[group->second].members.push_back(i);
    group_of_[i] = group->second;
    auto& partition = partitions_[part->second];
    partition.hosts.push_back(i);
  }
  for (auto& partition : partitions_) {
    partition.hosts_by_group_size = partition.hosts;
    std::stable_sort(partition.hosts_by_group_size.begin(), partition.hosts_by_group_size.end(),
                     [this](std::size_t a, std::size_t b) {
                       return groups_[group_of_[a]].members.size() <
                              groups_[group_of_[b]].members.size();
                     });
  }
}

std::size_t MeshFabric::watch_demand(std::size_t partition, std::size_t min_watchers) const {
  std::size_t demand = 0;
  for (const std::size_t host : partitions_[partition].hosts_by_group_size) {
    const std::size_t mates = groups_[group_of_[host]].members.size() - 1;
    if (mates >= min_watchers) break;
    demand += min_watchers - mates;
  }
  return demand;
}

std::size_t MeshFabric::cross_items(std::size_t group, std::size_t pairs) const {
  std::size_t items = 0;
  for (const std::size_t remote : partitions_[groups_[group].partition].groups) {
    if (remote != group) items += std::min(pairs, groups_[remote].members.size());
  }
  return items;
}

std::optional<std::size_t> MeshFabric::find(std::string_view target) const {
  const auto it = std::lower_bound(
      peers_.begin(), peers_.end(), target,
      [](const MeshPeer& peer, std::string_view wanted) { return peer.target < wanted; });
  if (it == peers_.end() || it->target != target) return std::nullopt;
  return static_cast<std::size_t>(it - peers_.begin());
}

namespace {

// The watchers a host of a small ToR gets this epoch: the first `count` hosts of other ToRs
// after a per-epoch position in the partition's host list. Any host can recompute the list, so a
// watcher knows it is one without being told.
template <typename Visit>
void for_each_watcher(const std::vector<std::size_t>& hosts,
                      const std::vector<std::size_t>& group_of, std::size_t watched,
                      std::uint64_t watched_hash, std::int64_t epoch, std::size_t count,
                      Visit&& visit) {
  const std::size_t n = hosts.size();
  const std::size_t start = mix(watched_hash, static_cast<std::uint64_t>(epoch), kWatcherSalt) % n;
  std::size_t found = 0;
  for (std::size_t step = 0; step < n && found < count; ++step) {
    const std::size_t candidate = hosts[(start + step) % n];
    if (group_of[candidate] == group_of[watched]) continue;
    ++found;
    if (visit(candidate)) return;
  }
}

// What each host sets aside of its budget for watching the partition's small ToRs: twice its
// mean share of the watchers they lack, plus min_watchers more, so that the host the hashes draw
// more often than most still fits its budget.
double watch_reserve_hz(std::size_t partition_hosts, std::size_t watch_demand,
                        const MeshPolicy& policy) {
  if (watch_demand == 0 || partition_hosts == 0) return 0;
  const double mean = static_cast<double>(watch_demand) / static_cast<double>(partition_hosts);
  return (2 * std::ceil(mean) + static_cast<double>(std::max(0, policy.min_watchers))) *
         policy.peer_rate_hz;
}

}  // namespace

std::vector<PlannedPing> plan_mesh(const MeshFabric& fabric, std::size_t self,
                                   std::chrono::system_clock::time_point at,
                                   const MeshPolicy& policy) {
  std::vector<PlannedPing> plan;
  if (self >= fabric.peers_.size() || policy.peer_rate_hz <= 0) return plan;
  const auto& own = fabric.groups_[fabric.group_of_[self]];
  const auto& partition = fabric.partitions_[own.partition];
  const std::size_t remote_tors = partition.groups.size() - 1;
  const std::int64_t epoch = epoch_index(at, policy.epoch);
  const auto min_watchers = static_cast<std::size_t>(std::max(0, policy.min_watchers));

  const std::size_t watch_demand =
      remote_tors > 0 ? fabric.watch_demand(own.partition, min_watchers) : 0;
  const TorShares shares = tor_shares(
      own.members.size(), remote_tors,
      fabric.cross_items(fabric.group_of_[self], pairs_per_remote_tor(own.members.size(), policy)),
      watch_reserve_hz(partition.hosts.size(), watch_demand, policy), policy);

  for (const std::size_t mate : own.members) {
    if (mate != self) plan.push_back({mate, MeshReason::kSameTor, shares.same_tor_rate});
  }

  std::vector<bool> planned(fabric.peers_.size(), false);
  if (shares.cross_slots > 0) {
    // This host's rank among its ToR's hosts this epoch: who takes which share of the sample.
    const std::uint64_t own_key =
        mix(fabric.peer_hash_[self], static_cast<std::uint64_t>(epoch), kHostOrderSalt);
    std::size_t rank = 0;
    for (const std::size_t mate : own.members) {
      const std::uint64_t key =
          mix(fabric.peer_hash_[mate], static_cast<std::uint64_t>(epoch), kHostOrderSalt);
      if (key < own_key || (key == own_key && mate < self)) ++rank;
    }
    // The remote ToRs in an order fixed for this ToR; each epoch's window moves along it, so
    // every remote ToR comes round within ceil(items / capacity) epochs.
    std::vector<std::pair<std::uint64_t, std::size_t>> remote;
    remote.reserve(remote_tors);
    for (const std::size_t group : partition.groups) {
      if (group != fabric.group_of_[self]) {
        remote.emplace_back(mix(own.hash, fabric.groups_[group].hash), group);
      }
    }
    std::sort(remote.begin(), remote.end());
    const std::size_t hosts = own.members.size();
    const std::size_t capacity = hosts * static_cast<std::size_t>(shares.cross_slots);
    const std::size_t window = std::min(capacity, shares.items);
    const std::size_t start =
        capacity >= shares.items
            ? 0
            : static_cast<std::size_t>(
                  (static_cast<unsigned __int128>(static_cast<std::uint64_t>(epoch)) * capacity) %
                  shares.items);
    // first_item[i]: the first item of remote[i]; its items are its host pairs this epoch.
    std::vector<std::size_t> first_item(remote.size() + 1, 0);
    for (std::size_t i = 0; i < remote.size(); ++i) {
      first_item[i + 1] = first_item[i] + std::min(shares.pairs_per_remote_tor,
                                                   fabric.groups_[remote[i].second].members.size());
    }
    std::vector<std::pair<std::uint64_t, std::size_t>> scored;
    for (std::size_t slot = rank; slot < window; slot += hosts) {
      const std::size_t item = (start + slot) % shares.items;
      const auto tor = static_cast<std::size_t>(
          std::upper_bound(first_item.begin(), first_item.end(), item) - first_item.begin() - 1);
      const auto& target_group = fabric.groups_[remote[tor].second];
      // Rendezvous hashing: the target is the remote host scoring highest for (this ToR, epoch);
      // the ToR's second pair takes the second highest, and so on.
      scored.clear();
      for (const std::size_t member : target_group.members) {
        scored.emplace_back(
            mix(fabric.peer_hash_[member], own.hash, static_cast<std::uint64_t>(epoch)), member);
      }
      const std::size_t nth = item - first_item[tor];
      std::nth_element(scored.begin(), scored.begin() + static_cast<std::ptrdiff_t>(nth),
                       scored.end(), std::greater<>());
      const std::size_t peer = scored[nth].second;
      if (!planned[peer]) {
        planned[peer] = true;
        plan.push_back({peer, MeshReason::kCrossTor, policy.peer_rate_hz});
      }
    }
  }
  const std::size_t rotation_end = plan.size();

  if (remote_tors > 0) {
    for (const std::size_t watched : partition.hosts_by_group_size) {
      const auto& group = fabric.groups_[fabric.group_of_[watched]];
      const std::size_t mates = group.members.size() - 1;
      if (mates >= min_watchers) break;
      if (fabric.group_of_[watched] == fabric.group_of_[self]) continue;
      for_each_watcher(partition.hosts, fabric.group_of_, watched, fabric.peer_hash_[watched],
                       epoch, min_watchers - mates, [&](std::size_t watcher) {
                         if (watcher != self) return false;
                         if (!planned[watched]) {
                           planned[watched] = true;
                           plan.push_back({watched, MeshReason::kCrossTor, policy.peer_rate_hz});
                         }
                         return true;
                       });
    }
  }

  // The reserve makes this rare; when it is not enough, the rotation gives way before watching.
  double total = 0;
  for (const auto& ping : plan) total += ping.rate_hz;
  const double budget = policy.host_budget_hz + 1e-9;
  std::size_t drop = rotation_end;
  while (total > budget && drop > own.members.size() - 1) {
    --drop;
    total -= plan[drop].rate_hz;
    plan.erase(plan.begin() + static_cast<std::ptrdiff_t>(drop));
  }
  while (total > budget && plan.size() > own.members.size() - 1) {
    total -= plan.back().rate_hz;
    plan.pop_back();
  }

  std::sort(plan.begin(), plan.end(), [](const PlannedPing& a, const PlannedPing& b) {
    return std::pair(a.reason, a.peer) < std::pair(b.reason, b.peer);
  });
  return plan;
}

std::optional<int> cross_tor_coverage_epochs(const MeshFabric& fabric, std::size_t self,
                                             const MeshPolicy& policy) {
  if (self >= fabric.peers_.size()) return std::nullopt;
  const auto& own = fabric.groups_[fabric.group_of_[self]];
  const auto& partition = fabric.partitions_[own.partition];
  const std::size_t remote_tors = partition.groups.size() - 1;
  if (remote_tors == 0) return 0;
  const auto min_watchers = static_cast<std::size_t>(std::max(0, policy.min_watchers));
  const TorShares shares = tor_shares(
      own.members.size(), remote_tors,
      fabric.cross_items(fabric.group_of_[self], pairs_per_remote_tor(own.members.size(), policy)),
      watch_reserve_hz(partition.hosts.size(), fabric.watch_demand(own.partition, min_watchers),
                       policy),
      policy);
  if (shares.cross_slots == 0) return std::nullopt;
  const std::size_t capacity = own.members.size() * static_cast<std::size_t>(shares.cross_slots);
  return static_cast<int>((shares.items + capacity - 1) / capacity);
}

}  // namespace ibprobe::mesh
