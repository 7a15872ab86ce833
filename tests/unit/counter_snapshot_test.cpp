#include "ibprobe/counter_snapshot.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <map>
#include <memory>

#include "sysfs_fixture.h"

namespace ibprobe::testing {
namespace {

TEST(CounterSnapshot, ExtendedPortWithHwCounters) {
  SysfsTree tree;
  const auto device = mlx5_ib_device("mlx5_0", 2, 0);
  tree.add(device);
  const auto snapshot = collectors::snapshot_port(tree.root(), "mlx5_0", 2);
  const auto& fixture = *device.ports.at(2).counters;
  const auto& data = snapshot.counters.at("port_xmit_data");
  EXPECT_EQ(data.value, fixture.at("port_xmit_data"));
  EXPECT_EQ(data.width_bits, 64u);
  EXPECT_EQ(data.scale, 4);
  EXPECT_FALSE(data.error_class);
  const auto& symbol = snapshot.counters.at("symbol_error");
  EXPECT_EQ(symbol.value, fixture.at("symbol_error"));
  EXPECT_EQ(symbol.width_bits, 16u);
  EXPECT_TRUE(symbol.error_class);
  EXPECT_EQ(snapshot.counters.at("local_link_integrity_errors").width_bits, 4u);
  EXPECT_EQ(snapshot.counters.at("hw_counters/out_of_buffer").value,
            device.ports.at(2).hw_counters->at("out_of_buffer"));
  EXPECT_FALSE(snapshot.counters.contains("hw_counters/lifespan"));
  EXPECT_EQ(snapshot.hw_counters_lifespan, std::chrono::milliseconds(10));
  // Every counters/ file and every hw_counters file except lifespan.
  EXPECT_EQ(snapshot.counters.size(), fixture.size() + device.ports.at(2).hw_counters->size() - 1);
}

TEST(CounterSnapshot, BasicTableIs32Bit) {
  SysfsTree tree;
  tree.add(basic_saturated_device("mthca0", 4));
  const auto snapshot = collectors::snapshot_port(tree.root(), "mthca0", 1);
  EXPECT_EQ(snapshot.counters.at("port_xmit_data").width_bits, 32u);
  EXPECT_EQ(snapshot.counters.at("port_xmit_data").value, 0xFFFFFFFFu);
}

TEST(CounterSnapshot, RxeHasOnlyHwCounters) {
  SysfsTree tree;
  tree.add(rxe_device("rxe0", "eth0", 3));
  const auto snapshot = collectors::snapshot_port(tree.root(), "rxe0", 1);
  EXPECT_FALSE(snapshot.counters.contains("port_xmit_data"));
  EXPECT_TRUE(snapshot.counters.contains("hw_counters/sent_pkts"));
}

// An ethtool source answering for one netdev, as a driver's ethtool -S would.
class OneNetdev final : public collectors::EthtoolSource {
 public:
  OneNetdev(std::string netdev, collectors::EthtoolStatistics statistics)
      : netdev_(std::move(netdev)), statistics_(std::move(statistics)) {}
  collectors::EthtoolRead statistics(const std::string& netdev) const override {
    ++asked_;
    if (netdev != netdev_) return std::unexpected(std::error_code(ENODEV, std::system_category()));
    return statistics_;
  }
  mutable int asked_ = 0;

 private:
  std::string netdev_;
  collectors::EthtoolStatistics statistics_;
};

TEST(CounterSnapshot, ARocePortHoldsItsNetdevsPerPriorityStatistics) {
  SysfsTree tree;
  tree.add(rxe_device("rxe0", "eth0", 3));
  // mlx5's names: traffic, pause and discards of priority 3, and statistics of no priority.
  const auto ethtool = std::make_shared<OneNetdev>(
      "eth0", collectors::EthtoolStatistics{{"rx_bytes", 900},
                                            {"tx_prio3_bytes", 123456},
                                            {"tx_prio3_pause", 2},
                                            {"rx_prio3_discards", 1},
                                            {"rx_queue_0_packets", 40}});
  const auto snapshot = collectors::snapshot_port(tree.root(), "rxe0", 1, ethtool);
  EXPECT_EQ(snapshot.counters.at("ethtool/tx_prio3_bytes"),
            (CounterSample{123456, 64, 1, false, "informative", 3}));
  EXPECT_EQ(snapshot.counters.at("ethtool/tx_prio3_pause"),
            (CounterSample{2, 64, 1, false, "congestion", 3}));
  EXPECT_EQ(snapshot.counters.at("ethtool/rx_prio3_discards"),
            (CounterSample{1, 64, 1, true, "error", 3}));
  EXPECT_FALSE(snapshot.counters.contains("ethtool/rx_bytes"));
  EXPECT_FALSE(snapshot.counters.contains("ethtool/rx_queue_0_packets"));
  EXPECT_TRUE(snapshot.counters.contains("hw_counters/sent_pkts"));
  EXPECT_EQ(collectors::counter_class_of("ethtool/tx_prio3_pause"), "congestion");
  EXPECT_EQ(collectors::priority_of("ethtool/tx_prio3_pause"), 3u);
  EXPECT_EQ(collectors::priority_of("hw_counters/tx_prio3_pause"), std::nullopt);
}

// mlx5's statistics as its ethtool -S names them (drivers/net/ethernet/mellanox/mlx5/core/
// en_stats.c): per priority 0-7 pport_per_prio_traffic_stats_desc, pport_per_tc_prio_stats_desc
// and pport_per_tc_congest_prio_stats_desc, pport_per_prio_pfc_stats_desc's "rx_%s_pause"...
// with "prio%d" (priorities with PFC) or "global" (link pause); and some without a priority:
// the PFC storm counters, the physical port's, the per-channel ones ("rx%d_", "tx%d_", "ch%d_").
TEST(CounterSnapshot, Mlx5sPerPriorityStatisticsAsEnStatsNamesThem) {
  collectors::EthtoolStatistics statistics;
  std::map<std::string, std::pair<std::uint32_t, std::string>> expected;
  for (std::uint32_t prio = 0; prio < 8; ++prio) {
    const std::string p = "prio" + std::to_string(prio);
    for (const auto& [format, counter_class] :
         std::initializer_list<std::pair<std::string, std::string>>{
             {"rx_%_bytes", "informative"},
             {"rx_%_packets", "informative"},
             {"rx_%_discards", "error"},
             {"tx_%_bytes", "informative"},
             {"tx_%_packets", "informative"},
             {"rx_%_buf_discard", "error"},
             {"rx_%_cong_discard", "error"},
             {"rx_%_marked", "congestion"},
             {"rx_%_pause", "congestion"},
             {"rx_%_pause_duration", "congestion"},
             {"tx_%_pause", "congestion"},
             {"tx_%_pause_duration", "congestion"},
             {"rx_%_pause_transition", "congestion"}}) {
      const std::string name =
          format.substr(0, format.find('%')) + p + format.substr(format.find('%') + 1);
      statistics.emplace_back(name, 100 + prio);
      expected[name] = {prio, counter_class};
    }
  }
  for (const auto* name :
       {"rx_global_pause", "tx_global_pause_duration", "rx_global_pause_transition",
        "tx_pause_storm_warning_events", "tx_pause_storm_error_events", "rx_pause_ctrl_phy",
        "rx_discards_phy", "rx3_packets", "tx3_bytes", "rx3_xdp_drop", "ch3_events",
        "rx_vport_rdma_unicast_bytes", "tx_bytes_phy", "rx_prio_bytes"}) {
    statistics.emplace_back(name, 7);
  }
  // The RoCE port's shape does not matter: the selection reads only its netdev's names.
  SysfsTree tree;
  tree.add(rxe_device("rxe0", "enp1s0f0", 3));
  const auto snapshot = collectors::snapshot_port(
      tree.root(), "rxe0", 1, std::make_shared<OneNetdev>("enp1s0f0", statistics));
  std::map<std::string, std::pair<std::uint32_t, std::string>> selected;
  for (const auto& [name, sample] : snapshot.counters) {
    if (!name.starts_with("ethtool/")) continue;
    ASSERT_TRUE(sample.priority.has_value()) << name;
    EXPECT_EQ(sample.value, 100 + *sample.priority) << name;
    selected[name.substr(std::string_view("ethtool/").size())] = {*sample.priority,
                                                                  sample.counter_class};
  }
  EXPECT_EQ(selected, expected);
}

TEST(CounterSnapshot, ANetdevWithoutStatisticsCostsNothingElse) {
  SysfsTree tree;
  tree.add(rxe_device("rxe0", "eth0", 3));
  const auto absent = std::make_shared<OneNetdev>("eth9", collectors::EthtoolStatistics{});
  const auto snapshot = collectors::snapshot_port(tree.root(), "rxe0", 1, absent);
  EXPECT_EQ(absent->asked_, 1);
  EXPECT_TRUE(snapshot.counters.contains("hw_counters/sent_pkts"));
  for (const auto& [name, sample] : snapshot.counters) EXPECT_FALSE(name.starts_with("ethtool/"));
}

TEST(CounterSnapshot, AnInfiniBandPortHasNoNetdevToAsk) {
  SysfsTree tree;
  tree.add(mlx5_ib_device("mlx5_0", 2, 0));
  const auto ethtool = std::make_shared<OneNetdev>("eth0", collectors::EthtoolStatistics{});
  collectors::snapshot_port(tree.root(), "mlx5_0", 2, ethtool);
  EXPECT_EQ(ethtool->asked_, 0);
}

TEST(CounterSnapshot, MissingPortIsEmpty) {
  SysfsTree tree;
  const auto snapshot = collectors::snapshot_port(tree.root(), "mlx5_9", 1);
  EXPECT_TRUE(snapshot.counters.empty());
}

}  // namespace
}  // namespace ibprobe::testing

namespace ibprobe::testing {
namespace {

TEST(DescribePortCounter, UnitAndClassFromTheName) {
  const auto data = collectors::describe_port_counter("port_rcv_data", 10, 32);
  EXPECT_EQ(data.scale, 4);
  EXPECT_FALSE(data.error_class);
  EXPECT_EQ(data.width_bits, 32u);
  const auto symbol = collectors::describe_port_counter("symbol_error", 3, 16);
  EXPECT_TRUE(symbol.error_class);
  EXPECT_EQ(symbol.scale, 1);
  const auto unknown = collectors::describe_port_counter("future_counter", 7, 64);
  EXPECT_FALSE(unknown.error_class);
  EXPECT_EQ(unknown.value, 7u);
}

}  // namespace
}  // namespace ibprobe::testing
