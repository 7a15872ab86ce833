#include <gtest/gtest.h>
#include <sys/fsuid.h>
#include <sys/stat.h>

#include "collect_helpers.h"
#include "sysfs_fixture.h"

namespace ibprobe::testing {
namespace {

using collectors::ReadError;

const std::map<std::string, std::string> kDataFamilies = {
    {"port_xmit_data", "rdma_port_data_transmitted_bytes_total"},
    {"port_rcv_data", "rdma_port_data_received_bytes_total"},
};
const std::map<std::string, std::string> kPacketFamilies = {
    {"port_xmit_packets", "rdma_port_packets_transmitted_total"},
    {"port_rcv_packets", "rdma_port_packets_received_total"},
    {"unicast_xmit_packets", "rdma_port_unicast_packets_transmitted_total"},
    {"unicast_rcv_packets", "rdma_port_unicast_packets_received_total"},
    {"multicast_xmit_packets", "rdma_port_multicast_packets_transmitted_total"},
    {"multicast_rcv_packets", "rdma_port_multicast_packets_received_total"},
    {"port_xmit_wait", "rdma_port_transmit_wait_ticks_total"},
};
const std::vector<std::string> kErrorCounters = {
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "port_xmit_discards",
    "port_xmit_constraint_errors",
    "port_rcv_constraint_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "VL15_dropped",
};

LabelMap port_labels(const std::string& device, int port) {
  return {{"device", device}, {"port", std::to_string(port)}};
}

LabelMap with_counter(LabelMap labels, const std::string& counter) {
  labels["counter"] = counter;
  return labels;
}

void expect_port_matches_fixture(const Families& families, const std::string& device, int port,
                                 const CounterValues& fixture) {
  const auto labels = port_labels(device, port);
  for (const auto& [file, family] : kDataFamilies) {
    // The data counters count 32-bit words: exported bytes are four times the file's value.
    EXPECT_EQ(sample(families, family, labels), static_cast<double>(fixture.at(file)) * 4)
        << device << " " << port << " " << file;
  }
  for (const auto& [file, family] : kPacketFamilies) {
    if (!fixture.contains(file)) {
      EXPECT_FALSE(sample(families, family, labels)) << file;
      continue;
    }
    EXPECT_EQ(sample(families, family, labels), static_cast<double>(fixture.at(file))) << file;
  }
  for (const auto& counter : kErrorCounters) {
    EXPECT_EQ(sample(families, "rdma_port_errors_total", with_counter(labels, counter)),
              static_cast<double>(fixture.at(counter)))
        << counter;
  }
}

TEST(PortCounters, ConnectXInfiniBandExtendedCounters) {
  const auto device = mlx5_ib_device("mlx5_0", 2, 0);
  const auto result = collect_from_device("port_counters", device);
  EXPECT_TRUE(result.errors.empty());
  for (int port : {1, 2}) {
    expect_port_matches_fixture(result.families, "mlx5_0", port, *device.ports.at(port).counters);
  }
  EXPECT_EQ(series_count(result.families, "rdma_port_errors_total"), 2 * kErrorCounters.size());
  // Extended table: data and packet counters are 64-bit and cannot saturate; the fixed-width
  // error counters and PortXmitWait are flagged (here: none at maximum).
  EXPECT_EQ(series_count(result.families, "rdma_port_pma_saturated"),
            2 * (kErrorCounters.size() + 1));
  EXPECT_FALSE(sample(result.families, "rdma_port_pma_saturated",
                      with_counter(port_labels("mlx5_0", 1), "port_xmit_data")));
  EXPECT_EQ(sample(result.families, "rdma_port_pma_saturated",
                   with_counter(port_labels("mlx5_0", 1), "symbol_error")),
            0);
  EXPECT_EQ(series_count(result.families, "rdma_port_pma_other_total"), 0u);
}

TEST(PortCounters, FamiliesCarryTypesAndHelp) {
  const auto result = collect_from_device("port_counters", mlx5_ib_device("mlx5_0", 1, 0));
  for (const auto& family : result.families) {
    EXPECT_FALSE(family.help.empty()) << family.name;
    if (family.name == "rdma_port_pma_saturated") {
      EXPECT_EQ(family.type, prometheus::MetricType::Gauge);
    } else {
      EXPECT_EQ(family.type, prometheus::MetricType::Counter) << family.name;
      EXPECT_TRUE(family.name.ends_with("_total")) << family.name;
    }
  }
}

TEST(PortCounters, RoCEPortIsExportedLikeInfiniBand) {
  const auto device = mlx5_roce_device("mlx5_1", "ens1f0", 1);
  const auto result = collect_from_device("port_counters", device);
  EXPECT_TRUE(result.errors.empty());
  expect_port_matches_fixture(result.families, "mlx5_1", 1, *device.ports.at(1).counters);
}

TEST(PortCounters, RxeHasNoPortCounters) {
  const auto result = collect_from_device("port_counters", rxe_device("rxe0", "eth0", 3));
  EXPECT_TRUE(result.errors.empty());
  EXPECT_TRUE(result.families.empty());
}

TEST(PortCounters, BasicTableFlagsSaturatedCounters) {
  const auto device = basic_saturated_device("mthca0", 4);
  const auto result = collect_from_device("port_counters", device);
  const auto& fixture = *device.ports.at(1).counters;
  expect_port_matches_fixture(result.families, "mthca0", 1, fixture);
  const auto labels = port_labels("mthca0", 1);
  // Stuck at 0xFFFFFFFF: still exported (x 4), and flagged.
  EXPECT_EQ(sample(result.families, "rdma_port_data_transmitted_bytes_total", labels),
            4294967295.0 * 4);
  EXPECT_EQ(
      sample(result.families, "rdma_port_pma_saturated", with_counter(labels, "port_xmit_data")),
      1);
  EXPECT_EQ(
      sample(result.families, "rdma_port_pma_saturated", with_counter(labels, "symbol_error")), 1);
  EXPECT_EQ(
      sample(result.families, "rdma_port_pma_saturated", with_counter(labels, "port_rcv_data")), 0);
  EXPECT_EQ(sample(result.families, "rdma_port_pma_saturated", with_counter(labels, "link_downed")),
            0);
  // 17 files, all of fixed width in the basic table.
  EXPECT_EQ(series_count(result.families, "rdma_port_pma_saturated"), fixture.size());
}

TEST(PortCounters, EightAndFourBitCountersSaturateAtTheirOwnWidth) {
  auto device = mlx5_ib_device("mlx5_0", 1, 0);
  auto& counters = *device.ports.at(1).counters;
  counters["link_downed"] = 255;
  counters["local_link_integrity_errors"] = 15;
  counters["excessive_buffer_overrun_errors"] = 14;
  counters["port_xmit_wait"] = 4294967295;
  const auto result = collect_from_device("port_counters", device);
  const auto labels = port_labels("mlx5_0", 1);
  auto saturated = [&](const std::string& counter) {
    return sample(result.families, "rdma_port_pma_saturated", with_counter(labels, counter));
  };
  EXPECT_EQ(saturated("link_downed"), 1);
  EXPECT_EQ(saturated("local_link_integrity_errors"), 1);
  EXPECT_EQ(saturated("excessive_buffer_overrun_errors"), 0);
  EXPECT_EQ(saturated("port_xmit_wait"), 1);
}

// The kernel's "no IETF" extended table has 64-bit data counters but no unicast files: a value
// above 32 bits must not be mistaken for a saturated or 32-bit counter.
TEST(PortCounters, LargeValueProvesExtendedWidthWithoutUnicastFiles) {
  auto device = mlx5_ib_device("mlx5_0", 1, 0);
  auto& counters = *device.ports.at(1).counters;
  for (const auto* name : {"unicast_xmit_packets", "unicast_rcv_packets", "multicast_xmit_packets",
                           "multicast_rcv_packets"}) {
    counters.erase(name);
  }
  counters["port_rcv_data"] = 4294967295;  // would read as saturated in a 32-bit table
  const auto result = collect_from_device("port_counters", device);
  EXPECT_FALSE(sample(result.families, "rdma_port_pma_saturated",
                      with_counter(port_labels("mlx5_0", 1), "port_rcv_data")));
}

TEST(PortCounters, LegacyCountersExtReplaceThe32BitValues) {
  auto device = basic_saturated_device("mlx4_0", 5);
  device.ports.at(1).counters_ext = CounterValues{
      {"port_xmit_data_64", 9'000'000'001},         {"port_rcv_data_64", 8'000'000'002},
      {"port_xmit_packets_64", 7'000'000'003},      {"port_rcv_packets_64", 6'000'000'004},
      {"port_unicast_xmit_packets", 5'000'000'005}, {"port_unicast_rcv_packets", 4'000'000'006},
      {"port_multicast_xmit_packets", 3'000'007},   {"port_multicast_rcv_packets", 2'000'008},
  };
  const auto result = collect_from_device("port_counters", device);
  EXPECT_TRUE(result.errors.empty());
  const auto labels = port_labels("mlx4_0", 1);
  EXPECT_EQ(sample(result.families, "rdma_port_data_transmitted_bytes_total", labels),
            9'000'000'001.0 * 4);
  EXPECT_EQ(sample(result.families, "rdma_port_data_received_bytes_total", labels),
            8'000'000'002.0 * 4);
  EXPECT_EQ(sample(result.families, "rdma_port_packets_transmitted_total", labels),
            7'000'000'003.0);
  EXPECT_EQ(sample(result.families, "rdma_port_packets_received_total", labels), 6'000'000'004.0);
  EXPECT_EQ(sample(result.families, "rdma_port_unicast_packets_transmitted_total", labels),
            5'000'000'005.0);
  EXPECT_EQ(sample(result.families, "rdma_port_multicast_packets_received_total", labels),
            2'000'008.0);
  // The saturated 32-bit port_xmit_data was superseded by the 64-bit value: no flag any more.
  EXPECT_FALSE(
      sample(result.families, "rdma_port_pma_saturated", with_counter(labels, "port_xmit_data")));
  EXPECT_EQ(series_count(result.families, "rdma_port_data_transmitted_bytes_total"), 1u);
}

TEST(PortCounters, UnknownCounterFilesAreKept) {
  SysfsTree tree;
  tree.add(mlx5_ib_device("mlx5_0", 1, 0));
  tree.write(tree.port_dir("mlx5_0", 1).lexically_relative(tree.root()) / "counters" /
                 "port_rcv_future_errors",
             "77");
  const auto result = collect("port_counters", tree.root());
  EXPECT_EQ(sample(result.families, "rdma_port_pma_other_total",
                   with_counter(port_labels("mlx5_0", 1), "port_rcv_future_errors")),
            77);
}

struct BrokenFile {
  std::string name;
  std::string content;
  ReadError reason;
};

void PrintTo(const BrokenFile& broken, std::ostream* out) {
  *out << broken.name;
}

class PortCountersBrokenFile : public ::testing::TestWithParam<BrokenFile> {};

// Every kind of unreadable counter costs exactly that one series and is reported with its reason;
// the other counters of the port, and the other ports, are untouched.
TEST_P(PortCountersBrokenFile, DropsOnlyThatSeries) {
  const auto& broken = GetParam();
  SysfsTree tree;
  const auto device = mlx5_ib_device("mlx5_0", 2, 0);
  tree.add(device);
  const auto counters_dir = tree.port_dir("mlx5_0", 1) / "counters";
  const auto broken_file = counters_dir / "symbol_error";
  std::filesystem::remove(broken_file);
  if (broken.content == "<dangling>") {
    std::filesystem::create_symlink(counters_dir / "nowhere", broken_file);
  } else if (broken.content == "<directory>") {
    std::filesystem::create_directory(broken_file);
  } else {
    tree.write(broken_file.lexically_relative(tree.root()), broken.content);
  }
  const auto result = collect("port_counters", tree.root());
  ASSERT_EQ(result.errors.size(), 1u);
  EXPECT_EQ(result.errors[0].reason, broken.reason);
  EXPECT_EQ(result.errors[0].path, broken_file);
  const auto labels = port_labels("mlx5_0", 1);
  EXPECT_FALSE(
      sample(result.families, "rdma_port_errors_total", with_counter(labels, "symbol_error")));
  EXPECT_FALSE(
      sample(result.families, "rdma_port_pma_saturated", with_counter(labels, "symbol_error")));
  EXPECT_EQ(series_count(result.families, "rdma_port_errors_total"), 2 * kErrorCounters.size() - 1);
  auto fixture = *device.ports.at(1).counters;
  EXPECT_EQ(sample(result.families, "rdma_port_data_transmitted_bytes_total", labels),
            static_cast<double>(fixture.at("port_xmit_data")) * 4);
  expect_port_matches_fixture(result.families, "mlx5_0", 2, *device.ports.at(2).counters);
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, PortCountersBrokenFile,
    ::testing::Values(BrokenFile{"NoPma", "N/A (no PMA)", ReadError::kNoPma},
                      BrokenFile{"Garbage", "lots of errors", ReadError::kMalformed},
                      BrokenFile{"Empty", "", ReadError::kMalformed},
                      BrokenFile{"Negative", "-5", ReadError::kMalformed},
                      BrokenFile{"Overflow", "99999999999999999999999", ReadError::kMalformed},
                      BrokenFile{"Vanished", "<dangling>", ReadError::kNotFound},
                      BrokenFile{"Directory", "<directory>", ReadError::kIo}),
    [](const auto& info) { return info.param.name; });

TEST(PortCounters, UnreadableFileIsPermissionError) {
  SysfsTree tree;
  tree.add(mlx5_ib_device("mlx5_0", 1, 0));
  const auto file = tree.port_dir("mlx5_0", 1) / "counters" / "port_rcv_errors";
  ASSERT_EQ(::chmod(file.c_str(), 0), 0);
  const int previous = ::setfsuid(65534);
  const auto result = collect("port_counters", tree.root());
  ::setfsuid(previous);
  ASSERT_EQ(result.errors.size(), 1u);
  EXPECT_EQ(result.errors[0].reason, ReadError::kPermission);
  EXPECT_FALSE(sample(result.families, "rdma_port_errors_total",
                      with_counter(port_labels("mlx5_0", 1), "port_rcv_errors")));
  EXPECT_EQ(series_count(result.families, "rdma_port_errors_total"), kErrorCounters.size() - 1);
}

TEST(PortCounters, DeviceFilterSelectsDevices) {
  SysfsTree tree;
  tree.add(mlx5_ib_device("mlx5_0", 1, 0));
  tree.add(mlx5_ib_device("mlx5_1", 1, 1));
  const auto result = collect("port_counters", tree.root(), collectors::DeviceFilter("", "mlx5_1"));
  EXPECT_TRUE(
      sample(result.families, "rdma_port_data_transmitted_bytes_total", port_labels("mlx5_0", 1)));
  EXPECT_FALSE(
      sample(result.families, "rdma_port_data_transmitted_bytes_total", port_labels("mlx5_1", 1)));
}

TEST(PortCounters, MissingSysfsClassIsNoDevicesNotAnError) {
  SysfsTree tree;
  std::filesystem::remove_all(tree.root() / "class");
  const auto result = collect("port_counters", tree.root());
  EXPECT_TRUE(result.families.empty());
  EXPECT_TRUE(result.errors.empty());
}

}  // namespace
}  // namespace ibprobe::testing
