#include <gtest/gtest.h>

#include "collect_helpers.h"
#include "sysfs_fixture.h"

namespace ibprobe::testing {
namespace {

TEST(Gids, PopulatedEntriesOnly) {
  SysfsTree tree;
  const auto device = mlx5_roce_device("mlx5_1", "ens1f0", 1);
  tree.add(device);
  const auto result = collect("gids", tree.root());
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

TEST(Gids, EmptyEntriesThatFailToReadAreNotErrors) {
  SysfsTree tree;
  tree.add(rxe_device("rxe0", "eth0", 3));
  // Newer kernels fail reads of empty GID entries with EINVAL; a directory stands in for an
  // entry that cannot be read at all and must be reported.
  const auto gids = tree.port_dir("rxe0", 1) / "gids";
  std::filesystem::remove(gids / "5");
  std::filesystem::create_directory(gids / "5");
  const auto result = collect("gids", tree.root());
  EXPECT_EQ(series_count(result.families, "rdma_port_gid_info"), 4u);
  ASSERT_EQ(result.errors.size(), 1u);
  EXPECT_EQ(result.errors[0].path, gids / "5");
}

}  // namespace
}  // namespace ibprobe::testing
