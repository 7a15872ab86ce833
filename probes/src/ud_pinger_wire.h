// The mesh's UD messages, 24 bytes big endian so hosts of either byte order understand each
// other:
//   0..3   magic "IBMP"
//   4      kind: 1 ping, 2 pong, 3 follow-up
//   5      flags (below)
//   6..7   zero
//   8..15  token: the prober's, echoed in the pong and the follow-up
//   16..23 nanoseconds: a pong's software turnaround, a follow-up's device-clock turnaround
//
// Compatibility: the first version of the mesh sent bytes 5..7 as zero and drops any kind it
// does not know. So a flag is a capability both ends must have: a prober asks for a follow-up
// in the ping, a responder promises one in the pong, and a peer of the first version does
// neither, which leaves its pings and pongs on the software clock without a wait.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace ibprobe::probes::ud_wire {

inline constexpr std::size_t kMessageBytes = 24;

enum class Kind : std::uint8_t { kPing = 1, kPong = 2, kFollowUp = 3 };

// In a ping: the prober reads its device's completion timestamps; a responder that reads its
// own sends a follow-up with its device-clock turnaround.
inline constexpr std::uint8_t kAsksFollowUp = 1 << 0;
// In a pong: a follow-up with the device-clock turnaround comes after this pong.
inline constexpr std::uint8_t kFollowUpComing = 1 << 0;

struct Message {
  Kind kind = Kind::kPing;  // may hold a kind of a later version, which receivers drop
  std::uint8_t flags = 0;
  std::uint64_t token = 0;
  std::uint64_t turnaround_ns = 0;
  bool operator==(const Message&) const = default;
};

void encode(const Message& message, std::span<std::uint8_t, kMessageBytes> out);
// Empty when the bytes are too few or do not start with the magic: not a mesh message.
std::optional<Message> decode(std::span<const std::uint8_t> bytes);

}  // namespace ibprobe::probes::ud_wire
