// The arithmetic of the mesh's device clock, apart from the verbs that read it: an RNIC stamps
// each completion with its free-running counter (ibv_wc_read_completion_ts, in HCA clock ticks),
// whose valid bits are ibv_query_device_ex's completion_timestamp_mask and whose rate is its
// hca_core_clock in kHz. As R-Pingmesh does, a round trip is measured on the prober's RNIC
// (pong received - ping sent) and the responder's turnaround on the responder's (pong sent -
// ping received), so neither host's scheduling delays enter the result.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace ibprobe::probes {

// Ticks from `earlier` to `later` on a counter of `mask`'s bits (a run of low bits), counting
// one wrap of the counter between them.
std::uint64_t ticks_between(std::uint64_t earlier, std::uint64_t later, std::uint64_t mask);

// `ticks` of a clock running at `khz` kHz, in nanoseconds (rounded down); khz must not be 0.
std::chrono::nanoseconds ticks_to_ns(std::uint64_t ticks, std::uint64_t khz);

// The network's share of a round trip: the prober's round trip less the responder's turnaround.
// Empty when the turnaround exceeds the round trip: the two clocks disagree (a responder
// reporting its turnaround in other units, or at a wrong rate), and the result would be made up.
std::optional<std::chrono::nanoseconds> network_rtt(std::chrono::nanoseconds round_trip,
                                                    std::chrono::nanoseconds turnaround);

// The longest interval the pinger times on the device clock: a pong later than a second is lost
// to the mesh, and the follow-up with the responder's turnaround comes shortly after the pong.
// A counter that wraps sooner would make one wrap look like none.
inline constexpr std::chrono::seconds kLongestDeviceInterval{2};

// What the device says of its completion timestamps, as the pinger found it.
struct DeviceClockFacts {
  int query_error = 0;  // ibv_query_device_ex's return; 0 when it answered
  std::uint64_t completion_timestamp_mask = 0;
  std::uint64_t hca_core_clock_khz = 0;
  // errno of ibv_create_cq_ex with IBV_WC_EX_WITH_COMPLETION_TIMESTAMP; 0 when it made the CQ
  int timestamp_cq_error = 0;
};

struct ClockChoice {
  bool device = false;  // completion timestamps; else the host's steady clock
  std::string detail;   // for the log: every reason the device clock is not used, or its figures
};

// The device clock only when the device reports a timestamp mask (a run of low bits wide enough
// for kLongestDeviceInterval) and a clock rate, and the timestamped CQ could be made.
ClockChoice choose_clock(const std::string& device, const DeviceClockFacts& facts);

}  // namespace ibprobe::probes
