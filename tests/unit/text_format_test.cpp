// The exporter's text format writer against prometheus-cpp's TextSerializer, the reference it
// replaces: byte-identical on every fixture shape and on values and labels chosen to be awkward.
#include "text_format.h"

#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <cmath>
#include <limits>
#include <random>
#include <sstream>

#include "collect_helpers.h"
#include "sysfs_fixture.h"

namespace ibprobe::testing {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

std::string reference(const std::vector<MetricFamily>& families) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

std::vector<std::unique_ptr<collectors::Collector>> all_collectors() {
  std::vector<std::unique_ptr<collectors::Collector>> result;
  for (const auto& info : collectors::available_collectors()) {
    result.push_back(collectors::make_collector(info.name));
  }
  return result;
}

// Every fixture shape, alone and all together, scraped by every collector.
TEST(TextFormat, MatchesPrometheusCppOnEveryFixture) {
  const std::vector<std::pair<std::string, std::vector<DeviceShape>>> trees = {
      {"mlx5_ib", {mlx5_ib_device("mlx5_0", 2, 1)}},
      {"mlx5_roce", {mlx5_roce_device("mlx5_0", "ens1f0", 2)}},
      {"hfi1", {hfi1_device("hfi1_0", 3)}},
      {"rxe", {rxe_device("rxe0", "eth0", 4)}},
      {"basic_saturated", {basic_saturated_device("mthca0", 5)}},
      {"all",
       {mlx5_ib_device("mlx5_0", 2, 1), mlx5_roce_device("mlx5_1", "ens1f0", 2),
        hfi1_device("hfi1_0", 3), rxe_device("rxe0", "eth0", 4),
        basic_saturated_device("mthca0", 5)}},
  };
  for (const auto& [name, devices] : trees) {
    SysfsTree tree;
    for (const auto& device : devices) tree.add(device);
    collectors::Options options;
    options.sysfs_root = tree.root();
    collectors::Scraper scraper(std::move(options), all_collectors());
    const auto families = scraper.scrape();
    ASSERT_GT(families.size(), 5u) << name;
    EXPECT_EQ(exporter::text_format(families), reference(families)) << name;
  }
}

ClientMetric metric(std::vector<prometheus::ClientMetric::Label> labels) {
  ClientMetric m;
  m.label = std::move(labels);
  return m;
}

TEST(TextFormat, MatchesPrometheusCppOnAwkwardValues) {
  std::vector<double> values = {0,
                                -0.0,
                                1,
                                -1,
                                0.1,
                                1.0 / 3,
                                1e15,
                                1e16,
                                123456789012345678.0,
                                18446744073709551615.0 * 4,
                                4294967295.0 * 4,
                                25e9,
                                1.5e-7,
                                0.000123,
                                5e-324,
                                std::numeric_limits<double>::max(),
                                std::numeric_limits<double>::min(),
                                std::numeric_limits<double>::quiet_NaN(),
                                std::numeric_limits<double>::infinity(),
                                -std::numeric_limits<double>::infinity()};
  std::mt19937_64 random(17);
  std::uniform_real_distribution<double> exponent(-320, 308);
  for (int i = 0; i < 1000; ++i) {
    values.push_back(std::pow(10.0, exponent(random)) * (i % 2 ? 1 : -1));
    values.push_back(static_cast<double>(random()));
    values.push_back(static_cast<double>(random() % 100000) / 1000);
  }
  MetricFamily gauge{"awkward_gauge", "help with \\ and \"quotes\"", MetricType::Gauge, {}};
  MetricFamily counter{"awkward_total", "", MetricType::Counter, {}};
  MetricFamily untyped{"awkward_untyped", "untyped", MetricType::Untyped, {}};
  for (const double value : values) {
    auto g = metric({{"a", "back\\slash \"quoted\"\nnewline"}, {"b", ""}});
    g.gauge.value = value;
    gauge.metric.push_back(g);
    auto c = metric({});
    c.counter.value = value;
    c.timestamp_ms = static_cast<std::int64_t>(random() >> 20);
    counter.metric.push_back(c);
    auto u = metric({{"only", "one"}});
    u.untyped.value = value;
    untyped.metric.push_back(u);
  }
  MetricFamily summary{"awkward_summary", "a summary", MetricType::Summary, {}};
  auto s = metric({{"x", "y"}});
  s.summary.sample_count = 12345678901234ULL;
  s.summary.sample_sum = 0.1 + 0.2;
  s.summary.quantile = {{0.5, 1.25}, {0.99, 1e-9}, {0.999, std::nan("")}};
  summary.metric.push_back(s);
  MetricFamily histogram{"awkward_histogram", "a histogram", MetricType::Histogram, {}};
  auto h = metric({});
  h.histogram.sample_count = 42;
  h.histogram.sample_sum = 17.5;
  h.histogram.bucket = {{3, 0.005}, {20, 1}, {42, 2.5}};
  histogram.metric.push_back(h);
  auto closed = metric({{"le_owner", "closed"}});
  closed.histogram.sample_count = 2;
  closed.histogram.bucket = {{1, 1}, {2, std::numeric_limits<double>::infinity()}};
  histogram.metric.push_back(closed);

  const std::vector<MetricFamily> families = {gauge, counter, untyped, summary, histogram};
  EXPECT_EQ(exporter::text_format(families), reference(families));
}

}  // namespace
}  // namespace ibprobe::testing
