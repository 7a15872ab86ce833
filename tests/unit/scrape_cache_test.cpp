// What a scraper keeps open between scrapes: devices and their files stay open and are read
// again with fresh values; devices that come, go or are replaced under the same name are
// noticed on the next scrape; the worker threads are started once.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "collect_helpers.h"
#include "sysfs_fixture.h"
#include "worker_pool.h"

namespace ibprobe::testing {
namespace {

std::size_t open_descriptors() {
  std::size_t count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    ++count;
  }
  return count;
}

std::size_t thread_count() {
  std::size_t count = 0;
  for ([[maybe_unused]] const auto& entry :
       std::filesystem::directory_iterator("/proc/self/task")) {
    ++count;
  }
  return count;
}

std::vector<std::unique_ptr<collectors::Collector>> port_counters() {
  std::vector<std::unique_ptr<collectors::Collector>> list;
  list.push_back(collectors::make_collector("port_counters"));
  return list;
}

const LabelMap kPort1{{"device", "mlx5_0"}, {"port", "1"}};

// What rdma_port_data_transmitted_bytes_total says of port 1 of `device` as generated.
double transmitted_bytes(const DeviceShape& device) {
  return static_cast<double>(device.ports.at(1).counters->at("port_xmit_data")) * 4;
}

std::filesystem::path relative_counter(const SysfsTree& tree, const std::string& device,
                                       const std::string& counter) {
  return (tree.port_dir(device, 1) / "counters" / counter).lexically_relative(tree.root());
}

TEST(ScrapeCache, KeepsFilesOpenAndReadsFreshValues) {
  SysfsTree tree;
  tree.add(mlx5_ib_device("mlx5_0", 2, 0));
  const auto before = open_descriptors();
  collectors::Scraper scraper(options_for(tree.root(), 1), port_counters());
  scraper.scrape();
  const auto after_first = open_descriptors();
  // Every counter file of both ports stays open, with the directories they are read through.
  EXPECT_GE(after_first - before, 2 * extended_port_counters(0).size());
  tree.write(relative_counter(tree, "mlx5_0", "port_xmit_data"), "1000");
  const auto families = scraper.scrape();
  EXPECT_EQ(open_descriptors(), after_first) << "the second scrape opened or closed files";
  EXPECT_EQ(sample(families, "rdma_port_data_transmitted_bytes_total", kPort1), 4000);
}

TEST(ScrapeCache, NoticesDevicesPluggedAndUnplugged) {
  SysfsTree tree;
  tree.add(mlx5_ib_device("mlx5_0", 1, 0));
  collectors::Scraper scraper(options_for(tree.root(), 1), port_counters());
  scraper.scrape();
  const auto one_device = open_descriptors();
  tree.add(mlx5_ib_device("mlx5_1", 1, 1));
  auto families = scraper.scrape();
  EXPECT_TRUE(sample(families, "rdma_port_data_transmitted_bytes_total",
                     {{"device", "mlx5_1"}, {"port", "1"}}));
  EXPECT_TRUE(sample(families, "rdma_port_data_transmitted_bytes_total", kPort1));
  EXPECT_GT(open_descriptors(), one_device);

  std::filesystem::remove(tree.device_dir("mlx5_1"));
  families = scraper.scrape();
  EXPECT_FALSE(sample(families, "rdma_port_data_transmitted_bytes_total",
                      {{"device", "mlx5_1"}, {"port", "1"}}));
  EXPECT_TRUE(sample(families, "rdma_port_data_transmitted_bytes_total", kPort1));
  EXPECT_EQ(open_descriptors(), one_device) << "the unplugged device's files are still open";
  EXPECT_EQ(series_count(families, "ibprobe_scrape_errors_total"), 0u);
}

// What becomes of a replaced device's class entry.
enum class ClassEntry {
  kNew,  // removed with the device and written again
  // Left in place: on an ordinary file system a new entry can be given the inode number of the
  // one removed before it, so the entry's inode alone does not show that the directory behind it
  // is new.
  kKept,
};

// A device unregistered and registered again under the same name (driver rebind) is a new
// directory: after mlx5_0 is replaced by a device with other counter values, the next scrape
// reads the new one, not the files of the old one.
void expect_replaced_device_read(ClassEntry class_entry) {
  SysfsTree tree;
  tree.add(mlx5_ib_device("mlx5_0", 1, 0));
  collectors::Scraper scraper(options_for(tree.root(), 1), port_counters());
  const auto old_value = sample(scraper.scrape(), "rdma_port_data_transmitted_bytes_total", kPort1);
  ASSERT_TRUE(old_value);
  const auto entry = tree.device_dir("mlx5_0");
  const auto kept_entry = tree.root() / "kept-entry";
  if (class_entry == ClassEntry::kKept) {
    std::filesystem::rename(entry, kept_entry);
  } else {
    std::filesystem::remove(entry);
  }
  std::filesystem::remove_all(tree.root() / "devices" / "pci0000:00" / "mlx5_0");
  const auto replacement = mlx5_ib_device("mlx5_0", 1, 7);
  tree.add(replacement);
  if (class_entry == ClassEntry::kKept) {
    std::filesystem::remove(entry);
    std::filesystem::rename(kept_entry, entry);
  }
  const auto families = scraper.scrape();
  EXPECT_EQ(sample(families, "rdma_port_data_transmitted_bytes_total", kPort1),
            transmitted_bytes(replacement));
  EXPECT_NE(sample(families, "rdma_port_data_transmitted_bytes_total", kPort1), old_value);
}

TEST(ScrapeCache, ReopensADeviceReplacedUnderTheSameName) {
  expect_replaced_device_read(ClassEntry::kNew);
}

TEST(ScrapeCache, ReopensADeviceWhoseDirectoryWasReplacedBehindTheSameEntry) {
  expect_replaced_device_read(ClassEntry::kKept);
}

// Class entries renamed in place keep their inodes (a device rename does this on sysfs): two
// devices that swapped names are each read under its new name.
TEST(ScrapeCache, FollowsDevicesThatSwappedNames) {
  SysfsTree tree;
  const auto first = mlx5_ib_device("mlx5_0", 1, 0);
  const auto second = mlx5_ib_device("mlx5_1", 1, 7);
  tree.add(first);
  tree.add(second);
  const LabelMap port_of_mlx5_1{{"device", "mlx5_1"}, {"port", "1"}};
  const auto first_bytes = transmitted_bytes(first);
  const auto second_bytes = transmitted_bytes(second);
  ASSERT_NE(first_bytes, second_bytes);
  collectors::Scraper scraper(options_for(tree.root(), 1), port_counters());
  auto families = scraper.scrape();
  ASSERT_EQ(sample(families, "rdma_port_data_transmitted_bytes_total", kPort1), first_bytes);

  const auto swap = tree.root() / "class" / "infiniband" / "swap";
  std::filesystem::rename(tree.device_dir("mlx5_0"), swap);
  std::filesystem::rename(tree.device_dir("mlx5_1"), tree.device_dir("mlx5_0"));
  std::filesystem::rename(swap, tree.device_dir("mlx5_1"));

  families = scraper.scrape();
  EXPECT_EQ(sample(families, "rdma_port_data_transmitted_bytes_total", kPort1), second_bytes);
  EXPECT_EQ(sample(families, "rdma_port_data_transmitted_bytes_total", port_of_mlx5_1),
            first_bytes);
}

TEST(ScrapeCache, StartsItsThreadsOnce) {
  SysfsTree tree;
  for (int i = 0; i < 4; ++i) tree.add(mlx5_ib_device("mlx5_" + std::to_string(i), 1, i));
  const auto before = thread_count();
  collectors::Scraper scraper(options_for(tree.root(), 4), port_counters());
  // The caller's thread is the fourth; sanitizer runtimes may add a thread of their own.
  const auto with_pool = thread_count();
  EXPECT_GE(with_pool, before + 3);
  for (int i = 0; i < 3; ++i) {
    const auto families = scraper.scrape();
    EXPECT_EQ(series_count(families, "rdma_port_data_transmitted_bytes_total"), 4u);
    EXPECT_EQ(thread_count(), with_pool) << "a scrape created or ended threads";
  }
}

TEST(WorkerPool, RunsEveryJobOnceAcrossThreads) {
  collectors::WorkerPool pool(3);
  std::vector<std::atomic<int>> runs(200);
  std::mutex mutex;
  std::set<std::thread::id> threads;
  pool.run(runs.size(), [&](std::size_t i) {
    ++runs[i];
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    std::lock_guard lock(mutex);
    threads.insert(std::this_thread::get_id());
  });
  for (const auto& count : runs) EXPECT_EQ(count, 1);
  EXPECT_GT(threads.size(), 1u);
}

// Overlapping scrapes share one pool: while every pool thread is busy with the first batch, a
// second caller runs its batch on its own thread instead of waiting (it would wait forever here).
TEST(WorkerPool, OverlappingBatchRunsOnItsCallersThread) {
  collectors::WorkerPool pool(2);
  std::atomic<int> started = 0;
  std::atomic<bool> release = false;
  std::thread first([&] {
    pool.run(3, [&](std::size_t) {
      ++started;
      while (!release) std::this_thread::yield();
    });
  });
  while (started < 3) std::this_thread::yield();
  std::set<std::thread::id> second_threads;
  pool.run(3, [&](std::size_t) { second_threads.insert(std::this_thread::get_id()); });
  EXPECT_EQ(second_threads, std::set<std::thread::id>{std::this_thread::get_id()});
  release = true;
  first.join();
}

}  // namespace
}  // namespace ibprobe::testing
