// Connections through the RDMA connection manager (librdmacm), perftest's -R. The CM resolves the
// peer's IP address to a path and carries QP numbers and PSNs in its REQ, REP and RTU; the QPs
// stay the probe's own (rdma_cm's mode for QPs not created on the rdma_cm_id), so each side moves
// them to RTS itself, with the attributes the CM resolved (rdma_init_qp_attr) and the spec's
// knobs over them, as librdmacm does for QPs it owns (cma.c: ucma_modify_qp_rtr/rts). UD QPs are
// "connected" as perftest -c UD -R connects them: in RDMA_PS_UDP, where rdma_connect is a SIDR
// exchange (SIDR_REQ, SIDR_REP) that gives the initiator the responder's QP number, Q_Key and an
// address vector to it, and each side's QP takes the Q_Key the CM gives (cma.c: ucma_init_ud_qp).
#pragma once

#include <rdma/rdma_cma.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "verbs.h"

namespace ibprobe::probes::cm {

using EventChannel =
    std::unique_ptr<rdma_event_channel, verbs::ReleasedBy<rdma_destroy_event_channel>>;
using Id = std::unique_ptr<rdma_cm_id, verbs::ReleasedBy<rdma_destroy_id>>;
using Event = std::unique_ptr<rdma_cm_event, verbs::ReleasedBy<rdma_ack_cm_event>>;

// The responder's UD QP as the initiator's SIDR exchange learned it (the ESTABLISHED event's
// rdma_ud_param).
struct DatagramPeer {
  ibv_ah_attr address{};
  std::uint32_t qp_number = 0;
  std::uint32_t qkey = 0;
};

// What the CM resolved for one connection, as rdma_init_qp_attr gives it for each state. A UD
// QP's are INIT's alone (port, P_Key entry, Q_Key), and on the initiator the peer it reaches.
struct QpAttributes {
  ibv_qp_attr init{}, rtr{}, rts{};
  int init_mask = 0, rtr_mask = 0, rts_mask = 0;
  std::optional<DatagramPeer> datagram = std::nullopt;
};

// Moves the probe's QP number `qp` (an index) to RTS with what the CM resolved for it.
using ToRts = std::function<void(std::size_t qp, QpAttributes& resolved)>;

// What the REQ and REP say besides the QP numbers: reads and atomics in flight each way, the RNR
// and transport retry counts, and for the active side the ACK timeout and the TOS it asks the CM
// to route by.
struct ConnectParameters {
  std::uint8_t responder_resources = 1;
  std::uint8_t initiator_depth = 1;
  std::uint8_t retry_count = 7;
  std::uint8_t rnr_retry_count = 7;
  std::uint8_t ack_timeout = 14;
  std::uint8_t type_of_service = 0;
  bool srq = false;  // the QPs receive from a shared receive queue
};

// Every wait on the CM: a deadline, and a check that throws when the peer is known to be gone.
struct Wait {
  std::chrono::steady_clock::time_point deadline;
  std::function<void()> check_peer;
};

// The device and port the probe's QPs live on; a connection the CM routes elsewhere is refused.
struct LocalDevice {
  std::string name;
  std::uint8_t port = 1;
  bool infiniband = false;  // the port's link layer; RoCE otherwise
  bool datagrams = false;   // the QPs are UD: RDMA_PS_UDP and SIDR, not RDMA_PS_TCP's REQ/REP/RTU
};

// The responder's end: listens at the address the control connection reached, on a port of its
// own, and accepts the initiator's connection requests, one per QP.
class Acceptor {
 public:
  Acceptor(const sockaddr_storage& address, LocalDevice device);
  std::uint16_t port() const { return port_; }
  std::uint64_t token() const { return token_; }
  // Accepts one request for each of `qp_numbers` (the QP index travels in the request with the
  // token), moving each QP to RTS before the REP goes out, then waits until every connection is
  // established (the initiator's RTU; a SIDR_REP ends a UD exchange).
  void accept(const std::vector<std::uint32_t>& qp_numbers, const ConnectParameters& ours,
              const ToRts& to_rts, const Wait& wait);

 private:
  LocalDevice device_;
  EventChannel channel_;
  Id listener_;
  std::vector<Id> connections_;
  std::uint16_t port_ = 0;
  std::uint64_t token_ = 0;
};

// The initiator's end: one connection per QP to the responder's listener.
class Connector {
 public:
  explicit Connector(LocalDevice device);
  // Resolves `peer` (its port replaced by the listener's) to a route through this side's
  // device, connects each of `qp_numbers` in turn, moves each QP to RTS on the REP, and
  // completes it with the RTU (UD: on the SIDR_REP, which needs none).
  void connect(const sockaddr_storage& peer, std::uint16_t port, std::uint64_t token,
               const std::vector<std::uint32_t>& qp_numbers, const ConnectParameters& ours,
               const ToRts& to_rts, const Wait& wait);

 private:
  LocalDevice device_;
  EventChannel channel_;
  std::vector<Id> connections_;
};

}  // namespace ibprobe::probes::cm
