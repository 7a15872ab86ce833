// One counter as read at one instant, with what it takes to diff it: a local port's sysfs
// counters, a remote port's PMA counters and a peer's snapshot in the control protocol all come
// as these.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

namespace ibprobe {

struct CounterSample {
  std::uint64_t value = 0;
  std::uint32_t width_bits = 64;  // fixed-width IB counters saturate at all ones, never wrap
  double scale = 1;               // 4 for PortXmitData/PortRcvData: they count 32-bit words
  bool error_class = false;       // any increase is a finding
  // "error"/"informative" for PortCounters, the driver table's class for hw_counters
  // ("retransmission", "rnr_nak", "congestion", ...); empty when not known.
  std::string counter_class;
  // The 802.1p priority of a netdev's per-priority statistic; none for every other counter.
  std::optional<std::uint32_t> priority = std::nullopt;

  bool operator==(const CounterSample&) const = default;
};

// Counters by name: PortCounters as "port_xmit_data", hw_counters as "hw_counters/<name>".
using CounterSnapshot = std::map<std::string, CounterSample, std::less<>>;

}  // namespace ibprobe
