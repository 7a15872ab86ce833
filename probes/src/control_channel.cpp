#include "control_channel.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
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

// Waits for `events` on fd until the deadline, or until `stop` is requested.
void wait_ready(int fd, short events, ControlChannel::Deadline deadline, const char* what,
                const StopSignal* stop) {
  while (true) {
    pollfd p[2] = {{fd, events, 0}, {stop ? stop->fd() : -1, POLLIN, 0}};
    const int rc = ::poll(p, 2, remaining_ms(deadline));
    if (stop && stop->stop_requested()) {
      throw ProbeFailure("the probe was cancelled", FailureKind::kCancelled);
    }
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

std::vector<IpAddress> ControlChannel::resolve(const std::string& host, const std::string& port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    throw ProbeFailure("cannot resolve " + host + ":" + port + ": " + gai_strerror(rc),
                       FailureKind::kUnreachable);
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owner(found, ::freeaddrinfo);
  std::vector<IpAddress> addresses;
  for (const addrinfo* a = found; a; a = a->ai_next) {
    IpAddress address{};
    if (a->ai_family == AF_INET) {
      address[10] = address[11] = 0xff;
      std::memcpy(address.data() + 12, &reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr,
                  4);
    } else if (a->ai_family == AF_INET6) {
      std::memcpy(address.data(), &reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr,
                  16);
    } else {
      continue;
    }
    addresses.push_back(address);
  }
  return addresses;
}

ControlChannel ControlChannel::connect(const std::string& host, const std::string& port,
                                       const std::vector<IpAddress>& addresses, Deadline deadline,
                                       const StopSignal* stop) {
  unsigned port_number = 0;
  std::from_chars(port.data(), port.data() + port.size(), port_number);
  std::string last_error = "no address";
  for (const auto& address : addresses) {
    sockaddr_storage storage{};
    socklen_t length = 0;
    static constexpr std::uint8_t kMappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::memcmp(address.data(), kMappedPrefix, sizeof(kMappedPrefix)) == 0) {
      auto& v4 = reinterpret_cast<sockaddr_in&>(storage);
      v4.sin_family = AF_INET;
      v4.sin_port = htons(static_cast<std::uint16_t>(port_number));
      std::memcpy(&v4.sin_addr, address.data() + 12, 4);
      length = sizeof(v4);
    } else {
      auto& v6 = reinterpret_cast<sockaddr_in6&>(storage);
      v6.sin6_family = AF_INET6;
      v6.sin6_port = htons(static_cast<std::uint16_t>(port_number));
      std::memcpy(&v6.sin6_addr, address.data(), 16);
      length = sizeof(v6);
    }
    const int fd = ::socket(storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    ControlChannel channel(fd, stop);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&storage), length) != 0 &&
        errno != EINPROGRESS) {
      last_error = std::strerror(errno);
      continue;
    }
    try {
      wait_ready(fd, POLLOUT, deadline, "connecting", stop);
    } catch (const ProbeFailure& failure) {
      if (failure.kind() == FailureKind::kCancelled) throw;
      last_error = "connection timed out";
      continue;
    }
    int error = 0;
    socklen_t error_length = sizeof(error);
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &error_length);
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

namespace {

// One end of a connected socket: getpeername's or getsockname's.
sockaddr_storage end_of(int fd, int (*query)(int, sockaddr*, socklen_t*), const char* call,
                        const std::string& peer) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (query(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    throw ProbeFailure("control connection to " + peer + ": " + call + ": " + std::strerror(errno),
                       FailureKind::kPeerLost);
  }
  return address;
}

}  // namespace

sockaddr_storage ControlChannel::peer_address() const {
  return end_of(fd_.get(), ::getpeername, "getpeername", peer_);
}

sockaddr_storage ControlChannel::local_address() const {
  return end_of(fd_.get(), ::getsockname, "getsockname", peer_);
}

ControlChannel::ControlChannel(int fd, const StopSignal* stop)
    : fd_(fd), peer_(describe_peer(fd)), stop_(stop) {
  const int one = 1;
  ::setsockopt(fd_.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // A peer that vanishes without a FIN (host frozen, cable pulled, power lost) would otherwise
  // hold this side's QPs, buffers and port gate until the run's deadline: keepalive probes
  // after 2 s of silence, and TCP_USER_TIMEOUT ends the connection once probes or data have
  // gone unanswered for 5 s. A live peer's kernel answers the probes whatever its process does.
  const int idle_seconds = 2, interval_seconds = 1, probes = 3;
  const unsigned user_timeout_ms = 5000;
  ::setsockopt(fd_.get(), SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  ::setsockopt(fd_.get(), IPPROTO_TCP, TCP_KEEPIDLE, &idle_seconds, sizeof(idle_seconds));
  ::setsockopt(fd_.get(), IPPROTO_TCP, TCP_KEEPINTVL, &interval_seconds, sizeof(interval_seconds));
  ::setsockopt(fd_.get(), IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
  ::setsockopt(fd_.get(), IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof(user_timeout_ms));
}

void ControlChannel::send(const protocol::Message& message, Deadline deadline) {
  const auto frame = protocol::encode(message);
  std::size_t sent = 0;
  while (sent < frame.size()) {
    const ssize_t n = ::send(fd_.get(), frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      wait_ready(fd_.get(), POLLOUT, deadline, "sending to the peer", stop_);
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
    const ssize_t n = ::recv(fd_.get(), data + got, size - got, 0);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
    } else if (n == 0) {
      throw ProbeFailure("control connection closed by " + peer_, FailureKind::kPeerLost);
    } else if (errno == EAGAIN || errno == EINTR) {
      wait_ready(fd_.get(), POLLIN, deadline, ("waiting for " + peer_).c_str(), stop_);
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
  if (!header) {
    throw ProbeFailure("bad frame from " + peer_ + ": " + header.error().message,
                       FailureKind::kProtocol);
  }
  std::vector<std::uint8_t> body(header->body_length);
  read_exactly(body.data(), body.size(), deadline);
  auto message = protocol::decode_body(*header, body);
  if (!message) {
    throw ProbeFailure("bad message from " + peer_ + ": " + message.error().message,
                       FailureKind::kProtocol);
  }
  return std::move(*message);
}

void ControlChannel::check_open(bool message_waiting_is_open) const {
  pollfd p{fd_.get(), POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return;
  std::uint8_t byte;
  // One look decides: the peer's last message and its close can arrive between two looks.
  const ssize_t n = ::recv(fd_.get(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0 && message_waiting_is_open) return;
  if (n < 0 && errno == ETIMEDOUT) throw_stopped_answering();
  if (n == 0 || (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
    throw ProbeFailure(peer_ + " closed the control connection mid-run (its side stopped)",
                       FailureKind::kPeerLost);
  }
}

void ControlChannel::check_still_open() const {
  check_open(false);
}

void ControlChannel::check_open_or_message_waiting() const {
  check_open(true);
}

void ControlChannel::fail_if_peer_spoke() {
  check_open_or_message_waiting();
  if (has_pending_message()) {
    fail_unexpected(receive(Clock::now() + std::chrono::seconds(1)), "the end of the run");
  }
}

bool ControlChannel::has_pending_message() const {
  std::uint8_t byte;
  const ssize_t n = ::recv(fd_.get(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
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
