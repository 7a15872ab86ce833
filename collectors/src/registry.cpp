#include <algorithm>
#include <array>
#include <chrono>

#include "collectors_internal.h"
#include "sysfs.h"

namespace ibprobe::collectors {
namespace {

using prometheus::MetricType;

struct Factory {
  CollectorInfo info;
  std::unique_ptr<Collector> (*make)(const Options&);
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
      {{"gids", "populated GID table entries with type and netdev", true}, make_gids_collector},
  };
  return kFactories;
}

// Counts dropped inputs of one collector during one scrape.
class CountingErrors final : public ErrorSink {
 public:
  CountingErrors(std::string_view collector, const Scraper::ErrorObserver& observer)
      : collector_(collector), observer_(observer) {}
  void record(ReadError reason, const std::filesystem::path& path) override {
    ++counts_[static_cast<std::size_t>(reason)];
    if (observer_) observer_(collector_, reason, path);
  }
  std::string_view collector_;
  const Scraper::ErrorObserver& observer_;
  std::array<double, static_cast<std::size_t>(ReadError::kIo) + 1> counts_{};
};

}  // namespace

DeviceFilter::DeviceFilter(const std::string& include, const std::string& exclude) {
  if (!include.empty()) include_.emplace(include, std::regex::ECMAScript);
  if (!exclude.empty()) exclude_.emplace(exclude, std::regex::ECMAScript);
}

bool DeviceFilter::accepts(std::string_view device) const {
  const std::string name(device);
  if (include_ && !std::regex_match(name, *include_)) return false;
  if (exclude_ && std::regex_match(name, *exclude_)) return false;
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

std::unique_ptr<Collector> make_collector(std::string_view name, const Options& options) {
  for (const auto& factory : factories()) {
    if (factory.info.name == name) return factory.make(options);
  }
  return nullptr;
}

Scraper::Scraper(std::vector<std::unique_ptr<Collector>> collectors, ErrorObserver observer)
    : collectors_(std::move(collectors)), observer_(std::move(observer)) {}

std::vector<prometheus::MetricFamily> Scraper::scrape() {
  MetricSet out;
  MetricSet self;
  for (const auto& collector : collectors_) {
    CountingErrors errors(collector->name(), observer_);
    const auto start = std::chrono::steady_clock::now();
    bool success = true;
    try {
      collector->collect(out, errors);
    } catch (const std::exception&) {
      // A collector that fails as a whole costs its own series, never the scrape.
      success = false;
    }
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    const MetricSet::Labels labels{{"collector", std::string(collector->name())}};
    self.add("ibprobe_scrape_collector_duration_seconds",
             "Time one collector took during this scrape.", MetricType::Gauge, labels,
             elapsed.count());
    self.add("ibprobe_scrape_collector_success",
             "1 if the collector ran to completion during this scrape.", MetricType::Gauge, labels,
             success ? 1 : 0);

    std::lock_guard lock(error_counts_mutex_);
    for (std::size_t r = 0; r < errors.counts_.size(); ++r) {
      const auto reason = static_cast<ReadError>(r);
      auto it = std::find_if(error_counts_.begin(), error_counts_.end(), [&](const auto& e) {
        return e.collector == collector->name() && e.reason == reason;
      });
      if (it == error_counts_.end()) {
        if (errors.counts_[r] == 0) continue;
        it = error_counts_.insert(error_counts_.end(),
                                  ErrorCount{std::string(collector->name()), reason, 0});
      }
      it->count += errors.counts_[r];
    }
  }
  {
    std::lock_guard lock(error_counts_mutex_);
    for (const auto& e : error_counts_) {
      self.add("ibprobe_scrape_errors_total",
               "sysfs inputs dropped since start (unreadable, vanished or malformed), by "
               "collector and reason; each costs one series, never the scrape.",
               MetricType::Counter,
               {{"collector", e.collector}, {"reason", std::string(to_string(e.reason))}}, e.count);
    }
  }
  out.merge(std::move(self));
  return std::move(out).take();
}

}  // namespace ibprobe::collectors
