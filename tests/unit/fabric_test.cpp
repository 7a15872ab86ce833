// The fabric's pure parts: GUID and node-name-map parsing, PortInfo encodings, the memory of
// cables that tells a cut or downgraded one; and the flags and routes of the fabric endpoints.
// The collector itself runs against a simulated fabric (tests/fabric).
#include "ibprobe/fabric.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "ibprobe/exporter.h"
#include "ibprobe/fabric_model.h"
#include "parse_args.h"

namespace ibprobe::fabric {
namespace {

TEST(FabricGuid, ParsesEverySpellingOfOneGuid) {
  constexpr std::uint64_t kGuid = 0x0002c90300100001;
  EXPECT_EQ(parse_guid("0x0002c90300100001"), kGuid);
  EXPECT_EQ(parse_guid("0002c90300100001"), kGuid);
  EXPECT_EQ(parse_guid("0002:c903:0010:0001"), kGuid);
  EXPECT_EQ(parse_guid("0x200001"), 0x200001u);
  EXPECT_FALSE(parse_guid(""));
  EXPECT_FALSE(parse_guid("0x"));
  EXPECT_FALSE(parse_guid("0002:c903:0010:000g"));
  EXPECT_FALSE(parse_guid("10002c90300100001"));  // 17 digits
  EXPECT_FALSE(parse_guid("leaf-01"));
}

TEST(NodeNameMap, ReadsIbnetdiscoverFormat) {
  const auto parsed = parse_node_name_map(
      "# IB1\n"
      "0x0008f104003f125c \"IB1 (Rack 11 slot 1) ISR9288\"\n"
      "\n"
      "   0x0008f104003f125d   unquoted name  \r\n"
      "0002:c903:0010:0001 \"with # inside\"\n");
  ASSERT_TRUE(parsed) << parsed.error().message;
  const auto& entries = *parsed;
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0], (std::pair<std::uint64_t, std::string>{0x0008f104003f125c,
                                                               "IB1 (Rack 11 slot 1) ISR9288"}));
  EXPECT_EQ(entries[1].second, "unquoted name");
  EXPECT_EQ(entries[2],
            (std::pair<std::uint64_t, std::string>{0x0002c90300100001, "with # inside"}));
}

TEST(NodeNameMap, NamesTheFirstBadLine) {
  auto message = [](std::string_view text) {
    const auto parsed = parse_node_name_map(text);
    if (parsed) return std::string("accepted");
    EXPECT_EQ(parsed.error().kind, ErrorKind::kNodeNameMap);
    return parsed.error().message;
  };
  EXPECT_EQ(message("0x1 \"a\"\nleaf-01 \"b\"\n"), "line 2: no GUID and name (want GUID \"name\")");
  EXPECT_EQ(message("0x1\n"), "line 1: no GUID and name (want GUID \"name\")");
  EXPECT_EQ(message("0x1 \"open\n"), "line 1: unterminated quoted name (want GUID \"name\")");
  EXPECT_EQ(message("0x1 \"\"\n"), "line 1: empty name (want GUID \"name\")");
}

// The node-name-map is read before the local port is opened, so these need no InfiniBand port.
// Checked before the local port is opened: a bad file is the first thing an operator fixes.
TEST(TopologyFile, AFabricWithAnUnreadableOrBadPlanIsNotOpened) {
  FabricOptions options;
  options.topology_file = "/nonexistent/fabric.topo";
  auto opened = Fabric::open(options);
  ASSERT_FALSE(opened);
  EXPECT_EQ(opened.error().kind, ErrorKind::kTopologyFile);
  EXPECT_EQ(opened.error().message,
            "cannot read topology file /nonexistent/fabric.topo: No such file or directory");

  const auto path = std::filesystem::path(::testing::TempDir()) / "bad-fabric.topo";
  std::ofstream(path) << "# plan\nleaf-01 1 node-0001 mlx5_0 1\nleaf-01 2 node-0002\n";
  options.topology_file = path;
  opened = Fabric::open(options);
  ASSERT_FALSE(opened);
  EXPECT_EQ(opened.error().kind, ErrorKind::kTopologyFile);
  EXPECT_EQ(opened.error().message,
            path.string() +
                ": line 3: want NODE PORT NODE PORT [WIDTHxSPEED], as leaf-01 12 node-0113 "
                "mlx5_0 1; got 'leaf-01 2 node-0002'");
}

TEST(NodeNameMap, AFabricWithAnUnreadableOrBadMapIsNotOpened) {
  FabricOptions options;
  options.node_name_map = "/nonexistent/node-name-map";
  auto opened = Fabric::open(options);
  ASSERT_FALSE(opened);
  EXPECT_EQ(opened.error().kind, ErrorKind::kNodeNameMap);
  EXPECT_EQ(opened.error().message,
            "cannot read node-name-map /nonexistent/node-name-map: No such file or directory");

  const auto path = std::filesystem::path(::testing::TempDir()) / "bad-node-name-map";
  {
    std::ofstream out(path);
    out << "0x1 \"a\"\n0x2\n";
  }
  options.node_name_map = path;
  opened = Fabric::open(options);
  ASSERT_FALSE(opened);
  EXPECT_EQ(opened.error().kind, ErrorKind::kNodeNameMap);
  EXPECT_EQ(opened.error().message,
            path.string() + ": line 2: no GUID and name (want GUID \"name\")");
  std::filesystem::remove(path);
}

TEST(PortInfoEncodings, WidthsAndSpeeds) {
  EXPECT_EQ(operational_vls(1), 1);
  EXPECT_EQ(operational_vls(3), 4);
  EXPECT_EQ(operational_vls(4), 8);
  EXPECT_EQ(operational_vls(5), 15);
  EXPECT_EQ(operational_vls(0), 0);
  EXPECT_EQ(operational_vls(6), 0);
  EXPECT_EQ(width_lanes(1), 1);
  EXPECT_EQ(width_lanes(2), 4);
  EXPECT_EQ(width_lanes(8), 12);
  EXPECT_EQ(width_lanes(16), 2);
  EXPECT_EQ(width_lanes(3), 0);  // a mask, not an active width
  EXPECT_EQ(widest_lanes(1 | 2 | 8), 12);
  EXPECT_EQ(widest_lanes(1 | 2), 4);
  EXPECT_EQ(lane_gigabits(1, 0), 2.5);
  EXPECT_EQ(lane_gigabits(4, 0), 10.0);
  EXPECT_EQ(lane_gigabits(4, 4), 53.125);  // an extended speed in use wins
  EXPECT_EQ(fastest_lane_gigabits(1 | 2 | 4, 0), 10.0);
  EXPECT_EQ(fastest_lane_gigabits(1 | 2 | 4, 1 | 2), 25.78125);
}

FabricModel leaf_with(std::vector<std::pair<int, std::optional<std::pair<int, double>>>> ports) {
  FabricNode leaf{0x200001, FabricNodeType::kSwitch, "leaf-01", 1, 4, {}};
  for (const auto& [number, link] : ports) {
    FabricPort port;
    port.number = number;
    port.state = link ? 4 : 1;
    if (link) {
      port.width_lanes = link->first;
      port.lane_gigabits = link->second;
      port.remote = FabricRemote{0x100000u + static_cast<unsigned>(number), "node", 1};
    }
    leaf.ports.push_back(port);
  }
  FabricModel model;
  model.nodes = {leaf};
  return model;
}

using Kind = LinkHistory::Change::Kind;

std::vector<std::pair<Kind, int>> kinds(const std::vector<LinkHistory::Change>& changes) {
  std::vector<std::pair<Kind, int>> out;
  for (const auto& change : changes) out.emplace_back(change.kind, change.port);
  return out;
}

TEST(LinkHistory, CutReturnedAndDowngradedCables) {
  LinkHistory history;
  const std::pair<int, double> full{4, 25.78125};
  EXPECT_TRUE(history.update(leaf_with({{1, full}, {2, full}, {3, std::nullopt}})).empty());
  // Port 1 cut; port 2 retrained at 1x.
  EXPECT_EQ(kinds(history.update(leaf_with({{1, std::nullopt}, {2, {{1, 25.78125}}}}))),
            (std::vector<std::pair<Kind, int>>{{Kind::kVanished, 1}, {Kind::kDowngraded, 2}}));
  const auto& links = history.links();
  EXPECT_FALSE(links.at({0x200001, 1}).present);
  EXPECT_EQ(links.at({0x200001, 1}).remote.guid, 0x100001u);  // the former far end is kept
  EXPECT_EQ(links.at({0x200001, 2}).best_width_lanes, 4);
  EXPECT_EQ(links.count({0x200001, 3}), 0u);  // never cabled: not missing
  // Nothing new while it stays so: each change is reported once.
  EXPECT_TRUE(history.update(leaf_with({{1, std::nullopt}, {2, {{1, 25.78125}}}})).empty());
  // Port 1 back, but slower; port 2 back to full width.
  EXPECT_EQ(kinds(history.update(leaf_with({{1, {{4, 14.0625}}}, {2, full}}))),
            (std::vector<std::pair<Kind, int>>{{Kind::kReturned, 1}, {Kind::kDowngraded, 1}}));
  EXPECT_EQ(links.at({0x200001, 2}).width_lanes, 4);
  // A cable on a port never cabled before is new, not a return.
  EXPECT_TRUE(history.update(leaf_with({{1, {{4, 14.0625}}}, {2, full}, {3, full}})).empty());
  EXPECT_TRUE(links.at({0x200001, 3}).present);
}

}  // namespace
}  // namespace ibprobe::fabric

namespace ibprobe::exporter {
namespace {

using testing::parse_args;

TEST(FabricFlags, OffByDefault) {
  Config config;
  EXPECT_FALSE(parse_args({}, config));
  EXPECT_FALSE(config.fabric);
  EXPECT_FALSE(config.fabric_collector);
}

TEST(FabricFlags, CollectorImpliesDiscoveryAndOptionsApply) {
  Config config;
  EXPECT_FALSE(parse_args({"--collector.fabric", "--fabric.ca=mlx5_1", "--fabric.ca-port=2",
                           "--fabric.discovery-interval-seconds=60", "--fabric.timeout-ms=50",
                           "--fabric.retries=1", "--fabric.budget-ms=1500",
                           "--fabric.concurrency=4", "--fabric.discovery-deadline-seconds=30"},
                          config));
  EXPECT_TRUE(config.fabric);
  EXPECT_TRUE(config.fabric_collector);
  const auto& f = config.fabric_options;
  EXPECT_EQ(f.ca, "mlx5_1");
  EXPECT_EQ(f.ca_port, 2);
  EXPECT_EQ(f.discovery_interval, std::chrono::seconds(60));
  EXPECT_EQ(f.timeout, std::chrono::milliseconds(50));
  EXPECT_EQ(f.retries, 1);
  EXPECT_EQ(f.budget, std::chrono::milliseconds(1500));
  EXPECT_EQ(f.concurrency, 4);
  EXPECT_EQ(f.discovery_deadline, std::chrono::seconds(30));
  EXPECT_TRUE(f.detail_counters);
  EXPECT_FALSE(f.extended_speeds_counters);
  EXPECT_FALSE(f.detail_counters_every_read);
  EXPECT_FALSE(parse_args({"--collector.fabric", "--no-fabric.detail-counters"}, config));
  EXPECT_FALSE(config.fabric_options.detail_counters);
  Config every_read;
  EXPECT_FALSE(
      parse_args({"--collector.fabric", "--fabric.detail-counters-every-read"}, every_read));
  EXPECT_TRUE(every_read.fabric_options.detail_counters);
  EXPECT_TRUE(every_read.fabric_options.detail_counters_every_read);
  EXPECT_FALSE(parse_args({"--collector.fabric", "--fabric.extended-speeds-counters"}, config));
  EXPECT_TRUE(config.fabric_options.extended_speeds_counters);
}

TEST(FabricFlags, RefusesOutOfRangeAndMissingFiles) {
  Config config;
  EXPECT_EQ(parse_args({"--fabric.enabled", "--fabric.discovery-interval-seconds=0"}, config), 105);
  EXPECT_EQ(parse_args({"--fabric.enabled", "--fabric.node-name-map=/nonexistent/map"}, config),
            105);
  EXPECT_EQ(parse_args({"--fabric.concurrency=0"}, config), 105);
  EXPECT_EQ(parse_args({"--fabric.discovery-deadline-seconds=0"}, config), 105);
}

TEST(FabricRoutes, OffAnswers503) {
  Config config;
  collectors::Scraper scraper(collectors::Options{}, {});
  const Routes routes(config, scraper);
  auto request = [&](std::string method, std::string path, std::string query = "") {
    return routes.handle(HttpRequest{std::move(method), std::move(path), std::move(query), {}, ""});
  };
  EXPECT_EQ(request("GET", "/fabric", "target=0x1").status, 503);
  EXPECT_EQ(request("GET", "/fabric/sd").status, 503);
  EXPECT_EQ(request("POST", "/fabric").status, 405);
  EXPECT_EQ(request("POST", "/fabric").headers.at(0).second, "GET, HEAD");
  EXPECT_EQ(request("GET", "/fabric/other").status, 404);
}

}  // namespace
}  // namespace ibprobe::exporter
