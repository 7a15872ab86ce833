// The responder: serves probe requests on its TCP port, one run at a time, on its own thread.
#include <fmt/format.h>
#include <netdb.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <thread>

#include "control_channel.h"
#include "ibprobe/unique_fd.h"
#include "ibprobe/verbs_probe.h"
#include "peer_auth.h"
#include "rc_session.h"
#include "run_common.h"
#include "verify_cases.h"

namespace ibprobe::probes {
namespace {

using Clock = std::chrono::steady_clock;

// The class of a responder-side failure, as the initiator will report it: a spec this host
// cannot serve (a NUMA node it lacks) is a refusal, its own deadline a timeout, its device a
// verbs failure; the rest is the run lost on the peer's side.
protocol::ErrorCode error_code_for(const std::exception& e) {
  const auto* failure = dynamic_cast<const ProbeFailure*>(&e);
  if (!failure) return protocol::ErrorCode::kInternal;
  switch (failure->kind()) {
    case FailureKind::kRejected:
      return protocol::ErrorCode::kBadRequest;
    case FailureKind::kTimeout:
      return protocol::ErrorCode::kTimeout;
    case FailureKind::kVerbs:
      return protocol::ErrorCode::kVerbs;
    default:
      return protocol::ErrorCode::kInternal;
  }
}

// The receiving side's verdict for whoever reads the responder's log; each error's offset and
// bytes are logged at debug level as they are found.
void log_validation(const std::string& peer, const ValidationReport& v) {
  spdlog::log(v.errors > 0 ? spdlog::level::warn : spdlog::level::info,
              "probe validation for {}: received={} checked={} errors={} skipped_overwritten={} "
              "races={} rechecks={} tail_checks={}{}{}",
              peer, v.messages_received, v.checked, v.errors, v.skipped_overwritten, v.races,
              v.rechecks, v.tail_checks,
              v.first_error.empty() ? "" : " first_error: ", v.first_error);
}

// The mesh address exchange, answered on the connection that asked: nothing is allocated.
void answer_mesh_address(ControlChannel& channel, const std::optional<MeshEndpoint>& endpoint,
                         Clock::time_point deadline) {
  if (!endpoint) {
    channel.send(protocol::Error{protocol::ErrorCode::kBadRequest,
                                 "the mesh is off on this exporter: no pings answered here"},
                 deadline);
    return;
  }
  channel.send(protocol::MeshAddress{endpoint->gid, endpoint->lid, endpoint->qpn, endpoint->qkey,
                                     endpoint->gid_family},
               deadline);
}

// One probe run, start to end; the session's verbs resources go with the stack frame.
void serve_accepted(ControlChannel& channel, const ValidSpec& valid, const LocalPort& local) {
  const ProbeSpec& spec = valid.spec();
  // The initiator's whole run is bounded by the same timeout: setup, run and result here.
  const auto deadline = Clock::now() + std::chrono::seconds(spec.timeout_seconds);
  RcSession session(local, spec, Side::kResponder);
  channel.send(protocol::ProbeAccept{}, deadline);
  auto endpoints = session.local_endpoints();
  // rdma_cm: the initiator connects to the address it reached this host at.
  if (spec.rdma_cm) endpoints.cm = session.listen_for_connections(channel.local_address());
  channel.send(endpoints, deadline);
  const auto remote = channel.expect<protocol::QpInfo>(deadline, "the initiator's QPs");
  if (spec.rdma_cm) {
    session.accept_connections(remote,
                               cm::Wait{deadline, [&channel] { channel.check_still_open(); }});
  } else {
    session.connect(remote);
  }
  protocol::Result result;
  result.before = snapshot_after_lifespan(local);
  channel.send(protocol::Ready{}, deadline);

  const RunGuard guard{deadline, [&channel] { channel.check_still_open(); },
                       [&channel] { return channel.has_pending_message(); },
                       std::chrono::seconds(spec.timeout_seconds)};
  if (spec.bidirectional) {
    // Both sides post (perftest's -b): this side measures its own direction as the
    // initiator measures its.
    result.bandwidth = session.run_bandwidth(guard);
  } else if (spec.test == TestKind::kLatency) {
    session.serve_latency(guard);
  } else if (spec.operation == Operation::kSend) {
    result.messages_received = session.serve_send_bandwidth(guard);
  } else if (spec.validation && spec.operation == Operation::kWrite) {
    session.serve_write_validation(guard);
  }
  channel.expect<protocol::Ready>(deadline, "the end of the run");
  result.after = snapshot_after_lifespan(local);
  result.checks = session.preflight_checks();
  result.facts = session.facts();
  if (spec.validation) {
    result.validation = session.validation();
    log_validation(channel.peer(), result.validation.value());
  }
  channel.send(result, deadline);
}

// A peer's spec enters here: checked against this side's rules and its own limits before
// anything is allocated for it.
void serve_probe(ControlChannel& channel, const protocol::ProbeRequest& request,
                 const LocalPort& local, const Limits& limits, Clock::time_point hello_deadline) {
  const auto valid = validate_within(request.spec, limits);
  if (!valid) {
    channel.send(protocol::ProbeReject{valid.error().message()}, hello_deadline);
    return;
  }
  serve_accepted(channel, *valid, local);
}

}  // namespace

struct Responder::Impl {
  Impl(const std::string& host, const std::string& port, LocalPort local, ResponderOptions options);
  ~Impl();
  void serve();
  void handle(int fd);
  // Tells an initiator that arrives during another run that the port is busy, and closes.
  void refuse_busy(int fd);

  LocalPort local_;
  ResponderOptions options_;
  UniqueFd listen_fd_;
  int port_ = 0;
  // Requested by the destructor: wakes serve() and ends the run in progress at its next wait.
  std::stop_source stopping_;
  std::unique_ptr<StopSignal> stop_signal_;
  std::atomic<int> active_fd_ = -1;
  std::thread thread_;
  std::thread run_thread_;  // the run being served, while serve() keeps answering the rest
};

Responder::Responder(const std::string& host, const std::string& port, LocalPort local,
                     ResponderOptions options)
    : impl_(std::make_unique<Impl>(host, port, std::move(local), std::move(options))) {}

Responder::~Responder() = default;

int Responder::port() const {
  return impl_->port_;
}

Responder::Impl::Impl(const std::string& host, const std::string& port, LocalPort local,
                      ResponderOptions options)
    : local_(std::move(local)), options_(std::move(options)) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (const int rc =
          ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found);
      rc != 0) {
    throw std::runtime_error("responder address " + host + ":" + port + ": " + gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addresses(found, ::freeaddrinfo);
  listen_fd_.reset(::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const int one = 1;
  ::setsockopt(listen_fd_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (!listen_fd_ || ::bind(listen_fd_.get(), found->ai_addr, found->ai_addrlen) != 0 ||
      ::listen(listen_fd_.get(), 8) != 0) {
    const std::string reason = std::strerror(errno);
    throw std::runtime_error("cannot listen for probes on " + host + ":" + port + ": " + reason);
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  ::getsockname(listen_fd_.get(), reinterpret_cast<sockaddr*>(&bound), &length);
  char port_text[NI_MAXSERV];
  ::getnameinfo(reinterpret_cast<sockaddr*>(&bound), length, nullptr, 0, port_text,
                sizeof(port_text), NI_NUMERICSERV);
  port_ = std::atoi(port_text);
  if (!options_.gate) options_.gate = std::make_shared<ProbeGate>();
  stop_signal_ = std::make_unique<StopSignal>(stopping_.get_token());
  thread_ = std::thread([this] { serve(); });
}

Responder::Impl::~Impl() {
  stopping_.request_stop();
  if (const int fd = active_fd_.load(); fd >= 0) ::shutdown(fd, SHUT_RDWR);
  thread_.join();
  if (run_thread_.joinable()) run_thread_.join();
}

void Responder::Impl::serve() {
  while (!stop_signal_->stop_requested()) {
    pollfd p[2] = {{listen_fd_.get(), POLLIN, 0}, {stop_signal_->fd(), POLLIN, 0}};
    if (::poll(p, 2, -1) <= 0 || !(p[0].revents & POLLIN)) continue;
    const int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;
    if (!options_.gate->try_enter()) {
      refuse_busy(fd);
      continue;
    }
    // The previous run has left the gate, so its thread is ending or ended.
    if (run_thread_.joinable()) run_thread_.join();
    run_thread_ = std::thread([this, fd] {
      handle(fd);
      options_.gate->leave();
    });
  }
}

void Responder::Impl::refuse_busy(int fd) {
  ControlChannel channel(fd);
  try {
    channel.send(protocol::Error{protocol::ErrorCode::kBusy,
                                 "busy: another probe is running on " + local_.device + " port " +
                                     std::to_string(local_.port) + "; try again later"},
                 Clock::now() + std::chrono::milliseconds(200));
  } catch (const std::exception&) {
    // An initiator that cannot take the answer learns from the closed connection.
    return;
  }
  // Closing with the initiator's hello unread would reset the connection and could destroy the
  // answer in flight; reading what has arrived lets the close be an orderly one.
  // The reading is bounded in time and bytes: this is the accepting thread, and an initiator
  // that keeps sending must not hold it from answering the others.
  ::shutdown(fd, SHUT_WR);
  constexpr auto kDrainFor = std::chrono::milliseconds(200);
  constexpr std::size_t kDrainBytes = 64 * 1024;
  const auto until = Clock::now() + kDrainFor;
  std::size_t drained = 0;
  std::uint8_t sink[512];
  while (drained < kDrainBytes) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    const ssize_t n = ::recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
    if (n <= 0) break;
    drained += static_cast<std::size_t>(n);
  }
}

// One connection: the handshake, then the handler of the request it brings. Whatever goes wrong
// is told to the initiator as an Error when the connection still stands.
void Responder::Impl::handle(int fd) {
  ControlChannel channel(fd, stop_signal_.get());
  // Published for the destructor while the run lasts; withdrawn before the channel closes fd.
  active_fd_ = fd;
  struct Withdraw {
    std::atomic<int>& slot;
    ~Withdraw() { slot = -1; }
  } withdraw{active_fd_};
  if (stop_signal_->stop_requested()) return;
  // Until the request says how long the run may take, the stranger gets the handshake's bound.
  const auto hello_deadline = Clock::now() + kHandshakeTimeout;
  try {
    const auto hello = channel.expect<protocol::Hello>(hello_deadline, "the initiator's hello");
    if (hello.protocol_version != protocol::kProtocolVersion) {
      channel.send(
          protocol::Error{protocol::ErrorCode::kBadRequest,
                          "incompatible protocol version " +
                              std::to_string(hello.protocol_version) + " (this side speaks " +
                              std::to_string(protocol::kProtocolVersion) + ")"},
          hello_deadline);
      return;
    }
    // Strangers are turned away here, before anything is allocated for them.
    peer_auth::ResponderAuth auth(options_.shared_secret);
    const auto answer = auth.answer(hello, kSoftwareVersion);
    if (!answer) {
      channel.send(answer.error(), hello_deadline);
      return;
    }
    channel.send(*answer, hello_deadline);
    const auto message = channel.receive(hello_deadline);
    // Every kind of request proves the secret for itself before its handler sees it.
    const auto proven = [&](const auto& request) {
      const auto checked = auth.check(request);
      if (!checked) channel.send(checked.error(), hello_deadline);
      return checked.has_value();
    };
    if (const auto* probe = std::get_if<protocol::ProbeRequest>(&message)) {
      if (proven(*probe)) serve_probe(channel, *probe, local_, options_.limits, hello_deadline);
    } else if (const auto* verify = std::get_if<protocol::VerifyRequest>(&message)) {
      if (proven(*verify)) {
        verify::serve_verify(channel, *verify, local_, options_.limits, hello_deadline);
      }
    } else if (const auto* mesh = std::get_if<protocol::MeshAddressRequest>(&message)) {
      if (proven(*mesh)) answer_mesh_address(channel, options_.mesh_endpoint, hello_deadline);
    } else {
      channel.fail_unexpected(message, "the probe request");
    }
  } catch (const std::exception& e) {
    try {
      channel.send(protocol::Error{error_code_for(e), e.what()},
                   Clock::now() + std::chrono::seconds(1));
    } catch (const std::exception&) {
      // The connection is gone as well; nothing left to tell.
    }
  }
}

}  // namespace ibprobe::probes
