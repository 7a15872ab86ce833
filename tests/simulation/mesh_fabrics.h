// Fabrics the mesh simulation and benchmark plan over, built the same way in both.
#pragma once

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "ibprobe/mesh_plan.h"

namespace ibprobe::testing {

inline std::string mesh_host_name(int tor, int host) {
  return "10." + std::to_string(tor / 250) + "." + std::to_string(tor % 250) + "." +
         std::to_string(host + 1) + ":9470";
}

// `tors` ToRs of `hosts_per_tor` hosts each, one GID family.
inline std::vector<mesh::MeshPeer> uniform_mesh_fabric(int tors, int hosts_per_tor) {
  std::vector<mesh::MeshPeer> peers;
  for (int t = 0; t < tors; ++t) {
    for (int h = 0; h < hosts_per_tor; ++h) {
      peers.push_back({mesh_host_name(t, h), "leaf" + std::to_string(t), "ipv4"});
    }
  }
  return peers;
}

// 10,000 hosts in 500 ToRs as a real fabric is: 20 ToRs each of 1, 2 and 3 hosts (too small to
// watch their own), the rest of 5 to 40 hosts; 20 ToRs on IPv6 GIDs, which never meet the others.
inline std::vector<mesh::MeshPeer> uneven_mesh_fabric() {
  constexpr int kTors = 500, kHosts = 10000;
  std::vector<int> sizes;
  for (int size : {1, 2, 3}) sizes.insert(sizes.end(), 20, size);
  std::mt19937 random(20260101);
  std::uniform_int_distribution<int> big(5, 40);
  int left = kHosts - 120;
  while (static_cast<int>(sizes.size()) < kTors) {
    const int remaining_tors = kTors - static_cast<int>(sizes.size());
    int size = remaining_tors == 1 ? left : big(random);
    // Keep what is left feasible for the remaining ToRs (5..40 each).
    size = std::clamp(size, left - 40 * (remaining_tors - 1), left - 5 * (remaining_tors - 1));
    sizes.push_back(size);
    left -= size;
  }
  std::vector<mesh::MeshPeer> peers;
  for (int t = 0; t < kTors; ++t) {
    const std::string family = t % 25 == 7 ? "ipv6" : "ipv4";
    for (int h = 0; h < sizes[static_cast<std::size_t>(t)]; ++h) {
      peers.push_back({mesh_host_name(t, h), "leaf" + std::to_string(t), family});
    }
  }
  return peers;
}

// A peer list from DNS: no ToR labels, so every host is a group of its own.
inline std::vector<mesh::MeshPeer> unlabelled_mesh_fabric(int hosts) {
  std::vector<mesh::MeshPeer> peers;
  for (int h = 0; h < hosts; ++h) peers.push_back({mesh_host_name(h / 200, h % 200), "", ""});
  return peers;
}

}  // namespace ibprobe::testing
