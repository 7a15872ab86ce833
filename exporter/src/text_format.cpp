#include "text_format.h"

#include <charconv>
#include <limits>
#include <string_view>

#include "ibprobe/exposition.h"

namespace ibprobe::exporter {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

using collectors::exposition::append_escaped;
using collectors::exposition::append_family_head;
using collectors::exposition::append_value;

template <class Integer>
void append_integer(std::string& out, Integer value) {
  char buffer[24];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  out.append(buffer, result.ptr);
}

template <class ExtraValue>
void append_head(std::string& out, const MetricFamily& family, const ClientMetric& metric,
                 std::string_view suffix, std::string_view extra_name,
                 const ExtraValue& extra_value) {
  out += family.name;
  out += suffix;
  if (!metric.label.empty() || !extra_name.empty()) {
    out += '{';
    std::string_view separator;
    for (const auto& label : metric.label) {
      out += separator;
      out += label.name;
      out += "=\"";
      append_escaped(out, label.value);
      out += '"';
      separator = ",";
    }
    if (!extra_name.empty()) {
      out += separator;
      out += extra_name;
      out += "=\"";
      if constexpr (std::is_same_v<ExtraValue, double>) {
        append_value(out, extra_value);
      } else {
        append_escaped(out, extra_value);
      }
      out += '"';
    }
    out += '}';
  }
  out += ' ';
}

void append_head(std::string& out, const MetricFamily& family, const ClientMetric& metric,
                 std::string_view suffix = {}) {
  append_head(out, family, metric, suffix, {}, std::string_view());
}

void append_tail(std::string& out, const ClientMetric& metric) {
  if (metric.timestamp_ms != 0) {
    out += ' ';
    append_integer(out, metric.timestamp_ms);
  }
  out += '\n';
}

void append_sample(std::string& out, const MetricFamily& family, const ClientMetric& metric,
                   double value) {
  append_head(out, family, metric);
  append_value(out, value);
  append_tail(out, metric);
}

void append_summary(std::string& out, const MetricFamily& family, const ClientMetric& metric) {
  const auto& summary = metric.summary;
  append_head(out, family, metric, "_count");
  append_integer(out, summary.sample_count);
  append_tail(out, metric);
  append_head(out, family, metric, "_sum");
  append_value(out, summary.sample_sum);
  append_tail(out, metric);
  for (const auto& quantile : summary.quantile) {
    append_head(out, family, metric, {}, "quantile", quantile.quantile);
    append_value(out, quantile.value);
    append_tail(out, metric);
  }
}

void append_histogram(std::string& out, const MetricFamily& family, const ClientMetric& metric) {
  const auto& histogram = metric.histogram;
  append_head(out, family, metric, "_count");
  append_integer(out, histogram.sample_count);
  append_tail(out, metric);
  append_head(out, family, metric, "_sum");
  append_value(out, histogram.sample_sum);
  append_tail(out, metric);
  double last = -std::numeric_limits<double>::infinity();
  for (const auto& bucket : histogram.bucket) {
    append_head(out, family, metric, "_bucket", "le", bucket.upper_bound);
    last = bucket.upper_bound;
    append_integer(out, bucket.cumulative_count);
    append_tail(out, metric);
  }
  if (last != std::numeric_limits<double>::infinity()) {
    append_head(out, family, metric, "_bucket", "le", std::string_view("+Inf"));
    append_integer(out, histogram.sample_count);
    append_tail(out, metric);
  }
}

void append_family(std::string& out, const MetricFamily& family) {
  append_family_head(out, family.name, family.help, family.type);
  for (const auto& metric : family.metric) {
    switch (family.type) {
      case MetricType::Counter:
        append_sample(out, family, metric, metric.counter.value);
        break;
      case MetricType::Gauge:
        append_sample(out, family, metric, metric.gauge.value);
        break;
      case MetricType::Untyped:
        append_sample(out, family, metric, metric.untyped.value);
        break;
      case MetricType::Summary:
        append_summary(out, family, metric);
        break;
      case MetricType::Histogram:
        append_histogram(out, family, metric);
        break;
    }
  }
}

}  // namespace

void append_text_format(std::string& out, const std::vector<MetricFamily>& families) {
  for (const auto& family : families) append_family(out, family);
}

std::string text_format(const std::vector<MetricFamily>& families) {
  std::string out;
  // About 150 bytes a sample at the label counts of this exporter's families.
  std::size_t samples = 0;
  for (const auto& family : families) samples += family.metric.size();
  out.reserve(samples * 160 + families.size() * 200);
  append_text_format(out, families);
  return out;
}

}  // namespace ibprobe::exporter
