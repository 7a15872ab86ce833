// The mesh's data path: low-rate RDMA pings over one UD queue pair per device, as R-Pingmesh
// does, so a host pings any number of peers without a connection to each. The same QP answers
// the pings of other hosts. Waiting is on the completion channel's file descriptor, so an idle
// mesh sleeps in poll() instead of spinning on the CQ.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ibprobe/mesh_endpoint.h"
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
};

// Learns a peer's endpoint from its exporter's responder at HOST:PORT, authenticated with
// `shared_secret` when it is not empty. Throws ProbeFailure saying why it could not.
MeshEndpoint fetch_mesh_endpoint(const std::string& host, const std::string& port,
                                 const std::string& shared_secret,
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
  PingClock clock() const;
  // Why that clock: what the device reports of its completion timestamps.
  const std::string& clock_detail() const;

  // Posts one ping; false when the send queue is full or the post was refused (the ping is not
  // on the wire, so the caller counts it lost).
  bool send_ping(const MeshEndpoint& peer, std::uint64_t token);

  struct Events {
    std::vector<PongReceived> pongs;
    std::vector<std::uint64_t> failed_sends;  // tokens whose send completed in error
    std::uint64_t pings_answered = 0;         // other hosts' pings this call answered
  };
  // Sleeps until a completion event, `wake_fd` becoming readable (-1: none) or `timeout`;
  // answers every ping that arrived and returns the answers to this host's pings.
  Events wait(std::chrono::milliseconds timeout, int wake_fd);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ibprobe::probes
