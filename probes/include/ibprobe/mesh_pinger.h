// The mesh's data path: low-rate RDMA pings over one UD queue pair per device, as R-Pingmesh
// does, so a host pings any number of peers without a connection to each. The same QP answers
// the pings of other hosts. Waiting is on the completion channel's file descriptor, so an idle
// mesh sleeps in poll() instead of spinning on the CQ.
//
// Clocks: where the device stamps completions (ud_pinger_clock.h says when that is), the pinger
// times the round trip on its RNIC and asks the responder for its turnaround on the responder's
// RNIC, which comes in a follow-up after the pong, as in R-Pingmesh; every pong is also timed on
// the host's steady clock, which is the result when the device clock is not there at both ends.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <expected>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ibprobe/mesh_endpoint.h"
#include "ibprobe/probe_failure.h"
#include "ibprobe/verbs_probe.h"

namespace ibprobe::probes {

// Which clock measured an RTT: the RNIC's completion timestamps, or the host's steady clock.
enum class PingClock { kSoftware, kDevice };

struct PongReceived {
  std::uint64_t token = 0;  // as the ping was sent with
  std::chrono::steady_clock::time_point received_at;
  // Time the responder held the ping, from its receive completion to posting the answer;
  // subtracted from the round trip so a busy peer host does not read as a slow fabric.
  std::chrono::nanoseconds responder_turnaround{0};
  // The responder promised a follow-up with its turnaround on its device clock.
  bool follow_up_coming = false;
  // Ping sent to pong received on this host's device clock, from the two completions' stamps;
  // empty on the host clock, or when the ping's send completion had no stamp on record.
  std::optional<std::chrono::nanoseconds> device_round_trip;
};

// The responder's turnaround on its device clock: its pong's send completion less the ping's
// receive completion.
struct FollowUpReceived {
  std::uint64_t token = 0;
  std::chrono::nanoseconds device_turnaround{0};
};

// Learns a peer's endpoint from its exporter's responder at HOST:PORT, authenticated with
// `shared_secret` when it is not empty; or why it could not (unreachable, unauthorized, ...).
std::expected<MeshEndpoint, Error> fetch_mesh_endpoint(
    const std::string& host, const std::string& port, const std::string& shared_secret,
    std::chrono::steady_clock::time_point deadline);

class UdPinger {
 public:
  // The Q_Key every ibprobe pinger uses unless configured otherwise (0x11b0 + "P").
  static constexpr std::uint32_t kDefaultQkey = 0x11b05050;

  // Opens `local`'s device and brings up the QP; throws ProbeFailure (kVerbs) when it cannot.
  explicit UdPinger(const LocalPort& local, std::uint32_t qkey = kDefaultQkey);
  ~UdPinger();
  UdPinger(const UdPinger&) = delete;
  UdPinger& operator=(const UdPinger&) = delete;

  const MeshEndpoint& endpoint() const;
  // kDevice when the device stamps this pinger's completions: pings then ask for follow-ups,
  // and pings from others that ask get one.
  PingClock clock() const;
  // Why that clock: what the device reports of its completion timestamps.
  const std::string& clock_detail() const;

  // Posts one ping; false when the send queue is full or the post was refused (the ping is not
  // on the wire, so the caller counts it lost). Tokens should increase: of pings long
  // unanswered, the send stamps of the lowest tokens are dropped first.
  bool send_ping(const MeshEndpoint& peer, std::uint64_t token);

  struct Events {
    std::vector<PongReceived> pongs;
    std::vector<FollowUpReceived> follow_ups;  // only on the device clock, which asks for them
    std::vector<std::uint64_t> failed_sends;   // tokens whose send completed in error
    std::uint64_t pings_answered = 0;          // other hosts' pings this call answered
  };
  // Sleeps until a completion event, `wake_fd` becoming readable (-1: none) or `timeout`;
  // answers every ping that arrived and returns the answers to this host's pings.
  Events wait(std::chrono::milliseconds timeout, int wake_fd);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ibprobe::probes
