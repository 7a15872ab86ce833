// The mesh's UD messages byte for byte, and what a receiver makes of a message from the first
// mesh version (flag bytes zero) or from a later one (a kind it does not know).
#include "ud_pinger_wire.h"

#include <gtest/gtest.h>

#include <array>
#include <vector>

namespace ibprobe::probes::ud_wire {
namespace {

TEST(UdWire, APingAskingForAFollowUpIsLaidOutBigEndian) {
  std::array<std::uint8_t, kMessageBytes> bytes{};
  encode({Kind::kPing, kAsksFollowUp, 0x0102030405060708, 0}, bytes);
  const std::array<std::uint8_t, kMessageBytes> expected = {'I', 'B', 'M', 'P', 1, 1, 0, 0,  //
                                                            1,   2,   3,   4,   5, 6, 7, 8,  //
                                                            0,   0,   0,   0,   0, 0, 0, 0};
  EXPECT_EQ(bytes, expected);
}

TEST(UdWire, AFollowUpCarriesTheTurnaroundInNanoseconds) {
  std::array<std::uint8_t, kMessageBytes> bytes{};
  // 4500 ns = 0x1194.
  encode({Kind::kFollowUp, 0, 7, 4500}, bytes);
  const std::array<std::uint8_t, kMessageBytes> expected = {'I', 'B', 'M', 'P', 3, 0, 0,    0,  //
                                                            0,   0,   0,   0,   0, 0, 0,    7,  //
                                                            0,   0,   0,   0,   0, 0, 0x11, 0x94};
  EXPECT_EQ(bytes, expected);
  EXPECT_EQ(decode(bytes), (Message{Kind::kFollowUp, 0, 7, 4500}));
}

TEST(UdWire, APongOfTheFirstVersionPromisesNoFollowUp) {
  // As the first version sent it: pong, bytes 5..7 zero, token 9, turnaround 2000 ns (0x7d0).
  const std::vector<std::uint8_t> bytes = {'I', 'B', 'M', 'P', 2, 0, 0,    0,  //
                                           0,   0,   0,   0,   0, 0, 0,    9,  //
                                           0,   0,   0,   0,   0, 0, 0x07, 0xd0};
  const auto message = decode(bytes);
  ASSERT_TRUE(message);
  EXPECT_EQ(message->kind, Kind::kPong);
  EXPECT_EQ(message->flags & kFollowUpComing, 0);
  EXPECT_EQ(message->token, 9u);
  EXPECT_EQ(message->turnaround_ns, 2000u);
}

TEST(UdWire, AKindOfALaterVersionDecodesForTheReceiverToDrop) {
  std::array<std::uint8_t, kMessageBytes> bytes{};
  encode({Kind::kPing, 0, 1, 0}, bytes);
  bytes[4] = 9;
  const auto message = decode(bytes);
  ASSERT_TRUE(message);
  EXPECT_NE(message->kind, Kind::kPing);
  EXPECT_NE(message->kind, Kind::kPong);
  EXPECT_NE(message->kind, Kind::kFollowUp);
}

TEST(UdWire, ShortOrForeignBytesAreNoMessage) {
  std::array<std::uint8_t, kMessageBytes> bytes{};
  encode({Kind::kPong, kFollowUpComing, 1, 1}, bytes);
  EXPECT_EQ(decode(std::span<const std::uint8_t>(bytes.data(), kMessageBytes - 1)), std::nullopt);
  bytes[0] = 'X';
  EXPECT_EQ(decode(bytes), std::nullopt);
}

}  // namespace
}  // namespace ibprobe::probes::ud_wire
