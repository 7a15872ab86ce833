// The mesh's device-clock arithmetic on figures worked out by hand: ticks across the counter's
// wrap, ticks to nanoseconds at real RNIC rates, the network's share of a round trip, and which
// clock a device's capabilities allow.
#include "ibprobe/ud_pinger_clock.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace ibprobe::probes {
namespace {

using std::chrono::nanoseconds;

// mlx5 reports 63 valid bits (drivers/infiniband/hw/mlx5: timestamp_mask 0x7fffffffffffffff).
constexpr std::uint64_t kMlx5Mask = 0x7fff'ffff'ffff'ffff;

TEST(DeviceTicks, WithoutAWrapAreTheDifference) {
  EXPECT_EQ(ticks_between(10, 25, 0xff), 15u);
  EXPECT_EQ(ticks_between(1'000'000, 1'000'640, kMlx5Mask), 640u);
}

TEST(DeviceTicks, AcrossTheCounterWrapCountOnce) {
  // An 8-bit counter: 0xf0 -> 0xff is 15 ticks, 0xff -> 0x00 one, 0x00 -> 0x10 sixteen: 32.
  EXPECT_EQ(ticks_between(0xf0, 0x10, 0xff), 32u);
  // The 63-bit counter: 0x7ff...f0 -> 0x7ff...ff is 15, to 0 one, to 5 five: 21. Without the
  // mask the 64-bit difference would be 0x8000000000000015.
  EXPECT_EQ(ticks_between(0x7fff'ffff'ffff'fff0, 5, kMlx5Mask), 21u);
  // All 64 bits valid: 0xff...f0 -> 0x10 is 16 + 16 = 32.
  EXPECT_EQ(ticks_between(0xffff'ffff'ffff'fff0, 0x10, ~std::uint64_t{0}), 32u);
}

TEST(DeviceTicks, ConvertToNanosecondsAtTheDeviceRate) {
  // 156.25 MHz: 6.4 ns a tick, so 1000 ticks are 6400 ns.
  EXPECT_EQ(ticks_to_ns(1000, 156'250), nanoseconds(6400));
  // 1 GHz: a tick is a nanosecond.
  EXPECT_EQ(ticks_to_ns(3, 1'000'000), nanoseconds(3));
  // 3 kHz: 7 ticks are 7 / 3 ms = 2,333,333.3 ns, rounded down.
  EXPECT_EQ(ticks_to_ns(7, 3), nanoseconds(2'333'333));
  // 2^62 ticks at 1 GHz are 2^62 ns; ticks * 10^6 would have overflowed 64 bits.
  EXPECT_EQ(ticks_to_ns(std::uint64_t{1} << 62, 1'000'000), nanoseconds(std::int64_t{1} << 62));
}

TEST(DeviceTicks, BeyondTheNanosecondRangeSaturate) {
  EXPECT_EQ(ticks_to_ns(~std::uint64_t{0}, 1), nanoseconds::max());
}

TEST(NetworkRtt, IsTheRoundTripLessTheTurnaround) {
  // R-Pingmesh's (T5 - T2) - (T4 - T3): 12.8 us on the prober's RNIC, 4.5 us held: 8.3 us.
  EXPECT_EQ(network_rtt(nanoseconds(12'800), nanoseconds(4'500)), nanoseconds(8'300));
  EXPECT_EQ(network_rtt(nanoseconds(5'000), nanoseconds(5'000)), nanoseconds(0));
}

TEST(NetworkRtt, ATurnaroundLongerThanTheRoundTripIsNoResult) {
  EXPECT_EQ(network_rtt(nanoseconds(5'000), nanoseconds(5'001)), std::nullopt);
}

DeviceClockFacts connectx() {
  return {0, kMlx5Mask, 156'250, 0};
}

TEST(ClockChoice, DeviceClockWhenMaskRateAndStampedCqAreThere) {
  const auto choice = choose_clock("mlx5_0", connectx());
  EXPECT_TRUE(choice.device);
  EXPECT_EQ(choice.detail,
            "mlx5_0: completion timestamps (completion_timestamp_mask 0x7fffffffffffffff, "
            "hca_core_clock 156250 kHz); device clock with peers that send follow-ups, host "
            "clock otherwise");
}

TEST(ClockChoice, RxeSaysEveryReasonForTheHostClock) {
  const auto choice = choose_clock("rxe0", {0, 0, 0, EOPNOTSUPP});
  EXPECT_FALSE(choice.device);
  EXPECT_EQ(choice.detail,
            "rxe0: no device clock (completion_timestamp_mask 0; hca_core_clock 0 kHz; "
            "ibv_create_cq_ex with IBV_WC_EX_WITH_COMPLETION_TIMESTAMP failed (Operation not "
            "supported)); host clock");
}

TEST(ClockChoice, EachMissingPieceAloneKeepsTheHostClock) {
  auto facts = connectx();
  facts.completion_timestamp_mask = 0;
  EXPECT_FALSE(choose_clock("d", facts).device);
  facts = connectx();
  facts.hca_core_clock_khz = 0;
  EXPECT_FALSE(choose_clock("d", facts).device);
  facts = connectx();
  facts.timestamp_cq_error = EOPNOTSUPP;
  EXPECT_FALSE(choose_clock("d", facts).device);
  facts = connectx();
  facts.query_error = EOPNOTSUPP;
  const auto choice = choose_clock("d", facts);
  EXPECT_FALSE(choice.device);
  EXPECT_EQ(choice.detail,
            "d: no device clock (ibv_query_device_ex failed (Operation not supported)); host "
            "clock");
}

TEST(ClockChoice, AMaskThatIsNotLowBitsKeepsTheHostClock) {
  auto facts = connectx();
  facts.completion_timestamp_mask = 0xff00;
  const auto choice = choose_clock("d", facts);
  EXPECT_FALSE(choice.device);
  EXPECT_NE(choice.detail.find("0xff00 is not a run of low bits"), std::string::npos)
      << choice.detail;
}

TEST(ClockChoice, ACounterWrappingWithinTwoSecondsKeepsTheHostClock) {
  // 32 bits at 1 GHz wrap every 4.29 s: enough. 31 bits wrap every 2,147,483 us: also enough.
  // 30 bits wrap every 1,073,741 us, within the 2 s the pinger times.
  auto facts = connectx();
  facts.hca_core_clock_khz = 1'000'000;
  facts.completion_timestamp_mask = 0xffff'ffff;
  EXPECT_TRUE(choose_clock("d", facts).device);
  facts.completion_timestamp_mask = 0x7fff'ffff;
  EXPECT_TRUE(choose_clock("d", facts).device);
  facts.completion_timestamp_mask = 0x3fff'ffff;
  const auto choice = choose_clock("d", facts);
  EXPECT_FALSE(choice.device);
  EXPECT_NE(choice.detail.find("wraps every 1073741 us"), std::string::npos) << choice.detail;
}

}  // namespace
}  // namespace ibprobe::probes
