#include "host_collectors.h"

#include "ibprobe/ethtool.h"
#include "ibprobe/gids.h"
#include "ibprobe/link_health.h"

namespace ibprobe::exporter {

std::vector<std::unique_ptr<collectors::Collector>> make_host_collectors(const Config& config) {
  std::vector<std::unique_ptr<collectors::Collector>> result;
  for (const auto& name : config.enabled_collectors) {
    if (name == collectors::kEthtoolCollector) {
      result.push_back(collectors::make_ethtool_collector(config.ethtool_all_statistics));
    } else if (name == collectors::kGidsCollector) {
      result.push_back(collectors::make_gids_collector(config.gid_rescan_interval));
    } else if (name == collectors::kLinkHealthCollector) {
      result.push_back(collectors::make_link_health_collector(
          {.module_interval = config.link_health_module_interval}));
    } else {
      result.push_back(collectors::make_collector(name));
    }
  }
  return result;
}

}  // namespace ibprobe::exporter
