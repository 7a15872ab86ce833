#include "cm_connection.h"

#include <arpa/inet.h>
#include <endian.h>
#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <thread>

namespace ibprobe::probes::cm {
namespace {

using Clock = std::chrono::steady_clock;

// The longest single poll of the event channel: the peer check runs between polls.
constexpr auto kPollSlice = std::chrono::milliseconds(100);
// Address and route resolution get what is left of the run's deadline, at most this (the CM's
// own resolution retries within it).
constexpr auto kMaxResolveTime = std::chrono::milliseconds(5000);
constexpr int kListenBacklog = 64;

// What a connection request carries besides the QP number: the listener's token (only this
// run's initiator connects) and which of the run's QPs it is for. Big-endian on the wire.
struct RequestData {
  std::uint64_t token;
  std::uint32_t qp_index;
} __attribute__((packed));

EventChannel open_channel() {
  EventChannel channel(rdma_create_event_channel());
  if (!channel) {
    throw verbs::VerbsError("rdma_create_event_channel (is the rdma_ucm module loaded?)", errno);
  }
  // Non-blocking: every wait is a poll() bounded by the run's deadline.
  const int flags = fcntl(channel->fd, F_GETFL);
  if (flags < 0 || fcntl(channel->fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    throw verbs::VerbsError("fcntl(O_NONBLOCK) on the rdma_cm event channel", errno);
  }
  return channel;
}

// perftest's port spaces (create_rdma_resources): RDMA_PS_UDP for UD, whose ids librdmacm makes
// IBV_QPT_UD ones, RDMA_PS_TCP otherwise.
Id create_id(rdma_event_channel* channel, bool datagrams) {
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(channel, &id, nullptr, datagrams ? RDMA_PS_UDP : RDMA_PS_TCP) != 0) {
    throw verbs::VerbsError("rdma_create_id", errno);
  }
  return Id(id);
}

std::string device_of(const rdma_cm_id* id) {
  return id->verbs ? ibv_get_device_name(id->verbs->device) : "no device";
}

// Empty when `id` is bound to the probe's device and port; else where it is bound instead,
// against the probe's ("mlx5_1 port 1, not the probe's mlx5_0 port 1").
std::string bound_elsewhere(const rdma_cm_id* id, const LocalDevice& device) {
  if (device_of(id) == device.name && id->port_num == device.port) return "";
  return device_of(id) + " port " + std::to_string(id->port_num) + ", not the probe's " +
         device.name + " port " + std::to_string(device.port);
}

// The IB CM's reject reasons (IBTA 12.6.7.2) a probe meets; librdmacm 44 has no text for them.
std::string reject_reason(int status) {
  switch (status) {
    case 3:
      return "the peer's CM has no resources";
    case 4:
      return "timeout";
    case 8:
      return "invalid service ID: nothing listens at that port";
    case 27:
      return "insufficient responder resources";
    case 28:
      return "rejected by the peer";
    default:
      return "IB CM reject reason " + std::to_string(status);
  }
}

// An event other than the one waited for: what the CM said, in its own words.
std::string describe(const rdma_cm_event& event) {
  std::string text = rdma_event_str(event.event);
  if (event.event == RDMA_CM_EVENT_REJECTED) {
    text += " (" + reject_reason(event.status) + ")";
  } else if (event.status < 0) {
    text += std::string(" (") + std::strerror(-event.status) + ")";
  } else if (event.status > 0) {
    text += " (status " + std::to_string(event.status) + ")";
  }
  return text;
}

FailureKind kind_of(rdma_cm_event_type type) {
  switch (type) {
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_REJECTED:
    case RDMA_CM_EVENT_CONNECT_ERROR:
      return FailureKind::kUnreachable;
    case RDMA_CM_EVENT_DISCONNECTED:
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
      return FailureKind::kPeerLost;
    default:
      return FailureKind::kProtocol;
  }
}

Event next_event(rdma_event_channel* channel, const Wait& wait, const std::string& waiting_for) {
  for (;;) {
    rdma_cm_event* event = nullptr;
    if (rdma_get_cm_event(channel, &event) == 0) return Event(event);
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      throw verbs::VerbsError("rdma_get_cm_event", errno);
    if (wait.check_peer) wait.check_peer();
    const auto left = wait.deadline - Clock::now();
    if (left <= Clock::duration::zero()) {
      throw ProbeFailure("timed out: the run's deadline passed waiting for " + waiting_for,
                         FailureKind::kTimeout);
    }
    pollfd p{channel->fd, POLLIN, 0};
    const auto slice = std::min<Clock::duration>(left, kPollSlice);
    ::poll(&p, 1, static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(slice).count()));
  }
}

// An event the handshake did not expect. A peer that gave up says why on the control channel,
// but its connections' DREQ or REJ can come first: its reason, when it comes within a moment,
// is the failure reported.
[[noreturn]] void fail_on(const rdma_cm_event& event, const Wait& wait,
                          const std::string& waiting_for) {
  constexpr auto kPeerExplains = std::chrono::milliseconds(500);
  constexpr auto kPeerCheckEvery = std::chrono::milliseconds(20);
  const auto until = std::min(Clock::now() + kPeerExplains, wait.deadline);
  while (wait.check_peer && Clock::now() < until) {
    wait.check_peer();
    std::this_thread::sleep_for(kPeerCheckEvery);
  }
  throw ProbeFailure(
      "rdma_cm: waiting for " + waiting_for + " the connection manager reported " + describe(event),
      kind_of(event.event));
}

// The next event, which must be `expected` (for `id`, when given).
Event expect(rdma_event_channel* channel, const rdma_cm_id* id, rdma_cm_event_type expected,
             const Wait& wait, const std::string& waiting_for) {
  auto event = next_event(channel, wait, waiting_for);
  if (event->event != expected || (id && event->id != id)) fail_on(*event, wait, waiting_for);
  return event;
}

QpAttributes resolved(rdma_cm_id* id, const LocalDevice& device) {
  QpAttributes attrs;
  // A UD id answers for INIT alone (cma_ib_init_qp_attr): the rest is the QP's own, RTR and
  // RTS with nothing but a send PSN.
  if (device.datagrams) {
    attrs.init.qp_state = IBV_QPS_INIT;
    if (rdma_init_qp_attr(id, &attrs.init, &attrs.init_mask) != 0) {
      throw verbs::VerbsError("rdma_init_qp_attr(INIT)", errno);
    }
    return attrs;
  }
  for (auto [attr, mask, state, name] :
       {std::tuple{&attrs.init, &attrs.init_mask, IBV_QPS_INIT, "INIT"},
        std::tuple{&attrs.rtr, &attrs.rtr_mask, IBV_QPS_RTR, "RTR"},
        std::tuple{&attrs.rts, &attrs.rts_mask, IBV_QPS_RTS, "RTS"}}) {
    attr->qp_state = state;
    if (rdma_init_qp_attr(id, attr, mask) != 0) {
      throw verbs::VerbsError(std::string("rdma_init_qp_attr(") + name + ")", errno);
    }
  }
  // librdmacm's own workaround (cma.c, ucma_modify_qp_rtr): the kernel may set mask bits 21-23,
  // which mean RoCE-only attributes, for an InfiniBand port.
  if (device.infiniband) attrs.rtr_mask &= ~0xe00000;
  return attrs;
}

// The address with `port`, an IPv4-mapped IPv6 address as the IPv4 one (a dual-stack socket
// reports those; the CM resolves an IPv4 address through the IPv4 routing table).
sockaddr_storage with_port(const sockaddr_storage& address, std::uint16_t port) {
  sockaddr_storage out = address;
  if (address.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address);
    if (IN6_IS_ADDR_V4MAPPED(&v6.sin6_addr)) {
      out = {};
      auto& v4 = reinterpret_cast<sockaddr_in&>(out);
      v4.sin_family = AF_INET;
      std::memcpy(&v4.sin_addr, &v6.sin6_addr.s6_addr[12], sizeof(v4.sin_addr));
    }
  }
  if (out.ss_family == AF_INET) {
    reinterpret_cast<sockaddr_in&>(out).sin_port = htons(port);
  } else {
    reinterpret_cast<sockaddr_in6&>(out).sin6_port = htons(port);
  }
  return out;
}

// "192.0.2.1:4791" or "[2001:db8::1]:4791".
std::string address_text(const sockaddr* address) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (address->sa_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(address);
    inet_ntop(AF_INET, &v4->sin_addr, host, sizeof(host));
    return std::string(host) + ":" + std::to_string(ntohs(v4->sin_port));
  }
  const auto* v6 = reinterpret_cast<const sockaddr_in6*>(address);
  inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof(host));
  return "[" + std::string(host) + "]:" + std::to_string(ntohs(v6->sin6_port));
}

int resolve_timeout_ms(const Wait& wait) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(wait.deadline - Clock::now());
  return static_cast<int>(std::clamp(left, std::chrono::milliseconds(1), kMaxResolveTime).count());
}

rdma_conn_param connect_param(const ConnectParameters& ours, std::uint32_t qp_number) {
  rdma_conn_param param{};
  param.qp_num = qp_number;
  param.srq = ours.srq ? 1 : 0;
  param.responder_resources = ours.responder_resources;
  param.initiator_depth = ours.initiator_depth;
  param.retry_count = ours.retry_count;
  param.rnr_retry_count = ours.rnr_retry_count;
  return param;
}

}  // namespace

Acceptor::Acceptor(const sockaddr_storage& address, LocalDevice device)
    : device_(std::move(device)),
      channel_(open_channel()),
      listener_(create_id(channel_.get(), device_.datagrams)) {
  auto bind_to = with_port(address, 0);
  const std::string where = address_text(reinterpret_cast<const sockaddr*>(&bind_to));
  if (rdma_bind_addr(listener_.get(), reinterpret_cast<sockaddr*>(&bind_to)) != 0) {
    throw ProbeFailure("rdma_cm cannot listen at " + where + ": " + std::strerror(errno) +
                           " (with rdma_cm the initiator must name this host by an address of "
                           "its RDMA device's network interface: the RoCE netdev or IPoIB)",
                       FailureKind::kRejected);
  }
  if (const auto elsewhere = bound_elsewhere(listener_.get(), device_); !elsewhere.empty()) {
    throw ProbeFailure("rdma_cm: the address " + where + " belongs to " + elsewhere,
                       FailureKind::kRejected);
  }
  if (rdma_listen(listener_.get(), kListenBacklog) != 0) {
    throw verbs::VerbsError("rdma_listen at " + where, errno);
  }
  port_ = ntohs(rdma_get_src_port(listener_.get()));
  std::random_device random;
  token_ = (static_cast<std::uint64_t>(random()) << 32) | random();
}

// The requests and the RTUs of the connections accepted so far come in any order: the
// initiator connects its next QP as soon as its RTU for the last one is out.
void Acceptor::accept(const std::vector<std::uint32_t>& qp_numbers, const ConnectParameters& ours,
                      const ToRts& to_rts, const Wait& wait) {
  const std::size_t count = qp_numbers.size();
  std::vector<bool> taken(count, false);
  std::vector<rdma_cm_id*> accepted;
  std::size_t established = 0;
  while (accepted.size() < count || established < count) {
    const std::string what = std::to_string(accepted.size()) + " of " + std::to_string(count) +
                             " connection requests accepted at port " + std::to_string(port_) +
                             ", " + std::to_string(established) + " established";
    auto event = next_event(channel_.get(), wait, what);
    if (event->event == RDMA_CM_EVENT_ESTABLISHED &&
        std::ranges::find(accepted, event->id) != accepted.end()) {
      ++established;
      continue;
    }
    if (event->event != RDMA_CM_EVENT_CONNECT_REQUEST) fail_on(*event, wait, what);
    // The new id is this side's to destroy; it outlives the event, whose ack it waits for.
    connections_.emplace_back(event->id);
    rdma_cm_id* id = event->id;
    RequestData data{};
    const void* private_data =
        device_.datagrams ? event->param.ud.private_data : event->param.conn.private_data;
    const std::size_t private_data_len =
        device_.datagrams ? event->param.ud.private_data_len : event->param.conn.private_data_len;
    if (private_data && private_data_len >= sizeof(data)) {
      std::memcpy(&data, private_data, sizeof(data));
    }
    const std::uint64_t token = be64toh(data.token);
    const std::uint32_t index = be32toh(data.qp_index);
    // A request that is not this run's (a stranger at the port, a stale retry) is turned away
    // and the wait goes on: it must not take one of the run's QPs.
    if (token != token_ || index >= count || taken[index]) {
      spdlog::warn("rdma_cm: refused a connection request at port {} that is not this run's",
                   port_);
      rdma_reject(id, nullptr, 0);
      continue;
    }
    if (const auto elsewhere = bound_elsewhere(id, device_); !elsewhere.empty()) {
      rdma_reject(id, nullptr, 0);
      throw ProbeFailure("rdma_cm: the connection request came in through " + elsewhere,
                         FailureKind::kRejected);
    }
    auto attributes = resolved(id, device_);
    to_rts(index, attributes);
    auto param = connect_param(ours, qp_numbers[index]);
    if (rdma_accept(id, &param) != 0) throw verbs::VerbsError("rdma_accept", errno);
    taken[index] = true;
    accepted.push_back(id);
    // The SIDR_REP that rdma_accept sent ends a UD exchange: no RTU, no ESTABLISHED here.
    if (device_.datagrams) ++established;
  }
}

Connector::Connector(LocalDevice device) : device_(std::move(device)), channel_(open_channel()) {}

void Connector::connect(const sockaddr_storage& peer, std::uint16_t port, std::uint64_t token,
                        const std::vector<std::uint32_t>& qp_numbers, const ConnectParameters& ours,
                        const ToRts& to_rts, const Wait& wait) {
  auto destination = with_port(peer, port);
  auto* target = reinterpret_cast<sockaddr*>(&destination);
  const std::string where = address_text(target);
  for (std::size_t q = 0; q < qp_numbers.size(); ++q) {
    connections_.push_back(create_id(channel_.get(), device_.datagrams));
    rdma_cm_id* id = connections_.back().get();
    if (rdma_resolve_addr(id, nullptr, target, resolve_timeout_ms(wait)) != 0) {
      throw verbs::VerbsError("rdma_resolve_addr(" + where + ")", errno);
    }
    expect(channel_.get(), id, RDMA_CM_EVENT_ADDR_RESOLVED, wait,
           "the resolution of the address " + where);
    if (const auto elsewhere = bound_elsewhere(id, device_); !elsewhere.empty()) {
      throw ProbeFailure("rdma_cm routes " + where + " through " + elsewhere +
                             " (the route to the peer's address leaves through another device)",
                         FailureKind::kRejected);
    }
    // As perftest -R: the TOS only when one is asked for, the ACK timeout always (RC).
    if (ours.type_of_service != 0) {
      std::uint8_t tos = ours.type_of_service;
      if (rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof(tos)) != 0) {
        throw verbs::VerbsError("rdma_set_option(TOS)", errno);
      }
    }
    // (A datagram is acknowledged by nothing: the CM refuses an ACK timeout for a UD id.)
    std::uint8_t ack_timeout = ours.ack_timeout;
    if (!device_.datagrams && rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT,
                                              &ack_timeout, sizeof(ack_timeout)) != 0) {
      throw verbs::VerbsError("rdma_set_option(ACK_TIMEOUT)", errno);
    }
    if (rdma_resolve_route(id, resolve_timeout_ms(wait)) != 0) {
      throw verbs::VerbsError("rdma_resolve_route(" + where + ")", errno);
    }
    expect(channel_.get(), id, RDMA_CM_EVENT_ROUTE_RESOLVED, wait, "the route to " + where);
    const RequestData data{htobe64(token), htobe32(static_cast<std::uint32_t>(q))};
    auto param = connect_param(ours, qp_numbers[q]);
    param.private_data = &data;
    param.private_data_len = sizeof(data);
    if (rdma_connect(id, &param) != 0) throw verbs::VerbsError("rdma_connect", errno);
    const std::string which =
        "QP " + std::to_string(q + 1) + " of " + std::to_string(qp_numbers.size()) + " at " + where;
    if (device_.datagrams) {
      // The SIDR_REP: the responder's QP number and Q_Key, and the address vector the CM
      // resolved to it (perftest's rdma_cm_establish_ud_connection).
      auto event = expect(channel_.get(), id, RDMA_CM_EVENT_ESTABLISHED, wait,
                          "the responder's SIDR_REP for " + which);
      auto attributes = resolved(id, device_);
      const rdma_ud_param& ud = event->param.ud;
      attributes.datagram = DatagramPeer{ud.ah_attr, ud.qp_num, ud.qkey};
      to_rts(q, attributes);
      continue;
    }
    expect(channel_.get(), id, RDMA_CM_EVENT_CONNECT_RESPONSE, wait,
           "the responder's REP for " + which);
    auto attributes = resolved(id, device_);
    to_rts(q, attributes);
    if (rdma_establish(id) != 0) throw verbs::VerbsError("rdma_establish", errno);
  }
}

}  // namespace ibprobe::probes::cm
