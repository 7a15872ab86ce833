// Pairs a pong with the follow-up that carries the responder's device-clock turnaround, by the
// ping's token, in either order. A pong is answered whatever becomes of its follow-up: with the
// device clock when the follow-up comes within `wait`, else with the host clock, never lost.
// A pong that promised no follow-up (a peer on the host clock, or of the first mesh version)
// is timed on the host clock at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mesh_metrics.h"

namespace ibprobe::mesh {

class MeshFollowUps {
 public:
  using Clock = std::chrono::steady_clock;

  struct Pong {
    std::string target;
    // Host clock: pong received - ping sent - the responder's software turnaround.
    std::chrono::nanoseconds software_rtt{0};
    // This host's device clock, ping sent to pong received; only when the responder promised a
    // follow-up and both completions were stamped.
    std::optional<std::chrono::nanoseconds> device_round_trip;
  };
  struct Answered {
    std::string target;
    MeshPingResult result;
  };

  explicit MeshFollowUps(std::chrono::nanoseconds wait) : wait_(wait) {}

  // The result now, unless it waits for its follow-up.
  std::optional<Answered> on_pong(std::uint64_t token, Pong pong, Clock::time_point now);
  // The result of the pong waiting for this follow-up; none when the pong has not come yet, in
  // which case the follow-up waits for it. Call only for tokens of pings in flight or waiting
  // here, so that stray follow-ups cannot pile up.
  std::optional<Answered> on_follow_up(std::uint64_t token, std::chrono::nanoseconds turnaround,
                                       Clock::time_point now);
  // Pongs whose follow-up did not come within `wait`, on the host clock; early follow-ups whose
  // pong did not come are dropped.
  std::vector<Answered> expire(Clock::time_point now);

  bool waiting(std::uint64_t token) const;
  std::optional<Clock::time_point> next_deadline() const;

 private:
  struct Waiting {
    Clock::time_point deadline;
    std::optional<Pong> pong;                            // the pong waits for its follow-up
    std::optional<std::chrono::nanoseconds> turnaround;  // or the follow-up for its pong
  };

  const std::chrono::nanoseconds wait_;
  std::map<std::uint64_t, Waiting> waiting_;
};

}  // namespace ibprobe::mesh
