// The link_health collector against a stand-in for ethtool netlink that answers with the real
// module dumps of tests/fixtures/module_eeprom/ (and images spoiled from them) and FEC replies laid
// out as net/ethtool/fec.c writes them, counting every read; and once against this machine's
// kernel, whose netdevs (loopback, virtio_net) have neither a module nor FEC statistics.
#include "ibprobe/link_health.h"

#include <gtest/gtest.h>
#include <linux/ethtool.h>
#include <linux/ethtool_netlink.h>
#include <linux/netlink.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "captured_log.h"
#include "collect_helpers.h"
#include "ibprobe/ethtool_netlink.h"
#include "module_dumps.h"
#include "netlink_attributes.h"
#include "sysfs_fixture.h"

namespace ibprobe::testing {
namespace {

using collectors::LinkHealthOptions;
using collectors::ModulePages;
using std::chrono::milliseconds;

std::error_code errno_error(int value) {
  return {value, std::system_category()};
}

// What each netdev answers, and how often it was asked. Shared by a test and its collector's
// source, which the collector's thread calls.
class Netdevs {
 public:
  struct Answers {
    std::expected<ModuleMemory, std::error_code> module;
    std::expected<Bytes, std::error_code> fec;
  };

  void answer(const std::string& netdev, Answers answers) {
    std::lock_guard lock(mutex_);
    answers_.insert_or_assign(netdev, std::move(answers));
  }
  int module_reads(const std::string& netdev) const {
    std::lock_guard lock(mutex_);
    const auto it = module_reads_.find(netdev);
    return it == module_reads_.end() ? 0 : it->second;
  }
  int fec_reads(const std::string& netdev) const {
    std::lock_guard lock(mutex_);
    const auto it = fec_reads_.find(netdev);
    return it == fec_reads_.end() ? 0 : it->second;
  }

  // A netdev not answered for does not exist, as the kernel says of one: ENODEV.
  std::expected<ModulePages, std::error_code> module_pages(const std::string& netdev) {
    std::lock_guard lock(mutex_);
    ++module_reads_[netdev];
    const auto it = answers_.find(netdev);
    if (it == answers_.end()) return std::unexpected(errno_error(ENODEV));
    if (!it->second.module) return std::unexpected(it->second.module.error());
    return read_module(*it->second.module);
  }
  std::expected<Bytes, std::error_code> fec_reply(const std::string& netdev) {
    std::lock_guard lock(mutex_);
    ++fec_reads_[netdev];
    const auto it = answers_.find(netdev);
    if (it == answers_.end()) return std::unexpected(errno_error(ENODEV));
    return it->second.fec;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, Answers> answers_;
  std::map<std::string, int> module_reads_;
  std::map<std::string, int> fec_reads_;
};

class StandInSource final : public collectors::LinkHealthSource {
 public:
  explicit StandInSource(std::shared_ptr<Netdevs> netdevs) : netdevs_(std::move(netdevs)) {}
  std::expected<ModulePages, std::error_code> module_pages(const std::string& netdev) override {
    return netdevs_->module_pages(netdev);
  }
  std::expected<Bytes, std::error_code> fec_reply(const std::string& netdev) override {
    return netdevs_->fec_reply(netdev);
  }

 private:
  std::shared_ptr<Netdevs> netdevs_;
};

// A u64 array attribute: the total, then one value per lane (the kernel's fec_stat_put).
void put_counter(Bytes& out, std::uint16_t type, const std::vector<std::uint64_t>& values) {
  collectors::netlink::put_attribute(
      out, type, {reinterpret_cast<const std::uint8_t*>(values.data()), values.size() * 8});
}

struct FecCounts {
  std::vector<std::uint64_t> corrected_blocks;
  std::vector<std::uint64_t> uncorrectable_blocks;
  std::vector<std::uint64_t> corrected_bits;
};

// An ETHTOOL_MSG_FEC_GET_REPLY's attributes with RS-FEC active.
Bytes rs_fec_reply(const FecCounts& counts) {
  Bytes statistics;
  put_counter(statistics, ETHTOOL_A_FEC_STAT_CORRECTED, counts.corrected_blocks);
  put_counter(statistics, ETHTOOL_A_FEC_STAT_UNCORR, counts.uncorrectable_blocks);
  put_counter(statistics, ETHTOOL_A_FEC_STAT_CORR_BITS, counts.corrected_bits);
  Bytes reply;
  collectors::netlink::put_value<std::uint32_t>(reply, ETHTOOL_A_FEC_ACTIVE,
                                                ETHTOOL_LINK_MODE_FEC_RS_BIT);
  collectors::netlink::put_attribute(reply, ETHTOOL_A_FEC_STATS | NLA_F_NESTED, statistics);
  return reply;
}

const FecCounts kFecCounts{{10, 4, 3, 2, 1}, {7, 7, 0, 0, 0}, {1234, 600, 400, 200, 34}};

ModuleMemory mellanox_qsfp28() {
  return qsfp_memory(read_hex_dump("sff8636_mellanox_mma1b00_ss1.txt"));
}
ModuleMemory fs_sfp28() {
  return sfp_memory(read_hex_dump("sff8472_fs_sfp28_25gsr_85.txt"));
}

// Scrapes until `done` holds for a scrape (the collector's thread answers between two scrapes),
// for 10 s at most.
Collected scrape_until(Scrapes& scrapes, const std::function<bool(const Collected&)>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    auto result = scrapes.scrape();
    if (done(result) || std::chrono::steady_clock::now() > deadline) return result;
    std::this_thread::sleep_for(milliseconds(1));
  }
}

// Until every RoCE port of the tree has its module's and its FEC statistics' _up series.
Collected scrape_until_read(Scrapes& scrapes, std::size_t ports) {
  return scrape_until(scrapes, [&](const Collected& result) {
    return series_count(result.families, "rdma_port_module_up") == ports &&
           series_count(result.families, "rdma_port_fec_up") == ports;
  });
}

class LinkHealth : public ::testing::Test {
 protected:
  std::unique_ptr<Scrapes> scrapes(LinkHealthOptions options = {}) {
    collectors::Options scrape_options;
    scrape_options.sysfs_root = tree.root();
    return std::make_unique<Scrapes>(
        std::move(scrape_options),
        collectors::make_link_health_collector(options, std::make_unique<StandInSource>(netdevs)));
  }

  SysfsTree tree;
  std::shared_ptr<Netdevs> netdevs = std::make_shared<Netdevs>();
};

LabelMap port_labels(const std::string& device, const std::string& netdev,
                     std::initializer_list<std::pair<const std::string, std::string>> more = {}) {
  LabelMap labels{{"device", device}, {"port", "1"}, {"netdev", netdev}};
  labels.insert(more);
  return labels;
}

TEST_F(LinkHealth, EachRocePortsModuleAndFecFromTheLastRead) {
  tree.add(mlx5_roce_device("mlx5_1", "ens1f0", 1));
  tree.add(mlx5_roce_device("mlx5_2", "ens2f0", 2));
  tree.add(mlx5_ib_device("mlx5_0", 1, 0));  // InfiniBand: no netdev, nothing to ask
  netdevs->answer("ens1f0", {mellanox_qsfp28(), rs_fec_reply(kFecCounts)});
  netdevs->answer("ens2f0", {fs_sfp28(), std::unexpected(errno_error(EOPNOTSUPP))});
  auto every_hour =
      scrapes({.module_interval = std::chrono::hours(1), .fec_interval = std::chrono::hours(1)});

  // The first scrape asks the thread and serves what it has: nothing yet.
  const auto first = every_hour->scrape();
  EXPECT_TRUE(first.families.empty());
  EXPECT_TRUE(first.errors.empty());
  const auto result = scrape_until_read(*every_hour, 2);
  EXPECT_TRUE(result.errors.empty());
  const auto& families = result.families;

  const auto qsfp = collectors::decode_module(read_module(mellanox_qsfp28()));
  ASSERT_TRUE(qsfp) << qsfp.error().message;
  EXPECT_EQ(sample(families, "rdma_port_module_up", port_labels("mlx5_1", "ens1f0")), 1);
  EXPECT_EQ(sample(families, "rdma_port_module_info",
                   port_labels("mlx5_1", "ens1f0",
                               {{"family", "sff8636"},
                                {"identifier", "0x11"},
                                {"vendor", qsfp->identity.vendor},
                                {"vendor_oui", "00:02:c9"},
                                {"part_number", "MMA1B00-SS1"},
                                {"revision", qsfp->identity.revision},
                                {"serial_number", qsfp->identity.serial_number}})),
            1);
  EXPECT_EQ(
      sample(families, "rdma_port_module_temperature_celsius", port_labels("mlx5_1", "ens1f0")),
      qsfp->temperature_celsius);
  EXPECT_EQ(
      sample(families, "rdma_port_module_supply_voltage_volts", port_labels("mlx5_1", "ens1f0")),
      qsfp->supply_volts);
  ASSERT_EQ(qsfp->lanes.size(), 4u);
  EXPECT_EQ(series_count(families, "rdma_port_module_rx_power_watts"), 4u + 1u);
  for (std::size_t lane = 0; lane < 4; ++lane) {
    const auto labels = port_labels("mlx5_1", "ens1f0", {{"lane", std::to_string(lane + 1)}});
    EXPECT_EQ(sample(families, "rdma_port_module_rx_power_watts", labels),
              qsfp->lanes[lane].rx_power_watts)
        << lane;
    EXPECT_EQ(sample(families, "rdma_port_module_tx_bias_amperes", labels),
              qsfp->lanes[lane].tx_bias_amperes)
        << lane;
    EXPECT_EQ(sample(families, "rdma_port_module_tx_power_watts", labels),
              qsfp->lanes[lane].tx_power_watts)
        << lane;
  }
  // The thresholds `ethtool -m` printed for this cable (the dump's comment).
  const auto threshold = [&](const std::string& family, const std::string& which) {
    return sample(families, family, port_labels("mlx5_1", "ens1f0", {{"threshold", which}}));
  };
  EXPECT_EQ(threshold("rdma_port_module_temperature_threshold_celsius", "high_warning"), 70);
  EXPECT_EQ(threshold("rdma_port_module_temperature_threshold_celsius", "low_alarm"), -10);
  EXPECT_NEAR(*threshold("rdma_port_module_tx_bias_threshold_amperes", "high_alarm"), 8.5e-3, 1e-9);
  EXPECT_NEAR(*threshold("rdma_port_module_tx_power_threshold_watts", "low_warning"), 0.1445e-3,
              0.00005e-3);
  for (const auto* family :
       {"rdma_port_module_temperature_threshold_celsius",
        "rdma_port_module_supply_voltage_threshold_volts",
        "rdma_port_module_tx_bias_threshold_amperes", "rdma_port_module_tx_power_threshold_watts",
        "rdma_port_module_rx_power_threshold_watts"}) {
    EXPECT_EQ(series_count(families, family), 8u) << family;  // four for each module
  }
  // The cable's far end was dark when it was dumped: every lane flags its RX power below the
  // low alarm and warning, and loss of signal both ways (lower page bytes 3, 9 and 10).
  EXPECT_EQ(series_count(families, "rdma_port_module_threshold_flag"), 0u);
  EXPECT_EQ(series_count(families, "rdma_port_module_lane_threshold_flag"), 8u);
  EXPECT_EQ(series_count(families, "rdma_port_module_lane_fault"), 8u);
  for (const auto* lane : {"1", "2", "3", "4"}) {
    for (const auto* which : {"low_alarm", "low_warning"}) {
      EXPECT_EQ(
          sample(families, "rdma_port_module_lane_threshold_flag",
                 port_labels("mlx5_1", "ens1f0",
                             {{"lane", lane}, {"monitor", "rx_power"}, {"threshold", which}})),
          1)
          << lane << " " << which;
    }
    for (const auto* fault : {"rx_loss_of_signal", "tx_loss_of_signal"}) {
      EXPECT_EQ(sample(families, "rdma_port_module_lane_fault",
                       port_labels("mlx5_1", "ens1f0", {{"lane", lane}, {"fault", fault}})),
                1)
          << lane << " " << fault;
    }
  }

  // The SFP: one lane.
  const auto sfp = collectors::decode_module(read_module(fs_sfp28()));
  ASSERT_TRUE(sfp) << sfp.error().message;
  EXPECT_EQ(sample(families, "rdma_port_module_rx_power_watts",
                   port_labels("mlx5_2", "ens2f0", {{"lane", "1"}})),
            sfp->lanes[0].rx_power_watts);
  EXPECT_EQ(
      sample(families, "rdma_port_module_temperature_celsius", port_labels("mlx5_2", "ens2f0")),
      sfp->temperature_celsius);

  // FEC: totals and lanes (counted from 0), the active mode; the SFP's driver has none.
  EXPECT_EQ(sample(families, "rdma_port_fec_up", port_labels("mlx5_1", "ens1f0")), 1);
  EXPECT_EQ(
      sample(families, "rdma_port_fec_info", port_labels("mlx5_1", "ens1f0", {{"mode", "RS"}})), 1);
  EXPECT_EQ(sample(families, "rdma_port_fec_corrected_bits_total", port_labels("mlx5_1", "ens1f0")),
            1234);
  EXPECT_EQ(
      sample(families, "rdma_port_fec_uncorrectable_blocks_total", port_labels("mlx5_1", "ens1f0")),
      7);
  EXPECT_EQ(sample(families, "rdma_port_fec_lane_corrected_blocks_total",
                   port_labels("mlx5_1", "ens1f0", {{"lane", "0"}})),
            4);
  EXPECT_EQ(sample(families, "rdma_port_fec_lane_corrected_bits_total",
                   port_labels("mlx5_1", "ens1f0", {{"lane", "3"}})),
            34);
  EXPECT_EQ(series_count(families, "rdma_port_fec_lane_corrected_bits_total"), 4u);
  EXPECT_EQ(sample(families, "rdma_port_fec_up",
                   port_labels("mlx5_2", "ens2f0", {{"reason", "not_supported"}})),
            0);
  const auto* fec_family = find_family(families, "rdma_port_fec_corrected_bits_total");
  ASSERT_NE(fec_family, nullptr);
  EXPECT_EQ(fec_family->type, prometheus::MetricType::Counter);
  // The InfiniBand port was never asked.
  EXPECT_EQ(netdevs->module_reads(""), 0);
}

TEST_F(LinkHealth, AModuleIsReadAtItsIntervalNotOnEveryScrape) {
  tree.add(mlx5_roce_device("mlx5_1", "ens1f0", 1));
  netdevs->answer("ens1f0", {mellanox_qsfp28(), rs_fec_reply(kFecCounts)});
  auto every_hour =
      scrapes({.module_interval = std::chrono::hours(1), .fec_interval = std::chrono::hours(1)});
  scrape_until_read(*every_hour, 1);
  for (int scrape = 0; scrape < 20; ++scrape) {
    EXPECT_EQ(series_count(every_hour->scrape().families, "rdma_port_module_rx_power_watts"), 4u);
  }
  EXPECT_EQ(netdevs->module_reads("ens1f0"), 1);
  EXPECT_EQ(netdevs->fec_reads("ens1f0"), 1);
}

TEST_F(LinkHealth, AModuleIsReadAgainOnceItsIntervalHasPassed) {
  tree.add(mlx5_roce_device("mlx5_1", "ens1f0", 1));
  netdevs->answer("ens1f0", {mellanox_qsfp28(), rs_fec_reply(kFecCounts)});
  const auto interval = milliseconds(50);
  auto often = scrapes({.module_interval = interval, .fec_interval = std::chrono::hours(1)});
  scrape_until_read(*often, 1);
  EXPECT_EQ(netdevs->module_reads("ens1f0"), 1);

  // The module stops answering (EIO, as from a module that does not ack on its bus).
  netdevs->answer("ens1f0", {std::unexpected(errno_error(EIO)), rs_fec_reply(kFecCounts)});
  std::this_thread::sleep_for(interval);
  const auto result = scrape_until(*often, [](const Collected& scraped) {
    return sample(scraped.families, "rdma_port_module_up",
                  port_labels("mlx5_1", "ens1f0", {{"reason", "io_error"}}))
        .has_value();
  });
  EXPECT_EQ(series_count(result.families, "rdma_port_module_rx_power_watts"), 0u);
  EXPECT_EQ(series_count(result.families, "rdma_port_module_info"), 0u);
  EXPECT_GE(netdevs->module_reads("ens1f0"), 2);
  EXPECT_EQ(netdevs->fec_reads("ens1f0"), 1);
}

TEST_F(LinkHealth, FecStatisticsAreReadAtTheirShorterInterval) {
  tree.add(mlx5_roce_device("mlx5_1", "ens1f0", 1));
  netdevs->answer("ens1f0", {mellanox_qsfp28(), rs_fec_reply(kFecCounts)});
  const auto interval = milliseconds(50);
  auto fec_often = scrapes({.module_interval = std::chrono::hours(1), .fec_interval = interval});
  scrape_until_read(*fec_often, 1);

  auto more = kFecCounts;
  more.corrected_bits[0] = 5000;
  netdevs->answer("ens1f0", {mellanox_qsfp28(), rs_fec_reply(more)});
  std::this_thread::sleep_for(interval);
  scrape_until(*fec_often, [](const Collected& scraped) {
    return sample(scraped.families, "rdma_port_fec_corrected_bits_total",
                  port_labels("mlx5_1", "ens1f0")) == 5000;
  });
  EXPECT_GE(netdevs->fec_reads("ens1f0"), 2);
  EXPECT_EQ(netdevs->module_reads("ens1f0"), 1);
}

// A virtio_net or an empty cage: EOPNOTSUPP for both requests. Said once each, in the status
// series and one debug line, and not asked again before the module interval, whatever the FEC
// interval says.
TEST_F(LinkHealth, ANetdevWithNothingToReadIsSaidOnceAndCostsNoReadsPerScrape) {
  const CapturedLog log;
  tree.add(mlx5_roce_device("mlx5_1", "ens1f0", 1));
  netdevs->answer("ens1f0", {std::unexpected(errno_error(EOPNOTSUPP)),
                             std::unexpected(errno_error(EOPNOTSUPP))});
  auto scraped =
      scrapes({.module_interval = std::chrono::hours(1), .fec_interval = milliseconds(1)});
  const auto result = scrape_until_read(*scraped, 1);
  EXPECT_EQ(sample(result.families, "rdma_port_module_up",
                   port_labels("mlx5_1", "ens1f0", {{"reason", "not_supported"}})),
            0);
  EXPECT_EQ(sample(result.families, "rdma_port_fec_up",
                   port_labels("mlx5_1", "ens1f0", {{"reason", "not_supported"}})),
            0);
  EXPECT_TRUE(result.errors.empty());
  std::this_thread::sleep_for(milliseconds(5));
  for (int scrape = 0; scrape < 20; ++scrape) {
    EXPECT_EQ(series_count(scraped->scrape().families, "rdma_port_module_up"), 1u);
  }
  EXPECT_EQ(netdevs->module_reads("ens1f0"), 1);
  EXPECT_EQ(netdevs->fec_reads("ens1f0"), 1);
  const auto lines = log.lines_with("ens1f0");
  ASSERT_EQ(lines.size(), 2u);
  for (const auto& line : lines) {
    EXPECT_TRUE(line.starts_with("debug link_health: ens1f0 ")) << line;
    EXPECT_NE(line.find("(not_supported)"), std::string::npos) << line;
  }
}

// A process without CAP_NET_ADMIN (the shipped systemd unit's, the DaemonSet's): the kernel
// refuses module reads with EPERM, serves FEC statistics. Said once, at info level, with what is
// missing; not asked again before the module interval.
TEST_F(LinkHealth, AModuleReadRefusedForWantOfCapNetAdminIsSaidOnce) {
  const CapturedLog log;
  tree.add(mlx5_roce_device("mlx5_1", "ens1f0", 1));
  netdevs->answer("ens1f0", {std::unexpected(errno_error(EPERM)), rs_fec_reply(kFecCounts)});
  auto scraped =
      scrapes({.module_interval = std::chrono::hours(1), .fec_interval = std::chrono::hours(1)});
  const auto result = scrape_until_read(*scraped, 1);
  EXPECT_EQ(sample(result.families, "rdma_port_module_up",
                   port_labels("mlx5_1", "ens1f0", {{"reason", "permission_denied"}})),
            0);
  EXPECT_EQ(sample(result.families, "rdma_port_fec_up", port_labels("mlx5_1", "ens1f0")), 1);
  for (int scrape = 0; scrape < 20; ++scrape) scraped->scrape();
  EXPECT_EQ(netdevs->module_reads("ens1f0"), 1);
  const auto lines = log.lines_with("ens1f0");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(lines[0].starts_with("info link_health: ens1f0 module left out (permission_denied)"))
      << lines[0];
  EXPECT_NE(lines[0].find("CAP_NET_ADMIN"), std::string::npos) << lines[0];
}

// Images no memory map accepts cost the module's series, with the decoder's reason, and one
// warning each; the FEC statistics and the other ports are served.
TEST_F(LinkHealth, AHostileImageDropsTheModuleSeriesWithTheReason) {
  const CapturedLog log;
  auto checksum = mellanox_qsfp28();
  checksum[kPage00][2] ^= 0x01;  // byte 130, covered by CC_BASE (byte 191)
  auto truncated = mellanox_qsfp28();
  truncated[kPage00].resize(100);
  auto unknown = mellanox_qsfp28();
  unknown[kLower][0] = 0xee;  // an SFF-8024 identifier of no memory map
  const std::map<std::string, ModuleMemory> images = {{"ens1f0", checksum},
                                                      {"ens2f0", truncated},
                                                      {"ens3f0", unknown},
                                                      {"ens4f0", mellanox_qsfp28()}};
  int seed = 1;
  for (const auto& [netdev, image] : images) {
    tree.add(mlx5_roce_device("mlx5_" + std::to_string(seed), netdev, seed));
    netdevs->answer(netdev, {image, rs_fec_reply(kFecCounts)});
    ++seed;
  }
  auto scraped = scrapes();
  const auto result = scrape_until_read(*scraped, 4);
  const auto down = [&](const std::string& device, const std::string& netdev,
                        const std::string& reason) {
    return sample(result.families, "rdma_port_module_up",
                  port_labels(device, netdev, {{"reason", reason}}));
  };
  EXPECT_EQ(down("mlx5_1", "ens1f0", "checksum_mismatch"), 0);
  EXPECT_EQ(down("mlx5_2", "ens2f0", "truncated_page"), 0);
  EXPECT_EQ(down("mlx5_3", "ens3f0", "unknown_identifier"), 0);
  EXPECT_EQ(sample(result.families, "rdma_port_module_up", port_labels("mlx5_4", "ens4f0")), 1);
  EXPECT_EQ(series_count(result.families, "rdma_port_module_info"), 1u);
  EXPECT_EQ(series_count(result.families, "rdma_port_module_temperature_celsius"), 1u);
  EXPECT_EQ(series_count(result.families, "rdma_port_module_rx_power_watts"), 4u);
  EXPECT_EQ(series_count(result.families, "rdma_port_fec_corrected_bits_total"), 4u);
  EXPECT_TRUE(result.errors.empty());
  for (const auto* netdev : {"ens1f0", "ens2f0", "ens3f0"}) {
    const auto lines = log.lines_with(std::string("link_health: ") + netdev + " module");
    ASSERT_EQ(lines.size(), 1u) << netdev;
    EXPECT_TRUE(lines[0].starts_with("warning ")) << lines[0];
  }
}

// SFF-8636 lower page bytes 3-14 (Tables 6-4 to 6-8): the flags the module raised, one series
// each; the ones clear are not written.
TEST_F(LinkHealth, FlagsTheModuleRaisedAreWritten) {
  auto flagged = mellanox_qsfp28();
  for (const std::size_t byte : {3, 9, 10}) flagged[kLower][byte] = 0;  // the dump's own flags
  flagged[kLower][6] |= 0x20;                                           // temperature high warning
  flagged[kLower][12] |= 0x80;                                          // lane 3 TX bias high alarm
  flagged[kLower][4] |= 0x02;                                           // lane 2 TX fault
  tree.add(mlx5_roce_device("mlx5_1", "ens1f0", 1));
  netdevs->answer("ens1f0", {flagged, rs_fec_reply(kFecCounts)});
  auto scraped = scrapes();
  const auto result = scrape_until_read(*scraped, 1);
  EXPECT_EQ(sample(result.families, "rdma_port_module_threshold_flag",
                   port_labels("mlx5_1", "ens1f0",
                               {{"monitor", "temperature"}, {"threshold", "high_warning"}})),
            1);
  EXPECT_EQ(
      sample(result.families, "rdma_port_module_lane_threshold_flag",
             port_labels("mlx5_1", "ens1f0",
                         {{"lane", "3"}, {"monitor", "tx_bias"}, {"threshold", "high_alarm"}})),
      1);
  EXPECT_EQ(sample(result.families, "rdma_port_module_lane_fault",
                   port_labels("mlx5_1", "ens1f0", {{"lane", "2"}, {"fault", "tx_fault"}})),
            1);
  EXPECT_EQ(series_count(result.families, "rdma_port_module_threshold_flag"), 1u);
  EXPECT_EQ(series_count(result.families, "rdma_port_module_lane_threshold_flag"), 1u);
  EXPECT_EQ(series_count(result.families, "rdma_port_module_lane_fault"), 1u);
}

// An active optical cable whose memory says it has no monitors (SFF-8472 A0h byte 92): its
// identity, nothing else.
TEST_F(LinkHealth, AModuleWithoutMonitorsHasItsIdentityOnly) {
  tree.add(mlx5_roce_device("mlx5_1", "ens1f0", 1));
  netdevs->answer("ens1f0", {sfp_memory(read_hex_dump("sff8472_mikrotik_s_ao0005.txt")),
                             rs_fec_reply(kFecCounts)});
  auto scraped = scrapes();
  const auto result = scrape_until_read(*scraped, 1);
  EXPECT_EQ(sample(result.families, "rdma_port_module_up", port_labels("mlx5_1", "ens1f0")), 1);
  const auto* info = find_family(result.families, "rdma_port_module_info");
  ASSERT_NE(info, nullptr);
  ASSERT_EQ(info->metric.size(), 1u);
  EXPECT_EQ(labels_of(info->metric[0]).at("part_number"), "S+AO0005");
  EXPECT_EQ(series_count(result.families, "rdma_port_module_temperature_celsius"), 0u);
  EXPECT_EQ(series_count(result.families, "rdma_port_module_rx_power_watts"), 0u);
}

// The kernel's own answers through EthtoolNetlink: loopback has no module and no FEC
// (EOPNOTSUPP); eth0, a virtio_net here, neither (or, on a machine without one, ENODEV). The
// scrape is served all the same, and the collector reports success.
TEST(LinkHealthNetlink, ThisMachinesNetdevsAnswerWithoutBreakingAScrape) {
  if (!collectors::EthtoolNetlink::open()) GTEST_SKIP() << "this kernel has no ethtool netlink";
  SysfsTree tree;
  tree.add(rxe_device("rxe0", "lo", 1));
  tree.add(mlx5_roce_device("mlx5_1", "eth0", 2));
  std::vector<std::unique_ptr<collectors::Collector>> list;
  list.push_back(collectors::make_link_health_collector());
  list.push_back(collectors::make_collector("port_info"));
  collectors::Scraper scraper(options_for(tree.root(), 1), std::move(list));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  Families families;
  do {
    families = scraper.scrape();
  } while ((series_count(families, "rdma_port_module_up") < 2 ||
            series_count(families, "rdma_port_fec_up") < 2) &&
           std::chrono::steady_clock::now() < deadline);
  for (const auto* family : {"rdma_port_module_up", "rdma_port_fec_up"}) {
    const auto* found = find_family(families, family);
    ASSERT_NE(found, nullptr) << family;
    ASSERT_EQ(found->metric.size(), 2u) << family;
    for (const auto& metric : found->metric) {
      const auto labels = labels_of(metric);
      EXPECT_EQ(metric.gauge.value, 0) << family << " " << labels.at("netdev");
      EXPECT_TRUE(labels.at("reason") == "not_supported" || labels.at("reason") == "not_found")
          << family << " " << labels.at("netdev") << ": " << labels.at("reason");
    }
  }
  EXPECT_EQ(
      sample(families, "rdma_port_module_up",
             {{"device", "rxe0"}, {"port", "1"}, {"netdev", "lo"}, {"reason", "not_supported"}}),
      0);
  EXPECT_EQ(sample(families, "ibprobe_scrape_collector_success", {{"collector", "link_health"}}),
            1);
  EXPECT_EQ(series_count(families, "ibprobe_scrape_errors_total"), 0u);
  EXPECT_EQ(series_count(families, "rdma_port_state"), 2u);
}

}  // namespace
}  // namespace ibprobe::testing
