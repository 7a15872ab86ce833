// Below a RoCE port's counters: the transceiver module in its cage (monitors, the module's own
// thresholds, the flags it raises, its identity) and the FEC statistics of its netdev, both read
// over ethtool netlink (ethtool_netlink.h) and decoded by module_eeprom.h and fec_statistics.h.
//
// A module's memory is behind a slow I2C bus and a FEC reply behind a firmware command, so neither
// is read on a scrape: a scrape serves what the collector's own thread read last, and asks that
// thread for a new read once the last one is older than its interval.
#pragma once

#include <chrono>
#include <cstdint>
#include <expected>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "ibprobe/collectors.h"
#include "ibprobe/module_eeprom.h"

namespace ibprobe::collectors {

inline constexpr std::string_view kLinkHealthCollector = "link_health";

// What the collector asks of a netdev. Failures are errnos (system category), as EthtoolNetlink
// returns them. Called from the collector's thread only, one call at a time.
class LinkHealthSource {
 public:
  virtual ~LinkHealthSource() = default;
  // Every page module_pages_to_read names (read_module_pages).
  virtual std::expected<ModulePages, std::error_code> module_pages(const std::string& netdev) = 0;
  // The attributes of the netdev's ETHTOOL_MSG_FEC_GET_REPLY, statistics included.
  virtual std::expected<std::vector<std::uint8_t>, std::error_code> fec_reply(
      const std::string& netdev) = 0;
};

// EthtoolNetlink, its socket opened on the first read (and again after a failed open).
std::unique_ptr<LinkHealthSource> make_netlink_link_health_source();

// A module is read again after `module_interval`, FEC statistics after `fec_interval`. A netdev
// whose driver refuses one of them (EOPNOTSUPP: no module in the cage, or a driver without the
// operation, such as virtio_net) or that does not exist here (ENODEV: another network namespace)
// is asked again after `module_interval` only. The netdev behind each port's GID 0 is looked up
// again after `module_interval` too.
//
// The FEC interval is shorter than the usual scrape interval (15 to 60 s), so that each scrape
// asks for a fresh read and serves counters one scrape old at most; module monitors change
// slowly, and reading them costs the module's bus, so their interval is minutes.
inline constexpr std::chrono::seconds kDefaultModuleInterval{300};
inline constexpr std::chrono::seconds kDefaultFecInterval{10};
struct LinkHealthOptions {
  std::chrono::steady_clock::duration module_interval = kDefaultModuleInterval;
  std::chrono::steady_clock::duration fec_interval = kDefaultFecInterval;
};

// Per RoCE port (labels device, port, netdev): rdma_port_module_* (temperature, supply voltage,
// per-lane TX bias, TX and RX power in base units, the module's thresholds, the flags it has set,
// its identity) and rdma_port_fec_* (corrected and uncorrectable blocks, corrected bits, total and
// per lane, the active mode), each with an _up gauge that is 0 with a `reason` when the netdev
// could not be read or its answer not decoded. Nothing is written for a port before its netdev's
// first read has finished.
std::unique_ptr<Collector> make_link_health_collector(
    LinkHealthOptions options = {},
    std::unique_ptr<LinkHealthSource> source = make_netlink_link_health_source());

}  // namespace ibprobe::collectors
