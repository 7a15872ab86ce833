#include <regex>

#include "collectors_internal.h"
#include "ibprobe/ethtool.h"
#include "ibprobe/gids.h"
#include "ibprobe/link_health.h"
#include "ibprobe/port_events.h"

namespace ibprobe::collectors {
namespace {

struct Factory {
  CollectorInfo info;
  std::unique_ptr<Collector> (*make)();
};

const std::vector<Factory>& factories() {
  static const std::vector<Factory> kFactories = {
      {{"port_counters", "PortCounters: data (bytes), packets, wait, error classes, saturation",
        true},
       make_port_counters_collector},
      {{"hw_counters", "driver hw_counters per port and per device", true},
       make_hw_counters_collector},
      {{"port_info", "device identity, port state, physical state, rate, LIDs, netdev", true},
       make_port_info_collector},
      {{kGidsCollector, "populated GID table entries with type and netdev", true},
       [] { return make_gids_collector(); }},
      // On by default although it asks the netdevs of this network namespace too: a netdev that
      // is not here, or has no module or FEC statistics, costs one status series and a read
      // every module interval, never a scrape's time.
      {{kLinkHealthCollector,
        "transceiver module monitors, thresholds, flags and identity, and FEC statistics, of "
        "each RoCE port's netdev (ethtool netlink, read off the scrape path)",
        true},
       [] { return make_link_health_collector(); }},
      // On by default: it opens each device's uverbs node, which the exporter needs for its
      // probes anyway; a device it cannot open costs one status series and a state file read
      // per port and scrape.
      {{kPortEventsCollector,
        "verbs async events per port (state changes, LID, P_Key, GID, SM changes), flaps and "
        "the time of the last state change, read as they happen",
        true},
       [] { return make_port_events_collector(); }},
      // Off by default, like node_exporter's: it asks the netdevs of this network namespace,
      // which are the ones sysfs names only when --path.sysfs is the host's own.
      {{kEthtoolCollector,
        "ethtool statistics of each RoCE port's netdev: pause frames per priority, PFC storm "
        "and watchdog, discards, drops, out of buffer, mlx5 physical-layer errors",
        false},
       [] { return make_ethtool_collector(false); }},
  };
  return kFactories;
}

}  // namespace

struct DeviceFilter::Patterns {
  std::optional<std::regex> include;
  std::optional<std::regex> exclude;
};

DeviceFilter::DeviceFilter(const std::string& include, const std::string& exclude) {
  if (include.empty() && exclude.empty()) return;
  auto patterns = std::make_shared<Patterns>();
  if (!include.empty()) patterns->include.emplace(include, std::regex::ECMAScript);
  if (!exclude.empty()) patterns->exclude.emplace(exclude, std::regex::ECMAScript);
  patterns_ = std::move(patterns);
}

bool DeviceFilter::accepts(std::string_view device) const {
  if (!patterns_) return true;
  const std::string name(device);
  if (patterns_->include && !std::regex_match(name, *patterns_->include)) return false;
  if (patterns_->exclude && std::regex_match(name, *patterns_->exclude)) return false;
  return true;
}

const std::vector<CollectorInfo>& available_collectors() {
  static const std::vector<CollectorInfo> kInfos = [] {
    std::vector<CollectorInfo> infos;
    for (const auto& factory : factories()) infos.push_back(factory.info);
    return infos;
  }();
  return kInfos;
}

std::unique_ptr<Collector> make_collector(std::string_view name) {
  for (const auto& factory : factories()) {
    if (factory.info.name == name) return factory.make();
  }
  return nullptr;
}

}  // namespace ibprobe::collectors
