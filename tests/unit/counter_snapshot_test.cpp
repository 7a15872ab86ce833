#include "ibprobe/counter_snapshot.h"

#include <gtest/gtest.h>

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
