// The remote PMA collector against replayed MAD exchanges, through the real Scraper.
#include "ibprobe/remote_pma.h"

#include <gtest/gtest.h>

#include "collect_helpers.h"
#include "mad_bytes.h"
#include "remote_pma_internal.h"
#include "replay_transport.h"

namespace ibprobe::testing {
namespace {

using collectors::ReadError;
using fabric::RemotePort;
using Reply = ReplayTransport::Reply;
using Values = std::map<std::string, std::uint64_t>;
using namespace std::chrono_literals;

constexpr std::uint8_t kPerfMgt = 0x04;
constexpr std::uint8_t kSmi = 0x01;
constexpr std::uint8_t kGet = 0x01;
constexpr std::uint8_t kGetResp = 0x81;
constexpr std::uint16_t kAllPortSelect = 0x0100;
constexpr std::uint16_t kExtendedWidth = 0x0200;
constexpr std::uint16_t kNoIetf = 0x0400;
constexpr std::uint16_t kXmitWait = 0x1000;

Bytes request(std::uint8_t mgmt_class, std::uint16_t attribute, int port_select = -1) {
  Bytes mad = mad_bytes(mgmt_class, kGet, attribute);
  if (port_select >= 0) mad[kDataStart + 1] = static_cast<std::uint8_t>(port_select);
  return mad;
}
Bytes class_port_info_request() {
  return request(kPerfMgt, 0x0001);
}
Bytes node_info_request() {
  return request(kSmi, 0x0011);
}
Bytes port_counters_request(int port) {
  return request(kPerfMgt, 0x0012, port);
}
Bytes extended_request(int port) {
  return request(kPerfMgt, 0x001D, port);
}

Bytes class_port_info_response(std::uint16_t capability_mask) {
  Bytes data = data_area();
  data[0] = 1;
  data[1] = 1;
  data[2] = static_cast<std::uint8_t>(capability_mask >> 8);
  data[3] = static_cast<std::uint8_t>(capability_mask);
  return mad_bytes(kPerfMgt, kGetResp, 0x0001, 0, 0, data);
}

Bytes node_info_response(std::uint8_t num_ports, std::uint64_t node_guid) {
  Bytes data = data_area();
  data[3] = num_ports;
  put_bits(data, 96, 64, node_guid);
  return mad_bytes(kSmi, kGetResp, 0x0011, 0, 0, data);
}

Bytes counters_response(std::uint16_t attribute, const std::vector<MadField>& table, int port,
                        const Values& values, std::uint16_t status = 0) {
  Bytes data = data_area();
  data[1] = static_cast<std::uint8_t>(port);
  for (const auto& field : table) {
    if (const auto it = values.find(field.counter); it != values.end()) {
      put_bits(data, field.bit_offset, field.width, it->second);
    }
  }
  return mad_bytes(kPerfMgt, kGetResp, attribute, 0, status, data);
}
Bytes port_counters_response(int port, const Values& values, std::uint16_t status = 0) {
  return counters_response(0x0012, kPortCounters, port, values, status);
}
Bytes extended_response(int port, const Values& values, std::uint16_t status = 0) {
  return counters_response(0x001D, kPortCountersExtended, port, values, status);
}

constexpr std::uint16_t kRcvErrorDetails = 0x0015;
constexpr std::uint16_t kXmitDiscardDetails = 0x0016;
constexpr std::uint16_t kVlXmitWait = 0x001C;
constexpr std::uint16_t kAttributeNotSupported = 0x000C;

// The three detail attributes of `port`, answered with `values` (by counter name), or each
// answered with `status` alone.
void expect_details(ReplayTransport& transport, std::uint16_t lid, int port, const Values& values,
                    std::uint16_t status = 0) {
  const std::vector<std::pair<std::uint16_t, std::vector<MadField>>> attributes = {
      {kRcvErrorDetails, kPortRcvErrorDetails},
      {kXmitDiscardDetails, kPortXmitDiscardDetails},
      {kVlXmitWait, port_vl_xmit_wait_counters()},
  };
  for (const auto& [attribute, table] : attributes) {
    transport.expect(lid, request(kPerfMgt, attribute, port),
                     counters_response(attribute, table, port, values, status));
  }
}

std::size_t detail_mads(const ReplayTransport& transport) {
  return static_cast<std::size_t>(
      std::count_if(transport.sends().begin(), transport.sends().end(), [](const auto& sent) {
        const int attribute = sent.mad[16] << 8 | sent.mad[17];
        return attribute == kRcvErrorDetails || attribute == kXmitDiscardDetails ||
               attribute == kVlXmitWait;
      }));
}

// A PMA's node facts, as a PMA would answer them.
void expect_node(ReplayTransport& transport, std::uint16_t lid, std::uint16_t capability_mask,
                 std::uint8_t num_ports = 1, std::uint64_t node_guid = 0x0002c90300a1b2c3) {
  transport.expect(lid, class_port_info_request(), class_port_info_response(capability_mask));
  if (transport.sends_smps()) {
    transport.expect(lid, node_info_request(), node_info_response(num_ports, node_guid));
  }
}

fabric::RemotePmaOptions remote_options(std::vector<RemotePort> targets) {
  fabric::RemotePmaOptions options;
  options.targets = std::move(targets);
  options.timeout = 20ms;
  options.retries = 1;
  options.budget = 2000ms;
  return options;
}

// Scrapes through one real Scraper with the remote PMA collector as its only collector, so
// what the collector learns in one scrape holds in the next.
std::vector<Collected> scrapes(ReplayTransport& transport, const fabric::RemotePmaOptions& options,
                               int count) {
  struct Borrowed final : fabric::MadTransport {
    explicit Borrowed(ReplayTransport& t) : inner(t) {}
    bool sends_smps() const override { return inner.sends_smps(); }
    int send(std::uint16_t lid, std::span<const std::uint8_t> mad,
             std::chrono::milliseconds timeout) override {
      return inner.send(lid, mad, timeout);
    }
    std::optional<Received> receive(std::chrono::milliseconds wait) override {
      return inner.receive(wait);
    }
    ReplayTransport& inner;
  };
  fabric::UmadOpenResult port;
  port.transport = std::make_unique<Borrowed>(transport);
  port.ca = "mlx5_0";
  port.port = 1;
  std::vector<std::unique_ptr<collectors::FabricCollector>> fabric;
  fabric.push_back(fabric::make_remote_pma_collector(options, std::move(port)));
  collectors::Options scraper_options;
  scraper_options.sysfs_root = "/nonexistent-ibprobe-sysfs";
  std::vector<Collected> results(static_cast<std::size_t>(count));
  std::size_t current = 0;
  collectors::Scraper scraper(
      std::move(scraper_options), {},
      [&](std::string_view, ReadError reason, const std::filesystem::path& path) {
        results[current].errors.push_back({reason, path});
      },
      std::move(fabric));
  for (current = 0; current < results.size(); ++current) {
    results[current].families = scraper.scrape();
  }
  return results;
}

Collected scrape(ReplayTransport& transport, const fabric::RemotePmaOptions& options) {
  return std::move(scrapes(transport, options, 1).front());
}

struct RecordingSink final : collectors::ErrorSink {
  void record(ReadError reason, const std::filesystem::path& path) override {
    recorded.push_back({reason, path});
  }
  std::vector<RecordedError> recorded;
};

const LabelMap kPort3{{"lid", "12"}, {"port", "3"}, {"node_guid", "0002:c903:00a1:b2c3"}};

LabelMap with_counter(LabelMap labels, const std::string& counter) {
  labels["counter"] = counter;
  return labels;
}

TEST(RemotePma, ExtendedPmaExportsTheLocalFamiliesByLidAndPort) {
  ReplayTransport transport;
  expect_node(transport, 12, kExtendedWidth | kXmitWait);
  transport.expect(12, port_counters_request(3),
                   port_counters_response(3, {{"symbol_error", 0xFFFF},
                                              {"link_downed", 2},
                                              {"local_link_integrity_errors", 0xF},
                                              {"excessive_buffer_overrun_errors", 3},
                                              {"port_xmit_data", 0xFFFFFFFF},
                                              {"port_xmit_wait", 77}}));
  transport.expect(12, extended_request(3),
                   extended_response(3, {{"port_xmit_data", 0x100000000ull},
                                         {"port_rcv_data", 10},
                                         {"unicast_xmit_packets", 5},
                                         {"multicast_rcv_packets", 6}}));
  const auto result = scrape(transport, remote_options({{12, 3}}));
  EXPECT_TRUE(result.errors.empty());
  EXPECT_EQ(transport.unused(), 0u);
  const auto& f = result.families;
  // Data counters from the 64-bit table, x 4 into bytes; the saturated 32-bit one is not used.
  EXPECT_EQ(sample(f, "rdma_port_data_transmitted_bytes_total", kPort3), 0x100000000ull * 4.0);
  EXPECT_EQ(sample(f, "rdma_port_data_received_bytes_total", kPort3), 40);
  EXPECT_EQ(sample(f, "rdma_port_unicast_packets_transmitted_total", kPort3), 5);
  EXPECT_EQ(sample(f, "rdma_port_multicast_packets_received_total", kPort3), 6);
  EXPECT_EQ(sample(f, "rdma_port_transmit_wait_ticks_total", kPort3), 77);
  EXPECT_EQ(sample(f, "rdma_port_errors_total", with_counter(kPort3, "symbol_error")), 0xFFFF);
  EXPECT_EQ(sample(f, "rdma_port_errors_total", with_counter(kPort3, "link_downed")), 2);
  EXPECT_EQ(
      sample(f, "rdma_port_errors_total", with_counter(kPort3, "excessive_buffer_overrun_errors")),
      3);
  EXPECT_EQ(series_count(f, "rdma_port_errors_total"), 12u);
  EXPECT_EQ(sample(f, "rdma_port_pma_saturated", with_counter(kPort3, "symbol_error")), 1);
  EXPECT_EQ(
      sample(f, "rdma_port_pma_saturated", with_counter(kPort3, "local_link_integrity_errors")), 1);
  EXPECT_EQ(sample(f, "rdma_port_pma_saturated", with_counter(kPort3, "link_downed")), 0);
  EXPECT_EQ(sample(f, "rdma_port_pma_saturated", with_counter(kPort3, "port_xmit_wait")), 0);
  // 64-bit counters never saturate in practice and get no flag.
  EXPECT_FALSE(sample(f, "rdma_port_pma_saturated", with_counter(kPort3, "port_xmit_data")));
  EXPECT_EQ(sample(f, "ibprobe_remote_pma_up", {{"ca", "mlx5_0"}, {"ca_port", "1"}}), 1);
  EXPECT_EQ(sample(f, "ibprobe_scrape_collector_success", {{"collector", "remote_pma"}}), 1);
  EXPECT_EQ(series_count(f, "ibprobe_scrape_errors_total"), 0u);
}

TEST(RemotePma, DetailCountersJoinTheErrorFamilyAndVlWaitsTheirOwn) {
  ReplayTransport transport;
  expect_node(transport, 12, kExtendedWidth | kXmitWait);
  transport.expect(12, port_counters_request(3),
                   port_counters_response(3, {{"port_rcv_errors", 9}}));
  expect_details(transport, 12, 3,
                 {{"port_malformed_packet_errors", 7},
                  {"port_vl_mapping_errors", 0xFFFF},
                  {"port_sw_lifetime_limit_discards", 11},
                  {"port_sw_hoq_lifetime_limit_discards", 12},
                  {"port_vl_xmit_wait_0", 100},
                  {"port_vl_xmit_wait_15", 115}});
  transport.expect(12, extended_request(3), extended_response(3, {}));
  auto options = remote_options({{12, 3}});
  options.detail_counters = true;
  const auto result = scrape(transport, options);
  EXPECT_TRUE(result.errors.empty());
  EXPECT_EQ(transport.unused(), 0u);
  const auto& f = result.families;
  EXPECT_EQ(sample(f, "rdma_port_errors_total", with_counter(kPort3, "port_rcv_errors")), 9);
  EXPECT_EQ(
      sample(f, "rdma_port_errors_total", with_counter(kPort3, "port_malformed_packet_errors")), 7);
  EXPECT_EQ(sample(f, "rdma_port_errors_total", with_counter(kPort3, "port_vl_mapping_errors")),
            0xFFFF);
  EXPECT_EQ(sample(f, "rdma_port_errors_total",
                   with_counter(kPort3, "port_sw_hoq_lifetime_limit_discards")),
            12);
  EXPECT_EQ(sample(f, "rdma_port_errors_total", with_counter(kPort3, "port_looping_errors")), 0);
  EXPECT_EQ(series_count(f, "rdma_port_errors_total"), 12u + 10u);
  EXPECT_EQ(sample(f, "rdma_port_pma_saturated", with_counter(kPort3, "port_vl_mapping_errors")),
            1);
  EXPECT_EQ(
      sample(f, "rdma_port_pma_saturated", with_counter(kPort3, "port_malformed_packet_errors")),
      0);
  auto vl = [](std::string lane) {
    LabelMap labels = kPort3;
    labels["vl"] = std::move(lane);
    return labels;
  };
  EXPECT_EQ(sample(f, "rdma_port_vl_transmit_wait_ticks_total", vl("0")), 100);
  EXPECT_EQ(sample(f, "rdma_port_vl_transmit_wait_ticks_total", vl("7")), 0);
  EXPECT_EQ(sample(f, "rdma_port_vl_transmit_wait_ticks_total", vl("15")), 115);
  EXPECT_EQ(series_count(f, "rdma_port_vl_transmit_wait_ticks_total"), 16u);
}

// ClassPortInfo has no bit for the detail attributes: a PMA that answers "not supported" is
// asked once, the answer is no loss, and later scrapes send it no detail MADs.
TEST(RemotePma, APmaWithoutDetailCountersIsAskedOnceAndLosesNothing) {
  ReplayTransport transport;
  for (int round = 0; round < 2; ++round) {
    expect_node(transport, 12, kExtendedWidth);
    transport.expect(12, port_counters_request(3),
                     port_counters_response(3, {{"symbol_error", 4}}));
    transport.expect(12, extended_request(3), extended_response(3, {}));
  }
  expect_details(transport, 12, 3, {}, kAttributeNotSupported);
  auto options = remote_options({{12, 3}});
  options.detail_counters = true;
  const auto results = scrapes(transport, options, 2);
  EXPECT_EQ(transport.unused(), 0u);
  EXPECT_EQ(detail_mads(transport), 3u);
  for (const auto& result : results) {
    EXPECT_TRUE(result.errors.empty());
    EXPECT_EQ(
        sample(result.families, "rdma_port_errors_total", with_counter(kPort3, "symbol_error")), 4);
    EXPECT_EQ(series_count(result.families, "rdma_port_errors_total"), 12u);
    EXPECT_EQ(series_count(result.families, "rdma_port_vl_transmit_wait_ticks_total"), 0u);
  }
}

constexpr std::uint16_t kExtendedSpeeds = 0x001F;
constexpr std::uint16_t kPortInfoExtended = 0x0033;
constexpr std::uint16_t kRsFecCounters = 0x4000;  // ClassPortInfo IsRSFECCountersSupported

Bytes extended_speeds_request(int port) {
  return request(kPerfMgt, kExtendedSpeeds, port);
}
Bytes extended_speeds_response(int port, const std::vector<MadField>& table, const Values& values,
                               std::uint16_t status = 0) {
  return counters_response(kExtendedSpeeds, table, port, values, status);
}
// PortInfoExtended of `port` (attribute modifier), answered with CapabilityMask bit 0 and
// FECModeActive `mode`.
Bytes port_info_extended_request(int port) {
  Bytes mad = request(kSmi, kPortInfoExtended);
  mad[23] = static_cast<std::uint8_t>(port);
  return mad;
}
Bytes port_info_extended_response(std::uint16_t mode) {
  Bytes data = data_area();
  put_bits(data, 0, 32, 1);      // IsFECModeSupported
  put_bits(data, 32, 16, mode);  // FECModeActive
  return mad_bytes(kSmi, kGetResp, kPortInfoExtended, 0, 0, data);
}
std::size_t mads_of(const ReplayTransport& transport, std::uint16_t attribute) {
  return static_cast<std::size_t>(std::count_if(
      transport.sends().begin(), transport.sends().end(),
      [&](const auto& sent) { return (sent.mad[16] << 8 | sent.mad[17]) == attribute; }));
}
LabelMap lane(LabelMap labels, int number) {
  labels["lane"] = std::to_string(number);
  return labels;
}

// A PMA without RS-FEC counters fills the block layout: per-lane corrected and uncorrectable
// blocks in the link_health families, their totals summed over the lanes, symbol errors per lane;
// every lane of the attribute, remote_pma knowing no width.
TEST(RemotePma, ExtendedSpeedsCountersInTheBlockLayout) {
  ReplayTransport transport;
  expect_node(transport, 12, kExtendedWidth);
  transport.expect(12, port_counters_request(3), port_counters_response(3, {}));
  transport.expect(12, extended_request(3), extended_response(3, {}));
  transport.expect(12, extended_speeds_request(3),
                   extended_speeds_response(3, port_extended_speeds_counters(),
                                            {{"sync_header_errors", 5},
                                             {"unknown_blocks", 0xFFFF},
                                             {"error_detection_0", 7},
                                             {"error_detection_11", 8},
                                             {"corrected_blocks_0", 1000},
                                             {"corrected_blocks_3", 0xFFFFFFFF},
                                             {"uncorrectable_blocks_1", 2},
                                             {"uncorrectable_blocks_11", 3}}));
  auto options = remote_options({{12, 3}});
  options.extended_speeds_counters = true;
  const auto result = scrape(transport, options);
  EXPECT_TRUE(result.errors.empty());
  EXPECT_EQ(transport.unused(), 0u);
  EXPECT_EQ(mads_of(transport, kPortInfoExtended), 0u);  // no RS-FEC counters: nothing to ask
  const auto& f = result.families;
  EXPECT_EQ(sample(f, "rdma_port_fec_lane_corrected_blocks_total", lane(kPort3, 0)), 1000);
  EXPECT_EQ(sample(f, "rdma_port_fec_lane_corrected_blocks_total", lane(kPort3, 3)), 0xFFFFFFFFu);
  EXPECT_EQ(sample(f, "rdma_port_fec_corrected_blocks_total", kPort3), 1000.0 + 0xFFFFFFFFu);
  EXPECT_EQ(sample(f, "rdma_port_fec_lane_uncorrectable_blocks_total", lane(kPort3, 11)), 3);
  EXPECT_EQ(sample(f, "rdma_port_fec_uncorrectable_blocks_total", kPort3), 5);
  EXPECT_EQ(sample(f, "rdma_port_lane_symbol_errors_total", lane(kPort3, 11)), 8);
  EXPECT_EQ(sample(f, "rdma_port_sync_header_errors_total", kPort3), 5);
  EXPECT_EQ(sample(f, "rdma_port_unknown_blocks_total", kPort3), 0xFFFF);
  EXPECT_EQ(series_count(f, "rdma_port_fec_lane_corrected_blocks_total"), 12u);
  EXPECT_EQ(series_count(f, "rdma_port_fec_corrected_symbols_total"), 0u);
  EXPECT_EQ(sample(f, "rdma_port_pma_saturated", with_counter(kPort3, "fec_corrected_blocks")), 1);
  EXPECT_EQ(sample(f, "rdma_port_pma_saturated", with_counter(kPort3, "unknown_blocks")), 1);
  EXPECT_EQ(sample(f, "rdma_port_pma_saturated", with_counter(kPort3, "fec_uncorrectable_blocks")),
            0);
  EXPECT_EQ(sample(f, "rdma_remote_pma_fec_counters_up", {{"lid", "12"}}), 1);
}

// With RS-FEC counters the port's PortInfoExtended decides the layout, asked once: RS-FEC active
// gives corrected symbols per lane and the port's own block and symbol totals.
TEST(RemotePma, ExtendedSpeedsCountersInTheRsFecLayoutAskPortInfoExtendedOnce) {
  ReplayTransport transport;
  for (int round = 0; round < 2; ++round) {
    expect_node(transport, 12, kExtendedWidth | kRsFecCounters);
    transport.expect(12, port_counters_request(3), port_counters_response(3, {}));
    transport.expect(12, extended_request(3), extended_response(3, {}));
    transport.expect(12, extended_speeds_request(3),
                     extended_speeds_response(3, port_extended_speeds_counters_rs_fec(),
                                              {{"corrected_symbols_0", 40},
                                               {"corrected_symbols_2", 2},
                                               {"corrected_blocks", 30},
                                               {"uncorrectable_blocks", 4},
                                               {"corrected_symbols", 42}}));
  }
  transport.expect(12, port_info_extended_request(3), port_info_extended_response(2));
  auto options = remote_options({{12, 3}});
  options.extended_speeds_counters = true;
  const auto results = scrapes(transport, options, 2);
  EXPECT_EQ(transport.unused(), 0u);
  EXPECT_EQ(mads_of(transport, kPortInfoExtended), 1u);
  for (const auto& result : results) {
    EXPECT_TRUE(result.errors.empty());
    const auto& f = result.families;
    EXPECT_EQ(sample(f, "rdma_port_fec_corrected_blocks_total", kPort3), 30);
    EXPECT_EQ(sample(f, "rdma_port_fec_uncorrectable_blocks_total", kPort3), 4);
    EXPECT_EQ(sample(f, "rdma_port_fec_corrected_symbols_total", kPort3), 42);
    EXPECT_EQ(sample(f, "rdma_port_fec_lane_corrected_symbols_total", lane(kPort3, 0)), 40);
    EXPECT_EQ(sample(f, "rdma_port_fec_lane_corrected_symbols_total", lane(kPort3, 2)), 2);
    EXPECT_EQ(series_count(f, "rdma_port_fec_lane_corrected_blocks_total"), 0u);
    EXPECT_EQ(series_count(f, "rdma_port_lane_symbol_errors_total"), 0u);
  }
}

// Fire-Code FEC active (FECModeActive 1) on a PMA with RS-FEC counters: the block layout.
TEST(RemotePma, FireCodeFecReadsTheBlockLayout) {
  ReplayTransport transport;
  expect_node(transport, 12, kExtendedWidth | kRsFecCounters);
  transport.expect(12, port_info_extended_request(3), port_info_extended_response(1));
  transport.expect(12, port_counters_request(3), port_counters_response(3, {}));
  transport.expect(12, extended_request(3), extended_response(3, {}));
  transport.expect(
      12, extended_speeds_request(3),
      extended_speeds_response(3, port_extended_speeds_counters(), {{"corrected_blocks_1", 9}}));
  auto options = remote_options({{12, 3}});
  options.extended_speeds_counters = true;
  const auto result = scrape(transport, options);
  EXPECT_EQ(transport.unused(), 0u);
  EXPECT_EQ(sample(result.families, "rdma_port_fec_corrected_blocks_total", kPort3), 9);
  EXPECT_EQ(series_count(result.families, "rdma_port_fec_corrected_symbols_total"), 0u);
}

// A PMA that answers "not supported" is asked once: no loss, a reason, and later scrapes cost
// no PortExtendedSpeedsCounters MAD.
TEST(RemotePma, APmaWithoutExtendedSpeedsCountersIsAskedOnce) {
  ReplayTransport transport;
  for (int round = 0; round < 3; ++round) {
    expect_node(transport, 12, kExtendedWidth);
    transport.expect(12, port_counters_request(3), port_counters_response(3, {}));
    transport.expect(12, extended_request(3), extended_response(3, {}));
  }
  transport.expect(
      12, extended_speeds_request(3),
      extended_speeds_response(3, port_extended_speeds_counters(), {}, kAttributeNotSupported));
  auto options = remote_options({{12, 3}});
  options.extended_speeds_counters = true;
  const auto results = scrapes(transport, options, 3);
  EXPECT_EQ(transport.unused(), 0u);
  EXPECT_EQ(mads_of(transport, kExtendedSpeeds), 1u);
  for (const auto& result : results) {
    EXPECT_TRUE(result.errors.empty());
    EXPECT_EQ(sample(result.families, "rdma_remote_pma_fec_counters_up",
                     {{"lid", "12"}, {"reason", "not_supported"}}),
              0);
    EXPECT_EQ(series_count(result.families, "rdma_port_fec_corrected_blocks_total"), 0u);
  }
}

// A PMA that answers PortCounters but never PortExtendedSpeedsCounters (as ibsim does) costs its
// attempts once, then nothing.
TEST(RemotePma, APmaThatDropsExtendedSpeedsCountersIsSwitchedOff) {
  ReplayTransport transport;
  for (int round = 0; round < 2; ++round) {
    expect_node(transport, 12, kExtendedWidth);
    transport.expect(12, port_counters_request(3), port_counters_response(3, {}));
    transport.expect(12, extended_request(3), extended_response(3, {}));
  }
  transport.expect_silence(12, extended_speeds_request(3));
  transport.expect_silence(12, extended_speeds_request(3));  // the retry
  auto options = remote_options({{12, 3}});
  options.extended_speeds_counters = true;
  const auto results = scrapes(transport, options, 2);
  EXPECT_EQ(transport.unused(), 0u);
  EXPECT_EQ(mads_of(transport, kExtendedSpeeds), 2u);
  ASSERT_EQ(results[0].errors.size(), 1u);
  EXPECT_EQ(results[0].errors[0].reason, ReadError::kTimeout);
  EXPECT_TRUE(results[1].errors.empty());
  for (const auto& result : results) {
    EXPECT_EQ(sample(result.families, "rdma_remote_pma_fec_counters_up",
                     {{"lid", "12"}, {"reason", "no_answer"}}),
              0);
  }
}

// Without the option, no PortExtendedSpeedsCounters or PortInfoExtended MAD leaves (the replay
// fails any MAD it was not told to expect) and no FEC series exists.
TEST(RemotePma, ExtendedSpeedsCountersAreAskedOnlyWhenEnabled) {
  ReplayTransport transport;
  expect_node(transport, 12, kExtendedWidth | kRsFecCounters);
  transport.expect(12, port_counters_request(3), port_counters_response(3, {}));
  transport.expect(12, extended_request(3), extended_response(3, {}));
  const auto result = scrape(transport, remote_options({{12, 3}}));
  EXPECT_TRUE(result.errors.empty());
  EXPECT_EQ(transport.unused(), 0u);
  EXPECT_EQ(mads_of(transport, kExtendedSpeeds) + mads_of(transport, kPortInfoExtended), 0u);
  EXPECT_EQ(series_count(result.families, "rdma_port_fec_corrected_blocks_total"), 0u);
  EXPECT_EQ(series_count(result.families, "rdma_remote_pma_fec_counters_up"), 0u);
}

// Without --collector.remote_pma.detail-counters no detail MAD leaves, however the PMA would
// answer (the replay fails any MAD it was not told to expect).
TEST(RemotePma, DetailCountersAreAskedOnlyWhenEnabled) {
  ReplayTransport transport;
  expect_node(transport, 12, kExtendedWidth);
  transport.expect(12, port_counters_request(3), port_counters_response(3, {}));
  transport.expect(12, extended_request(3), extended_response(3, {}));
  const auto result = scrape(transport, remote_options({{12, 3}}));
  EXPECT_TRUE(result.errors.empty());
  EXPECT_EQ(detail_mads(transport), 0u);
  EXPECT_EQ(series_count(result.families, "rdma_port_errors_total"), 12u);
}

TEST(RemotePma, BasicOnlyPmaUses32BitCountersAndFlagsTheirSaturation) {
  ReplayTransport transport(false);  // no SMI agent: no NodeInfo, no node_guid
  expect_node(transport, 7, 0);
  transport.expect(
      7, port_counters_request(1),
      port_counters_response(
          1, {{"port_xmit_data", 0xFFFFFFFF}, {"port_rcv_packets", 9}, {"port_xmit_wait", 1234}}));
  const auto result = scrape(transport, remote_options({{7, 1}}));
  EXPECT_TRUE(result.errors.empty());
  const LabelMap port{{"lid", "7"}, {"port", "1"}};
  const auto& f = result.families;
  EXPECT_EQ(sample(f, "rdma_port_data_transmitted_bytes_total", port), 0xFFFFFFFFull * 4.0);
  EXPECT_EQ(sample(f, "rdma_port_packets_received_total", port), 9);
  EXPECT_EQ(sample(f, "rdma_port_pma_saturated", with_counter(port, "port_xmit_data")), 1);
  EXPECT_EQ(sample(f, "rdma_port_pma_saturated", with_counter(port, "port_rcv_packets")), 0);
  // Without capability bit 12 the PortXmitWait field is reserved: not a counter.
  EXPECT_EQ(series_count(f, "rdma_port_transmit_wait_ticks_total"), 0u);
  EXPECT_EQ(series_count(f, "rdma_port_unicast_packets_transmitted_total"), 0u);
}

TEST(RemotePma, NoIetfExtendedTableHasNoUnicastOrMulticast) {
  ReplayTransport transport;
  expect_node(transport, 12, kNoIetf);
  transport.expect(12, port_counters_request(3), port_counters_response(3, {}));
  transport.expect(
      12, extended_request(3),
      extended_response(3, {{"port_xmit_packets", 1ull << 40}, {"unicast_xmit_packets", 99}}));
  const auto result = scrape(transport, remote_options({{12, 3}}));
  EXPECT_TRUE(result.errors.empty());
  EXPECT_EQ(sample(result.families, "rdma_port_packets_transmitted_total", kPort3),
            static_cast<double>(1ull << 40));
  EXPECT_EQ(series_count(result.families, "rdma_port_unicast_packets_transmitted_total"), 0u);
  EXPECT_FALSE(
      sample(result.families, "rdma_port_pma_saturated", with_counter(kPort3, "port_xmit_data")));
}

TEST(RemotePma, AllPortsWithAllPortSelectIsOneQuery) {
  ReplayTransport transport;
  expect_node(transport, 12, kAllPortSelect);
  transport.expect(12, port_counters_request(0xFF),
                   port_counters_response(0xFF, {{"port_rcv_errors", 4}}));
  const auto result = scrape(transport, remote_options({{12, std::nullopt}}));
  EXPECT_TRUE(result.errors.empty());
  EXPECT_EQ(sample(result.families, "rdma_port_errors_total",
                   {{"lid", "12"},
                    {"port", "all"},
                    {"node_guid", "0002:c903:00a1:b2c3"},
                    {"counter", "port_rcv_errors"}}),
            4);
}

TEST(RemotePma, AllPortsWithoutAllPortSelectSumsEveryPortWithSaturation) {
  ReplayTransport transport;
  expect_node(transport, 12, kExtendedWidth, 3);
  const std::vector<Values> basic = {
      {{"symbol_error", 0xFFF0}, {"link_downed", 200}, {"local_link_integrity_errors", 9}},
      {{"symbol_error", 0x20}, {"link_downed", 50}, {"local_link_integrity_errors", 3}},
      {{"symbol_error", 1}, {"link_downed", 1}, {"local_link_integrity_errors", 1}},
  };
  for (int p = 1; p <= 3; ++p) {
    transport.expect(12, port_counters_request(p), port_counters_response(p, basic[p - 1]));
    transport.expect(12, extended_request(p),
                     extended_response(p, {{"port_xmit_data", p == 1 ? ~0ull - 5 : 3}}));
  }
  const auto result = scrape(transport, remote_options({{12, std::nullopt}}));
  EXPECT_TRUE(result.errors.empty());
  EXPECT_EQ(transport.unused(), 0u);
  const LabelMap all{{"lid", "12"}, {"port", "all"}, {"node_guid", "0002:c903:00a1:b2c3"}};
  const auto& f = result.families;
  EXPECT_EQ(sample(f, "rdma_port_errors_total", with_counter(all, "symbol_error")), 0xFFFF);
  EXPECT_EQ(sample(f, "rdma_port_errors_total", with_counter(all, "link_downed")), 251);
  EXPECT_EQ(sample(f, "rdma_port_errors_total", with_counter(all, "local_link_integrity_errors")),
            13);
  EXPECT_EQ(sample(f, "rdma_port_pma_saturated", with_counter(all, "symbol_error")), 1);
  EXPECT_EQ(sample(f, "rdma_port_pma_saturated", with_counter(all, "link_downed")), 0);
  EXPECT_EQ(sample(f, "rdma_port_data_transmitted_bytes_total", all),
            static_cast<double>(~0ull) * 4);
}

// The shape a probe diffs before and after a run: counter name -> raw value and width.
TEST(RemotePma, SnapshotGivesRawValuesAndWidthsByCounterName) {
  ReplayTransport transport;
  expect_node(transport, 12, kExtendedWidth | kXmitWait);
  transport.expect(12, port_counters_request(3),
                   port_counters_response(3, {{"link_downed", 3}, {"port_xmit_wait", 5}}));
  transport.expect(12, extended_request(3), extended_response(3, {{"port_xmit_data", 1000}}));
  RecordingSink errors;
  fabric::RemotePmaMemory memory;
  const auto snapshot =
      fabric::query_remote_ports(transport, remote_options({{12, 3}}), errors, memory);
  EXPECT_TRUE(errors.recorded.empty());
  ASSERT_EQ(snapshot.size(), 1u);
  EXPECT_EQ(snapshot[0].target, (RemotePort{12, 3}));
  EXPECT_EQ(snapshot[0].node_guid, 0x0002c90300a1b2c3u);
  const auto& counters = snapshot[0].counters;
  EXPECT_EQ(counters.size(), 12u + 1u + 8u);  // error classes, PortXmitWait, extended table
  EXPECT_EQ(counters.at("port_xmit_data").value, 1000u);  // words, not yet x 4
  EXPECT_EQ(counters.at("port_xmit_data").width, 64);
  EXPECT_EQ(counters.at("link_downed").value, 3u);
  EXPECT_EQ(counters.at("link_downed").width, 8);
  EXPECT_EQ(counters.at("port_xmit_wait").width, 32);
}

TEST(RemotePma, SaturatingAddStopsAtTheFieldWidth) {
  EXPECT_EQ(fabric::saturating_add(14, 1, 4), 15u);
  EXPECT_EQ(fabric::saturating_add(14, 2, 4), 15u);
  EXPECT_EQ(fabric::saturating_add(15, 0, 4), 15u);
  EXPECT_EQ(fabric::saturating_add(0xFFFFFFF0, 0x10, 32), 0xFFFFFFFFu);
  EXPECT_EQ(fabric::saturating_add(~0ull - 1, 1, 64), ~0ull);
  EXPECT_EQ(fabric::saturating_add(~0ull, ~0ull, 64), ~0ull);
  EXPECT_EQ(fabric::saturating_add(1, 2, 64), 3u);
}

TEST(RemotePma, DeadTargetCostsItsOwnSeriesAndOneTimeout) {
  ReplayTransport transport;
  expect_node(transport, 12, kExtendedWidth);
  transport.expect(12, port_counters_request(3), port_counters_response(3, {}));
  transport.expect(12, extended_request(3), extended_response(3, {{"port_rcv_data", 1}}));
  // LID 40 answers nothing, to either attempt of either query.
  for (int attempt = 0; attempt < 2; ++attempt) {
    transport.expect_silence(40, class_port_info_request());
    transport.expect_silence(40, node_info_request());
  }
  const auto start = std::chrono::steady_clock::now();
  const auto result = scrape(transport, remote_options({{12, 3}, {40, 1}}));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  EXPECT_EQ(transport.unused(), 0u);
  EXPECT_EQ(sample(result.families, "rdma_port_data_received_bytes_total", kPort3), 4);
  for (const auto& family : result.families) {
    for (const auto& metric : family.metric) EXPECT_NE(labels_of(metric)["lid"], "40");
  }
  ASSERT_EQ(result.errors.size(), 2u);
  EXPECT_EQ(result.errors[0].reason, ReadError::kTimeout);
  EXPECT_EQ(result.errors[0].path.string(),
            "lid 40 ClassPortInfo: no answer to 2 attempt(s) of 20 ms");
  EXPECT_EQ(sample(result.families, "ibprobe_scrape_errors_total",
                   {{"collector", "remote_pma"}, {"reason", "timeout"}}),
            2);
  EXPECT_EQ(
      sample(result.families, "ibprobe_scrape_collector_success", {{"collector", "remote_pma"}}),
      1);
}

TEST(RemotePma, WrongTransactionIdIsIgnoredAndTheRetryAnswered) {
  ReplayTransport transport(false);
  transport.expect(12, class_port_info_request(), class_port_info_response(0), Reply::kWrongTid);
  transport.expect(12, class_port_info_request(), class_port_info_response(0));
  transport.expect(12, port_counters_request(3), port_counters_request(3),
                   Reply::kTransportTimeout);
  transport.expect(12, port_counters_request(3),
                   port_counters_response(3, {{"port_xmit_discards", 8}}));
  const auto result = scrape(transport, remote_options({{12, 3}}));
  EXPECT_TRUE(result.errors.empty());
  EXPECT_EQ(transport.unused(), 0u);
  EXPECT_EQ(sample(result.families, "rdma_port_errors_total",
                   {{"lid", "12"}, {"port", "3"}, {"counter", "port_xmit_discards"}}),
            8);
}

TEST(RemotePma, MadStatusIsReportedPreciselyAndCostsOnlyItsAttribute) {
  ReplayTransport transport;
  expect_node(transport, 12, kExtendedWidth);
  transport.expect(12, port_counters_request(3),
                   port_counters_response(3, {{"VL15_dropped", 3}, {"port_xmit_data", 1}}));
  transport.expect(12, extended_request(3), extended_response(3, {}, 0x001C));
  const auto result = scrape(transport, remote_options({{12, 3}}));
  ASSERT_EQ(result.errors.size(), 1u);
  EXPECT_EQ(result.errors[0].reason, ReadError::kMadStatus);
  EXPECT_EQ(result.errors[0].path.string(),
            "lid 12 port 3 PortCountersExtended: MAD status 0x001c (invalid attribute field or "
            "modifier)");
  EXPECT_EQ(sample(result.families, "rdma_port_errors_total", with_counter(kPort3, "VL15_dropped")),
            3);
  // The 32-bit data counter is not a stand-in for the 64-bit one: its value would jump down.
  EXPECT_EQ(series_count(result.families, "rdma_port_data_transmitted_bytes_total"), 0u);
  EXPECT_EQ(sample(result.families, "ibprobe_scrape_errors_total",
                   {{"collector", "remote_pma"}, {"reason", "mad_status"}}),
            1);
}

TEST(RemotePma, TruncatedOrForeignAnswersAreMalformed) {
  ReplayTransport transport(false);
  expect_node(transport, 12, 0);
  Bytes truncated = port_counters_response(3, {{"symbol_error", 1}});
  truncated.resize(100);
  transport.expect(12, port_counters_request(3), truncated);
  expect_node(transport, 13, 0);
  transport.expect(13, port_counters_request(1), port_counters_response(2, {}));
  const auto result = scrape(transport, remote_options({{12, 3}, {13, 1}}));
  ASSERT_EQ(result.errors.size(), 2u);
  EXPECT_EQ(result.errors[0].reason, ReadError::kMalformed);
  EXPECT_EQ(result.errors[0].path.string(),
            "lid 12 port 3 PortCounters: truncated answer of 100 bytes");
  EXPECT_EQ(result.errors[1].reason, ReadError::kMalformed);
  EXPECT_EQ(result.errors[1].path.string(), "lid 13 port 1 PortCounters: answer is for port 2");
  EXPECT_EQ(series_count(result.families, "rdma_port_errors_total"), 0u);
}

TEST(RemotePma, BudgetBoundsTheWholeScrape) {
  ReplayTransport transport(false);
  for (int attempt = 0; attempt < 3; ++attempt)
    transport.expect_silence(12, class_port_info_request());
  auto options = remote_options({{12, 3}});
  options.timeout = 40ms;
  options.retries = 10;
  options.budget = 100ms;
  const auto start = std::chrono::steady_clock::now();
  const auto result = scrape(transport, options);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 400ms);
  ASSERT_EQ(result.errors.size(), 1u);
  EXPECT_EQ(result.errors[0].reason, ReadError::kBudgetExceeded);
  EXPECT_EQ(sample(result.families, "ibprobe_scrape_errors_total",
                   {{"collector", "remote_pma"}, {"reason", "budget_exceeded"}}),
            1);
}

TEST(RemotePma, ConcurrencyLimitsMadsInFlight) {
  ReplayTransport transport(false);
  for (std::uint16_t lid = 1; lid <= 4; ++lid)
    transport.expect_silence(lid, class_port_info_request());
  auto options = remote_options({{1, 1}, {2, 1}, {3, 1}, {4, 1}});
  options.retries = 0;
  options.timeout = 30ms;
  options.concurrency = 2;
  const auto result = scrape(transport, options);
  EXPECT_EQ(result.errors.size(), 4u);
  const auto& sends = transport.sends();
  ASSERT_EQ(sends.size(), 4u);
  // The second pair goes out only once the first pair has timed out.
  EXPECT_LT(sends[1].at - sends[0].at, 15ms);
  EXPECT_GE(sends[2].at - sends[0].at, 30ms);
  EXPECT_GE(sends[3].at - sends[1].at, 30ms);
}

TEST(RemotePma, WithoutAnInfiniBandPortReportsDownWithItsReasonAndNothingElse) {
  fabric::UmadOpenResult port;
  port.reason = "not_infiniband";
  port.detail = "rxe0 port 1 is Ethernet";
  std::vector<std::unique_ptr<collectors::FabricCollector>> fabric;
  fabric.push_back(fabric::make_remote_pma_collector(remote_options({{12, 3}}), std::move(port)));
  std::vector<std::unique_ptr<collectors::Collector>> local;
  local.push_back(collectors::make_collector("port_info"));
  collectors::Options options;
  options.sysfs_root = "/nonexistent-ibprobe-sysfs";
  collectors::Scraper scraper(options, std::move(local), nullptr, std::move(fabric));
  for (int round = 0; round < 3; ++round) {
    const auto families = scraper.scrape();
    EXPECT_EQ(sample(families, "ibprobe_remote_pma_up", {{"reason", "not_infiniband"}}), 0);
    EXPECT_EQ(series_count(families, "ibprobe_remote_pma_up"), 1u);
    EXPECT_EQ(series_count(families, "ibprobe_scrape_errors_total"), 0u);
    EXPECT_EQ(sample(families, "ibprobe_scrape_collector_success", {{"collector", "remote_pma"}}),
              1);
    EXPECT_EQ(sample(families, "ibprobe_scrape_collector_success", {{"collector", "port_info"}}),
              1);
  }
}

class ThrowingFabricCollector final : public collectors::FabricCollector {
 public:
  std::string_view name() const override { return "broken"; }
  void collect(collectors::MetricSet& out, collectors::ErrorSink&) const override {
    out.add("partial", "", prometheus::MetricType::Gauge, {}, 1);
    throw std::runtime_error("boom");
  }
};

TEST(RemotePma, FailingFabricCollectorCostsOnlyItsOwnSeries) {
  std::vector<std::unique_ptr<collectors::FabricCollector>> fabric;
  fabric.push_back(std::make_unique<ThrowingFabricCollector>());
  std::vector<std::unique_ptr<collectors::Collector>> local;
  local.push_back(collectors::make_collector("port_info"));
  collectors::Options options;
  options.sysfs_root = "/nonexistent-ibprobe-sysfs";
  collectors::Scraper scraper(options, std::move(local), nullptr, std::move(fabric));
  const auto families = scraper.scrape();
  EXPECT_EQ(sample(families, "ibprobe_scrape_collector_success", {{"collector", "broken"}}), 0);
  EXPECT_EQ(sample(families, "ibprobe_scrape_collector_success", {{"collector", "port_info"}}), 1);
  EXPECT_EQ(series_count(families, "partial"), 0u);
}

TEST(RemotePma, ParsesTargets) {
  EXPECT_EQ(fabric::parse_remote_port("12:3"), (RemotePort{12, 3}));
  EXPECT_EQ(fabric::parse_remote_port("0x1a:all"), (RemotePort{26, std::nullopt}));
  EXPECT_EQ(fabric::parse_remote_port("49151:0"), (RemotePort{0xBFFF, 0}));
  for (const char* bad : {"", "12", "12:", ":3", "0:1", "49152:1", "12:255", "12:x", "12:3:4",
                          "-1:2", "12:ALL", "0x:1"}) {
    EXPECT_FALSE(fabric::parse_remote_port(bad)) << bad;
  }
}

}  // namespace
}  // namespace ibprobe::testing
