// The ethtool netlink reader against this machine's kernel. Its netdevs are virtual (loopback,
// virtio), whose drivers have no module and no FEC, so the answers that can be checked here are
// the kernel's: a request it parses reaches the driver, which refuses it (EOPNOTSUPP); a request
// the kernel itself must refuse is EINVAL; an unknown netdev is ENODEV. Reading a real module is
// left to hardware with one.
#include "ibprobe/ethtool_netlink.h"

#include <gtest/gtest.h>

namespace ibprobe::testing {
namespace {

using collectors::EthtoolNetlink;
using collectors::kLowerPage;

std::optional<EthtoolNetlink> open_or_skip() {
  auto ethtool = EthtoolNetlink::open();
  if (!ethtool) {
    EXPECT_EQ(ethtool.error(), std::errc::no_such_file_or_directory) << ethtool.error().message();
    return std::nullopt;
  }
  return std::move(*ethtool);
}

TEST(EthtoolNetlink, KernelParsesTheRequestsAndTheDriverRefusesThem) {
  auto ethtool = open_or_skip();
  if (!ethtool) GTEST_SKIP() << "this kernel has no ethtool netlink family";

  const auto page = ethtool->module_page("lo", kLowerPage);
  ASSERT_FALSE(page);
  EXPECT_EQ(page.error(), std::errc::operation_not_supported) << page.error().message();
  const auto upper = ethtool->module_page("lo", {.page = 0x11, .bank = 1, .offset = 128});
  ASSERT_FALSE(upper);
  EXPECT_EQ(upper.error(), std::errc::operation_not_supported) << upper.error().message();

  const auto fec = ethtool->fec_reply("lo");
  ASSERT_FALSE(fec);
  EXPECT_EQ(fec.error(), std::errc::operation_not_supported) << fec.error().message();

  const auto pages = collectors::read_module_pages(*ethtool, "lo");
  ASSERT_FALSE(pages);
  EXPECT_EQ(pages.error(), std::errc::operation_not_supported);
}

TEST(EthtoolNetlink, KernelRefusalsAreItsErrnos) {
  auto ethtool = open_or_skip();
  if (!ethtool) GTEST_SKIP() << "this kernel has no ethtool netlink family";
  // Page 1 in the lower half: net/ethtool/eeprom.c refuses it before asking the driver.
  const auto lower_half = ethtool->module_page("lo", {.page = 1, .offset = 0});
  ASSERT_FALSE(lower_half);
  EXPECT_EQ(lower_half.error(), std::errc::invalid_argument) << lower_half.error().message();
  const auto missing = ethtool->module_page("ibprobe-none0", kLowerPage);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error(), std::errc::no_such_device) << missing.error().message();
  // The socket still answers in order after refusals.
  EXPECT_EQ(ethtool->fec_reply("ibprobe-none0").error(), std::errc::no_such_device);
}

}  // namespace
}  // namespace ibprobe::testing
