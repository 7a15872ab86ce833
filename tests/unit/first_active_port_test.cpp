#include <gtest/gtest.h>

#include "ibprobe/active_port.h"
#include "sysfs_fixture.h"

namespace ibprobe::testing {
namespace {

TEST(FirstActivePort, SkipsPortsThatAreNotActive) {
  SysfsTree tree;
  auto down = mlx5_ib_device("mlx5_0", 2, 0);
  down.ports.at(1).state = "1: DOWN";
  down.ports.at(2).state = "5: ACTIVE_DEFER";
  tree.add(down);
  auto second = mlx5_ib_device("mlx5_1", 2, 1);
  second.ports.at(1).state = "2: INIT";
  tree.add(second);
  const auto port = collectors::first_active_port(tree.root());
  ASSERT_TRUE(port);
  EXPECT_EQ(port->device, "mlx5_1");
  EXPECT_EQ(port->port, 2);
  EXPECT_EQ(port->sysfs_root, tree.root());
}

TEST(FirstActivePort, NoneWithoutActivePorts) {
  SysfsTree tree;
  EXPECT_FALSE(collectors::first_active_port(tree.root()));
  auto device = rxe_device("rxe0", "eth0", 3);
  device.ports.at(1).state = "1: DOWN";
  tree.add(device);
  EXPECT_FALSE(collectors::first_active_port(tree.root()));
}

}  // namespace
}  // namespace ibprobe::testing
