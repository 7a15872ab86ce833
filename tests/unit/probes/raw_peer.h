// For tests that play the other end of the control protocol by hand: a responder that
// misbehaves, or an initiator that never authenticates.
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>

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

struct Listener {
  int fd;
  int port;
};

inline sockaddr_in loopback_address(int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return address;
}

// A socket listening on a free loopback port. Throws when it cannot, which ends the test.
inline Listener listen_on_loopback() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address = loopback_address(0);  // port 0: the kernel picks a free one
  socklen_t length = sizeof(address);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
      ::listen(fd, 1) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    const int error = errno;
    if (fd >= 0) ::close(fd);
    throw std::system_error(error, std::generic_category(), "listening on loopback");
  }
  return {fd, ntohs(address.sin_port)};
}

// A socket connected to `port` on loopback, or -1 when nothing accepts there.
inline int connect_to_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const sockaddr_in address = loopback_address(port);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A TCP listener on loopback that answers one connection with a scripted behaviour.
class FakeResponder {
 public:
  using Script = std::function<void(int fd)>;

  explicit FakeResponder(Script script) {
    const auto listener = listen_on_loopback();
    listen_fd_ = listener.fd;
    port_ = listener.port;
    thread_ = std::thread([this, script = std::move(script)] {
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) return;
      script(fd);
      ::close(fd);
    });
  }
  ~FakeResponder() {
    ::shutdown(listen_fd_, SHUT_RDWR);
    thread_.join();
    ::close(listen_fd_);
  }
  std::string port() const { return std::to_string(port_); }

 private:
  int listen_fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

// A write bandwidth run that gives up after `timeout_seconds`.
inline ProbeSpec write_bw_spec(std::uint32_t timeout_seconds) {
  auto spec = default_spec(Operation::kWrite, TestKind::kBandwidth);
  spec.timeout_seconds = timeout_seconds;
  return spec;
}

}  // namespace ibprobe::probes::raw_peer
