#include <gtest/gtest.h>

#include "collect_helpers.h"
#include "sysfs_fixture.h"

namespace ibprobe::testing {
namespace {

void expect_counters(const Families& families, const std::string& family, const LabelMap& owner,
                     const CounterValues& fixture) {
  std::size_t counters = 0;
  for (const auto& [name, value] : fixture) {
    if (name == "lifespan") continue;
    ++counters;
    auto labels = owner;
    labels["counter"] = name;
    EXPECT_EQ(sample(families, family, labels), static_cast<double>(value)) << name;
  }
  const auto* f = find_family(families, family);
  ASSERT_NE(f, nullptr);
  std::size_t owned = 0;
  for (const auto& metric : f->metric) {
    auto labels = labels_of(metric);
    labels.erase("counter");
    if (labels == owner) ++owned;
  }
  EXPECT_EQ(owned, counters);
}

TEST(HwCounters, RxePortCountersAllExported) {
  SysfsTree tree;
  const auto device = rxe_device("rxe0", "eth0", 3);
  tree.add(device);
  const auto result = collect("hw_counters", tree.root());
  EXPECT_TRUE(result.errors.empty());
  const LabelMap owner{{"device", "rxe0"}, {"port", "1"}};
  expect_counters(result.families, "rdma_port_hw_stat_total", owner,
                  *device.ports.at(1).hw_counters);
  // lifespan is a cache setting, not a counter: 10 ms as a gauge in seconds.
  EXPECT_EQ(sample(result.families, "rdma_port_hw_stats_lifespan_seconds", owner), 0.010);
  EXPECT_FALSE(sample(result.families, "rdma_port_hw_stat_total",
                      {{"device", "rxe0"}, {"port", "1"}, {"counter", "lifespan"}}));
  const auto* family = find_family(result.families, "rdma_port_hw_stat_total");
  ASSERT_NE(family, nullptr);
  EXPECT_EQ(family->type, prometheus::MetricType::Counter);
  EXPECT_EQ(find_family(result.families, "rdma_port_hw_stats_lifespan_seconds")->type,
            prometheus::MetricType::Gauge);
}

TEST(HwCounters, Mlx5CountersPerPort) {
  SysfsTree tree;
  const auto device = mlx5_ib_device("mlx5_0", 2, 0);
  tree.add(device);
  const auto result = collect("hw_counters", tree.root());
  for (int port : {1, 2}) {
    expect_counters(result.families, "rdma_port_hw_stat_total",
                    {{"device", "mlx5_0"}, {"port", std::to_string(port)}},
                    *device.ports.at(port).hw_counters);
  }
  EXPECT_EQ(sample(result.families, "rdma_port_hw_stat_total",
                   {{"device", "mlx5_0"}, {"port", "2"}, {"counter", "out_of_buffer"}}),
            static_cast<double>(device.ports.at(2).hw_counters->at("out_of_buffer")));
}

TEST(HwCounters, Hfi1NamesAreSanitizedAndCollisionsKeptApart) {
  SysfsTree tree;
  const auto device = hfi1_device("hfi1_0", 2);
  tree.add(device);
  const auto result = collect("hw_counters", tree.root());
  EXPECT_TRUE(result.errors.empty());
  const auto& port = *device.ports.at(1).hw_counters;
  const LabelMap owner{{"device", "hfi1_0"}, {"port", "1"}};
  auto value = [&](const std::string& counter) {
    auto labels = owner;
    labels["counter"] = counter;
    return sample(result.families, "rdma_port_hw_stat_total", labels);
  };
  EXPECT_EQ(value("DRAM_ECC_Corr_Bank_0"), static_cast<double>(port.at("DRAM ECC Corr,Bank 0")));
  EXPECT_EQ(value("DRAM_ECC_Corr_Bank_0_2"), static_cast<double>(port.at("DRAM-ECC-Corr Bank 0")));
  EXPECT_EQ(value("tx_wait_vl_0"), static_cast<double>(port.at("tx_wait (vl 0)")));
  EXPECT_EQ(value("RxDroppedPkt"), static_cast<double>(port.at("RxDroppedPkt")));
  // Device-level hw_counters have their own family, without a port label.
  EXPECT_EQ(sample(result.families, "rdma_device_hw_stat_total",
                   {{"device", "hfi1_0"}, {"counter", "TxFlitVL0"}}),
            static_cast<double>(device.hw_counters->at("TxFlitVL0")));
  EXPECT_EQ(
      sample(result.families, "rdma_device_hw_stats_lifespan_seconds", {{"device", "hfi1_0"}}),
      0.010);
}

TEST(HwCounters, BrokenFileCostsOneSeries) {
  SysfsTree tree;
  const auto device = rxe_device("rxe0", "eth0", 3);
  tree.add(device);
  const auto dir = tree.port_dir("rxe0", 1) / "hw_counters";
  tree.write((dir / "rcvd_pkts").lexically_relative(tree.root()), "not a number");
  const auto result = collect("hw_counters", tree.root());
  ASSERT_EQ(result.errors.size(), 1u);
  EXPECT_EQ(result.errors[0].reason, collectors::ReadError::kMalformed);
  EXPECT_FALSE(sample(result.families, "rdma_port_hw_stat_total",
                      {{"device", "rxe0"}, {"port", "1"}, {"counter", "rcvd_pkts"}}));
  EXPECT_EQ(sample(result.families, "rdma_port_hw_stat_total",
                   {{"device", "rxe0"}, {"port", "1"}, {"counter", "sent_pkts"}}),
            static_cast<double>(device.ports.at(1).hw_counters->at("sent_pkts")));
}

}  // namespace
}  // namespace ibprobe::testing
