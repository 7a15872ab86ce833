// Where a host's mesh pinger is reached: what its responder tells peers over the control
// channel, and all a pinger needs to address a UD datagram to it.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace ibprobe::probes {

struct MeshEndpoint {
  std::array<std::uint8_t, 16> gid{};
  std::uint16_t lid = 0;  // InfiniBand: the destination LID; 0 on RoCE
  std::uint32_t qpn = 0;
  std::uint32_t qkey = 0;
  std::string gid_family;  // ipv4, ipv6 or ib

  bool operator==(const MeshEndpoint&) const = default;
};

}  // namespace ibprobe::probes
