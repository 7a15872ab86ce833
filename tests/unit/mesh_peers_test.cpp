#include "ibprobe/mesh_peers.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace ibprobe::testing {
namespace {

using mesh::MeshPeer;
using mesh::parse_file_sd;

std::string file_sd_error(const std::string& text) {
  const auto peers = parse_file_sd(text);
  if (!peers) {
    EXPECT_EQ(peers.error().kind, mesh::ErrorKind::kBadPeerList) << peers.error().message;
    return peers.error().message;
  }
  ADD_FAILURE() << "accepted: " << text;
  return "";
}

TEST(MeshPeers, ReadsJsonFileSdWithTorAndGidFamilyLabels) {
  const auto parsed = parse_file_sd(R"([
    {"targets": ["10.0.0.1:9470", "10.0.0.2:9470"],
     "labels": {"tor": "leaf1", "gid_family": "ipv4", "job": "ibprobe"}},
    {"targets": ["[fd00::3]:9470"], "labels": {"tor": "leaf2"}},
    {"targets": ["host4:9470"]}
  ])");
  ASSERT_TRUE(parsed) << parsed.error().message;
  const auto& peers = *parsed;
  ASSERT_EQ(peers.size(), 4u);
  EXPECT_EQ(peers[0].target, "10.0.0.1:9470");
  EXPECT_EQ(peers[0].tor, "leaf1");
  EXPECT_EQ(peers[0].gid_family, "ipv4");
  EXPECT_EQ(peers[1].tor, "leaf1");
  EXPECT_EQ(peers[2].target, "[fd00::3]:9470");
  EXPECT_EQ(peers[2].tor, "leaf2");
  EXPECT_EQ(peers[2].gid_family, "");
  EXPECT_EQ(peers[3].tor, "");
}

TEST(MeshPeers, ReadsYamlFileSd) {
  const auto peers = parse_file_sd(
      "- targets: ['a:9470', 'b:9470']\n"
      "  labels:\n"
      "    tor: rack7\n");
  ASSERT_TRUE(peers) << peers.error().message;
  ASSERT_EQ(peers->size(), 2u);
  EXPECT_EQ((*peers)[1].target, "b:9470");
  EXPECT_EQ((*peers)[1].tor, "rack7");
}

TEST(MeshPeers, RefusesBadFilesSayingWhere) {
  EXPECT_NE(file_sd_error(R"({"targets": ["a:1"]})").find("list of target groups"),
            std::string::npos);
  EXPECT_NE(file_sd_error(R"([{"labels": {"tor": "x"}}])").find("non-empty list of targets"),
            std::string::npos);
  EXPECT_NE(file_sd_error(R"([{"targets": ["a"]}])").find("not HOST:PORT"), std::string::npos);
  EXPECT_NE(file_sd_error(R"([{"targets": ["a:0"]}])").find("not HOST:PORT"), std::string::npos);
  EXPECT_NE(file_sd_error(R"([{"targets": ["fd00::1:9470"]}])").find("brackets"),
            std::string::npos);
  EXPECT_NE(file_sd_error("[{\"targets\": [\"a:1\"]},\n {\"targets\": [\"a:1\"]}]")
                .find("line 2, column 15: target a:1 is listed twice"),
            std::string::npos);
  EXPECT_NE(file_sd_error(R"([{"targets": ["a:1"], "label": {}}])").find("unknown field 'label'"),
            std::string::npos);
  EXPECT_NE(file_sd_error(R"([{"targets": ["a:1"], "labels": {"tor": ["x"]}}])").find("label tor"),
            std::string::npos);
  EXPECT_FALSE(file_sd_error("[{").empty());
}

TEST(MeshPeers, LoadNamesTheFile) {
  const auto peers = mesh::load_file_sd("/nonexistent/peers.json");
  ASSERT_FALSE(peers) << "no error";
  EXPECT_EQ(peers.error().kind, mesh::ErrorKind::kUnreadable);
  EXPECT_NE(peers.error().message.find("/nonexistent/peers.json"), std::string::npos);
}

TEST(MeshPeers, DnsGivesOnePeerPerAddress) {
  const auto peers = mesh::resolve_dns_peers("localhost:9470");
  ASSERT_TRUE(peers) << peers.error().message;
  ASSERT_FALSE(peers->empty());
  bool loopback = false;
  for (const auto& peer : *peers) {
    loopback |= peer.target == "127.0.0.1:9470" || peer.target == "[::1]:9470";
    EXPECT_EQ(peer.tor, "");
  }
  EXPECT_TRUE(loopback);
  const auto no_port = mesh::resolve_dns_peers("localhost");
  ASSERT_FALSE(no_port);
  EXPECT_EQ(no_port.error().kind, mesh::ErrorKind::kBadPeerList);
  const auto bad_port = mesh::resolve_dns_peers("localhost:99999");
  ASSERT_FALSE(bad_port);
  EXPECT_EQ(bad_port.error().kind, mesh::ErrorKind::kBadPeerList);
  const auto unknown = mesh::resolve_dns_peers("no-such-host.invalid:9470");
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().kind, mesh::ErrorKind::kUnresolvable);
}

}  // namespace
}  // namespace ibprobe::testing
