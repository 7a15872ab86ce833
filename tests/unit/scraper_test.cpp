#include <gtest/gtest.h>

#include "collect_helpers.h"
#include "devices.h"
#include "sysfs_fixture.h"

namespace ibprobe::testing {
namespace {

using collectors::Collector;
using collectors::Device;
using collectors::ErrorSink;
using collectors::MetricSet;

std::vector<std::unique_ptr<Collector>> all_collectors(const std::filesystem::path& root) {
  collectors::Options options;
  options.sysfs_root = root;
  std::vector<std::unique_ptr<Collector>> result;
  for (const auto& info : collectors::available_collectors()) {
    result.push_back(collectors::make_collector(info.name, options));
  }
  return result;
}

TEST(Scraper, ReportsCollectorSuccessAndDuration) {
  SysfsTree tree;
  tree.add(mlx5_ib_device("mlx5_0", 2, 0));
  collectors::Scraper scraper(all_collectors(tree.root()));
  const auto families = scraper.scrape();
  for (const auto& info : collectors::available_collectors()) {
    const LabelMap labels{{"collector", std::string(info.name)}};
    EXPECT_EQ(sample(families, "ibprobe_scrape_collector_success", labels), 1) << info.name;
    const auto duration = sample(families, "ibprobe_scrape_collector_duration_seconds", labels);
    ASSERT_TRUE(duration);
    EXPECT_GE(*duration, 0);
  }
  EXPECT_EQ(series_count(families, "ibprobe_scrape_errors_total"), 0u);
}

TEST(Scraper, CountsDroppedInputsAcrossScrapes) {
  SysfsTree tree;
  tree.add(mlx5_ib_device("mlx5_0", 1, 0));
  const auto counters = tree.port_dir("mlx5_0", 1) / "counters";
  tree.write((counters / "symbol_error").lexically_relative(tree.root()), "N/A (no PMA)");
  tree.write((counters / "link_downed").lexically_relative(tree.root()), "N/A (no PMA)");
  tree.write((counters / "port_rcv_errors").lexically_relative(tree.root()), "x");
  std::vector<std::string> observed;
  collectors::Scraper scraper(
      all_collectors(tree.root()), [&](std::string_view collector, collectors::ReadError reason,
                                       const std::filesystem::path& path) {
        observed.push_back(std::string(collector) + " " + std::string(to_string(reason)) + " " +
                           path.filename().string());
      });
  scraper.scrape();
  const auto families = scraper.scrape();
  const LabelMap no_pma{{"collector", "port_counters"}, {"reason", "no_pma"}};
  const LabelMap malformed{{"collector", "port_counters"}, {"reason", "malformed"}};
  EXPECT_EQ(sample(families, "ibprobe_scrape_errors_total", no_pma), 4);
  EXPECT_EQ(sample(families, "ibprobe_scrape_errors_total", malformed), 2);
  EXPECT_EQ(series_count(families, "ibprobe_scrape_errors_total"), 2u);
  EXPECT_EQ(sample(families, "ibprobe_scrape_collector_success", {{"collector", "port_counters"}}),
            1);
  EXPECT_EQ(observed.size(), 6u);
  EXPECT_NE(std::find(observed.begin(), observed.end(), "port_counters no_pma symbol_error"),
            observed.end());
}

class ThrowingCollector final : public Collector {
 public:
  std::string_view name() const override { return "throwing"; }
  void collect(MetricSet& out, ErrorSink&) const override {
    out.add("partial_metric", "never exported", prometheus::MetricType::Gauge, {}, 1);
    throw std::runtime_error("boom");
  }
};

TEST(Scraper, FailingCollectorCostsOnlyItself) {
  SysfsTree tree;
  tree.add(mlx5_ib_device("mlx5_0", 1, 0));
  auto collectors = all_collectors(tree.root());
  collectors.insert(collectors.begin(), std::make_unique<ThrowingCollector>());
  collectors::Scraper scraper(std::move(collectors));
  const auto families = scraper.scrape();
  EXPECT_EQ(sample(families, "ibprobe_scrape_collector_success", {{"collector", "throwing"}}), 0);
  EXPECT_EQ(sample(families, "ibprobe_scrape_collector_success", {{"collector", "port_counters"}}),
            1);
  EXPECT_TRUE(sample(families, "rdma_port_data_transmitted_bytes_total",
                     {{"device", "mlx5_0"}, {"port", "1"}}));
}

// A device unplugged while its files are being read loses its partial series; the others stay.
TEST(ForEachDevice, VanishedDeviceCostsOnlyThatDevice) {
  SysfsTree tree;
  tree.add(mlx5_ib_device("mlx5_0", 1, 0));
  tree.add(mlx5_ib_device("mlx5_1", 1, 1));
  tree.add(mlx5_ib_device("mlx5_2", 1, 2));
  collectors::Options options;
  options.sysfs_root = tree.root();
  MetricSet out;
  RecordingErrors errors;
  collectors::for_each_device(
      options, out, errors, [&](const Device& device, MetricSet& device_out, ErrorSink&) {
        device_out.add("seen", "devices seen", prometheus::MetricType::Gauge,
                       {{"device", device.name}}, 1);
        if (device.name == "mlx5_1") {
          std::filesystem::remove(device.dir);  // the class symlink
        }
      });
  const auto families = std::move(out).take();
  EXPECT_EQ(sample(families, "seen", {{"device", "mlx5_0"}}), 1);
  EXPECT_FALSE(sample(families, "seen", {{"device", "mlx5_1"}}));
  EXPECT_EQ(sample(families, "seen", {{"device", "mlx5_2"}}), 1);
  ASSERT_EQ(errors.errors.size(), 1u);
  EXPECT_EQ(errors.errors[0].reason, collectors::ReadError::kNotFound);
}

TEST(ForEachDevice, VanishingDuringRealCollection) {
  SysfsTree tree;
  tree.add(mlx5_ib_device("mlx5_0", 1, 0));
  // A device whose class entry points at nothing any more: everything under it reads ENOENT.
  std::filesystem::create_directory_symlink(tree.root() / "devices" / "gone",
                                            tree.device_dir("mlx5_9"));
  const auto result = collect("port_counters", tree.root());
  EXPECT_TRUE(sample(result.families, "rdma_port_data_transmitted_bytes_total",
                     {{"device", "mlx5_0"}, {"port", "1"}}));
  ASSERT_EQ(result.errors.size(), 1u);
  EXPECT_EQ(result.errors[0].path, tree.device_dir("mlx5_9"));
}

TEST(MetricSet, MergeKeepsFamiliesGrouped) {
  MetricSet a;
  a.add("x", "", prometheus::MetricType::Gauge, {{"d", "1"}}, 1);
  a.add("y", "", prometheus::MetricType::Gauge, {{"d", "1"}}, 2);
  MetricSet b;
  b.add("y", "", prometheus::MetricType::Gauge, {{"d", "2"}}, 3);
  b.add("x", "", prometheus::MetricType::Gauge, {{"d", "2"}}, 4);
  a.merge(std::move(b));
  const auto families = std::move(a).take();
  ASSERT_EQ(families.size(), 2u);
  EXPECT_EQ(families[0].name, "x");
  EXPECT_EQ(families[0].metric.size(), 2u);
  EXPECT_EQ(families[1].metric.size(), 2u);
}

}  // namespace
}  // namespace ibprobe::testing
