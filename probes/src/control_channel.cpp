#include "control_channel.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "ibprobe/probe_failure.h"

namespace ibprobe::probes {
namespace {

using Clock = std::chrono::steady_clock;

int remaining_ms(ControlChannel::Deadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() <= 0 ? 0 : static_cast<int>(std::min<long long>(left.count(), 1 << 30));
}

void wait_ready(int fd, short events, ControlChannel::Deadline deadline, const char* what) {
  while (true) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, remaining_ms(deadline));
    if (rc > 0) return;
    if (rc == 0) throw ProbeFailure(std::string("timed out ") + what, FailureKind::kTimeout);
    if (errno != EINTR)
      throw ProbeFailure(std::string("poll failed ") + what, FailureKind::kInternal);
  }
}

FailureKind failure_kind(protocol::ErrorCode code) {
  switch (code) {
    case protocol::ErrorCode::kBadRequest:
    case protocol::ErrorCode::kLimitExceeded:
    case protocol::ErrorCode::kBusy:
      return FailureKind::kRejected;
    case protocol::ErrorCode::kUnauthorized:
      return FailureKind::kUnauthorized;
    case protocol::ErrorCode::kTimeout:
      return FailureKind::kTimeout;
    case protocol::ErrorCode::kVerbs:
      return FailureKind::kVerbs;
    case protocol::ErrorCode::kInternal:
      break;
  }
  // The responder's own run broke (its verbs, its link): the run is lost on the peer's side.
  return FailureKind::kPeerLost;
}

std::string describe_peer(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return "peer";
  char host[NI_MAXHOST], port[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&address), length, host, sizeof(host), port,
                    sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "peer";
  }
  return std::string(host) + ":" + port;
}

}  // namespace

ControlChannel ControlChannel::connect(const std::string& host, const std::string& port,
                                       Deadline deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    throw ProbeFailure("cannot resolve " + host + ":" + port + ": " + gai_strerror(rc),
                       FailureKind::kUnreachable);
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addresses(found, ::freeaddrinfo);
  std::string last_error = "no address";
  for (const addrinfo* a = addresses.get(); a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    ControlChannel channel(fd);
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      last_error = std::strerror(errno);
      continue;
    }
    try {
      wait_ready(fd, POLLOUT, deadline, "connecting");
    } catch (const ProbeFailure&) {
      last_error = "connection timed out";
      continue;
    }
    int error = 0;
    socklen_t length = sizeof(error);
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
    if (error != 0) {
      last_error = std::strerror(error);
      continue;
    }
    channel.peer_ = host + ":" + port;
    return channel;
  }
  throw ProbeFailure("cannot connect to " + host + ":" + port + ": " + last_error,
                     FailureKind::kUnreachable);
}

ControlChannel::ControlChannel(int fd) : fd_(fd), peer_(describe_peer(fd)) {
  const int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // A peer that vanishes without a FIN (host frozen, cable pulled, power lost) would otherwise
  // hold this side's QPs, buffers and port gate until the run's deadline: keepalive probes
  // after 2 s of silence, and TCP_USER_TIMEOUT ends the connection once probes or data have
  // gone unanswered for 5 s. A live peer's kernel answers the probes whatever its process does.
  const int idle_seconds = 2, interval_seconds = 1, probes = 3;
  const unsigned user_timeout_ms = 5000;
  ::setsockopt(fd_, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  ::setsockopt(fd_, IPPROTO_TCP, TCP_KEEPIDLE, &idle_seconds, sizeof(idle_seconds));
  ::setsockopt(fd_, IPPROTO_TCP, TCP_KEEPINTVL, &interval_seconds, sizeof(interval_seconds));
  ::setsockopt(fd_, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
  ::setsockopt(fd_, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof(user_timeout_ms));
}

ControlChannel::ControlChannel(ControlChannel&& other) noexcept
    : fd_(other.fd_), peer_(std::move(other.peer_)) {
  other.fd_ = -1;
}

ControlChannel::~ControlChannel() {
  if (fd_ >= 0) ::close(fd_);
}

void ControlChannel::send(const protocol::Message& message, Deadline deadline) {
  const auto frame = protocol::encode(message);
  std::size_t sent = 0;
  while (sent < frame.size()) {
    const ssize_t n = ::send(fd_, frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      wait_ready(fd_, POLLOUT, deadline, "sending to the peer");
    } else {
      throw ProbeFailure(
          "control connection to " + peer_ + " lost while sending: " + std::strerror(errno),
          FailureKind::kPeerLost);
    }
  }
}

void ControlChannel::read_exactly(std::uint8_t* data, std::size_t size, Deadline deadline) {
  std::size_t got = 0;
  while (got < size) {
    const ssize_t n = ::recv(fd_, data + got, size - got, 0);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
    } else if (n == 0) {
      throw ProbeFailure("control connection closed by " + peer_, FailureKind::kPeerLost);
    } else if (errno == EAGAIN || errno == EINTR) {
      wait_ready(fd_, POLLIN, deadline, ("waiting for " + peer_).c_str());
    } else {
      throw ProbeFailure("control connection to " + peer_ + " lost: " + std::strerror(errno),
                         FailureKind::kPeerLost);
    }
  }
}

protocol::Message ControlChannel::receive(Deadline deadline) {
  std::uint8_t header_bytes[protocol::kHeaderSize];
  read_exactly(header_bytes, sizeof(header_bytes), deadline);
  const auto header = protocol::decode_header(header_bytes);
  if (const auto* error = std::get_if<protocol::DecodeError>(&header)) {
    throw ProbeFailure("bad frame from " + peer_ + ": " + error->message, FailureKind::kProtocol);
  }
  const auto& parsed = std::get<protocol::FrameHeader>(header);
  std::vector<std::uint8_t> body(parsed.body_length);
  read_exactly(body.data(), body.size(), deadline);
  auto message = protocol::decode_body(parsed, body);
  if (const auto* error = std::get_if<protocol::DecodeError>(&message)) {
    throw ProbeFailure("bad message from " + peer_ + ": " + error->message, FailureKind::kProtocol);
  }
  return std::get<protocol::Message>(std::move(message));
}

void ControlChannel::check_still_open() const {
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return;
  std::uint8_t byte;
  const ssize_t n = ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n < 0 && errno == ETIMEDOUT) throw_stopped_answering();
  if (n == 0 || (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
    throw ProbeFailure(peer_ + " closed the control connection mid-run (its side stopped)",
                       FailureKind::kPeerLost);
  }
}

void ControlChannel::fail_if_peer_spoke() {
  if (has_pending_message()) {
    fail_unexpected(receive(Clock::now() + std::chrono::seconds(1)), "the end of the run");
  }
  check_still_open();
}

bool ControlChannel::has_pending_message() const {
  std::uint8_t byte;
  const ssize_t n = ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  // The socket reports its error once: the one read that sees it says what it was.
  if (n < 0 && errno == ETIMEDOUT) throw_stopped_answering();
  return n > 0;
}

void ControlChannel::throw_stopped_answering() const {
  throw ProbeFailure(peer_ +
                         " stopped answering mid-run: no reply to TCP keepalive or data for 5 s "
                         "(its host froze, or the path to it is cut)",
                     FailureKind::kPeerLost);
}

void ControlChannel::fail_unexpected(const protocol::Message& message, const char* what) const {
  if (const auto* error = std::get_if<protocol::Error>(&message)) {
    throw ProbeFailure(peer_ + " reported an error: " + error->text, failure_kind(error->code));
  }
  if (const auto* reject = std::get_if<protocol::ProbeReject>(&message)) {
    throw ProbeFailure(peer_ + " rejected the probe: " + reject->reason, FailureKind::kRejected);
  }
  throw ProbeFailure(std::string("unexpected message from ") + peer_ + " while waiting for " + what,
                     FailureKind::kProtocol);
}

}  // namespace ibprobe::probes
