// For tests that play the other end of the control protocol by hand: a responder that
// misbehaves, or an initiator that never authenticates.
#pragma once

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <cstdint>
#include <stdexcept>

#include "ibprobe/probes.h"
#include "protocol.h"

namespace ibprobe::probes::raw_peer {

inline constexpr const char* kSecret = "correct horse battery staple";
// A port on this device makes a run fail once it opens the device, after the handshake.
inline constexpr const char* kMissingDevice = "no_such_rdma_device";

inline void write_all(int fd, const protocol::Bytes& bytes) {
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
}

// One whole frame from the other end, or an exception when the connection closes first.
inline protocol::Message read_frame(int fd) {
  protocol::Bytes header(protocol::kHeaderSize);
  if (::recv(fd, header.data(), header.size(), MSG_WAITALL) !=
      static_cast<ssize_t>(header.size())) {
    throw std::runtime_error("connection closed before a frame");
  }
  const auto parsed = protocol::decode_header(header).value();
  protocol::Bytes body(parsed.body_length);
  if (::recv(fd, body.data(), body.size(), MSG_WAITALL) != static_cast<ssize_t>(body.size())) {
    throw std::runtime_error("connection closed inside a frame");
  }
  return protocol::decode_body(parsed, body).value();
}

// A write bandwidth run that gives up after `timeout_seconds`.
inline ProbeSpec write_bw_spec(std::uint32_t timeout_seconds) {
  auto spec = default_spec(Operation::kWrite, TestKind::kBandwidth);
  spec.timeout_seconds = timeout_seconds;
  return spec;
}

}  // namespace ibprobe::probes::raw_peer
