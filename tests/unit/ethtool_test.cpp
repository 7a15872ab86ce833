#include "ibprobe/ethtool.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <map>
#include <system_error>

#include "collect_helpers.h"
#include "sysfs_fixture.h"

namespace ibprobe::testing {
namespace {

// Statistics as each driver's ethtool -S names them (mlx5 en_stats.c, bnxt_en bnxt_ethtool.c,
// ice ice_ethtool.c, virtio_net), split by whether they matter for RoCE.
TEST(EthtoolNames, RoceStatisticsAcrossDrivers) {
  for (const auto* name :
       {"rx_prio3_pause", "tx_prio3_pause", "rx_prio3_pause_duration", "rx_prio3_pause_transition",
        "tx_pause_storm_warning_events", "tx_pause_storm_error_events", "rx_pause_ctrl_phy",
        "rx_discards_phy", "tx_discards_phy", "rx_prio3_discards", "rx_out_of_buffer",
        "rx_prio3_buf_discard", "rx_pfc_ena_frames_pri3", "tx_pfc_ena_frames_pri3",
        "rx_priority_3_xoff", "tx_priority_3_xon", "rx_queue_0_drops", "rx_dropped",
        "pfc_watchdog_triggered"}) {
    EXPECT_TRUE(collectors::is_roce_ethtool_statistic(name)) << name;
  }
  for (const auto* name : {"rx_bytes", "tx_packets", "rx_queue_0_packets", "tx_queue_0_kicks",
                           "rx_csum_complete", "tx_tso_packets", "rx_vport_rdma_unicast_bytes"}) {
    EXPECT_FALSE(collectors::is_roce_ethtool_statistic(name)) << name;
  }
}

// The priority each driver's per-priority statistics count for, as the drivers print the names:
// mlx5 en_stats.c (rx_prio%d_bytes, tx_prio%d_pause, rx_prio%d_buf_discard), bnxt_en
// bnxt_ethtool.c (rx_bytes_pri%d, rx_pfc_ena_frames_pri%d), ice ice_ethtool.c
// (tx_priority_%u_xon.nic), i40e i40e_ethtool.c (port.rx_priority_%u_xon_rx).
// Every name the mlx5 driver gives its port counters (drivers/net/ethernet/mellanox/mlx5/core/
// en_stats.c: pport_802_3_stats_desc, pport_2863_stats_desc, pport_2819_stats_desc,
// pport_phy_statistical_stats_desc, pport_phy_statistical_err_lanes_stats_desc, the
// "link_down_events_phy" string of the phy group and pport_eth_ext_stats_desc), split into the
// errors of the physical layer and the rest.
TEST(EthtoolNames, Mlx5PhysicalLayerErrors) {
  for (const auto* name :
       {"rx_crc_errors_phy", "rx_in_range_len_errors_phy", "rx_oversize_pkts_phy",
        "rx_symbol_err_phy", "tx_errors_phy", "rx_undersize_pkts_phy", "rx_fragments_phy",
        "rx_jabbers_phy", "link_down_events_phy", "rx_pcs_symbol_err_phy", "rx_corrected_bits_phy",
        "rx_err_lane_0_phy", "rx_err_lane_1_phy", "rx_err_lane_2_phy", "rx_err_lane_3_phy"}) {
    EXPECT_TRUE(collectors::is_physical_error_statistic(name)) << name;
    EXPECT_TRUE(collectors::is_roce_ethtool_statistic(name)) << name;
  }
  for (const auto* name : {"tx_packets_phy",
                           "rx_packets_phy",
                           "tx_bytes_phy",
                           "rx_bytes_phy",
                           "tx_multicast_phy",
                           "tx_broadcast_phy",
                           "rx_multicast_phy",
                           "rx_broadcast_phy",
                           "rx_out_of_range_len_phy",
                           "tx_mac_control_phy",
                           "rx_mac_control_phy",
                           "rx_unsupported_op_phy",
                           "rx_64_bytes_phy",
                           "rx_65_to_127_bytes_phy",
                           "rx_8192_to_10239_bytes_phy",
                           "rx_buffer_passed_thres_phy",
                           "rx_wqe_err",
                           "tx_cqe_err",
                           "rx_pause_ctrl_phy",
                           "rx_discards_phy"}) {
    EXPECT_FALSE(collectors::is_physical_error_statistic(name)) << name;
  }
  // Already among the RoCE ones, as pause frames and discards.
  for (const auto* name :
       {"rx_pause_ctrl_phy", "tx_pause_ctrl_phy", "rx_discards_phy", "tx_discards_phy"}) {
    EXPECT_TRUE(collectors::is_roce_ethtool_statistic(name)) << name;
  }
  for (const auto* name : {"rx_bytes_phy", "rx_64_bytes_phy", "rx_out_of_range_len_phy",
                           "rx_buffer_passed_thres_phy", "rx_wqe_err"}) {
    EXPECT_FALSE(collectors::is_roce_ethtool_statistic(name)) << name;
  }
}

TEST(EthtoolNames, ThePriorityOfAPerPriorityStatistic) {
  const std::map<std::string, std::uint32_t> named = {
      {"rx_prio0_bytes", 0},         {"tx_prio3_bytes", 3},
      {"tx_prio7_packets", 7},       {"rx_prio3_pause_duration", 3},
      {"rx_prio5_buf_discard", 5},   {"rx_bytes_pri4", 4},
      {"rx_pfc_ena_frames_pri3", 3}, {"tx_priority_3_xon.nic", 3},
      {"rx_priority_6_xoff", 6},     {"port.rx_priority_2_xon_rx", 2},
  };
  for (const auto& [name, priority] : named) {
    EXPECT_EQ(collectors::ethtool_priority(name), priority) << name;
  }
  for (const auto* name :
       {"rx_bytes", "tx_queue_3_packets", "rx_pause_ctrl_phy", "tx_prio8_bytes", "rx_prio31_bytes",
        "rx_priority", "rx_prio_bytes", "ch3_poll", "rx_vport_rdma_unicast_bytes", "spring3",
        "tx_xprio3_bytes", "rx_pri3x"}) {
    EXPECT_EQ(collectors::ethtool_priority(name), std::nullopt) << name;
  }
}

TEST(EthtoolNames, ThePriorityStatisticsClass) {
  EXPECT_EQ(collectors::ethtool_priority_class("tx_prio3_pause"), "congestion");
  EXPECT_EQ(collectors::ethtool_priority_class("rx_pfc_ena_frames_pri3"), "congestion");
  EXPECT_EQ(collectors::ethtool_priority_class("tx_priority_3_xoff.nic"), "congestion");
  EXPECT_EQ(collectors::ethtool_priority_class("rx_prio3_discards"), "error");
  EXPECT_EQ(collectors::ethtool_priority_class("rx_prio3_buf_discard"), "error");
  EXPECT_EQ(collectors::ethtool_priority_class("tx_prio3_bytes"), "informative");
}

collectors::EthtoolRead failure(int errno_value) {
  return std::unexpected(std::error_code(errno_value, std::system_category()));
}

// What a driver answers for each netdev: fixture data for the collector's logic; the ioctl
// itself is tested below against the kernel and in the lab against virtio_net.
class FixedSource final : public collectors::EthtoolSource {
 public:
  explicit FixedSource(std::map<std::string, collectors::EthtoolRead> answers)
      : answers_(std::move(answers)) {}
  collectors::EthtoolRead statistics(const std::string& netdev) const override {
    const auto it = answers_.find(netdev);
    return it == answers_.end() ? failure(ENODEV) : it->second;
  }

 private:
  std::map<std::string, collectors::EthtoolRead> answers_;
};

const collectors::EthtoolStatistics kMlx5 = {
    {"rx_packets", 9000},   {"rx_bytes", 7'000'000},
    {"rx_prio3_pause", 41}, {"rx_prio3_pause_duration", 4100},
    {"tx_prio3_pause", 2},  {"rx_out_of_buffer", 5},
    {"rx_discards_phy", 3}, {"tx_pause_storm_warning_events", 1},
    {"rx_prio3_pause", 42},
};

Collected collect_ethtool(const SysfsTree& tree, bool all,
                          std::map<std::string, collectors::EthtoolRead> answers) {
  collectors::Options options;
  options.sysfs_root = tree.root();
  return collect_with(
      std::move(options),
      collectors::make_ethtool_collector(all, std::make_shared<FixedSource>(std::move(answers))));
}

LabelMap stat(const std::string& device, const std::string& netdev, const std::string& name) {
  return {{"device", device}, {"port", "1"}, {"netdev", netdev}, {"stat", name}};
}

TEST(EthtoolCollector, RoceStatisticsOfEachRocePortsNetdevByDefault) {
  SysfsTree tree;
  tree.add(mlx5_roce_device("mlx5_0", "ens1f0", 1));
  tree.add(mlx5_ib_device("mlx5_1", 1, 2));  // InfiniBand: no netdev, nothing to ask
  const auto result = collect_ethtool(tree, false, {{"ens1f0", kMlx5}});
  EXPECT_TRUE(result.errors.empty());
  const std::string family = "rdma_port_ethtool_stat_total";
  EXPECT_EQ(sample(result.families, family, stat("mlx5_0", "ens1f0", "rx_prio3_pause")), 41);
  // A name the driver repeats gets a suffix rather than a duplicate series.
  EXPECT_EQ(sample(result.families, family, stat("mlx5_0", "ens1f0", "rx_prio3_pause_2")), 42);
  EXPECT_EQ(sample(result.families, family, stat("mlx5_0", "ens1f0", "rx_prio3_pause_duration")),
            4100);
  EXPECT_EQ(sample(result.families, family, stat("mlx5_0", "ens1f0", "rx_out_of_buffer")), 5);
  EXPECT_EQ(
      sample(result.families, family, stat("mlx5_0", "ens1f0", "tx_pause_storm_warning_events")),
      1);
  EXPECT_FALSE(sample(result.families, family, stat("mlx5_0", "ens1f0", "rx_bytes")));
  const auto* f = find_family(result.families, family);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->metric.size(), 7u);
  EXPECT_EQ(f->type, prometheus::MetricType::Counter);
}

TEST(EthtoolCollector, AllStatisticsWhenAsked) {
  SysfsTree tree;
  tree.add(mlx5_roce_device("mlx5_0", "ens1f0", 1));
  const auto result = collect_ethtool(tree, true, {{"ens1f0", kMlx5}});
  const auto* f = find_family(result.families, "rdma_port_ethtool_stat_total");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->metric.size(), kMlx5.size());
  EXPECT_EQ(
      sample(result.families, "rdma_port_ethtool_stat_total", stat("mlx5_0", "ens1f0", "rx_bytes")),
      7'000'000);
}

// The same isolation as the sysfs collectors: a netdev that cannot be asked costs its series and
// one dropped input with the errno's reason; the other device is served.
TEST(EthtoolCollector, AnUnreadableNetdevCostsItsSeriesOnly) {
  SysfsTree tree;
  tree.add(mlx5_roce_device("mlx5_0", "ens1f0", 1));
  tree.add(rxe_device("rxe0", "gone0", 2));
  const auto result = collect_ethtool(tree, false, {{"ens1f0", kMlx5}});
  ASSERT_EQ(result.errors.size(), 1u);
  EXPECT_EQ(result.errors[0].reason, collectors::ReadError::kNotFound);
  EXPECT_NE(result.errors[0].path.string().find("netdev gone0"), std::string::npos);
  EXPECT_EQ(sample(result.families, "rdma_port_ethtool_stat_total",
                   stat("mlx5_0", "ens1f0", "rx_discards_phy")),
            3);

  const auto unsupported =
      collect_ethtool(tree, false, {{"ens1f0", failure(EOPNOTSUPP)}, {"gone0", failure(EPERM)}});
  ASSERT_EQ(unsupported.errors.size(), 2u);
  EXPECT_EQ(unsupported.errors[0].reason, collectors::ReadError::kNotSupported);
  EXPECT_EQ(unsupported.errors[1].reason, collectors::ReadError::kPermission);
}

// The ioctl against this kernel: a netdev that does not exist is ENODEV; loopback has no
// statistics set, which is an empty answer, not a failure.
TEST(EthtoolIoctl, AsksTheKernel) {
  const auto source = collectors::make_ioctl_ethtool_source();
  const auto missing = source->statistics("ibprobe-none0");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().value(), ENODEV);
  const auto loopback = source->statistics("lo");
  ASSERT_TRUE(loopback) << loopback.error().message();
  EXPECT_TRUE(loopback->empty());
  // Names longer than IFNAMSIZ cannot name a netdev.
  const auto too_long = source->statistics(std::string(32, 'x'));
  ASSERT_FALSE(too_long);
  EXPECT_EQ(too_long.error().value(), ENODEV);
}

}  // namespace
}  // namespace ibprobe::testing
