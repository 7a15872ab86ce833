#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <thread>

#include "collect_helpers.h"
#include "host_collectors.h"
#include "ibprobe/exporter.h"
#include "parse_args.h"
#include "sysfs_fixture.h"

namespace ibprobe::exporter {
namespace {

using testing::parse_args;

TEST(Flags, Defaults) {
  Config config;
  EXPECT_FALSE(parse_args({}, config));
  EXPECT_EQ(config.listen_address, ":9470");
  EXPECT_EQ(config.telemetry_path, "/metrics");
  EXPECT_EQ(config.sysfs_root, "/sys");
  EXPECT_EQ(config.enabled_collectors,
            (std::vector<std::string>{"port_counters", "hw_counters", "port_info", "gids",
                                      "link_health", "port_events"}));
}

TEST(Flags, PrometheusStyleOptions) {
  Config config;
  EXPECT_FALSE(parse_args(
      {"--web.listen-address=127.0.0.1:9999", "--web.telemetry-path", "/m", "--path.sysfs=/tmp/sys",
       "--no-collector.gids", "--device.exclude=rxe.*", "--log.level=debug"},
      config));
  EXPECT_EQ(config.listen_address, "127.0.0.1:9999");
  EXPECT_EQ(config.telemetry_path, "/m");
  EXPECT_EQ(config.sysfs_root, "/tmp/sys");
  EXPECT_EQ(config.device_exclude, "rxe.*");
  EXPECT_EQ(config.log_level, "debug");
  EXPECT_EQ(config.enabled_collectors,
            (std::vector<std::string>{"port_counters", "hw_counters", "port_info", "link_health",
                                      "port_events"}));
}

TEST(Flags, ProbeResponderAddress) {
  Config config;
  EXPECT_FALSE(parse_args({}, config));
  EXPECT_EQ(config.probe_responder_address, ":9471");
  EXPECT_FALSE(parse_args({"--probe.responder-address=10.0.0.5:9471"}, config));
  EXPECT_EQ(config.probe_responder_address, "10.0.0.5:9471");
  // Nothing after the '=': the responder is off, and the next flag is not taken as the address.
  Config off;
  EXPECT_FALSE(parse_args({"--probe.responder-address=", "--web.listen-address=:1234"}, off));
  EXPECT_EQ(off.probe_responder_address, "");
  EXPECT_EQ(off.listen_address, ":1234");
}

TEST(Flags, GidRescanInterval) {
  Config config;
  EXPECT_FALSE(parse_args({}, config));
  EXPECT_EQ(config.gid_rescan_interval, std::chrono::minutes(5));
  EXPECT_FALSE(parse_args({"--collector.gids.rescan-interval-seconds=0"}, config));
  EXPECT_EQ(config.gid_rescan_interval, std::chrono::seconds(0));
  EXPECT_FALSE(parse_args({"--collector.gids.rescan-interval-seconds", "60"}, config));
  EXPECT_EQ(config.gid_rescan_interval, std::chrono::seconds(60));
}

TEST(Flags, LinkHealthModuleInterval) {
  Config config;
  EXPECT_FALSE(parse_args({}, config));
  EXPECT_EQ(config.link_health_module_interval, std::chrono::minutes(5));
  EXPECT_FALSE(parse_args({"--collector.link_health.module-interval-seconds=60"}, config));
  EXPECT_EQ(config.link_health_module_interval, std::chrono::seconds(60));
  Config off;
  EXPECT_FALSE(parse_args({"--no-collector.link_health"}, off));
  EXPECT_EQ(off.enabled_collectors, (std::vector<std::string>{"port_counters", "hw_counters",
                                                              "port_info", "gids", "port_events"}));
}

// The link_health collector the exporter builds from the flags keeps the interval: the netdev
// behind a port's GID 0 is looked up again (and read) once it has passed, and not before. Both
// collectors read this machine's netdevs through ethtool netlink.
TEST(Flags, LinkHealthModuleIntervalReachesTheCollector) {
  // Before any thread logs, as the exporter's main makes it: the collectors' threads and the
  // scrape's workers log (port_events says it cannot open the tree's device), and libspdlog (not
  // built for ThreadSanitizer) creates the logger on first use.
  spdlog::default_logger();
  testing::SysfsTree tree;
  tree.add(testing::rxe_device("rxe0", "lo", 1));
  const std::string sysfs = "--path.sysfs=" + tree.root().string();
  Config one_second;
  ASSERT_FALSE(
      parse_args({sysfs, "--collector.link_health.module-interval-seconds=1"}, one_second));
  Config defaults;
  ASSERT_FALSE(parse_args({sysfs}, defaults));
  const auto scraper_of = [](const Config& config) {
    collectors::Options options;
    options.sysfs_root = config.sysfs_root;
    return std::make_unique<collectors::Scraper>(options, make_host_collectors(config));
  };
  const auto netdev_of = [](collectors::Scraper& scraper) {
    const auto families = scraper.scrape();
    const auto* up = testing::find_family(families, "rdma_port_module_up");
    return up && up->metric.size() == 1 ? testing::labels_of(up->metric[0]).at("netdev")
                                        : std::string();
  };
  const auto netdev_after = [&](collectors::Scraper& scraper, const std::string& wanted,
                                std::chrono::steady_clock::duration within) {
    const auto deadline = std::chrono::steady_clock::now() + within;
    std::string netdev;
    while ((netdev = netdev_of(scraper)) != wanted && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return netdev;
  };
  auto every_second = scraper_of(one_second);
  auto every_five_minutes = scraper_of(defaults);
  EXPECT_EQ(netdev_after(*every_second, "lo", std::chrono::seconds(10)), "lo");
  EXPECT_EQ(netdev_after(*every_five_minutes, "lo", std::chrono::seconds(10)), "lo");

  tree.write(tree.port_dir("rxe0", 1) / "gid_attrs" / "ndevs" / "0", "eth0");
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_EQ(netdev_after(*every_second, "eth0", std::chrono::seconds(10)), "eth0");
  EXPECT_EQ(netdev_of(*every_five_minutes), "lo");
}

TEST(Flags, RejectsBadInputWithExitCode) {
  for (const auto& bad :
       std::vector<std::vector<std::string>>{{"--web.listen-address=9470"},
                                             {"--web.listen-address=:99999"},
                                             {"--web.listen-address=:http"},
                                             {"--web.telemetry-path=metrics"},
                                             {"--log.level=verbose"},
                                             {"--collector.nonexistent"},
                                             {"--device.include=("},
                                             {"--probe.responder-address=9471"},
                                             {"--probe.device-port=0"},
                                             {"--collector.gids.rescan-interval-seconds=-1"},
                                             {"--collector.gids.rescan-interval-seconds=5m"},
                                             {"--collector.link_health.module-interval-seconds=0"},
                                             {"--collector.link_health.module-interval-seconds=1h"},
                                             {"--unknown-flag"}}) {
    Config config;
    const auto exit_code = parse_args(bad, config);
    ASSERT_TRUE(exit_code) << bad[0];
    EXPECT_NE(*exit_code, 0) << bad[0];
  }
}

TEST(Flags, HelpAndVersionExitZero) {
  Config config;
  EXPECT_EQ(parse_args({"--help"}, config), 0);
  EXPECT_EQ(parse_args({"--version"}, config), 0);
}

TEST(ListenAddress, CivetwebForms) {
  EXPECT_EQ(civetweb_listening_port(":9470"), "9470");
  EXPECT_EQ(civetweb_listening_port("0.0.0.0:80"), "0.0.0.0:80");
  EXPECT_EQ(civetweb_listening_port("[::1]:9470"), "[::1]:9470");
  EXPECT_THROW(civetweb_listening_port("::1:9470"), std::invalid_argument);
  EXPECT_THROW(civetweb_listening_port("host"), std::invalid_argument);
  EXPECT_EQ(civetweb_listening_port("127.0.0.1:0"), "127.0.0.1:0");
  EXPECT_THROW(civetweb_listening_port("host:-1"), std::invalid_argument);
  EXPECT_THROW(civetweb_listening_port("[::1:9470"), std::invalid_argument);
}

}  // namespace
}  // namespace ibprobe::exporter
