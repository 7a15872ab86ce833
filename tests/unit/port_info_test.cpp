#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "collect_helpers.h"
#include "sysfs_fixture.h"

namespace ibprobe::testing {
namespace {

using ::testing::Contains;
using ::testing::IsSupersetOf;
using ::testing::Pair;

const prometheus::ClientMetric* only_metric(const Families& families, const std::string& name,
                                            const LabelMap& subset) {
  const auto* family = find_family(families, name);
  if (!family) return nullptr;
  const prometheus::ClientMetric* found = nullptr;
  for (const auto& metric : family->metric) {
    const auto labels = labels_of(metric);
    bool match = true;
    for (const auto& [k, v] : subset) match = match && labels.contains(k) && labels.at(k) == v;
    if (!match) continue;
    EXPECT_EQ(found, nullptr) << "more than one " << name;
    found = &metric;
  }
  return found;
}

// The labels of the one sample of `name` whose labels include `subset`; none is a failure.
LabelMap only_labels(const Families& families, const std::string& name, const LabelMap& subset) {
  const auto* metric = only_metric(families, name, subset);
  EXPECT_NE(metric, nullptr) << "no " << name;
  return metric ? labels_of(*metric) : LabelMap{};
}

TEST(PortInfo, InfiniBandPort) {
  const auto device = mlx5_ib_device("mlx5_0", 2, 7);
  const auto result = collect_from_device("port_info", device);
  EXPECT_TRUE(result.errors.empty());
  const LabelMap port1{{"device", "mlx5_0"}, {"port", "1"}};
  EXPECT_EQ(sample(result.families, "rdma_port_state", port1), 4);
  EXPECT_EQ(sample(result.families, "rdma_port_physical_state", port1), 5);
  // "200 Gb/sec (4X HDR)" = 200e9 bit/s = 25e9 bytes/s.
  EXPECT_EQ(sample(result.families, "rdma_port_rate_bytes_per_second", port1), 25e9);
  EXPECT_EQ(sample(result.families, "rdma_port_link_width_lanes", port1), 4);
  EXPECT_EQ(sample(result.families, "rdma_port_lid", port1),
            std::stoul(device.ports.at(1).lid, nullptr, 16));
  EXPECT_EQ(sample(result.families, "rdma_port_sm_lid", port1), 1);
  EXPECT_EQ(sample(result.families, "rdma_port_info",
                   {{"device", "mlx5_0"},
                    {"port", "1"},
                    {"link_layer", "InfiniBand"},
                    {"netdev", ""},
                    {"speed", "HDR"}}),
            1);
  EXPECT_EQ(sample(result.families, "rdma_device_info",
                   {{"device", "mlx5_0"},
                    {"hca_type", "MT4123"},
                    {"fw_ver", "20.31.1014"},
                    {"board_id", "MT_0000000223"},
                    {"node_guid", device.node_guid},
                    {"node_type", "1: CA"},
                    {"numa_node", "1"}}),
            1);
  EXPECT_EQ(series_count(result.families, "rdma_port_state"), 2u);
}

TEST(PortInfo, RoCEPortHasNetdev) {
  const auto result = collect_from_device("port_info", mlx5_roce_device("mlx5_1", "ens1f0", 1));
  EXPECT_TRUE(result.errors.empty());
  EXPECT_THAT(only_labels(result.families, "rdma_port_info", {{"device", "mlx5_1"}}),
              IsSupersetOf({Pair("link_layer", "Ethernet"), Pair("netdev", "ens1f0")}));
  EXPECT_EQ(sample(result.families, "rdma_port_lid", {{"device", "mlx5_1"}, {"port", "1"}}), 0);
  EXPECT_EQ(sample(result.families, "rdma_port_rate_bytes_per_second",
                   {{"device", "mlx5_1"}, {"port", "1"}}),
            12.5e9);
}

TEST(PortInfo, NetdevFromPciFunctionWhenGidHasNone) {
  auto device = mlx5_roce_device("mlx5_2", "ens2f0", 2);
  device.ports.at(1).gids.clear();
  const auto result = collect_from_device("port_info", device);
  EXPECT_THAT(only_labels(result.families, "rdma_port_info", {{"device", "mlx5_2"}}),
              Contains(Pair("netdev", "ens2f0")));
}

TEST(PortInfo, RxeWithoutOptionalAttributes) {
  const auto result = collect_from_device("port_info", rxe_device("rxe0", "eth0", 3));
  // rxe has no hca_type, board_id or PCI device: absent, not errors.
  EXPECT_TRUE(result.errors.empty());
  EXPECT_THAT(only_labels(result.families, "rdma_device_info", {{"device", "rxe0"}}),
              IsSupersetOf({Pair("hca_type", ""), Pair("numa_node", "")}));
  EXPECT_THAT(only_labels(result.families, "rdma_port_info", {{"device", "rxe0"}}),
              Contains(Pair("netdev", "eth0")));
}

TEST(PortInfo, DownPortAndMalformedRate) {
  auto device = mlx5_ib_device("mlx5_0", 1, 0);
  device.ports.at(1).state = "1: DOWN";
  device.ports.at(1).phys_state = "3: Disabled";
  device.ports.at(1).rate = "very fast";
  const auto result = collect_from_device("port_info", device);
  const LabelMap port{{"device", "mlx5_0"}, {"port", "1"}};
  EXPECT_EQ(sample(result.families, "rdma_port_state", port), 1);
  EXPECT_EQ(sample(result.families, "rdma_port_physical_state", port), 3);
  EXPECT_FALSE(sample(result.families, "rdma_port_rate_bytes_per_second", port));
  ASSERT_EQ(result.errors.size(), 1u);
  EXPECT_EQ(result.errors[0].reason, collectors::ReadError::kMalformed);
  EXPECT_EQ(result.errors[0].path.filename(), "rate");
  // The port is still described.
  EXPECT_NE(only_metric(result.families, "rdma_port_info", port), nullptr);
}

TEST(PortInfo, BrokenStateFileCostsOnlyThatSeries) {
  auto device = mlx5_ib_device("mlx5_0", 1, 0);
  device.ports.at(1).state = "ACTIVE";
  device.ports.at(1).sm_lid = "N/A";
  const auto result = collect_from_device("port_info", device);
  const LabelMap port{{"device", "mlx5_0"}, {"port", "1"}};
  EXPECT_FALSE(sample(result.families, "rdma_port_state", port));
  EXPECT_FALSE(sample(result.families, "rdma_port_sm_lid", port));
  EXPECT_EQ(sample(result.families, "rdma_port_physical_state", port), 5);
  EXPECT_EQ(result.errors.size(), 2u);
}

}  // namespace
}  // namespace ibprobe::testing
