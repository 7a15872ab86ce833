// Runs collectors against generated trees and looks up samples by family and exact label set.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ibprobe/collectors.h"
#include "ibprobe/link_health.h"
#include "ibprobe/port_events.h"
#include "sysfs_fixture.h"

namespace ibprobe::testing {

using Families = std::vector<prometheus::MetricFamily>;
using LabelMap = std::map<std::string, std::string>;

// A metrics page without the lines that start with one of `prefixes`: samples that differ from
// one scrape to the next, such as the collectors' durations.
inline std::string without_lines(std::string_view text,
                                 std::initializer_list<std::string_view> prefixes) {
  std::string kept;
  while (!text.empty()) {
    const auto line = text.substr(0, text.find('\n') + 1);
    bool drop = false;
    for (const auto prefix : prefixes) drop = drop || line.starts_with(prefix);
    if (!drop) kept += line;
    text.remove_prefix(line.size());
  }
  return kept;
}

// One instance of every collector the exporter has whose series are a function of the tree:
// link_health writes what its own thread read from this machine's netdevs, whenever that thread
// got to it, so two scrapers of one tree would differ (link_health_test covers it); port_events
// writes what the scrapes before saw of the ports' states (port_events_test covers it).
inline std::vector<std::unique_ptr<collectors::Collector>> every_collector() {
  std::vector<std::unique_ptr<collectors::Collector>> list;
  for (const auto& info : collectors::available_collectors()) {
    if (info.name == collectors::kLinkHealthCollector ||
        info.name == collectors::kPortEventsCollector) {
      continue;
    }
    list.push_back(collectors::make_collector(info.name));
  }
  return list;
}

// A scraper of the tree at `root`, as the exporter builds one: every collector, or only `name`.
inline std::unique_ptr<collectors::Scraper> scraper_over(const std::filesystem::path& root,
                                                         std::string_view name = {}) {
  collectors::Options options;
  options.sysfs_root = root;
  std::vector<std::unique_ptr<collectors::Collector>> list;
  if (name.empty()) {
    list = every_collector();
  } else {
    list.push_back(collectors::make_collector(std::string(name)));
  }
  return std::make_unique<collectors::Scraper>(options, std::move(list));
}

struct RecordedError {
  collectors::ReadError reason;
  std::filesystem::path path;
};

struct Collected {
  Families families;
  std::vector<RecordedError> errors;
};

// Scrapes with one collector instance through the real Scraper, again and again as the exporter
// does; its own ibprobe_* families are left out so tests see only what the collector produced.
class Scrapes {
 public:
  Scrapes(collectors::Options options, std::unique_ptr<collectors::Collector> instance) {
    std::vector<std::unique_ptr<collectors::Collector>> list;
    list.push_back(std::move(instance));
    scraper_ = std::make_unique<collectors::Scraper>(
        std::move(options), std::move(list),
        [this](std::string_view, collectors::ReadError reason, const std::filesystem::path& path) {
          errors_.push_back({reason, path});
        });
  }
  // The observer holds this object's address.
  Scrapes(const Scrapes&) = delete;
  Scrapes& operator=(const Scrapes&) = delete;

  Collected scrape() {
    errors_.clear();
    Collected result;
    for (auto& family : scraper_->scrape()) {
      if (!family.name.starts_with("ibprobe_")) result.families.push_back(std::move(family));
    }
    result.errors = std::move(errors_);
    return result;
  }

 private:
  std::vector<RecordedError> errors_;
  std::unique_ptr<collectors::Scraper> scraper_;
};

// One scrape.
inline Collected collect_with(collectors::Options options,
                              std::unique_ptr<collectors::Collector> instance) {
  return Scrapes(std::move(options), std::move(instance)).scrape();
}

// The same with a collector of the registry, by name.
inline Collected collect(const std::string& collector, const std::filesystem::path& sysfs_root,
                         collectors::DeviceFilter filter = {}) {
  collectors::Options options;
  options.sysfs_root = sysfs_root;
  options.devices = std::move(filter);
  auto instance = collectors::make_collector(collector);
  EXPECT_NE(instance, nullptr) << collector;
  return collect_with(std::move(options), std::move(instance));
}

// One scrape of a sysfs tree that holds `device` alone.
inline Collected collect_from_device(const std::string& collector, const DeviceShape& device) {
  SysfsTree tree;
  tree.add(device);
  return collect(collector, tree.root());
}

inline const prometheus::MetricFamily* find_family(const Families& families,
                                                   const std::string& name) {
  for (const auto& family : families) {
    if (family.name == name) return &family;
  }
  return nullptr;
}

inline LabelMap labels_of(const prometheus::ClientMetric& metric) {
  LabelMap labels;
  for (const auto& label : metric.label) labels[label.name] = label.value;
  return labels;
}

inline double value_of(const prometheus::MetricFamily& family,
                       const prometheus::ClientMetric& metric) {
  switch (family.type) {
    case prometheus::MetricType::Counter:
      return metric.counter.value;
    case prometheus::MetricType::Gauge:
      return metric.gauge.value;
    default:
      return metric.untyped.value;
  }
}

// The value of the one sample of `name` whose labels are exactly `labels`; nullopt when there is
// none. A duplicate series fails the test.
inline std::optional<double> sample(const Families& families, const std::string& name,
                                    const LabelMap& labels) {
  const auto* family = find_family(families, name);
  if (!family) return std::nullopt;
  std::optional<double> found;
  for (const auto& metric : family->metric) {
    if (labels_of(metric) != labels) continue;
    EXPECT_FALSE(found.has_value()) << "duplicate series " << name;
    found = value_of(*family, metric);
  }
  return found;
}

inline std::size_t series_count(const Families& families, const std::string& name) {
  const auto* family = find_family(families, name);
  return family ? family->metric.size() : 0;
}

// Collector options that read the sysfs tree at `root` with `parallelism` device workers.
inline collectors::Options options_for(const std::filesystem::path& root, int parallelism) {
  collectors::Options options;
  options.sysfs_root = root;
  options.parallelism = parallelism;
  return options;
}

}  // namespace ibprobe::testing
