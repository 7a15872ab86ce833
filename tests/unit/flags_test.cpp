#include <gtest/gtest.h>

#include "ibprobe/exporter.h"
#include "parse_args.h"

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
                                      "link_health"}));
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
            (std::vector<std::string>{"port_counters", "hw_counters", "port_info", "link_health"}));
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
