// A pong and its follow-up paired by token: in either order, each ping with its own follow-up's
// turnaround, and a pong whose follow-up never comes answered on the host clock after the wait,
// not lost. RTTs below are worked out by hand.
#include "mesh_follow_ups.h"

#include <gtest/gtest.h>

namespace ibprobe::mesh {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using Clock = MeshFollowUps::Clock;

const Clock::time_point t0 = Clock::time_point(std::chrono::hours(1));
constexpr auto kWait = milliseconds(200);

// Host clock 30 us, device 12 us round trip.
MeshFollowUps::Pong pong_from(std::string target,
                              std::optional<nanoseconds> device = microseconds(12)) {
  return {std::move(target), microseconds(30), device};
}

TEST(MeshFollowUps, APongThenItsFollowUpGiveTheDeviceRtt) {
  MeshFollowUps follow_ups(kWait);
  EXPECT_EQ(follow_ups.on_pong(1, pong_from("b:9470"), t0), std::nullopt);
  EXPECT_TRUE(follow_ups.waiting(1));
  const auto answered = follow_ups.on_follow_up(1, microseconds(4), t0 + microseconds(50));
  ASSERT_TRUE(answered);
  EXPECT_EQ(answered->target, "b:9470");
  EXPECT_TRUE(answered->result.answered);
  EXPECT_EQ(answered->result.clock, MeshClock::kDevice);
  EXPECT_DOUBLE_EQ(answered->result.rtt_seconds, 8e-6);  // 12 - 4 us
  EXPECT_FALSE(follow_ups.waiting(1));
  EXPECT_EQ(follow_ups.next_deadline(), std::nullopt);
}

TEST(MeshFollowUps, AFollowUpAheadOfItsPongWaitsForIt) {
  MeshFollowUps follow_ups(kWait);
  EXPECT_EQ(follow_ups.on_follow_up(5, microseconds(3), t0), std::nullopt);
  const auto answered = follow_ups.on_pong(5, pong_from("b:9470"), t0 + microseconds(10));
  ASSERT_TRUE(answered);
  EXPECT_EQ(answered->result.clock, MeshClock::kDevice);
  EXPECT_DOUBLE_EQ(answered->result.rtt_seconds, 9e-6);  // 12 - 3 us
}

TEST(MeshFollowUps, EachPingTakesItsOwnFollowUpWhenTheyArriveOutOfOrder) {
  MeshFollowUps follow_ups(kWait);
  ASSERT_EQ(follow_ups.on_pong(1, {"b:9470", microseconds(30), microseconds(12)}, t0),
            std::nullopt);
  ASSERT_EQ(follow_ups.on_pong(2, {"c:9470", microseconds(40), microseconds(20)}, t0),
            std::nullopt);
  const auto second = follow_ups.on_follow_up(2, microseconds(5), t0);
  const auto first = follow_ups.on_follow_up(1, microseconds(2), t0);
  ASSERT_TRUE(first && second);
  EXPECT_EQ(first->target, "b:9470");
  EXPECT_DOUBLE_EQ(first->result.rtt_seconds, 10e-6);  // 12 - 2
  EXPECT_EQ(second->target, "c:9470");
  EXPECT_DOUBLE_EQ(second->result.rtt_seconds, 15e-6);  // 20 - 5
}

TEST(MeshFollowUps, APongPromisingNoFollowUpIsTimedOnTheHostClockAtOnce) {
  MeshFollowUps follow_ups(kWait);
  const auto answered = follow_ups.on_pong(3, pong_from("b:9470", std::nullopt), t0);
  ASSERT_TRUE(answered);
  EXPECT_EQ(answered->result.clock, MeshClock::kSoftware);
  EXPECT_DOUBLE_EQ(answered->result.rtt_seconds, 30e-6);
  EXPECT_FALSE(follow_ups.waiting(3));
}

TEST(MeshFollowUps, AFollowUpThatNeverComesLeavesThePingAnsweredOnTheHostClock) {
  MeshFollowUps follow_ups(kWait);
  ASSERT_EQ(follow_ups.on_pong(4, pong_from("b:9470"), t0), std::nullopt);
  EXPECT_EQ(follow_ups.next_deadline(), t0 + kWait);
  EXPECT_TRUE(follow_ups.expire(t0 + kWait - nanoseconds(1)).empty());
  const auto expired = follow_ups.expire(t0 + kWait);
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].target, "b:9470");
  EXPECT_TRUE(expired[0].result.answered);
  EXPECT_EQ(expired[0].result.clock, MeshClock::kSoftware);
  EXPECT_DOUBLE_EQ(expired[0].result.rtt_seconds, 30e-6);
  // Its follow-up, arriving after all, pairs with nothing: the ping is not counted twice.
  EXPECT_EQ(follow_ups.on_follow_up(4, microseconds(4), t0 + kWait), std::nullopt);
  EXPECT_TRUE(follow_ups.expire(t0 + 2 * kWait).empty());
  EXPECT_EQ(follow_ups.next_deadline(), std::nullopt);
}

TEST(MeshFollowUps, ATurnaroundLongerThanTheRoundTripFallsBackToTheHostClock) {
  MeshFollowUps follow_ups(kWait);
  ASSERT_EQ(follow_ups.on_pong(6, pong_from("b:9470"), t0), std::nullopt);
  const auto answered = follow_ups.on_follow_up(6, microseconds(13), t0);
  ASSERT_TRUE(answered);
  EXPECT_EQ(answered->result.clock, MeshClock::kSoftware);
  EXPECT_DOUBLE_EQ(answered->result.rtt_seconds, 30e-6);
}

}  // namespace
}  // namespace ibprobe::mesh
