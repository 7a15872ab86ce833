// Where the mesh's peer list comes from: a Prometheus file_sd file (the one Prometheus already
// scrapes the exporters with: targets plus labels such as `tor`), or a DNS name resolving to every
// peer (a Kubernetes headless Service over the DaemonSet).
#pragma once

#include <expected>
#include <string>
#include <string_view>
#include <vector>

#include "ibprobe/mesh_config.h"
#include "ibprobe/mesh_error.h"
#include "ibprobe/mesh_plan.h"

namespace ibprobe::mesh {

// The labels of a file_sd group the mesh reads.
inline constexpr std::string_view kMeshTorLabel = "tor";
inline constexpr std::string_view kMeshGidFamilyLabel = "gid_family";

// Parses file_sd text, JSON or YAML (Prometheus accepts both):
//   [{"targets": ["10.0.0.1:9470", ...], "labels": {"tor": "leaf1", "gid_family": "ipv4"}}, ...]
// A mistake is kBadPeerList saying where and what, e.g. a group without targets, a target
// without a port, or a target listed twice.
std::expected<std::vector<MeshPeer>, Error> parse_file_sd(std::string_view text);

// Reads and parses a file; errors name the file (kUnreadable when it cannot be read).
std::expected<std::vector<MeshPeer>, Error> load_file_sd(const std::string& path);

// Resolves "NAME:PORT" to one peer per address (IPv6 ones in brackets), without ToR labels:
// kBadPeerList for a missing port, kUnresolvable when resolution fails.
std::expected<std::vector<MeshPeer>, Error> resolve_dns_peers(const std::string& name_and_port);

// The peer list from the one source `mesh` names: its peers_file, else the fabric when
// peers_fabric is set (discover_mesh_peers), else the DNS name peers_dns.
std::expected<std::vector<MeshPeer>, Error> read_mesh_peers(const MeshConfig& mesh);

}  // namespace ibprobe::mesh
