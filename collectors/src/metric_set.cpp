#include <algorithm>

#include "ibprobe/collectors.h"

namespace ibprobe::collectors {

prometheus::MetricFamily& MetricSet::family(std::string_view name, std::string_view help,
                                            prometheus::MetricType type) {
  // Collectors add the samples of one family in a row: the last family is the likely one.
  if (!families_.empty() && families_.back().name == name) return families_.back();
  auto it = std::find_if(families_.begin(), families_.end(),
                         [&](const prometheus::MetricFamily& f) { return f.name == name; });
  if (it != families_.end()) return *it;
  families_.push_back(prometheus::MetricFamily{std::string(name), std::string(help), type, {}});
  return families_.back();
}

void MetricSet::add(std::string_view family_name, std::string_view help,
                    prometheus::MetricType type, const Labels& labels, double value) {
  auto& f = family(family_name, help, type);
  prometheus::ClientMetric metric;
  metric.label.reserve(labels.size());
  for (const auto& [name, label_value] : labels) metric.label.push_back({name, label_value});
  switch (type) {
    case prometheus::MetricType::Counter:
      metric.counter.value = value;
      break;
    case prometheus::MetricType::Gauge:
      metric.gauge.value = value;
      break;
    default:
      metric.untyped.value = value;
      break;
  }
  f.metric.push_back(std::move(metric));
}

void MetricSet::merge(MetricSet&& other) {
  for (auto& incoming : other.families_) {
    auto& f = family(incoming.name, incoming.help, incoming.type);
    std::move(incoming.metric.begin(), incoming.metric.end(), std::back_inserter(f.metric));
  }
  other.families_.clear();
}

std::vector<prometheus::MetricFamily> MetricSet::take() && {
  return std::move(families_);
}

}  // namespace ibprobe::collectors
