// The fast text writer must produce prometheus-cpp's TextSerializer bytes exactly, except where
// prometheus-cpp departs from the exposition format.
#include "text_format.h"

#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <cmath>
#include <limits>
#include <sstream>

namespace ibprobe::exporter {
namespace {

prometheus::ClientMetric metric(std::vector<prometheus::ClientMetric::Label> labels,
                                prometheus::MetricType type, double value) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  if (type == prometheus::MetricType::Counter) m.counter.value = value;
  if (type == prometheus::MetricType::Gauge) m.gauge.value = value;
  if (type == prometheus::MetricType::Untyped) m.untyped.value = value;
  return m;
}

TEST(TextFormat, SameBytesAsPrometheusCpp) {
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily> families;
  families.push_back(
      {"rdma_port_errors_total",
       "Error-class PortCounters, one series per counter.",
       MetricType::Counter,
       {metric({{"node_description", "MF0;leaf-01:\"MQM8700\"/U1\n\\x"}, {"port", "1"}},
               MetricType::Counter, 65535),
        metric({}, MetricType::Counter, 493827182832.0)}});
  families.push_back(
      {"ibprobe_fabric_scrape_duration_seconds",
       "",
       MetricType::Gauge,
       {metric({{"a", "b"}}, MetricType::Gauge, 0.000720451),
        metric({{"a", "c"}}, MetricType::Gauge, 1.0 / 3),
        metric({{"a", "d"}}, MetricType::Gauge, 1e17),
        metric({{"a", "e"}}, MetricType::Gauge, -2.5e-9),
        metric({{"a", "f"}}, MetricType::Gauge, std::numeric_limits<double>::quiet_NaN()),
        metric({{"a", "g"}}, MetricType::Gauge, std::numeric_limits<double>::infinity()),
        metric({{"a", "h"}}, MetricType::Gauge, -std::numeric_limits<double>::infinity()),
        metric({{"a", "i"}}, MetricType::Gauge, 18446744073709551615.0)}});
  families.push_back(
      {"untyped_thing", "help", MetricType::Untyped, {metric({}, MetricType::Untyped, 42)}});
  families.back().metric[0].timestamp_ms = 1700000000123;
  families.push_back({"empty_family", "no samples", MetricType::Gauge, {}});
  std::ostringstream reference;
  prometheus::TextSerializer().Serialize(reference, families);
  EXPECT_EQ(serialize_text(families), reference.str());
}

// The exposition format escapes \ and newlines in HELP; prometheus-cpp 1.0 writes them raw,
// which would end the comment line early.
TEST(TextFormat, EscapesHelpAsTheFormatSays) {
  const std::vector<prometheus::MetricFamily> families{
      {"f", "two\nlines \\ here", prometheus::MetricType::Gauge, {}}};
  EXPECT_EQ(serialize_text(families), "# HELP f two\\nlines \\\\ here\n# TYPE f gauge\n");
}

}  // namespace
}  // namespace ibprobe::exporter
