// Every counter of one local port at one instant, for diffing around a probe run: the
// PortCounters (with their width and unit) and the driver's hw_counters.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "ibprobe/counter_sample.h"
#include "ibprobe/ethtool.h"

namespace ibprobe::collectors {

struct PortSnapshot {
  // PortCounters by name ("port_xmit_data", "symbol_error", ...), hw_counters as
  // "hw_counters/<driver name>".
  CounterSnapshot counters;
  // How long the driver caches hw_counters: a reading taken sooner than this after traffic may
  // not show it yet.
  std::chrono::milliseconds hw_counters_lifespan{0};
};

// The class of a counter as named in a snapshot ("port_rcv_errors", "hw_counters/<name>"), for
// readings taken elsewhere (a peer's snapshot arrives with names and values), and
// "ethtool/<name>".
std::string_view counter_class_of(std::string_view snapshot_name);

// The priority of a snapshot's "ethtool/<name>" statistic, as snapshot_port() sets it.
std::optional<std::uint32_t> priority_of(std::string_view snapshot_name);

// A PortCounters value read elsewhere (a remote port's PMA), described like a local one: unit
// and class from the counter's name. Unknown names are informative with scale 1.
CounterSample describe_port_counter(std::string_view name, std::uint64_t value,
                                    std::uint32_t width_bits);

// Unreadable files are left out of the snapshot (and so show as missing in a delta). A RoCE
// port's snapshot also holds its netdev's per-priority ethtool statistics, as
// "ethtool/<name>" (ethtool_priority() names their priority): where traffic moved by priority,
// on drivers that count by priority (mlx5, bnxt_en, ice; not virtio_net).
PortSnapshot snapshot_port(
    const std::filesystem::path& sysfs_root, const std::string& device, unsigned port,
    const std::shared_ptr<const EthtoolSource>& ethtool = make_ioctl_ethtool_source());

}  // namespace ibprobe::collectors
