// Ethernet-side evidence of a RoCE port: the ethtool statistics of its netdev (what
// `ethtool -S` prints), read with the SIOCETHTOOL ioctl. The statistics belong to the netdev in
// the exporter's network namespace, whatever --path.sysfs says: sysfs only names the netdev.
#pragma once

#include <cstdint>
#include <expected>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "ibprobe/collectors.h"

namespace ibprobe::collectors {

inline constexpr std::string_view kEthtoolCollector = "ethtool";

// Statistics of one netdev in the driver's order, or the failed ioctl's errno (system category),
// which names both the dropped input's reason and, in its message, what the driver said.
using EthtoolStatistics = std::vector<std::pair<std::string, std::uint64_t>>;
using EthtoolRead = std::expected<EthtoolStatistics, std::error_code>;

class EthtoolSource {
 public:
  virtual ~EthtoolSource() = default;
  virtual EthtoolRead statistics(const std::string& netdev) const = 0;
};

// ETHTOOL_GSSET_INFO, ETHTOOL_GSTRINGS and ETHTOOL_GSTATS on an AF_INET datagram socket.
std::shared_ptr<const EthtoolSource> make_ioctl_ethtool_source();

// The statistics that matter for RoCE, by name across drivers: pause frames and pause duration
// per priority (mlx5 rx_prio3_pause, bnxt_en rx_pfc_ena_frames_pri3, ice rx_priority_3_xoff),
// PFC storm and watchdog counters, discards, drops and out-of-buffer, and the physical-layer
// errors below (is_physical_error_statistic).
bool is_roce_ethtool_statistic(std::string_view name);

// mlx5's physical-layer error and FEC counters: rx_corrected_bits_phy (bits the FEC corrected),
// rx_err_lane_N_phy (the same per lane), rx_symbol_err_phy, rx_pcs_symbol_err_phy,
// rx_crc_errors_phy, link_down_events_phy, the malformed-frame counts (undersize, oversize,
// fragments, jabbers, in-range length errors) and tx_errors_phy.
bool is_physical_error_statistic(std::string_view name);

// The IEEE 802.1p priority (0..7) a statistic counts for, from its name across drivers: mlx5
// rx_prio3_bytes and tx_prio3_pause, bnxt_en rx_bytes_pri3 and rx_pfc_ena_frames_pri3, ice and
// i40e rx_priority_3_xoff and port.tx_priority_3_xon_tx. None for a statistic of no priority.
std::optional<std::uint32_t> ethtool_priority(std::string_view name);

// The class of a per-priority statistic as a probe's counter deltas name it: pause and PFC
// frames and ECN marks "congestion", discards and drops "error", traffic "informative".
std::string_view ethtool_priority_class(std::string_view name);

// One series per statistic of each RoCE port's netdev (ports without one are skipped):
// rdma_port_ethtool_stat_total{device,port,netdev,stat}. `all_statistics` exports every
// statistic instead of the RoCE ones. A netdev whose statistics cannot be read costs its series
// and one dropped input (reason from the errno), never the scrape.
std::unique_ptr<Collector> make_ethtool_collector(
    bool all_statistics, std::shared_ptr<const EthtoolSource> source = make_ioctl_ethtool_source());

}  // namespace ibprobe::collectors
