#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "collect_helpers.h"
#include "devices.h"
#include "sysfs_fixture.h"

namespace ibprobe::testing {
namespace {

using collectors::Collector;
using collectors::Device;
using collectors::ErrorSink;
using collectors::MetricSet;

TEST(Scraper, ReportsCollectorSuccessAndDuration) {
  SysfsTree tree;
  tree.add(mlx5_ib_device("mlx5_0", 2, 0));
  auto list = every_collector();
  std::vector<std::string> names;
  for (const auto& collector : list) names.emplace_back(collector->name());
  collectors::Scraper scraper(options_for(tree.root(), 2), std::move(list));
  const auto families = scraper.scrape();
  for (const auto& name : names) {
    const LabelMap labels{{"collector", name}};
    EXPECT_EQ(sample(families, "ibprobe_scrape_collector_success", labels), 1) << name;
    const auto duration = sample(families, "ibprobe_scrape_collector_duration_seconds", labels);
    ASSERT_TRUE(duration);
    EXPECT_GE(*duration, 0);
  }
  EXPECT_EQ(series_count(families, "ibprobe_scrape_errors_total"), 0u);
}

// The same tree gives the same exposition whatever the number of threads: order is by collector,
// then device, never by which thread finished first.
TEST(Scraper, ParallelScrapeMatchesSequential) {
  SysfsTree tree;
  for (int i = 0; i < 6; ++i) tree.add(mlx5_ib_device("mlx5_" + std::to_string(i), 2, i));
  tree.add(rxe_device("rxe0", "eth0", 9));
  collectors::Scraper sequential(options_for(tree.root(), 1), every_collector());
  auto always_parallel = options_for(tree.root(), 4);
  always_parallel.parallel_collection_from = {};
  collectors::Scraper parallel(always_parallel, every_collector());
  auto strip_self = [](std::vector<prometheus::MetricFamily> families) {
    std::erase_if(families, [](const auto& f) { return f.name.starts_with("ibprobe_"); });
    return families;
  };
  const auto expected = strip_self(sequential.scrape());
  for (int round = 0; round < 5; ++round) {
    const auto actual = strip_self(parallel.scrape());
    ASSERT_EQ(actual.size(), expected.size());
    for (std::size_t f = 0; f < expected.size(); ++f) {
      ASSERT_EQ(actual[f].name, expected[f].name);
      ASSERT_EQ(actual[f].metric.size(), expected[f].metric.size()) << expected[f].name;
      for (std::size_t m = 0; m < expected[f].metric.size(); ++m) {
        EXPECT_EQ(labels_of(actual[f].metric[m]), labels_of(expected[f].metric[m]));
        EXPECT_EQ(value_of(actual[f], actual[f].metric[m]),
                  value_of(expected[f], expected[f].metric[m]));
      }
    }
  }
}

// Records the threads devices are collected on. Slow, it sleeps in every device; waiting for
// company, a device's collection also waits (10 s at most) until two run at the same time.
class ThreadRecordingCollector final : public Collector {
 public:
  std::string_view name() const override { return "threads"; }
  void collect(const Device& device, MetricSet& out, ErrorSink&) const override {
    out.add("seen", "devices seen", prometheus::MetricType::Gauge, {{"device", device.name}}, 1);
    std::unique_lock lock(mutex_);
    threads_.insert(std::this_thread::get_id());
    if (!slow_) return;
    ++running_;
    if (running_ >= 2) overlapped_ = true;
    company_.notify_all();
    if (wait_for_company_)
      company_.wait_for(lock, std::chrono::seconds(10), [&] { return overlapped_; });
    lock.unlock();
    std::this_thread::sleep_for(kSlowDevice);
    lock.lock();
    --running_;
  }
  // Forgets what it saw and sets how the next scrapes behave.
  void reset(bool slow, bool wait_for_company) {
    std::lock_guard lock(mutex_);
    threads_.clear();
    overlapped_ = false;
    slow_ = slow;
    wait_for_company_ = wait_for_company;
  }
  std::set<std::thread::id> threads() const {
    std::lock_guard lock(mutex_);
    return threads_;
  }
  bool overlapped() const {
    std::lock_guard lock(mutex_);
    return overlapped_;
  }
  static constexpr auto kSlowDevice = std::chrono::milliseconds(60);

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable company_;
  mutable std::set<std::thread::id> threads_;
  mutable int running_ = 0;
  mutable bool overlapped_ = false;
  bool slow_ = false;
  bool wait_for_company_ = false;
};

// Devices go to other threads only when the last scrape's devices took long enough in all for
// that to pay: a fast tree is collected on the scraping thread alone, a slow one in parallel.
TEST(Scraper, CollectsInParallelOnlyAfterASlowScrape) {
  SysfsTree tree;
  for (int i = 0; i < 4; ++i) tree.add(mlx5_ib_device("mlx5_" + std::to_string(i), 1, i));
  auto options = options_for(tree.root(), 4);
  // Four slow devices take 240 ms in all; four fast ones a few microseconds.
  options.parallel_collection_from = std::chrono::milliseconds(200);
  auto recorder = std::make_unique<ThreadRecordingCollector>();
  auto& threads = *recorder;
  std::vector<std::unique_ptr<Collector>> collectors;
  collectors.push_back(std::move(recorder));
  collectors::Scraper scraper(options, std::move(collectors));
  const std::set<std::thread::id> scraping_thread{std::this_thread::get_id()};

  scraper.scrape();  // the first scrape has no history, and collects in parallel
  threads.reset(false, false);
  scraper.scrape();
  EXPECT_EQ(threads.threads(), scraping_thread) << "fast devices after a fast scrape";

  threads.reset(true, false);
  scraper.scrape();
  EXPECT_EQ(threads.threads(), scraping_thread) << "slow devices after a fast scrape";
  threads.reset(true, true);
  const auto families = scraper.scrape();
  EXPECT_TRUE(threads.overlapped()) << "slow devices after a slow scrape ran one at a time";
  EXPECT_GT(threads.threads().size(), 1u);
  EXPECT_EQ(series_count(families, "seen"), 4u);

  threads.reset(false, false);
  scraper.scrape();  // after the slow scrape: in parallel, and fast
  threads.reset(false, false);
  scraper.scrape();
  EXPECT_EQ(threads.threads(), scraping_thread) << "fast devices after a fast scrape, again";
}

TEST(Scraper, CountsDroppedInputsAcrossScrapes) {
  SysfsTree tree;
  tree.add(mlx5_ib_device("mlx5_0", 1, 0));
  const auto counters = tree.port_dir("mlx5_0", 1) / "counters";
  tree.write((counters / "symbol_error").lexically_relative(tree.root()), "N/A (no PMA)");
  tree.write((counters / "link_downed").lexically_relative(tree.root()), "N/A (no PMA)");
  tree.write((counters / "port_rcv_errors").lexically_relative(tree.root()), "x");
  std::vector<std::string> observed;
  collectors::Scraper scraper(options_for(tree.root(), 2), every_collector(),
                              [&](std::string_view collector, collectors::ReadError reason,
                                  const std::filesystem::path& path) {
                                observed.push_back(std::string(collector) + " " +
                                                   std::string(to_string(reason)) + " " +
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
  void collect(const Device&, MetricSet& out, ErrorSink&) const override {
    out.add("partial_metric", "never exported", prometheus::MetricType::Gauge, {}, 1);
    throw std::runtime_error("boom");
  }
};

TEST(Scraper, FailingCollectorCostsOnlyItself) {
  SysfsTree tree;
  tree.add(mlx5_ib_device("mlx5_0", 1, 0));
  auto collectors = every_collector();
  collectors.insert(collectors.begin(), std::make_unique<ThrowingCollector>());
  collectors::Scraper scraper(options_for(tree.root(), 2), std::move(collectors));
  const auto families = scraper.scrape();
  EXPECT_EQ(sample(families, "ibprobe_scrape_collector_success", {{"collector", "throwing"}}), 0);
  EXPECT_EQ(series_count(families, "partial_metric"), 0u);
  EXPECT_EQ(sample(families, "ibprobe_scrape_collector_success", {{"collector", "port_counters"}}),
            1);
  EXPECT_TRUE(sample(families, "rdma_port_data_transmitted_bytes_total",
                     {{"device", "mlx5_0"}, {"port", "1"}}));
}

// Unplugs one device (removes its class entry, as the kernel does) while collecting it.
class UnpluggingCollector final : public Collector {
 public:
  explicit UnpluggingCollector(std::string victim) : victim_(std::move(victim)) {}
  std::string_view name() const override { return "unplugging"; }
  void collect(const Device& device, MetricSet& out, ErrorSink&) const override {
    out.add("seen", "devices seen", prometheus::MetricType::Gauge, {{"device", device.name}}, 1);
    if (device.name == victim_) std::filesystem::remove(device.dir.path());
  }

 private:
  std::string victim_;
};

TEST(Scraper, DeviceVanishingMidScrapeCostsOnlyThatDevice) {
  SysfsTree tree;
  tree.add(mlx5_ib_device("mlx5_0", 1, 0));
  tree.add(mlx5_ib_device("mlx5_1", 1, 1));
  tree.add(mlx5_ib_device("mlx5_2", 1, 2));
  std::vector<std::unique_ptr<Collector>> collectors;
  collectors.push_back(std::make_unique<UnpluggingCollector>("mlx5_1"));
  collectors.push_back(collectors::make_collector("port_counters"));
  std::vector<std::string> errors;
  collectors::Scraper scraper(options_for(tree.root(), 1), std::move(collectors),
                              [&](std::string_view collector, collectors::ReadError reason,
                                  const std::filesystem::path& path) {
                                errors.push_back(std::string(collector) + " " +
                                                 std::string(to_string(reason)) + " " +
                                                 path.filename().string());
                              });
  const auto families = scraper.scrape();
  EXPECT_EQ(sample(families, "seen", {{"device", "mlx5_0"}}), 1);
  EXPECT_FALSE(sample(families, "seen", {{"device", "mlx5_1"}}));
  EXPECT_EQ(sample(families, "seen", {{"device", "mlx5_2"}}), 1);
  EXPECT_TRUE(sample(families, "rdma_port_data_transmitted_bytes_total",
                     {{"device", "mlx5_2"}, {"port", "1"}}));
  EXPECT_FALSE(sample(families, "rdma_port_data_transmitted_bytes_total",
                      {{"device", "mlx5_1"}, {"port", "1"}}));
  EXPECT_EQ(errors, (std::vector<std::string>{"unplugging not_found mlx5_1",
                                              "port_counters not_found mlx5_1"}));
  EXPECT_EQ(sample(families, "ibprobe_scrape_errors_total",
                   {{"collector", "port_counters"}, {"reason", "not_found"}}),
            1);
}

// The metrics page without the collectors' durations, which differ from scrape to scrape.
std::string page_of(collectors::Scraper& scraper) {
  std::string text;
  scraper.append_text(text);
  return without_lines(text, {"ibprobe_scrape_collector_duration_seconds{"});
}

// A scraper keeps what it collected into for the next scrape: after devices come and go, it
// still writes what a scraper new to the tree writes, with nothing left of a device gone.
TEST(Scraper, KeptStorageWritesWhatANewScraperWrites) {
  SysfsTree tree;
  tree.add(mlx5_ib_device("mlx5_0", 2, 0));
  tree.add(rxe_device("rxe0", "eth0", 1));
  tree.add(hfi1_device("hfi1_0", 2));
  collectors::Scraper kept(options_for(tree.root(), 1), every_collector());
  const auto first = page_of(kept);
  EXPECT_NE(first.find("device=\"rxe0\""), std::string::npos);
  EXPECT_EQ(page_of(kept), first);

  std::filesystem::remove(tree.device_dir("rxe0"));
  const auto without_rxe = page_of(kept);
  EXPECT_EQ(without_rxe.find("rxe0"), std::string::npos);
  {
    collectors::Scraper fresh(options_for(tree.root(), 1), every_collector());
    EXPECT_EQ(without_rxe, page_of(fresh));
  }

  tree.add(mlx5_roce_device("mlx5_1", "eth1", 3));
  const auto with_roce = page_of(kept);
  EXPECT_NE(with_roce.find("device=\"mlx5_1\""), std::string::npos);
  collectors::Scraper fresh(options_for(tree.root(), 1), every_collector());
  EXPECT_EQ(with_roce, page_of(fresh));
}

TEST(Scraper, DanglingDeviceEntryIsReportedOnce) {
  SysfsTree tree;
  tree.add(mlx5_ib_device("mlx5_0", 1, 0));
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

// A cleared set writes and takes only what was added since; families it had are not written.
TEST(MetricSet, ClearedSetHoldsOnlyWhatWasAddedSince) {
  auto fill = [](MetricSet& set, std::string_view port) {
    set.add("y", "help y", prometheus::MetricType::Gauge, {{"port", std::string(port)}}, 2);
    set.add("z", "help z", prometheus::MetricType::Counter, {{"port", std::string(port)}},
            {{"counter", "c"}}, 3);
  };
  MetricSet reused;
  reused.add("x", "help x", prometheus::MetricType::Gauge, {{"port", "1"}}, 1);
  fill(reused, "1");
  reused.clear();
  EXPECT_TRUE(reused.empty());
  fill(reused, "2");
  MetricSet fresh;
  fill(fresh, "2");
  std::string reused_text;
  std::string fresh_text;
  reused.append_text(reused_text);
  fresh.append_text(fresh_text);
  EXPECT_EQ(reused_text, fresh_text);
  EXPECT_EQ(reused_text.find("help x"), std::string::npos);
  const auto families = std::move(reused).take();
  ASSERT_EQ(families.size(), 2u);
  EXPECT_EQ(families[0].name, "y");
  EXPECT_EQ(families[1].name, "z");
}

}  // namespace
}  // namespace ibprobe::testing
