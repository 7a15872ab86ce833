#include <gtest/gtest.h>

#include "collect_helpers.h"
#include "sysfs_fixture.h"

namespace ibprobe::testing {
namespace {

using Classes = std::map<std::string, std::string>;

// The classes of the fixture drivers' names, read off each driver's kernel source by hand
// (rxe_hw_counters.c, mlx5 counters.c); every name not listed is informative.
const Classes kRxeClasses = {
    {"completer_retry_err", "retransmission"},
    {"duplicate_request", "retransmission"},
    {"retry_exceeded_err", "retransmission"},
    {"out_of_seq_request", "sequence_error"},
    {"rcvd_seq_err", "sequence_error"},
    {"rcvd_rnr_err", "rnr_nak"},
    {"send_rnr_err", "rnr_nak"},
    {"retry_rnr_exceeded_err", "rnr_retry_exceeded"},
};
const Classes kMlx5Classes = {
    {"duplicate_request", "retransmission"},
    {"roce_adp_retrans", "retransmission"},
    {"implied_nak_seq_err", "sequence_error"},
    {"out_of_sequence", "sequence_error"},
    {"packet_seq_err", "sequence_error"},
    {"local_ack_timeout_err", "ack_timeout"},
    {"rnr_nak_retry_err", "rnr_retry_exceeded"},
    {"out_of_buffer", "out_of_buffer"},
    {"np_cnp_sent", "congestion"},
    {"np_ecn_marked_roce_packets", "congestion"},
    {"rp_cnp_handled", "congestion"},
};

std::string class_of(const Classes& classes, const std::string& name) {
  const auto it = classes.find(name);
  return it == classes.end() ? "informative" : it->second;
}

void expect_counters(const Families& families, const std::string& family, const LabelMap& owner,
                     const CounterValues& fixture, const Classes& classes = {}) {
  std::size_t counters = 0;
  for (const auto& [name, value] : fixture) {
    if (name == "lifespan") continue;
    ++counters;
    auto labels = owner;
    labels["counter"] = name;
    labels["class"] = class_of(classes, name);
    EXPECT_EQ(sample(families, family, labels), static_cast<double>(value)) << name;
  }
  const auto* f = find_family(families, family);
  ASSERT_NE(f, nullptr);
  std::size_t owned = 0;
  for (const auto& metric : f->metric) {
    auto labels = labels_of(metric);
    labels.erase("counter");
    labels.erase("class");
    if (labels == owner) ++owned;
  }
  EXPECT_EQ(owned, counters);
}

TEST(HwCounters, RxePortCountersAllExported) {
  const auto device = rxe_device("rxe0", "eth0", 3);
  const auto result = collect_from_device("hw_counters", device);
  EXPECT_TRUE(result.errors.empty());
  const LabelMap owner{{"device", "rxe0"}, {"port", "1"}};
  expect_counters(result.families, "rdma_port_hw_stat_total", owner,
                  *device.ports.at(1).hw_counters, kRxeClasses);
  // lifespan is a cache setting, not a counter: 10 ms as a gauge in seconds.
  EXPECT_EQ(sample(result.families, "rdma_port_hw_stats_lifespan_seconds", owner), 0.010);
  EXPECT_FALSE(sample(
      result.families, "rdma_port_hw_stat_total",
      {{"device", "rxe0"}, {"port", "1"}, {"counter", "lifespan"}, {"class", "informative"}}));
  const auto* family = find_family(result.families, "rdma_port_hw_stat_total");
  ASSERT_NE(family, nullptr);
  EXPECT_EQ(family->type, prometheus::MetricType::Counter);
  EXPECT_EQ(find_family(result.families, "rdma_port_hw_stats_lifespan_seconds")->type,
            prometheus::MetricType::Gauge);
}

TEST(HwCounters, Mlx5CountersPerPort) {
  const auto device = mlx5_ib_device("mlx5_0", 2, 0);
  const auto result = collect_from_device("hw_counters", device);
  for (int port : {1, 2}) {
    expect_counters(result.families, "rdma_port_hw_stat_total",
                    {{"device", "mlx5_0"}, {"port", std::to_string(port)}},
                    *device.ports.at(port).hw_counters, kMlx5Classes);
  }
  EXPECT_EQ(sample(result.families, "rdma_port_hw_stat_total",
                   {{"device", "mlx5_0"},
                    {"port", "2"},
                    {"counter", "out_of_buffer"},
                    {"class", "out_of_buffer"}}),
            static_cast<double>(device.ports.at(2).hw_counters->at("out_of_buffer")));
}

TEST(HwCounters, Hfi1NamesAreSanitizedAndCollisionsKeptApart) {
  const auto device = hfi1_device("hfi1_0", 2);
  const auto result = collect_from_device("hw_counters", device);
  EXPECT_TRUE(result.errors.empty());
  const auto& port = *device.ports.at(1).hw_counters;
  const LabelMap owner{{"device", "hfi1_0"}, {"port", "1"}};
  auto value = [&](const std::string& counter) {
    auto labels = owner;
    labels["counter"] = counter;
    labels["class"] = "informative";  // hfi1 is not in the driver table
    return sample(result.families, "rdma_port_hw_stat_total", labels);
  };
  EXPECT_EQ(value("DRAM_ECC_Corr_Bank_0"), static_cast<double>(port.at("DRAM ECC Corr,Bank 0")));
  EXPECT_EQ(value("DRAM_ECC_Corr_Bank_0_2"), static_cast<double>(port.at("DRAM-ECC-Corr Bank 0")));
  EXPECT_EQ(value("tx_wait_vl_0"), static_cast<double>(port.at("tx_wait (vl 0)")));
  EXPECT_EQ(value("RxDroppedPkt"), static_cast<double>(port.at("RxDroppedPkt")));
  // Device-level hw_counters have their own family, without a port label.
  EXPECT_EQ(sample(result.families, "rdma_device_hw_stat_total",
                   {{"device", "hfi1_0"}, {"counter", "TxFlitVL0"}, {"class", "informative"}}),
            static_cast<double>(device.hw_counters->at("TxFlitVL0")));
  EXPECT_EQ(
      sample(result.families, "rdma_device_hw_stats_lifespan_seconds", {{"device", "hfi1_0"}}),
      0.010);
}

TEST(HwCounters, CollidingNameKeptWhenTheOtherFileFails) {
  SysfsTree tree;
  const auto device = hfi1_device("hfi1_0", 1);
  tree.add(device);
  const auto dir = tree.port_dir("hfi1_0", 1) / "hw_counters";
  tree.write((dir / "DRAM ECC Corr,Bank 0").lexically_relative(tree.root()), "not a number");
  const auto result = collect("hw_counters", tree.root());
  ASSERT_EQ(result.errors.size(), 1u);
  const LabelMap labels{{"device", "hfi1_0"},
                        {"port", "1"},
                        {"counter", "DRAM_ECC_Corr_Bank_0_2"},
                        {"class", "informative"}};
  EXPECT_EQ(sample(result.families, "rdma_port_hw_stat_total", labels),
            static_cast<double>(device.ports.at(1).hw_counters->at("DRAM-ECC-Corr Bank 0")));
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
  EXPECT_FALSE(sample(
      result.families, "rdma_port_hw_stat_total",
      {{"device", "rxe0"}, {"port", "1"}, {"counter", "rcvd_pkts"}, {"class", "informative"}}));
  EXPECT_EQ(
      sample(
          result.families, "rdma_port_hw_stat_total",
          {{"device", "rxe0"}, {"port", "1"}, {"counter", "sent_pkts"}, {"class", "informative"}}),
      static_cast<double>(device.ports.at(1).hw_counters->at("sent_pkts")));
}

// One port per remaining driver of the table, with names as each driver's source spells them
// (bnxt_re hw_counters.c, irdma verbs.c, efa efa_verbs.c, hns hns_roce_main.c), a few
// informative ones among them, one mlx5 switchdev vport_ name, and names no driver table knows.
TEST(HwCounters, EveryDriverTableClassifiesItsNames) {
  const Classes expected = {
      // bnxt_re
      {"to_retransmits", "ack_timeout"},
      {"seq_err_naks_rcvd", "sequence_error"},
      {"max_retry_exceeded", "retransmission"},
      {"rnr_naks_rcvd", "rnr_nak"},
      {"dup_req", "retransmission"},
      {"remote_access_err", "remote_error"},
      {"res_rx_invalid_rkey", "remote_error"},
      {"oos_drop_count", "sequence_error"},
      {"rx_out_of_buffer", "out_of_buffer"},
      {"tx_cnp_pkts", "congestion"},
      {"rx_ecn_marked_pkts", "congestion"},
      {"active_qps", "informative"},
      {"tx_bytes", "informative"},
      // irdma
      {"tcpRetransSegs", "retransmission"},
      {"cnpHandled", "congestion"},
      {"cnpSent", "congestion"},
      {"RxECNMrkd", "congestion"},
      {"ip4InOctets", "informative"},
      // efa
      {"retrans_pkts", "retransmission"},
      {"retrans_timeout_events", "ack_timeout"},
      {"rx_drops", "out_of_buffer"},
      {"rdma_read_bytes", "informative"},
      // hns
      {"rx_cnp_pkt", "congestion"},
      {"tx_cnp_pkt", "congestion"},
      {"rx_rc_pkt", "informative"},
      // mlx5 in switchdev mode
      {"vport_local_ack_timeout_err", "ack_timeout"},
      {"vport_rx_write_requests", "informative"},
      // no driver's: never guessed from the look of the name
      {"frobnicated_retransmissions", "informative"},
      {"vport_sent_pkts", "informative"},
  };
  auto device = rxe_device("roce0", "eth0", 1);
  CounterValues values;
  std::uint64_t value = 1;
  for (const auto& [name, counter_class] : expected) values[name] = value++;
  device.ports.at(1).hw_counters = values;
  const auto result = collect_from_device("hw_counters", device);
  EXPECT_TRUE(result.errors.empty());
  expect_counters(result.families, "rdma_port_hw_stat_total", {{"device", "roce0"}, {"port", "1"}},
                  values, expected);
}

}  // namespace
}  // namespace ibprobe::testing
