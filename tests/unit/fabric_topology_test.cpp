// The cabling plan: both formats parsed (ibnetdiscover's on a real output saved from ibsim, see
// the fixture's first lines), every refusal naming its line, and the comparison with a model
// that differs from the plan in every way the statuses name.
#include "ibprobe/fabric_topology.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace ibprobe::fabric {
namespace {

std::string fixture(const std::string& name) {
  std::ifstream file(std::filesystem::path(IBPROBE_SOURCE_DIR) / "tests/fixtures/topology" / name);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

std::string refusal(std::string_view text) {
  const auto parsed = parse_topology(text);
  if (parsed) return "accepted";
  EXPECT_EQ(parsed.error().kind, ErrorKind::kTopologyFile);
  return parsed.error().message;
}

const PlannedCable* cable_at(const TopologyPlan& plan, std::string_view name, int port) {
  for (const auto& cable : plan.cables) {
    if (cable.node.name == name && cable.node.port == port) return &cable;
  }
  return nullptr;
}

TEST(TopologyPlan, ReadsIbnetdiscoverOutputOnceACable) {
  const auto plan = parse_topology(fixture("ibnetdiscover_fat_tree.txt"));
  ASSERT_TRUE(plan) << plan.error().message;
  // 4 host cables and 2 leaves x 2 spines, each listed from both ends in the file.
  EXPECT_EQ(plan->cables.size(), 8u);
  const auto* host = cable_at(*plan, "MF0;leaf-02:MQM8700/U1", 2);
  ASSERT_NE(host, nullptr);
  EXPECT_EQ(host->node.guid, 0x200003u);
  EXPECT_EQ(host->remote.name, "node-0004 mlx5_0");
  EXPECT_EQ(host->remote.guid, 0x100006u);
  EXPECT_EQ(host->remote.port, 1);
  EXPECT_EQ(host->width_lanes, 12);
  EXPECT_EQ(host->lane_gigabits, 10.0);
  EXPECT_EQ(host->line, 17);
  const auto* slow = cable_at(*plan, "MF0;leaf-01:MQM8700/U1", 1);
  ASSERT_NE(slow, nullptr);
  EXPECT_EQ(slow->remote.name, "node-0001 mlx5_0");
  EXPECT_EQ(slow->width_lanes, 4);
  EXPECT_EQ(slow->lane_gigabits, 2.5);
  // Spine to leaf: listed first from spine-02's port 1, leaf-01's port 4 on the far end.
  const auto* uplink = cable_at(*plan, "MF0;spine-02:MQM8700/U1", 1);
  ASSERT_NE(uplink, nullptr);
  EXPECT_EQ(uplink->remote.name, "MF0;leaf-01:MQM8700/U1");
  EXPECT_EQ(uplink->remote.port, 4);
  EXPECT_EQ(cable_at(*plan, "MF0;leaf-01:MQM8700/U1", 4), nullptr);
}

TEST(TopologyPlan, PutsTheSwitchEndFirstWhenOnlyTheHostListsTheCable) {
  const auto plan = parse_topology(
      "Ca\t1 \"H-0000000000100006\"\t\t# \"node-0004 mlx5_0\"\n"
      "[1](100007) \t\"S-0000000000200003\"[2]\t\t# lid 17 lmc 0 \"MF0;leaf-02:MQM8700/U1\" lid "
      "8 4xEDR\n");
  ASSERT_TRUE(plan) << plan.error().message;
  ASSERT_EQ(plan->cables.size(), 1u);
  const auto& cable = plan->cables[0];
  EXPECT_EQ(cable.node.name, "MF0;leaf-02:MQM8700/U1");  // from the comment: no header of its own
  EXPECT_EQ(cable.node.guid, 0x200003u);
  EXPECT_EQ(cable.node.port, 2);
  EXPECT_EQ(cable.remote.name, "node-0004 mlx5_0");
  EXPECT_EQ(cable.width_lanes, 4);
  EXPECT_EQ(cable.lane_gigabits, 25.78125);
}

TEST(TopologyPlan, NamesTheLineOfEveryIbnetdiscoverRefusal) {
  const std::string header = "Switch\t8 \"S-0000000000200003\"\t# \"leaf\"\n";
  EXPECT_EQ(refusal("[1]\t\"H-0000000000100004\"[1]\n"),
            "line 1: port line before any node header");
  EXPECT_EQ(refusal(header + "[9]\t\"H-0000000000100004\"[1]\n"),
            "line 2: port 9 of a node with 8 ports");
  EXPECT_EQ(refusal(header + "[1]\t\"H-0000000000100004\"\n"),
            "line 2: want [PORT] \"ID\"[PORT] with ports 1-254, got '[1] \"H-0000000000100004\"'");
  EXPECT_EQ(refusal(header + "[1]\t\"H-0000000000100004\"[1]\n\n[1]\t\"H-0000000000100005\"[1]\n"),
            "line 4: port 1 listed twice (first on line 2)");
  EXPECT_EQ(refusal(header + "[1]\t\"H-0000000000100004\"[1] 4xSDR\n"),
            "line 2: text after the far end's port: '4xSDR'");
  EXPECT_EQ(refusal(header + "Switch 300 \"S-1\"\n"),
            "line 2: want Switch PORTS \"ID\" with 1-254 ports, got 'Switch 300 \"S-1\"'");
  EXPECT_EQ(refusal(header + header), "line 2: node \"S-0000000000200003\" listed twice");
  EXPECT_EQ(refusal("Switch 8 \"leaf-01\"\n"),
            "line 1: want \"S-\", \"H-\" or \"R-\" and a 16-digit GUID as node identifier, got "
            "'leaf-01'");
  EXPECT_EQ(refusal(header + "[1] \"S-00000000002000\"[1]\n"),
            "line 2: want \"S-\", \"H-\" or \"R-\" and a 16-digit GUID as node identifier, got "
            "'S-00000000002000'");
  EXPECT_EQ(refusal(header + "leaf-01 1 node 1\n"),
            "line 2: not a node header, port line or node attribute: 'leaf-01 1 node 1'");
  // Two ports that name one far end, which does not list its own cable.
  EXPECT_EQ(refusal(header + "[1]\t\"S-0000000000200001\"[5]\n[2]\t\"S-0000000000200001\"[5]\n"),
            "line 3: \"S-0000000000200001\" port 5 is the far end of line 2 already");
  EXPECT_EQ(refusal(header + "[1]\t\"H-0000000000200003\"[1]\n"),
            "line 2: \"H-0000000000200003\" has the GUID of \"S-0000000000200003\"");
  EXPECT_EQ(refusal(header + "[1]\t\"S-0000000000200003\"[1]\n"),
            "line 2: a cable from a port to itself");
  // The two ends of one cable disagree.
  EXPECT_EQ(refusal(header + "[1]\t\"S-0000000000200001\"[5]\n" +
                    "Switch\t8 \"S-0000000000200001\"\n[5]\t\"S-0000000000200003\"[2]\n"),
            "line 2: \"S-0000000000200001\" port 5 goes to \"S-0000000000200003\" port 2 on line "
            "4, not here");
}

TEST(TopologyPlan, ReadsThePlainCableList) {
  const auto plan = parse_topology(
      "# rack 12\n"
      "leaf-01 12 node-0113 mlx5_0 1\n"
      "  \"leaf 02\" 3   \"rack 7 node 2\" 1 4xHDR  # quoted: names with numbers\n"
      "0x0002c90300100001 1 0002:c903:0010:0002 2\r\n");
  ASSERT_TRUE(plan) << plan.error().message;
  ASSERT_EQ(plan->cables.size(), 3u);
  const auto& first = plan->cables[0];
  EXPECT_EQ(first.node.name, "leaf-01");
  EXPECT_EQ(first.node.port, 12);
  EXPECT_FALSE(first.node.guid);
  EXPECT_EQ(first.remote.name, "node-0113 mlx5_0");
  EXPECT_EQ(first.remote.port, 1);
  EXPECT_EQ(first.width_lanes, 0);
  EXPECT_EQ(first.line, 2);
  const auto& second = plan->cables[1];
  EXPECT_EQ(second.node.name, "leaf 02");
  EXPECT_EQ(second.remote.name, "rack 7 node 2");
  EXPECT_EQ(second.width_lanes, 4);
  EXPECT_EQ(second.lane_gigabits, 53.125);
  const auto& third = plan->cables[2];
  EXPECT_EQ(third.node.guid, 0x0002c90300100001u);
  EXPECT_EQ(third.node.name, "");
  EXPECT_EQ(third.remote.guid, 0x0002c90300100002u);
  EXPECT_EQ(third.remote.port, 2);
}

TEST(TopologyPlan, NamesTheLineOfEveryCableListRefusal) {
  constexpr std::string_view kWant =
      "want NODE PORT NODE PORT [WIDTHxSPEED], as leaf-01 12 node-0113 mlx5_0 1; got ";
  EXPECT_EQ(refusal("leaf-01 12 node-0113 mlx5_0 1\nleaf-01 13 node-0114\n"),
            std::string("line 2: ") + std::string(kWant) + "'leaf-01 13 node-0114'");
  EXPECT_EQ(refusal("12 node 1\n"), std::string("line 1: ") + std::string(kWant) + "'12 node 1'");
  EXPECT_EQ(refusal("leaf-01 0 node 1\n"), "line 1: port 0 is not 1-254");
  EXPECT_EQ(refusal("leaf-01 1 node 99999999999\n"), "line 1: port 255 is not 1-254");
  EXPECT_EQ(refusal("leaf-01 1 node 1 4xSDR extra\n"),
            "line 1: after the ports, want at most a width and speed as 4xHDR; got '4xSDR'");
  EXPECT_EQ(refusal("leaf-01 1 node 1 3xSDR\n"),
            "line 1: after the ports, want at most a width and speed as 4xHDR; got '3xSDR'");
  EXPECT_EQ(refusal("leaf-01 1 \"node 1\n"), "line 1: unterminated quoted name");
  EXPECT_EQ(refusal("leaf-01 1 leaf-01 1\n"), "line 1: a cable from a port to itself");
  EXPECT_EQ(refusal("leaf-01 1 a 1\nleaf-02 1 a 1\n"),
            "line 2: a port 1 is planned on line 1 already");
}

// A small fat tree as discovery models it: leaf (GUID 0x10) ports 1-3 to hosts 0x21-0x23,
// port 4 to the spine (0x30) port 1.
class TopologyCompare : public ::testing::Test {
 protected:
  void SetUp() override {
    add_node(0x10, FabricNodeType::kSwitch, "leaf-01", 8);
    add_node(0x30, FabricNodeType::kSwitch, "spine-01", 8);
    add_node(0x21, FabricNodeType::kCa, "node-0001 mlx5_0", 1);
    add_node(0x22, FabricNodeType::kCa, "node-0002 mlx5_0", 1);
    add_node(0x23, FabricNodeType::kCa, "node-0003 mlx5_0", 1);
    cable(0x10, 1, 0x21, 1);
    cable(0x10, 2, 0x22, 1);
    cable(0x10, 3, 0x23, 1);
    cable(0x10, 4, 0x30, 1);
    const auto parsed = parse_topology(
        "leaf-01 1 node-0001 mlx5_0 1 4xEDR\n"
        "leaf-01 2 node-0002 mlx5_0 1 4xEDR\n"
        "leaf-01 3 node-0003 mlx5_0 1 4xEDR\n"
        "leaf-01 4 spine-01 1 4xEDR\n");
    ASSERT_TRUE(parsed) << parsed.error().message;
    plan = *parsed;
  }

  FabricNode& node(std::uint64_t guid) {
    return *std::find_if(model.nodes.begin(), model.nodes.end(),
                         [&](const FabricNode& n) { return n.guid == guid; });
  }
  void add_node(std::uint64_t guid, FabricNodeType type, std::string description, int ports) {
    FabricNode added;
    added.guid = guid;
    added.type = type;
    added.description = std::move(description);
    added.port_count = ports;
    for (int p = 1; p <= ports; ++p) {
      FabricPort port;
      port.number = p;
      added.ports.push_back(port);
    }
    model.nodes.push_back(std::move(added));
  }
  void end_to(std::uint64_t guid, int port, std::uint64_t far, int far_port) {
    auto& p = node(guid).ports[static_cast<std::size_t>(port - 1)];
    p.remote = FabricRemote{far, node(far).description, far_port};
    p.width_lanes = 4;
    p.lane_gigabits = 25.78125;
  }
  void cable(std::uint64_t a, int pa, std::uint64_t b, int pb) {
    end_to(a, pa, b, pb);
    end_to(b, pb, a, pa);
  }
  void unplug(std::uint64_t guid, int port) {
    auto& p = node(guid).ports[static_cast<std::size_t>(port - 1)];
    p.remote.reset();
    p.width_lanes = 0;
    p.lane_gigabits = 0;
  }

  std::map<std::string, CableReport> by_status_and_port() const {
    std::map<std::string, CableReport> reports;
    for (const auto& report : compare_topology(plan, model)) {
      reports[std::string(to_string(report.status)) + " " + report.node.description + " " +
              std::to_string(report.node.port)] = report;
    }
    return reports;
  }

  FabricModel model;
  TopologyPlan plan;
};

TEST_F(TopologyCompare, TheFabricAsPlannedIsOk) {
  const auto reports = by_status_and_port();
  ASSERT_EQ(reports.size(), 4u);
  for (int port = 1; port <= 4; ++port) {
    const auto it = reports.find("ok leaf-01 " + std::to_string(port));
    ASSERT_NE(it, reports.end()) << port;
    EXPECT_EQ(it->second.node.guid, 0x10u);
  }
  EXPECT_EQ(reports.at("ok leaf-01 4").remote.guid, 0x30u);
}

TEST_F(TopologyCompare, SwappedMissingExtraAndSlowCablesEachGetTheirStatus) {
  // Hosts 1 and 2 swapped on the leaf, host 3 unplugged, an extra leaf-to-spine cable, the
  // uplink at 4x SDR instead of EDR.
  unplug(0x10, 1);
  unplug(0x10, 2);
  cable(0x10, 1, 0x22, 1);
  cable(0x10, 2, 0x21, 1);
  unplug(0x10, 3);
  unplug(0x23, 1);
  cable(0x10, 8, 0x30, 8);
  node(0x10).ports[3].lane_gigabits = 2.5;
  const auto reports = by_status_and_port();
  ASSERT_EQ(reports.size(), 5u);
  const auto& first = reports.at("miswired leaf-01 1");
  EXPECT_EQ(first.remote.description, "node-0001 mlx5_0");
  ASSERT_TRUE(first.node_found);  // the leaf's port 1 goes to host 2
  EXPECT_EQ(first.node_found->guid, 0x22u);
  EXPECT_EQ(first.node_found->port, 1);
  ASSERT_TRUE(first.remote_found);  // host 1 goes to the leaf's port 2
  EXPECT_EQ(first.remote_found->guid, 0x10u);
  EXPECT_EQ(first.remote_found->port, 2);
  const auto& second = reports.at("miswired leaf-01 2");
  EXPECT_EQ(second.node_found->guid, 0x21u);
  EXPECT_EQ(second.remote_found->port, 1);
  const auto& missing = reports.at("missing leaf-01 3");
  EXPECT_EQ(missing.remote.guid, 0x23u);
  EXPECT_FALSE(missing.node_found);
  EXPECT_EQ(reports.at("downgraded leaf-01 4").remote.description, "spine-01");
  const auto& extra = reports.at("unexpected leaf-01 8");
  EXPECT_EQ(extra.node.guid, 0x10u);
  EXPECT_EQ(extra.remote.guid, 0x30u);
  EXPECT_EQ(extra.remote.description, "spine-01");
  EXPECT_EQ(extra.remote.port, 8);
}

TEST_F(TopologyCompare, AHostGoneFromTheFabricIsMissingAndItsReplacementByNameIsOk) {
  // Host 3's HCA replaced: a new GUID under the same name keeps its cable.
  node(0x23).guid = 0x99;
  node(0x10).ports[2].remote->guid = 0x99;
  // Host 2 gone altogether: its node is no longer in the model.
  unplug(0x10, 2);
  std::erase_if(model.nodes, [](const FabricNode& n) { return n.guid == 0x22; });
  const auto reports = by_status_and_port();
  ASSERT_EQ(reports.size(), 4u);
  EXPECT_EQ(reports.at("ok leaf-01 3").remote.guid, 0x99u);
  const auto& missing = reports.at("missing leaf-01 2");
  EXPECT_FALSE(missing.remote.guid);  // the plan knows it by name only
  EXPECT_EQ(missing.remote.description, "node-0002 mlx5_0");
}

TEST_F(TopologyCompare, GuidsMatchWhereNamesAreNotUnique) {
  // Two hosts under one default description: the plan's GUIDs tell them apart.
  node(0x21).description = "MT4123 ConnectX6";
  node(0x22).description = "MT4123 ConnectX6";
  const auto parsed = parse_topology(
      "leaf-01 1 0x21 1\n"
      "leaf-01 2 0x22 1\n");
  ASSERT_TRUE(parsed) << parsed.error().message;
  plan = *parsed;
  auto reports = by_status_and_port();
  EXPECT_TRUE(reports.contains("ok leaf-01 1"));
  EXPECT_TRUE(reports.contains("ok leaf-01 2"));
  // Their cables swapped: both miswired, nothing unexpected.
  unplug(0x10, 1);
  unplug(0x10, 2);
  cable(0x10, 1, 0x22, 1);
  cable(0x10, 2, 0x21, 1);
  reports = by_status_and_port();
  EXPECT_TRUE(reports.contains("miswired leaf-01 1"));
  EXPECT_TRUE(reports.contains("miswired leaf-01 2"));
  // Cables 3 and 4 are not in this plan.
  EXPECT_TRUE(reports.contains("unexpected leaf-01 3"));
  EXPECT_TRUE(reports.contains("unexpected leaf-01 4"));
  EXPECT_EQ(reports.size(), 4u);
}

}  // namespace
}  // namespace ibprobe::fabric
