#include "ibprobe/mesh_fabric_peers.h"

#include <map>

#include "ibprobe/fabric.h"
#include "ibprobe/fabric_discovery.h"

namespace ibprobe::mesh {
std::vector<MeshPeer> mesh_peers_from_fabric(const fabric::FabricModel& model,
                                             const std::string& exporter_port) {
  using fabric::FabricNodeType;
  std::map<std::string, MeshPeer> by_host;
  // The model lists nodes by GUID after the switches, so the first CA of a host has its lowest.
  for (const auto& node : model.nodes) {
    if (node.type != FabricNodeType::kCa) continue;
    const auto host = node.description.substr(0, node.description.find_first_of(" \t"));
    if (host.empty() || by_host.contains(host)) continue;
    for (const auto& port : node.ports) {
      if (!port.remote) continue;
      const auto* leaf = model.find(port.remote->guid);
      if (!leaf || leaf->type != FabricNodeType::kSwitch) continue;
      const auto tor =
          leaf->description.empty() ? fabric::format_guid(leaf->guid) : leaf->description;
      by_host.emplace(host, MeshPeer{host + ":" + exporter_port, tor, "ib"});
      break;
    }
  }
  std::vector<MeshPeer> peers;
  peers.reserve(by_host.size());
  for (auto& [host, peer] : by_host) peers.push_back(std::move(peer));
  return peers;
}

std::expected<std::vector<MeshPeer>, Error> discover_mesh_peers(const MeshFabricPeers& source) {
  fabric::DiscoveryOptions options;
  options.ca = source.ca;
  options.ca_port = source.ca_port;
  const auto result = fabric::discover_in_child(
      fabric::discovery_child_command("/proc/self/exe", options), std::chrono::seconds(120));
  if (!result) return std::unexpected(Error{ErrorKind::kDiscovery, result.error().message});
  return mesh_peers_from_fabric(result->model, source.exporter_port);
}

}  // namespace ibprobe::mesh
