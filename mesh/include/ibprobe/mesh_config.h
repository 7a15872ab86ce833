// The `mesh:` section of --config.file: whether this exporter runs the mesh, its peers, this
// host, and the planner's policy. --mesh.plan reads it too. Read once at startup: a reload
// leaves a running mesh as it is.
#pragma once

#include <optional>
#include <string>

#include "ibprobe/mesh_plan.h"

namespace ibprobe::mesh {

// At namespace scope, not nested in MeshConfig: clang judges a nested class with default member
// initializers not default-constructible while the enclosing class is incomplete, and
// std::optional<Nested> as its member then offers no emplace().
struct MeshFabricPeers {
  std::string exporter_port = "9470";  // every host's exporter listens here
  std::string ca;                      // the local CA to discover from; empty: the first
  int ca_port = 0;                     // 0: the CA's first InfiniBand port
};

struct MeshConfig {
  bool enabled = false;  // off by default: pings start only where asked for
  // Where the peer list comes from: a file_sd file, a NAME:PORT resolving to every peer, or the
  // fabric model (mesh_fabric_peers.h).
  std::string peers_file;
  std::string peers_dns;
  std::optional<MeshFabricPeers> peers_fabric;
  // This host's target in the peer list.
  std::string self;
  MeshPolicy policy;
  // An RTT histogram per planned peer on /metrics as well as per path class: 14 series more per
  // peer (69 peers: 966 more), for small fabrics or while debugging a pair. Off by default.
  bool per_peer_rtt = false;
};

}  // namespace ibprobe::mesh
