#include "ibprobe/gids.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "collect_helpers.h"
#include "sysfs_fixture.h"

namespace ibprobe::testing {
namespace {

TEST(Gids, PopulatedEntriesOnly) {
  const auto device = mlx5_roce_device("mlx5_1", "ens1f0", 1);
  const auto result = collect_from_device("gids", device);
  EXPECT_TRUE(result.errors.empty());
  const auto& gids = device.ports.at(1).gids;
  EXPECT_EQ(series_count(result.families, "rdma_port_gid_info"), gids.size());
  for (const auto& gid : gids) {
    EXPECT_EQ(sample(result.families, "rdma_port_gid_info",
                     {{"device", "mlx5_1"},
                      {"port", "1"},
                      {"index", std::to_string(gid.index)},
                      {"gid", gid.gid},
                      {"type", gid.type},
                      {"netdev", gid.netdev}}),
              1)
        << gid.index;
  }
}

// Adds rxe0 to `tree` with its GID entry 5 unreadable, and returns that entry's path. Newer
// kernels fail reads of empty GID entries with EINVAL; a directory stands in for an entry that
// cannot be read at all and must be reported.
std::filesystem::path add_rxe_with_unreadable_gid(SysfsTree& tree) {
  tree.add(rxe_device("rxe0", "eth0", 3));
  const auto entry = tree.port_dir("rxe0", 1) / "gids" / "5";
  std::filesystem::remove(entry);
  std::filesystem::create_directory(entry);
  return entry;
}

TEST(Gids, EmptyEntriesThatFailToReadAreNotErrors) {
  SysfsTree tree;
  const auto unreadable = add_rxe_with_unreadable_gid(tree);
  const auto result = collect("gids", tree.root());
  EXPECT_EQ(series_count(result.families, "rdma_port_gid_info"), 4u);
  ASSERT_EQ(result.errors.size(), 1u);
  EXPECT_EQ(result.errors[0].path, unreadable);
}

std::optional<double> gid_sample(const Collected& result, const Gid& gid) {
  return sample(result.families, "rdma_port_gid_info",
                {{"device", "mlx5_1"},
                 {"port", "1"},
                 {"index", std::to_string(gid.index)},
                 {"gid", gid.gid},
                 {"type", gid.type},
                 {"netdev", gid.netdev}});
}

// Entry 5 of the table (8 entries, 0 to 3 populated) gets a GID, as when an address is added.
const Gid kNewGid{5, "0000:0000:0000:0000:0000:ffff:c0a8:0b07", "RoCE v2", "ens1f0"};

void populate(const SysfsTree& tree, const Gid& gid) {
  const auto port = tree.port_dir("mlx5_1", 1);
  const auto index = std::to_string(gid.index);
  tree.write(port / "gid_attrs" / "types" / index, gid.type);
  tree.write(port / "gid_attrs" / "ndevs" / index, gid.netdev);
  tree.write(port / "gids" / index, gid.gid);
}

// One RoCE port with a table of 8 entries, 0 to 3 populated, scraped by a gids collector that
// reads the whole table every `interval`.
class GidRescan : public ::testing::Test {
 protected:
  GidRescan() { tree.add(device); }

  Scrapes scrapes(std::chrono::steady_clock::duration interval) const {
    collectors::Options options;
    options.sysfs_root = tree.root();
    return Scrapes(std::move(options), collectors::make_gids_collector(interval));
  }

  SysfsTree tree;
  const DeviceShape device = mlx5_roce_device("mlx5_1", "ens1f0", 1);
  const std::vector<Gid>& gids = device.ports.at(1).gids;
};

TEST_F(GidRescan, EntriesFoundEmptyAreNotReadAgainBeforeTheInterval) {
  auto every_hour = scrapes(std::chrono::hours(1));
  EXPECT_EQ(series_count(every_hour.scrape().families, "rdma_port_gid_info"), 4u);
  populate(tree, kNewGid);
  const auto result = every_hour.scrape();
  EXPECT_EQ(series_count(result.families, "rdma_port_gid_info"), 4u);
  EXPECT_FALSE(gid_sample(result, kNewGid).has_value());
}

TEST_F(GidRescan, ANewEntryShowsOnceTheIntervalHasPassed) {
  const auto interval = std::chrono::milliseconds(50);
  auto often = scrapes(interval);
  EXPECT_EQ(series_count(often.scrape().families, "rdma_port_gid_info"), 4u);
  populate(tree, kNewGid);
  std::this_thread::sleep_for(interval);
  const auto result = often.scrape();
  EXPECT_EQ(series_count(result.families, "rdma_port_gid_info"), 5u);
  EXPECT_EQ(gid_sample(result, kNewGid), 1);
}

TEST_F(GidRescan, ZeroReadsTheWholeTableOnEveryScrape) {
  auto every_scrape = scrapes(std::chrono::seconds(0));
  EXPECT_EQ(series_count(every_scrape.scrape().families, "rdma_port_gid_info"), 4u);
  populate(tree, kNewGid);
  EXPECT_EQ(gid_sample(every_scrape.scrape(), kNewGid), 1);
}

TEST_F(GidRescan, ARemovedEntryGoesOnTheNextScrape) {
  auto every_hour = scrapes(std::chrono::hours(1));
  EXPECT_EQ(gid_sample(every_hour.scrape(), gids[2]), 1);
  tree.write(tree.port_dir("mlx5_1", 1) / "gids" / "2", "0000:0000:0000:0000:0000:0000:0000:0000");
  const auto result = every_hour.scrape();
  EXPECT_EQ(series_count(result.families, "rdma_port_gid_info"), 3u);
  EXPECT_FALSE(gid_sample(result, gids[2]).has_value());
  EXPECT_EQ(gid_sample(result, gids[3]), 1);
}

TEST_F(GidRescan, AChangedEntryIsDescribedAnew) {
  auto every_hour = scrapes(std::chrono::hours(1));
  EXPECT_EQ(gid_sample(every_hour.scrape(), gids[3]), 1);
  const Gid changed{3, "0000:0000:0000:0000:0000:ffff:0a00:0001", "IB/RoCE v1", "ens1f0v1"};
  populate(tree, changed);
  const auto result = every_hour.scrape();
  EXPECT_EQ(series_count(result.families, "rdma_port_gid_info"), 4u);
  EXPECT_EQ(gid_sample(result, changed), 1);
  EXPECT_FALSE(gid_sample(result, gids[3]).has_value());
}

TEST(GidRescanOfRxe, AnUnreadableEntryIsAskedAgainOnEveryScrape) {
  SysfsTree tree;
  const auto unreadable = add_rxe_with_unreadable_gid(tree);
  collectors::Options options;
  options.sysfs_root = tree.root();
  Scrapes every_hour(std::move(options), collectors::make_gids_collector(std::chrono::hours(1)));
  for (int scrape = 0; scrape < 2; ++scrape) {
    const auto result = every_hour.scrape();
    EXPECT_EQ(series_count(result.families, "rdma_port_gid_info"), 4u) << scrape;
    ASSERT_EQ(result.errors.size(), 1u) << scrape;
    EXPECT_EQ(result.errors[0].path, unreadable);
  }
}

}  // namespace
}  // namespace ibprobe::testing
