#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "ibprobe/exporter.h"
#include "parse_args.h"

namespace ibprobe::exporter {
namespace {

using fabric::RemotePort;
using namespace std::chrono_literals;

using testing::parse_args;

// Which CA and port the MADs leave from, and the limits they are sent under, for comparing whole.
auto source_and_limits(const fabric::RemotePmaOptions& remote) {
  return std::tuple(remote.ca, remote.ca_port, remote.timeout, remote.retries, remote.budget,
                    remote.concurrency);
}

TEST(RemotePmaFlags, OffByDefaultWithBoundedDefaults) {
  Config config;
  EXPECT_FALSE(parse_args({}, config));
  EXPECT_FALSE(config.remote_pma);
  const auto& remote = config.remote_pma_options;
  EXPECT_TRUE(remote.targets.empty());
  EXPECT_EQ(source_and_limits(remote), std::tuple(std::string(""), 0, 300ms, 2, 4000ms, 8));
  EXPECT_FALSE(remote.detail_counters);
  EXPECT_FALSE(remote.extended_speeds_counters);
}

TEST(RemotePmaFlags, ExtendedSpeedsCountersOnRequest) {
  Config config;
  EXPECT_FALSE(parse_args({"--collector.remote_pma", "--collector.remote_pma.target=12:3",
                           "--collector.remote_pma.extended-speeds-counters"},
                          config));
  EXPECT_TRUE(config.remote_pma_options.extended_speeds_counters);
  EXPECT_FALSE(parse_args({"--collector.remote_pma", "--collector.remote_pma.target=12:3",
                           "--collector.remote_pma.extended-speeds-counters",
                           "--no-collector.remote_pma.extended-speeds-counters"},
                          config));
  EXPECT_FALSE(config.remote_pma_options.extended_speeds_counters);
}

TEST(RemotePmaFlags, DetailCountersOnRequest) {
  Config config;
  EXPECT_FALSE(parse_args({"--collector.remote_pma", "--collector.remote_pma.target=12:3",
                           "--collector.remote_pma.detail-counters"},
                          config));
  EXPECT_TRUE(config.remote_pma_options.detail_counters);
  EXPECT_FALSE(parse_args(
      {"--collector.remote_pma", "--collector.remote_pma.target=12:3",
       "--collector.remote_pma.detail-counters", "--no-collector.remote_pma.detail-counters"},
      config));
  EXPECT_FALSE(config.remote_pma_options.detail_counters);
}

TEST(RemotePmaFlags, EnabledWithRepeatedTargetsAndLimits) {
  Config config;
  EXPECT_FALSE(
      parse_args({"--collector.remote_pma", "--collector.remote_pma.target=12:3",
                  "--collector.remote_pma.target", "0x1a:all", "--collector.remote_pma.ca=mlx5_1",
                  "--collector.remote_pma.ca-port=2", "--collector.remote_pma.timeout-ms=150",
                  "--collector.remote_pma.retries=0", "--collector.remote_pma.budget-ms=2500",
                  "--collector.remote_pma.concurrency=3"},
                 config));
  EXPECT_TRUE(config.remote_pma);
  const auto& remote = config.remote_pma_options;
  EXPECT_EQ(remote.targets, (std::vector<RemotePort>{{12, 3}, {26, std::nullopt}}));
  EXPECT_EQ(source_and_limits(remote), std::tuple(std::string("mlx5_1"), 2, 150ms, 0, 2500ms, 3));
  // The per-device collectors are unaffected.
  EXPECT_EQ(config.enabled_collectors,
            (std::vector<std::string>{"port_counters", "hw_counters", "port_info", "gids",
                                      "link_health", "port_events"}));
}

TEST(RemotePmaFlags, NoCollectorFlagTurnsItOff) {
  Config config;
  EXPECT_FALSE(parse_args({"--collector.remote_pma", "--no-collector.remote_pma"}, config));
  EXPECT_FALSE(config.remote_pma);
}

TEST(RemotePmaFlags, RejectsBadInputWithExitCode) {
  for (const auto& bad : std::vector<std::vector<std::string>>{
           {"--collector.remote_pma"},  // no target
           {"--collector.remote_pma", "--collector.remote_pma.target=12"},
           {"--collector.remote_pma", "--collector.remote_pma.target=0:1"},
           {"--collector.remote_pma", "--collector.remote_pma.target=12:255"},
           {"--collector.remote_pma.timeout-ms=0"},
           {"--collector.remote_pma.retries=-1"},
           {"--collector.remote_pma.budget-ms=0"},
           {"--collector.remote_pma.concurrency=0"},
           {"--collector.remote_pma.ca-port=255"}}) {
    Config config;
    const auto exit_code = parse_args(bad, config);
    ASSERT_TRUE(exit_code) << bad.back();
    EXPECT_NE(*exit_code, 0) << bad.back();
  }
}

}  // namespace
}  // namespace ibprobe::exporter
