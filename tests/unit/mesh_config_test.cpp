#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <expected>
#include <utility>

#include "probe_config.h"

namespace ibprobe::testing {
namespace {

using exporter::parse_probe_config;
using exporter::ProbeConfig;
using ::testing::HasSubstr;

const std::string kModules = "modules:\n  lat:\n    kind: write_lat\n";

std::expected<ProbeConfig, std::string> parse_mesh(const std::string& mesh) {
  return parse_probe_config(kModules + "mesh:\n" + mesh);
}

std::string mesh_error(const std::string& mesh) {
  auto parsed = parse_mesh(mesh);
  if (!parsed) return parsed.error();
  ADD_FAILURE() << "accepted: " << mesh;
  return "";
}

TEST(MeshConfig, DefaultsAreOnePingPerSecondPerPeerAndAHundredPerHost) {
  const auto parsed = parse_probe_config(kModules);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_FALSE(parsed.value().mesh.enabled);
  EXPECT_TRUE(parsed.value().mesh.peers_file.empty());
  EXPECT_DOUBLE_EQ(parsed.value().mesh.policy.peer_rate_hz, 1.0);
  EXPECT_DOUBLE_EQ(parsed.value().mesh.policy.host_budget_hz, 100.0);
  EXPECT_FALSE(parsed.value().mesh.per_peer_rtt);
}

TEST(MeshConfig, ReadsEveryField) {
  const auto parsed = parse_mesh(
      "  enabled: true\n  peers_file: /etc/ibprobe/peers.json\n  self: a:9470\n"
      "  peer_rate: 0.5\n  host_budget: 40\n  epoch: 5m\n  host_pairs_per_tor_pair: 3\n"
      "  min_watchers: 4\n  per_peer_rtt: true\n");
  ASSERT_TRUE(parsed.has_value()) << parsed.error();
  const auto& mesh = parsed.value().mesh;
  EXPECT_TRUE(mesh.enabled);
  EXPECT_EQ(mesh.peers_file, "/etc/ibprobe/peers.json");
  EXPECT_EQ(mesh.self, "a:9470");
  EXPECT_DOUBLE_EQ(mesh.policy.peer_rate_hz, 0.5);
  EXPECT_DOUBLE_EQ(mesh.policy.host_budget_hz, 40);
  EXPECT_EQ(mesh.policy.epoch, std::chrono::seconds(300));
  EXPECT_EQ(mesh.policy.host_pairs_per_tor_pair, 3);
  EXPECT_EQ(mesh.policy.min_watchers, 4);
  EXPECT_TRUE(mesh.per_peer_rtt);
}

TEST(MeshConfig, RefusesBadValuesSayingWhere) {
  const std::pair<std::string, std::string> refusals[] = {
      {"  peer_rate: 0\n", "line 5, column 14: peer_rate must be a number above 0"},
      {"  peer_rate: fast\n", "peer_rate"},
      {"  host_budget: 1e9\n", "at most 100000"},
      {"  epoch: 0s\n", "epoch must be at least 1s"},
      {"  host_pairs_per_tor_pair: 0\n", ">= 1"},
      {"  enabled: sometimes\n", "enabled"},
      {"  per_peer_rtt: 14\n", "per_peer_rtt"},
      {"  peers_file: a\n  peers_dns: b:1\n", "not several"},
      {"  rate: 1\n", "unknown field 'rate' in mesh"},
  };
  for (const auto& [mesh, error] : refusals) {
    EXPECT_THAT(mesh_error(mesh), HasSubstr(error)) << mesh;
  }
}

TEST(MeshConfig, ReadsTheFabricPeerSource) {
  const auto parsed =
      parse_mesh("  peers_fabric:\n    exporter_port: 9100\n    ca: mlx5_1\n    ca_port: 2\n");
  ASSERT_TRUE(parsed.has_value()) << parsed.error();
  const auto& fabric = parsed.value().mesh.peers_fabric;
  ASSERT_TRUE(fabric);
  EXPECT_EQ(fabric->exporter_port, "9100");
  EXPECT_EQ(fabric->ca, "mlx5_1");
  EXPECT_EQ(fabric->ca_port, 2);

  const auto defaults = parse_mesh("  peers_fabric: {}\n");
  ASSERT_TRUE(defaults.has_value()) << defaults.error();
  EXPECT_EQ(defaults.value().mesh.peers_fabric->exporter_port, "9470");
  EXPECT_TRUE(defaults.value().mesh.peers_fabric->ca.empty());
}

TEST(MeshConfig, RefusesABadFabricPeerSource) {
  EXPECT_NE(mesh_error("  peers_fabric:\n    exporter_port: 0\n").find("1 to 65535"),
            std::string::npos);
  EXPECT_NE(mesh_error("  peers_fabric:\n    exporter_port: 70000\n").find("exporter_port"),
            std::string::npos);
  EXPECT_NE(mesh_error("  peers_fabric:\n    port: 9470\n").find("unknown field 'port'"),
            std::string::npos);
  EXPECT_NE(mesh_error("  peers_fabric: yes\n").find("peers_fabric"), std::string::npos);
  EXPECT_NE(mesh_error("  peers_file: a\n  peers_fabric: {}\n").find("not several"),
            std::string::npos);
}

}  // namespace
}  // namespace ibprobe::testing
