// The metric set's text, the exporter's one writer of the exposition format, against
// prometheus-cpp's TextSerializer, the reference it replaces: byte-identical on every fixture
// shape and on values and labels chosen to be awkward, histograms included.
#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
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

// The set's text is prometheus-cpp's text of `families`, and the families take() hands back are
// written the same.
void expect_writes_as_prometheus_cpp(const collectors::MetricSet& set,
                                     const std::vector<MetricFamily>& families) {
  std::string text;
  set.append_text(text);
  EXPECT_EQ(text, reference(families));
  auto copy = set;
  EXPECT_EQ(reference(std::move(copy).take()), reference(families));
}

// A page without the samples that differ from one scrape to the next: the collectors' durations,
// and the errors counted since start.
std::string without_changing(std::string_view text) {
  return without_lines(
      text, {"ibprobe_scrape_collector_duration_seconds{", "ibprobe_scrape_errors_total{"});
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
    collectors::Scraper scraper(std::move(options), every_collector());
    const auto families = scraper.scrape();
    ASSERT_GT(families.size(), 5u) << name;
    const auto set = scraper.scrape_set();
    std::string text;
    set.append_text(text);
    auto copy = set;
    EXPECT_EQ(text, reference(std::move(copy).take())) << name;
    // The metrics page: the scrape's sets written one after another, never merged.
    std::string page;
    scraper.append_text(page);
    EXPECT_EQ(without_changing(page), without_changing(reference(scraper.scrape()))) << name;
  }
}

// Samples added to a metric set and, beside it, to families built by hand: the set's text and its
// families must both be what prometheus-cpp writes for the hand-built ones. Families come back in
// first-seen order with their samples grouped, whatever order they were added in and merged.
TEST(TextFormat, MetricSetWritesWhatPrometheusCppWrites) {
  using Labels = collectors::MetricSet::Labels;
  std::vector<MetricFamily> expected;
  auto expect = [&](std::string_view name, std::string_view help, MetricType type, Labels labels,
                    double value) {
    auto it = std::find_if(expected.begin(), expected.end(),
                           [&](const MetricFamily& f) { return f.name == name; });
    if (it == expected.end()) {
      expected.push_back(MetricFamily{std::string(name), std::string(help), type, {}});
      it = expected.end() - 1;
    }
    ClientMetric m;
    for (auto& [n, v] : labels) m.label.push_back({n, v});
    if (type == MetricType::Counter) m.counter.value = value;
    if (type == MetricType::Gauge) m.gauge.value = value;
    if (type == MetricType::Untyped) m.untyped.value = value;
    it->metric.push_back(m);
  };
  const Labels port = {{"node_guid", "0002:c903:0010:0001"},
                       {"node_description", "MF0;leaf-01:MQM8700/U1 \\ \"quoted\"\nline"},
                       {"port", "12"}};
  const Labels other = {{"device", "mlx5_0"}, {"port", ""}};
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();

  collectors::MetricSet first;
  collectors::MetricSet second;
  collectors::MetricSet third;
  // `first` gets a port's series in turn, twice over, as the fabric adds them.
  for (int round = 0; round < 2; ++round) {
    for (const auto& labels : {port, other, port}) {
      first.add("a_total", "help a", MetricType::Counter, labels, round + 0.5);
      expect("a_total", "help a", MetricType::Counter, labels, round + 0.5);
      first.add("b", "help \\ b", MetricType::Gauge, labels,
                {{"counter", "symbol\"error\\"}, {"class", "x"}}, nan);
      auto with = labels;
      with.emplace_back("counter", "symbol\"error\\");
      with.emplace_back("class", "x");
      expect("b", "help \\ b", MetricType::Gauge, with, nan);
      first.add("c", "", MetricType::Untyped, {}, round ? inf : -inf);
      expect("c", "", MetricType::Untyped, {}, round ? inf : -inf);
      first.add("d", "only extra", MetricType::Gauge, {}, {{"kind", "width"}}, 1e-300);
      expect("d", "only extra", MetricType::Gauge, {{"kind", "width"}}, 1e-300);
    }
  }
  // `second` repeats a family of `first` and adds one of its own; `third` is merged empty.
  second.add("e", "help e", MetricType::Gauge, other, 123456789012345678.0);
  second.add("b", "help \\ b", MetricType::Gauge, port, {{"counter", "x"}}, -0.0);
  collectors::MetricSet all;
  all.merge(std::move(third));
  all.merge(std::move(first));
  all.merge(std::move(second));
  auto with = port;
  with.emplace_back("counter", "x");
  expect("b", "help \\ b", MetricType::Gauge, with, -0.0);
  expect("e", "help e", MetricType::Gauge, other, 123456789012345678.0);

  std::string text = "# already there\n";
  all.append_text(text);
  EXPECT_EQ(text, "# already there\n" + reference(expected));
  // The same sets written as one page without merging them: `second`'s "b" comes after its
  // own "e", and joins the "b" of `first`.
  const collectors::MetricSet* const parts[] = {&third, &first, &second};
  std::string unmerged = "# already there\n";
  collectors::MetricSet::append_text(parts, unmerged);
  EXPECT_EQ(unmerged, "# already there\n" + reference(expected));
  EXPECT_EQ(reference(std::move(all).take()), reference(expected));
}

ClientMetric metric(std::vector<prometheus::ClientMetric::Label> labels) {
  ClientMetric m;
  m.label = std::move(labels);
  return m;
}

// The writer checks label values for characters to escape eight bytes at a time: each of them at
// every position of values longer and shorter than a word.
TEST(TextFormat, EscapesLabelCharactersAtEveryPosition) {
  MetricFamily family{"escaped", "", MetricType::Gauge, {}};
  collectors::MetricSet set;
  auto add = [&](const std::string& value) {
    family.metric.push_back(metric({{"v", value}}));
    set.add("escaped", "", MetricType::Gauge, {{"v", value}}, 0);
  };
  for (const char special : {'\\', '"', '\n'}) {
    for (std::size_t length = 1; length <= 25; ++length) {
      for (std::size_t at = 0; at < length; ++at) {
        std::string value(length, 'x');
        value[at] = special;
        add(value);
      }
    }
  }
  // Bytes that differ from the specials in one bit, which a wrong word test would take for them.
  add(std::string("\x5d\x23\x0b\xdc\xa2\x8a]#\x0bzzzzzzzz"));
  std::string text;
  set.append_text(text);
  EXPECT_EQ(text, reference({family}));
}

// Labels rendered once with render_text() and added with add_rendered(), as hw_counters adds
// its counter and class labels, read as prometheus-cpp writes them, after a port's labels or none.
TEST(TextFormat, PreRenderedLabelsWriteWhatPrometheusCppWrites) {
  const collectors::MetricSet::Labels port = {{"device", "mlx5_0"}, {"port", "1"}};
  const std::string odd = "odd\"na\\me\n";
  const auto rendered = collectors::MetricSet::render_text({{"counter", odd}, {"class", ""}});
  collectors::MetricSet set;
  set.add_rendered("x_total", "help", MetricType::Counter, port, rendered, 7);
  set.add_rendered("x_total", "help", MetricType::Counter, {}, rendered, 8);
  auto first = metric({{"device", "mlx5_0"}, {"port", "1"}, {"counter", odd}, {"class", ""}});
  first.counter.value = 7;
  auto second = metric({{"counter", odd}, {"class", ""}});
  second.counter.value = 8;
  std::string text;
  set.append_text(text);
  EXPECT_EQ(text,
            reference({MetricFamily{"x_total", "help", MetricType::Counter, {first, second}}}));
}

// A port's identity rendered once (as a port renders it when it is opened) and a family looked up
// once (as a hw_counters directory adds its counters): samples added that way, between samples
// added by name to the same and to another family, read as prometheus-cpp writes them.
TEST(TextFormat, RenderedIdentityAndFamilyHandleWriteWhatPrometheusCppWrites) {
  const std::string odd = "mlx\"5\\_0\n";
  const auto identity = collectors::MetricSet::render_text({{"device", odd}, {"port", "2"}});
  const auto counter = collectors::MetricSet::render_text({{"counter", "c"}});
  collectors::MetricSet set;
  set.add("other", "other help", MetricType::Gauge, {{"device", odd}}, 1);
  const auto handle = set.family_handle("x_total", "help", MetricType::Counter);
  set.add_rendered(handle, set.rendered_label_set(identity), counter, 2);
  set.add("other", "other help", MetricType::Gauge, {{"device", "b"}}, 3);
  set.add_rendered("x_total", "help", MetricType::Counter, {{"device", "b"}}, counter, 4);
  set.add_rendered(handle, set.rendered_label_set(identity), counter, 5);

  auto other_a = metric({{"device", odd}});
  other_a.gauge.value = 1;
  auto other_b = metric({{"device", "b"}});
  other_b.gauge.value = 3;
  auto x_a = metric({{"device", odd}, {"port", "2"}, {"counter", "c"}});
  x_a.counter.value = 2;
  auto x_b = metric({{"device", "b"}, {"counter", "c"}});
  x_b.counter.value = 4;
  auto x_c = x_a;
  x_c.counter.value = 5;
  std::string text;
  set.append_text(text);
  EXPECT_EQ(text,
            reference({MetricFamily{"other", "other help", MetricType::Gauge, {other_a, other_b}},
                       MetricFamily{"x_total", "help", MetricType::Counter, {x_a, x_b, x_c}}}));
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
                                1e16 - 2,
                                9007199254740993.0,
                                1e15 + 1,
                                -1e15,
                                4294967296.0,
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
    // Whole numbers on both sides of 10^16, where %.16g turns to exponents.
    values.push_back(static_cast<double>(random() >> (i % 64)));
    values.push_back(-static_cast<double>(random() >> (i % 64)));
  }
  MetricFamily gauge{"awkward_gauge", "help with \\ and \"quotes\"", MetricType::Gauge, {}};
  MetricFamily counter{"awkward_total", "", MetricType::Counter, {}};
  MetricFamily untyped{"awkward_untyped", "untyped", MetricType::Untyped, {}};
  collectors::MetricSet set;
  for (const double value : values) {
    auto g = metric({{"a", "back\\slash \"quoted\"\nnewline"}, {"b", ""}});
    g.gauge.value = value;
    gauge.metric.push_back(g);
    set.add(gauge.name, gauge.help, MetricType::Gauge,
            {{"a", "back\\slash \"quoted\"\nnewline"}, {"b", ""}}, value);
    auto c = metric({});
    c.counter.value = value;
    counter.metric.push_back(c);
    set.add(counter.name, counter.help, MetricType::Counter, {}, value);
    auto u = metric({{"only", "one"}});
    u.untyped.value = value;
    untyped.metric.push_back(u);
    set.add(untyped.name, untyped.help, MetricType::Untyped, {{"only", "one"}}, value);
  }
  expect_writes_as_prometheus_cpp(set, {gauge, counter, untyped});
}

// Histograms: the open form (prometheus-cpp adds the +Inf bucket) and the closed one (its last
// bound is +Inf), with awkward bounds and sums, beside a gauge family; and a declared family
// with no sample, written as prometheus-cpp writes a family without metrics. take() gives the
// families back.
TEST(TextFormat, HistogramsAndDeclaredFamiliesWriteWhatPrometheusCppWrites) {
  MetricFamily histogram{"awkward_histogram", "a histogram", MetricType::Histogram, {}};
  auto open = metric({{"x", "quo\"te"}});
  open.histogram.sample_count = 42;
  open.histogram.sample_sum = 0.1 + 0.2;
  open.histogram.bucket = {{3, 5e-6}, {20, 1}, {42, 2.5}};
  histogram.metric.push_back(open);
  auto closed = metric({});
  closed.histogram.sample_count = 2;
  closed.histogram.sample_sum = 1e300;
  closed.histogram.bucket = {{1, 1}, {2, std::numeric_limits<double>::infinity()}};
  histogram.metric.push_back(closed);
  MetricFamily declared{"declared_total", "nothing yet", MetricType::Counter, {}};
  auto g = metric({{"x", "y"}});
  g.gauge.value = 3;
  MetricFamily gauge{"after", "after help", MetricType::Gauge, {g}};

  collectors::MetricSet set;
  const std::vector<double> open_bounds = {5e-6, 1, 2.5};
  const std::vector<std::uint64_t> open_counts = {3, 20, 42};
  set.add_histogram("awkward_histogram", "a histogram", {{"x", "quo\"te"}}, open_bounds,
                    open_counts, 42, 0.1 + 0.2);
  set.declare("declared_total", "nothing yet", MetricType::Counter);
  set.add("after", "after help", MetricType::Gauge, {{"x", "y"}}, 3);
  const std::vector<double> closed_bounds = {1};
  const std::vector<std::uint64_t> closed_counts = {1};
  set.add_histogram("awkward_histogram", "a histogram", {}, closed_bounds, closed_counts, 2, 1e300);

  const std::vector<MetricFamily> expected = {histogram, declared, gauge};
  expect_writes_as_prometheus_cpp(set, expected);
  // Merged into another set, and written beside one: the same.
  collectors::MetricSet merged;
  merged.merge(set);
  std::string text;
  merged.append_text(text);
  EXPECT_EQ(text, reference(expected));
  // clear() forgets the declaration with the samples.
  set.clear();
  text.clear();
  set.append_text(text);
  EXPECT_EQ(text, "");
}

}  // namespace
}  // namespace ibprobe::testing
