// Port counters of remote ports (switch ports, peers) read over the fabric with PerfMgt MADs,
// the way perfquery reads them: from an InfiniBand port of this host, through its umad device.
#pragma once

#include <chrono>
#include <cstdint>
#include <expected>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ibprobe/collectors.h"
#include "ibprobe/fabric_error.h"

namespace ibprobe::fabric {

inline constexpr std::string_view kRemotePmaCollector = "remote_pma";

struct RemotePort {
  std::uint16_t lid = 0;
  std::optional<std::uint8_t> port;  // nullopt: every port of the node, summed
  bool operator==(const RemotePort&) const = default;
};

// "LID:PORT" or "LID:all". LID is decimal or 0x-hex, a unicast LID (1..0xBFFF); PORT is 0..254
// (0 is a switch's management port).
std::optional<RemotePort> parse_remote_port(std::string_view text);

struct RemotePmaOptions {
  std::vector<RemotePort> targets;
  std::string ca;                          // local CA to send from; empty: first InfiniBand one
  int ca_port = 0;                         // 0: the CA's first InfiniBand port
  std::chrono::milliseconds timeout{300};  // per MAD attempt
  int retries = 2;                         // further attempts after a timeout
  std::chrono::milliseconds budget{4000};  // for all targets together, per scrape
  int concurrency = 8;                     // MADs in flight at once
  // Also PortRcvErrorDetails, PortXmitDiscardDetails and PortVLXmitWaitCounters of each asked
  // port, from PMAs that answer them: up to three more MADs per port per scrape.
  bool detail_counters = false;
  // Also PortExtendedSpeedsCounters (FEC counters) of each target with a port number, from PMAs
  // that answer it: one more MAD per port per scrape, and once per port a PortInfoExtended SMP
  // when the PMA has RS-FEC counters.
  bool extended_speeds_counters = false;
};

struct RemoteCounter {
  std::uint64_t value;  // raw, as the PMA counts (data counters in 4-octet words)
  int width;            // bits; the counter saturates at 2^width - 1
};

// The counters of one target, named as ports/N/counters/ names them locally (port_xmit_data,
// symbol_error, ...). Counters the PMA did not answer for, or does not support, are absent.
struct RemotePortCounters {
  RemotePort target;
  std::optional<std::uint64_t> node_guid;
  std::map<std::string, RemoteCounter, std::less<>> counters;
};

struct RemotePmaCollector {
  std::unique_ptr<collectors::FabricCollector> collector;
  // Empty when a local InfiniBand port with a umad device was found; otherwise why not, in one
  // sentence. The collector then exports only ibprobe_remote_pma_up 0 with a reason.
  std::string unavailable;
};
RemotePmaCollector make_remote_pma_collector(RemotePmaOptions options);

// One bounded round of queries of `options.targets`, for comparing before and after. Failed
// queries go to `errors`; kLocalPort when no local port can send MADs.
std::expected<std::vector<RemotePortCounters>, Error> snapshot_remote_ports(
    const RemotePmaOptions& options, collectors::ErrorSink& errors);

}  // namespace ibprobe::fabric
