// The mesh's peer list from the fabric model (InfiniBand discovery, as /fabric uses): every host
// channel adapter becomes a peer, grouped by the leaf switch its cable ends at, so hosts under one
// leaf are fully meshed without anyone writing a peer list.
#pragma once

#include <expected>
#include <string>
#include <vector>

#include "ibprobe/fabric_model.h"
#include "ibprobe/mesh_config.h"
#include "ibprobe/mesh_error.h"
#include "ibprobe/mesh_plan.h"

namespace ibprobe::mesh {

// One peer per host among the model's CAs:
//   target      the first word of the CA's node description (Linux sets it to "HOSTNAME DEVICE",
//               e.g. "node-0001 mlx5_0"), then ':' and `exporter_port`;
//   tor         the switch its lowest-numbered cabled port leads to, by that switch's node
//               description, or its GUID ("0002:c903:0010:0001") when the description is empty;
//   gid_family  "ib".
// A CA without a description, or cabled to no switch, is no peer (it cannot be named or placed).
// A host with several CAs is one peer, at the CA with the lowest GUID. Peers come sorted by target.
std::vector<MeshPeer> mesh_peers_from_fabric(const fabric::FabricModel& model,
                                             const std::string& exporter_port);

// Discovers the fabric from `source`'s local port (in a child process of this executable, as
// /fabric does, within 120 s) and returns its peers, or kDiscovery saying why it failed.
std::expected<std::vector<MeshPeer>, Error> discover_mesh_peers(const MeshFabricPeers& source);

}  // namespace ibprobe::mesh
