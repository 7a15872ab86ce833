#include "ibprobe/mesh_fabric_peers.h"

#include <gtest/gtest.h>

namespace ibprobe::testing {
namespace {

using fabric::FabricModel;
using fabric::FabricNode;
using fabric::FabricNodeType;
using fabric::FabricPort;
using fabric::FabricRemote;
using mesh::mesh_peers_from_fabric;
using mesh::MeshPeer;

FabricNode node(FabricNodeType type, std::uint64_t guid, std::string description,
                std::vector<std::pair<int, std::uint64_t>> cables) {
  FabricNode n;
  n.type = type;
  n.guid = guid;
  n.description = std::move(description);
  for (const auto& [number, far] : cables) {
    FabricPort port;
    port.number = number;
    port.state = 4;
    port.remote = FabricRemote{far, "", 1};
    n.ports.push_back(port);
  }
  n.port_count = static_cast<int>(n.ports.size());
  return n;
}

// Two leaves under a spine; hosts hang off the leaves as the model lists nodes: switches first,
// then by GUID.
FabricModel two_leaves() {
  FabricModel model;
  model.nodes = {
      node(FabricNodeType::kSwitch, 0x100, "spine-1", {{1, 0x200}, {2, 0x300}}),
      node(FabricNodeType::kSwitch, 0x200, "leaf-1", {{1, 0x1001}, {2, 0x1002}, {9, 0x100}}),
      node(FabricNodeType::kSwitch, 0x0002c90300100003, "", {{1, 0x1003}, {9, 0x100}}),
      node(FabricNodeType::kCa, 0x1001, "host-b mlx5_0", {{1, 0x200}}),
      node(FabricNodeType::kCa, 0x1002, "host-a mlx5_0", {{1, 0x200}}),
      node(FabricNodeType::kCa, 0x1003, "host-c HCA-1", {{1, 0x0002c90300100003}}),
  };
  return model;
}

// Each peer as TARGET@TOR.
std::vector<std::string> targets_at_tors(const std::vector<MeshPeer>& peers) {
  std::vector<std::string> targets;
  for (const auto& peer : peers) targets.push_back(peer.target + "@" + peer.tor);
  return targets;
}

TEST(MeshFabricPeers, HostsAreGroupedByTheirLeafAndNamedByTheirDescription) {
  const auto peers = mesh_peers_from_fabric(two_leaves(), "9470");
  // A leaf without a description is named by its GUID, as /fabric labels it.
  EXPECT_EQ(targets_at_tors(peers),
            (std::vector<std::string>{"host-a:9470@leaf-1", "host-b:9470@leaf-1",
                                      "host-c:9470@0002:c903:0010:0003"}));
  for (const auto& peer : peers) EXPECT_EQ(peer.gid_family, "ib");
}

TEST(MeshFabricPeers, TheConfiguredPortNamesTheExporter) {
  EXPECT_EQ(mesh_peers_from_fabric(two_leaves(), "9100")[0].target, "host-a:9100");
}

TEST(MeshFabricPeers, UnnamedOrUncabledCasAreNoPeersAndAHostIsOneEvenWithTwoCas) {
  auto model = two_leaves();
  model.nodes.push_back(node(FabricNodeType::kCa, 0x1004, "", {{1, 0x200}}));
  model.nodes.push_back(node(FabricNodeType::kCa, 0x1005, "host-d mlx5_0", {}));
  // host-a's second CA, on the other leaf: host-a stays where its first CA (lower GUID) is.
  model.nodes.push_back(
      node(FabricNodeType::kCa, 0x1006, "host-a mlx5_1", {{1, 0x0002c90300100003}}));
  // A CA cabled straight to another CA (back to back) has no leaf.
  model.nodes.push_back(node(FabricNodeType::kCa, 0x1007, "host-e mlx5_0", {{1, 0x1001}}));
  EXPECT_EQ(targets_at_tors(mesh_peers_from_fabric(model, "9470")),
            (std::vector<std::string>{"host-a:9470@leaf-1", "host-b:9470@leaf-1",
                                      "host-c:9470@0002:c903:0010:0003"}));
}

}  // namespace
}  // namespace ibprobe::testing
