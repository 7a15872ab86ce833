#include "rc_resources.h"

#include <fcntl.h>
#include <numa.h>
#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "ibprobe/cpu_frequency.h"
#include "ibprobe/master_sm.h"
#include "payload.h"

namespace ibprobe::probes {
NumaBinding::NumaBinding(int node) : node_(node) {
  if (node_ < 0) return;
  if (numa_run_on_node(node_) != 0) {
    throw verbs::VerbsError("binding the probe thread to NUMA node " + std::to_string(node_),
                            errno);
  }
  numa_set_preferred(node_);
}

NumaBinding::~NumaBinding() {
  if (node_ < 0) return;
  numa_run_on_node(-1);
  numa_set_localalloc();
}

int numa_node_for(const std::string& device, NumaPolicy policy,
                  std::optional<std::uint32_t> node_asked) {
  if (policy == NumaPolicy::kNone || numa_available() < 0) return -1;
  if (policy == NumaPolicy::kNode) {
    const int node = static_cast<int>(node_asked.value_or(0));
    if (node > numa_max_node()) {
      throw ProbeFailure("NUMA node " + std::to_string(node) +
                             " does not exist on this host (nodes 0-" +
                             std::to_string(numa_max_node()) + ")",
                         FailureKind::kRejected);
    }
    return node;
  }
  std::ifstream file("/sys/class/infiniband/" + device + "/device/numa_node");
  int node = -1;
  if (!(file >> node) || node > numa_max_node()) return -1;
  return node;
}

RcResources::RcResources(const LocalPort& local, const ProbeSpec& spec, Side side)
    : spec_(spec),
      numa_(side == Side::kInitiator
                ? numa_node_for(local.device, spec.numa, spec.numa_node)
                : numa_node_for(local.device, spec.peer_numa, spec.peer_numa_node)),
      device_(local.device),
      port_number_(local.port),
      sysfs_root_(local.sysfs_root),
      context_(verbs::open_device(local.device)),
      port_(verbs::query_port(
          context_.get(), local.port,
          static_cast<int>(
              (side == Side::kInitiator ? spec.gid_index : spec.peer_gid_index).value_or(-1)))),
      cq_moderation_(effective_cq_moderation(spec)),
      chain_(std::max(spec.post_list, 1u)),
      chain_sges_(chain_.size()) {
  if (port_.attr.state != IBV_PORT_ACTIVE) {
    throw ProbeFailure(local.device + " port " + std::to_string(local.port) +
                           " is not ACTIVE (state " + ibv_port_state_str(port_.attr.state) + ")",
                       FailureKind::kVerbs);
  }
  ibv_device_attr device_attr{};
  if (const int rc = ibv_query_device(context_.get(), &device_attr); rc != 0) {
    throw verbs::VerbsError("ibv_query_device", rc);
  }
  // perftest's out_reads: the device's own limit, then the lower of it and the peer's.
  max_rd_atomic_ = static_cast<std::uint32_t>(std::clamp(device_attr.max_qp_rd_atom, 1, 255));
  outstanding_reads_ =
      static_cast<std::uint32_t>(std::clamp(device_attr.max_qp_init_rd_atom, 1, 255));
  inline_size_ = spec.inline_size.value_or(
      perftest_default_inline(device_attr.vendor_id, device_attr.vendor_part_id, spec.operation,
                              spec.test, spec.connection));
  const bool atomic = spec.operation == Operation::kAtomic;
  if (const auto atomics = verbs::check_atomics(device_attr, local.device); atomic && !atomics) {
    throw ProbeFailure(atomics.error(), FailureKind::kRejected);
  }
  // The P_Key index against this port's own table, before anything is allocated: the initiator
  // checked it against its sysfs before queueing, the responder learns it from the spec.
  if (spec.pkey_index != 0) {
    __be16 pkey = 0;
    const bool indexed =
        static_cast<int>(spec.pkey_index) < port_.attr.pkey_tbl_len &&
        ibv_query_pkey(context_.get(), local.port, static_cast<int>(spec.pkey_index), &pkey) == 0;
    if (!indexed || pkey == 0) {
      throw ProbeFailure(local.device + " port " + std::to_string(local.port) + ": " +
                             lane_pkey_problem(spec.pkey_index, port_.attr.pkey_tbl_len),
                         FailureKind::kRejected);
    }
  }

  if (side == Side::kInitiator && spec.dlid) {
    if (port_.is_ethernet) {
      throw ProbeFailure(local.device + " port " + std::to_string(local.port) +
                             ": dlid=" + std::to_string(*spec.dlid) +
                             ": the port is RoCE: packets are routed by GID and a destination LID "
                             "is never used",
                         FailureKind::kRejected);
    }
    destination_lid_ = static_cast<std::uint16_t>(*spec.dlid);
  }

  pd_.reset(ibv_alloc_pd(context_.get()));
  if (!pd_) throw verbs::VerbsError("ibv_alloc_pd", errno);
  const bool send = spec.operation == Operation::kSend;
  if (spec.validation) {
    send_slots_ = spec.tx_depth;
    receive_slots_ = send ? (spec.posted_receives ? spec.posted_receives : spec.rx_depth)
                          : std::max(spec.tx_depth, spec.rx_depth);
  }
  generation_ = payload::next_generation();
  // An atomic probe cycles through kAtomicTargets cache lines of its areas, as perftest's does
  // through its page-sized cycle buffer: atomics to one address would queue behind each other.
  // A UD receive lands the message behind room for the GRH.
  const bool ud = spec.connection == Connection::kUd;
  slot_bytes_ =
      atomic ? kAtomicTargets * kAtomicTargetStride : spec.message_size + (ud ? kUdGrhBytes : 0);
  atomics_posted_.assign(spec.qps, 0);
  buffer_ =
      verbs::register_buffer(pd_.get(), spec.qps * (receive_slots_ + send_slots_) * slot_bytes_,
                             atomic ? IBV_ACCESS_REMOTE_ATOMIC : 0);
  const int cq_entries = static_cast<int>(spec.qps * (spec.tx_depth + (send ? spec.rx_depth : 0)));
  if (spec.cq_events) {
    channel_.reset(ibv_create_comp_channel(context_.get()));
    if (!channel_) throw verbs::VerbsError("ibv_create_comp_channel", errno);
    // Non-blocking: the wait is a poll() on it with a timeout, never ibv_get_cq_event's own.
    const int flags = fcntl(channel_->fd, F_GETFL);
    if (flags < 0 || fcntl(channel_->fd, F_SETFL, flags | O_NONBLOCK) != 0) {
      throw verbs::VerbsError("fcntl(O_NONBLOCK) on the completion channel", errno);
    }
  }
  cq_.reset(ibv_create_cq(context_.get(), cq_entries, nullptr, channel_.get(), 0));
  if (!cq_) throw verbs::VerbsError("ibv_create_cq(" + std::to_string(cq_entries) + ")", errno);
  // Armed before the first poll, so that a completion after it raises an event.
  if (channel_) {
    if (const int rc = ibv_req_notify_cq(cq_.get(), 0); rc != 0) {
      throw verbs::VerbsError("ibv_req_notify_cq", rc);
    }
  }
  if (spec.use_srq) {
    ibv_srq_init_attr srq_attr{};
    srq_attr.attr.max_wr = spec.rx_depth;
    srq_attr.attr.max_sge = spec.receive_sges;
    srq_.reset(ibv_create_srq(pd_.get(), &srq_attr));
    if (!srq_) throw verbs::VerbsError("ibv_create_srq", errno);
  }

  for (std::uint32_t q = 0; q < spec.qps; ++q) {
    ibv_qp_init_attr init{};
    init.send_cq = cq_.get();
    init.recv_cq = cq_.get();
    init.qp_type = ud ? IBV_QPT_UD : spec.connection == Connection::kUc ? IBV_QPT_UC : IBV_QPT_RC;
    init.cap.max_send_wr = spec.tx_depth;
    init.srq = srq_.get();
    init.cap.max_recv_wr = send && !srq_ ? spec.rx_depth : 1;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = spec.receive_sges;
    init.cap.max_inline_data = inline_size_;
    verbs::QueuePair qp(ibv_create_qp(pd_.get(), &init));
    if (!qp) throw verbs::VerbsError("ibv_create_qp", errno);

    // A UD QP needs no peer to be ready: it goes to RTS at once, and its sends name their
    // destination. With rdma_cm it waits for the CM's Q_Key.
    if (ud) {
      if (!spec.rdma_cm) {
        verbs::ud_qp_to_rts(qp.get(), port_number_, static_cast<std::uint16_t>(spec.pkey_index),
                            kProbeQkey, verbs::random_psn());
      }
    } else {
      verbs::rc_qp_to_init(qp.get(), port_number_, remote_access(),
                           static_cast<std::uint16_t>(spec.pkey_index));
    }
    qps_.push_back(std::move(qp));
    psns_.push_back(verbs::random_psn());
  }
}

std::uint8_t* RcResources::receive_area(std::size_t qp) const {
  return buffer_.memory.get() + qp * (receive_slots_ + send_slots_) * slot_bytes_;
}

std::uint8_t* RcResources::send_area(std::size_t qp) const {
  return receive_area(qp) + receive_slots_ * slot_bytes_;
}

namespace {
// SMInfo from the port's SM: an SM that answers at all answers within microseconds on its own
// subnet; two tries bound what a dead SM adds to the run's setup to 0.4 s.
constexpr std::chrono::milliseconds kSmInfoTimeout{200};
}  // namespace

std::vector<protocol::PreflightCheck> RcResources::preflight_checks() const {
  constexpr int kLinkUp = 5;
  const auto& a = port_.attr;
  std::vector<protocol::PreflightCheck> checks;
  checks.push_back({"port_active", a.state == IBV_PORT_ACTIVE && a.phys_state == kLinkUp,
                    std::string("state ") + ibv_port_state_str(a.state) + ", physical state " +
                        std::to_string(a.phys_state)});
  if (!port_.is_ethernet) {
    checks.push_back({"sm_lid", a.sm_lid != 0 && a.lid != 0,
                      "lid " + std::to_string(a.lid) + ", sm_lid " + std::to_string(a.sm_lid)});
    const auto sm = check_master_sm(device_, port_number_, a.sm_lid, kSmInfoTimeout, 1);
    checks.push_back({"master_sm", sm.passed, sm.detail, sm.applicable});
  }
  char rate[32];
  std::snprintf(rate, sizeof(rate), "%g", verbs::port_rate_gbps(a));
  checks.push_back({"link_rate", verbs::port_rate_gbps(a) > 0, rate});
  // Not fatal, as perftest's warning is not: the run goes on and the check reports the cores.
  const auto frequency = check_cpu_frequency(sysfs_root_, cpus_of_this_thread());
  checks.push_back({"cpu_frequency", frequency.passed, frequency.detail, frequency.applicable});
  return checks;
}

std::uint32_t RcResources::offered_mtu() const {
  const std::uint32_t port_mtu = verbs::mtu_bytes(port_.attr.active_mtu);
  return spec_.mtu ? std::min(*spec_.mtu, port_mtu) : port_mtu;
}

protocol::QpInfo RcResources::local_endpoints() const {
  protocol::QpInfo info;
  for (std::size_t q = 0; q < qps_.size(); ++q) {
    protocol::QpEndpoint endpoint;
    endpoint.qpn = qps_[q]->qp_num;
    endpoint.psn = psns_[q];
    endpoint.lid = port_.attr.lid;
    endpoint.gid = port_.gid;
    endpoint.rkey = buffer_.mr->rkey;
    endpoint.addr = reinterpret_cast<std::uintptr_t>(receive_area(q));
    endpoint.mtu = offered_mtu();
    endpoint.max_rd_atomic = max_rd_atomic_;
    info.qps.push_back(endpoint);
  }
  return info;
}

unsigned RcResources::remote_access() const {
  // A UC QP takes only writes from its peer.
  unsigned access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  if (spec_.connection == Connection::kRc) access |= IBV_ACCESS_REMOTE_READ;
  if (spec_.operation == Operation::kAtomic) access |= IBV_ACCESS_REMOTE_ATOMIC;
  return access;
}

void RcResources::learn_peer(const protocol::QpInfo& remote) {
  if (remote.qps.size() != qps_.size()) {
    throw ProbeFailure("peer offered " + std::to_string(remote.qps.size()) + " QPs, expected " +
                           std::to_string(qps_.size()),
                       FailureKind::kProtocol);
  }
  path_mtu_ = std::min(remote.qps.front().mtu, offered_mtu());
  // A datagram is one packet. perftest cuts its default message size to the path MTU and
  // refuses a larger size asked for.
  if (spec_.connection == Connection::kUd) {
    if (spec_.message_size > path_mtu_ &&
        spec_.message_size != default_spec(spec_.operation, spec_.test).message_size) {
      throw ProbeFailure("message_size " + std::to_string(spec_.message_size) +
                             ": a UD message is one packet, at most the path MTU (" +
                             std::to_string(path_mtu_) + " bytes); perftest refuses it too",
                         FailureKind::kRejected);
    }
    spec_.message_size = std::min<std::uint64_t>(spec_.message_size, path_mtu_);
  }
  // Reads in flight: no more than the peer's QP accepts (all its QPs have the same limit).
  outstanding_reads_ = std::min(outstanding_reads_, remote.qps.front().max_rd_atomic);
  for (const auto& peer : remote.qps) {
    peers_.push_back(Peer{peer.addr, peer.rkey, peer.qpn, peer.lid, peer.gid});
  }
  lane_ = Lane{spec_.sl, spec_.traffic_class, spec_.pkey_index};
}

void RcResources::connect(const protocol::QpInfo& remote) {
  learn_peer(remote);
  const verbs::AddressLane lane{static_cast<std::uint8_t>(spec_.sl),
                                static_cast<std::uint8_t>(spec_.traffic_class), destination_lid_};
  for (std::size_t q = 0; q < qps_.size(); ++q) {
    const auto& peer = remote.qps[q];
    const verbs::RcPeer path{peer.qpn, peer.psn, peer.lid, peer.gid, verbs::mtu_enum(path_mtu_)};
    if (spec_.connection == Connection::kUd) {
      // The QP is in RTS already; its sends reach the peer through this handle.
      ibv_ah_attr attr = verbs::address_vector(port_, port_number_, path, lane);
      verbs::AddressHandle ah(ibv_create_ah(pd_.get(), &attr));
      if (!ah) throw verbs::VerbsError("ibv_create_ah", errno);
      address_handles_.push_back(std::move(ah));
    } else if (spec_.connection == Connection::kUc) {
      verbs::uc_qp_to_rts(qps_[q].get(), port_, port_number_, path, psns_[q], lane);
    } else {
      verbs::rc_qp_to_rts(qps_[q].get(), port_, port_number_, path, psns_[q], spec_.rc,
                          static_cast<std::uint8_t>(max_rd_atomic_),
                          static_cast<std::uint8_t>(outstanding_reads_), lane);
    }
  }
  finish_connect();
}

protocol::CmListener RcResources::listen_for_connections(const sockaddr_storage& local_address) {
  acceptor_.emplace(local_address, cm_device());
  return protocol::CmListener{acceptor_->port(), acceptor_->token()};
}

void RcResources::accept_connections(const protocol::QpInfo& remote, const cm::Wait& wait) {
  learn_peer(remote);
  acceptor_->accept(
      qp_numbers(), cm_parameters(),
      [this](std::size_t q, cm::QpAttributes& resolved) { to_rts_as_resolved(q, resolved); }, wait);
  finish_connect();
}

void RcResources::connect_through_cm(const protocol::QpInfo& remote, const sockaddr_storage& peer,
                                     const cm::Wait& wait) {
  if (!remote.cm) {
    throw ProbeFailure("the responder offered no rdma_cm listener (older software?)",
                       FailureKind::kProtocol);
  }
  learn_peer(remote);
  connector_.emplace(cm_device());
  connector_->connect(
      peer, remote.cm->port, remote.cm->token, qp_numbers(), cm_parameters(),
      [this](std::size_t q, cm::QpAttributes& resolved) { to_rts_as_resolved(q, resolved); }, wait);
  finish_connect();
}

std::vector<std::uint32_t> RcResources::qp_numbers() const {
  std::vector<std::uint32_t> numbers;
  for (const auto& qp : qps_) numbers.push_back(qp->qp_num);
  return numbers;
}

cm::ConnectParameters RcResources::cm_parameters() const {
  cm::ConnectParameters parameters;
  parameters.responder_resources = static_cast<std::uint8_t>(max_rd_atomic_);
  parameters.initiator_depth = static_cast<std::uint8_t>(outstanding_reads_);
  parameters.retry_count = static_cast<std::uint8_t>(spec_.rc.retry_cnt);
  parameters.rnr_retry_count = static_cast<std::uint8_t>(spec_.rc.rnr_retry);
  parameters.ack_timeout = static_cast<std::uint8_t>(spec_.rc.timeout);
  parameters.type_of_service = static_cast<std::uint8_t>(spec_.traffic_class);
  parameters.srq = static_cast<bool>(srq_);
  return parameters;
}

cm::LocalDevice RcResources::cm_device() const {
  return cm::LocalDevice{ibv_get_device_name(context_->device), port_number_, !port_.is_ethernet,
                         spec_.connection == Connection::kUd};
}

void RcResources::to_rts_as_resolved(std::size_t q, cm::QpAttributes& resolved) {
  ibv_qp* qp = qps_[q].get();
  if (spec_.connection == Connection::kUd) {
    datagram_to_rts_as_resolved(q, resolved);
    return;
  }
  // INIT again, with the connection manager's P_Key entry and port; the access this side's
  // operations need on top of what the negotiated reads allow.
  resolved.init.qp_access_flags |= remote_access();
  verbs::modify_qp(qp, resolved.init, resolved.init_mask | IBV_QP_ACCESS_FLAGS, "INIT (rdma_cm)");
  ibv_qp_attr& rtr = resolved.rtr;
  if (spec_.mtu) rtr.path_mtu = std::min(rtr.path_mtu, verbs::mtu_enum(*spec_.mtu));
  rtr.max_dest_rd_atomic = static_cast<std::uint8_t>(max_rd_atomic_);
  rtr.min_rnr_timer = static_cast<std::uint8_t>(spec_.rc.min_rnr_timer);
  verbs::modify_qp(
      qp, rtr,
      resolved.rtr_mask | IBV_QP_PATH_MTU | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
      "RTR (rdma_cm)");
  ibv_qp_attr& rts = resolved.rts;
  rts.timeout = static_cast<std::uint8_t>(spec_.rc.timeout);
  rts.retry_cnt = static_cast<std::uint8_t>(spec_.rc.retry_cnt);
  rts.rnr_retry = static_cast<std::uint8_t>(spec_.rc.rnr_retry);
  rts.max_rd_atomic = static_cast<std::uint8_t>(outstanding_reads_);
  verbs::modify_qp(qp, rts,
                   resolved.rts_mask | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                       IBV_QP_MAX_QP_RD_ATOMIC,
                   "RTS (rdma_cm)");
  // What the connection manager chose, for the run's report: every QP's path is the same one.
  path_mtu_ = verbs::mtu_bytes(rtr.path_mtu);
  lane_ = Lane{rtr.ah_attr.sl, rtr.ah_attr.is_global ? rtr.ah_attr.grh.traffic_class : 0u,
               resolved.init.pkey_index};
  if (rtr.ah_attr.is_global) port_.gid_index = rtr.ah_attr.grh.sgid_index;
}

// The CM's Q_Key, port and P_Key entry for the QP, as librdmacm's ucma_init_ud_qp gives its own
// UD QPs; both sides' ids are RDMA_PS_UDP ones, whose Q_Key is the same. The initiator sends
// through the address vector the SIDR_REP brought. The responder's replies (send_lat) go to the
// address the initiator announced on the control channel: a SIDR_REQ carries no QP number and no
// path back (perftest's client sends its QP number in a first datagram instead).
void RcResources::datagram_to_rts_as_resolved(std::size_t q, const cm::QpAttributes& resolved) {
  const ibv_qp_attr& init = resolved.init;
  verbs::ud_qp_to_rts(qps_[q].get(), init.port_num, init.pkey_index, init.qkey, psns_[q]);
  remote_qkey_ = resolved.datagram ? resolved.datagram->qkey : init.qkey;
  ibv_ah_attr address{};
  if (resolved.datagram) {
    address = resolved.datagram->address;
    peers_[q].qpn = resolved.datagram->qp_number;
  } else {
    const auto& peer = peers_[q];
    const verbs::RcPeer path{peer.qpn, 0, peer.lid, peer.gid, verbs::mtu_enum(path_mtu_)};
    address =
        verbs::address_vector(port_, port_number_, path,
                              {.traffic_class = static_cast<std::uint8_t>(spec_.traffic_class)});
  }
  verbs::AddressHandle ah(ibv_create_ah(pd_.get(), &address));
  if (!ah) throw verbs::VerbsError("ibv_create_ah (rdma_cm)", errno);
  address_handles_.resize(qps_.size());
  address_handles_[q] = std::move(ah);
  lane_ = Lane{address.sl, address.is_global ? address.grh.traffic_class : 0u, init.pkey_index};
  if (address.is_global) port_.gid_index = address.grh.sgid_index;
}

void RcResources::finish_connect() {
  apply_rate_limit();
  // Receives must be in place before the peer is told we are ready, or its first sends meet
  // RNR NAKs.
  if (spec_.operation == Operation::kSend) {
    const std::size_t queues = srq_ ? 1 : qps_.size();
    const std::uint32_t posted = spec_.posted_receives ? spec_.posted_receives : spec_.rx_depth;
    for (std::size_t q = 0; q < queues; ++q) {
      for (std::uint32_t i = 0; i < posted; ++i) {
        if (spec_.validation) {
          post_validated_receive(q, i);
        } else {
          post_receive(q);
        }
      }
    }
  }
}

ibv_sge RcResources::message_at(std::uint8_t* area) const {
  ibv_sge sge{};
  sge.addr = reinterpret_cast<std::uintptr_t>(area);
  sge.length = static_cast<std::uint32_t>(spec_.message_size);
  sge.lkey = buffer_.mr->lkey;
  return sge;
}

void RcResources::post_receive(std::size_t qp) {
  ibv_sge sge = message_at(receive_area(qp));
  if (spec_.connection == Connection::kUd) sge.length += kUdGrhBytes;
  ibv_recv_wr wr{};
  wr.wr_id = qp;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  const int rc =
      srq_ ? ibv_post_srq_recv(srq_.get(), &wr, &bad) : ibv_post_recv(qps_[qp].get(), &wr, &bad);
  if (rc != 0) throw verbs::VerbsError("ibv_post_recv", rc);
}

void RcResources::post(std::size_t qp, std::uint32_t count, std::uint64_t posted_before,
                       std::uint64_t last) {
  const bool read = spec_.operation == Operation::kRead;
  const bool send = spec_.operation == Operation::kSend;
  const bool atomic = spec_.operation == Operation::kAtomic;
  const bool inline_data = !read && !atomic && spec_.message_size <= inline_size_;
  for (std::uint32_t i = 0; i < count; ++i) {
    ibv_send_wr& wr = chain_[i];
    if (atomic) {
      wr = atomic_request(qp, chain_sges_[i]);
    } else {
      // A read lands in our receive area; a write or send leaves from the send area.
      wr = request_over(qp, chain_sges_[i], read ? receive_area(qp) : send_area(qp),
                        spec_.message_size);
      wr.opcode = read ? IBV_WR_RDMA_READ : send ? IBV_WR_SEND : IBV_WR_RDMA_WRITE;
      if (inline_data) wr.send_flags |= IBV_SEND_INLINE;
      if (!send) {
        wr.wr.rdma.remote_addr = peers_[qp].addr;
        wr.wr.rdma.rkey = peers_[qp].rkey;
      } else if (spec_.connection == Connection::kUd) {
        wr.wr.ud.ah = address_handles_[qp].get();
        wr.wr.ud.remote_qpn = peers_[qp].qpn;
        wr.wr.ud.remote_qkey = remote_qkey_;
      }
    }
    const std::uint64_t number = posted_before + i + 1;
    if (number % cq_moderation_ == 0 || number == last) wr.send_flags |= IBV_SEND_SIGNALED;
    wr.next = i + 1 < count ? &chain_[i + 1] : nullptr;
  }
  ++post_calls_;
  messages_posted_ += count;
  ibv_send_wr* bad = nullptr;
  if (const int rc = ibv_post_send(qps_[qp].get(), chain_.data(), &bad); rc != 0) {
    throw verbs::VerbsError("ibv_post_send", rc);
  }
}

ibv_send_wr RcResources::request_over(std::size_t qp, ibv_sge& sge, std::uint8_t* at,
                                      std::size_t length) const {
  sge.addr = reinterpret_cast<std::uintptr_t>(at);
  sge.length = static_cast<std::uint32_t>(length);
  sge.lkey = buffer_.mr->lkey;
  ibv_send_wr wr{};
  wr.wr_id = qp;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  return wr;
}

ibv_send_wr RcResources::atomic_request(std::size_t qp, ibv_sge& sge) {
  // The n-th atomic of the QP goes to target n mod kAtomicTargets, and the value it fetches
  // lands in the same line of our send area.
  const std::uint64_t n = atomics_posted_[qp]++;
  const std::size_t offset = (n % kAtomicTargets) * kAtomicTargetStride;
  ibv_send_wr wr = request_over(qp, sge, send_area(qp) + offset, kAtomicMessageSize);
  wr.wr.atomic.remote_addr = peers_[qp].addr + offset;
  wr.wr.atomic.rkey = peers_[qp].rkey;
  // The value the n-th atomic to a target finds there: the QP's earlier ones executed in order.
  const std::uint64_t before = n / kAtomicTargets;
  const std::uint64_t corrupt = corrupt_atomic(n) ? 1 : 0;
  if (spec_.atomic_type == AtomicType::kFetchAndAdd) {
    wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
    wr.wr.atomic.compare_add = 1 + corrupt;  // perftest's ATOMIC_ADD_VALUE
  } else {
    wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
    // perftest's compare 0 and swap 0 leave every target at 0; a validating run chains them,
    // so each swap happens only if every earlier one to the target did.
    wr.wr.atomic.compare_add = spec_.validation ? before : 0;
    wr.wr.atomic.swap = spec_.validation ? before + 1 + corrupt : 0;
  }
  return wr;
}

void RcResources::post_atomic_read_back(std::size_t qp) {
  // Into our own receive area, which this side's atomics leave alone.
  ibv_sge sge{};
  ibv_send_wr wr = request_over(qp, sge, receive_area(qp), slot_bytes_);
  wr.opcode = IBV_WR_RDMA_READ;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = peers_[qp].addr;
  wr.wr.rdma.rkey = peers_[qp].rkey;
  ibv_send_wr* bad = nullptr;
  if (const int rc = ibv_post_send(qps_[qp].get(), &wr, &bad); rc != 0) {
    throw verbs::VerbsError("ibv_post_send (reading the atomic targets back)", rc);
  }
}

std::vector<std::uint64_t> RcResources::atomic_targets_read_back(std::size_t qp) const {
  std::vector<std::uint64_t> values(kAtomicTargets);
  for (std::size_t t = 0; t < kAtomicTargets; ++t) {
    std::memcpy(&values[t], receive_area(qp) + t * kAtomicTargetStride, sizeof(std::uint64_t));
  }
  return values;
}

void RcResources::apply_rate_limit() {
  if (!spec_.rate_limit) return;
  const auto& limit = *spec_.rate_limit;
  if (limit.limiter == RateLimiter::kSoftware) {
    rate_limiter_ = RateLimiter::kSoftware;
    return;
  }
  // The cap is this side's whole rate; each QP gets its share, in the kbit/s the verb takes.
  const double kbps = rate_limit_bytes_per_second(limit, spec_.message_size) * 8 / 1000 /
                      static_cast<double>(qps_.size());
  ibv_qp_rate_limit_attr attr{};
  attr.rate_limit = static_cast<std::uint32_t>(std::clamp(kbps, 1.0, 4294967295.0));
  for (std::size_t q = 0; q < qps_.size(); ++q) {
    if (const int rc = ibv_modify_qp_rate_limit(qps_[q].get(), &attr); rc != 0) {
      if (limit.limiter == RateLimiter::kAuto) {
        // The QPs that took it go back to no limit, or they would be paced twice.
        ibv_qp_rate_limit_attr unlimited{};
        for (std::size_t done = 0; done < q; ++done) {
          ibv_modify_qp_rate_limit(qps_[done].get(), &unlimited);
        }
        rate_limiter_ = RateLimiter::kSoftware;
        return;
      }
      throw ProbeFailure(std::string(ibv_get_device_name(context_->device)) +
                             " does not take a hardware rate limit of " +
                             std::to_string(attr.rate_limit) +
                             " kbit/s per QP: ibv_modify_qp_rate_limit: " + std::strerror(rc) +
                             "; ask for limiter software or auto",
                         FailureKind::kRejected);
    }
  }
  rate_limiter_ = RateLimiter::kHardware;
}

protocol::SideFacts RcResources::facts() const {
  protocol::SideFacts facts;
  facts.gid_index = static_cast<std::uint32_t>(port_.gid_index);
  if (numa_.node() >= 0) facts.numa_node = static_cast<std::uint32_t>(numa_.node());
  facts.inline_size = inline_size_;
  facts.relaxed_ordering = buffer_.relaxed_ordering;
  facts.rate_limiter = rate_limiter_;
  facts.lane = lane_;
  return facts;
}

namespace {
// How long an empty CQ waits for its completion event before it is polled again. perftest blocks
// in ibv_get_cq_event without a limit. On rxe (Debian 12's 6.1 kernel) the event of some
// completions did not come within 100 ms, though the CQ had been armed before it was last found
// empty and the next poll found them: with a 100 ms wait a send_lat -e iteration took 60 ms on
// average. The short wait bounds what such a late event costs.
constexpr std::chrono::milliseconds kEventWait{1};
}  // namespace

int RcResources::poll(ibv_wc* wcs, int max) {
  int n = ibv_poll_cq(cq_.get(), max, wcs);
  if (n == 0 && channel_) {
    // perftest's ctx_notify_events: take the event, acknowledge it (ibv_destroy_cq waits for
    // every event to be), arm the CQ again, then poll what raised it.
    pollfd ready{.fd = channel_->fd, .events = POLLIN, .revents = 0};
    if (::poll(&ready, 1, static_cast<int>(kEventWait.count())) <= 0) {
      event_wait_timed_out_ = true;
    } else {
      ibv_cq* event_cq = nullptr;
      void* event_context = nullptr;
      if (ibv_get_cq_event(channel_.get(), &event_cq, &event_context) == 0) {
        ibv_ack_cq_events(event_cq, 1);
        ++cq_events_;
        if (const int rc = ibv_req_notify_cq(cq_.get(), 0); rc != 0) {
          throw verbs::VerbsError("ibv_req_notify_cq", rc);
        }
      }
      n = ibv_poll_cq(cq_.get(), max, wcs);
    }
  }
  if (n < 0) throw ProbeFailure("ibv_poll_cq failed", FailureKind::kVerbs);
  completions_ += static_cast<std::uint64_t>(n);
  for (int i = 0; i < n; ++i) {
    if (wcs[i].status != IBV_WC_SUCCESS) {
      throw ProbeFailure(describe_failed_completion(wcs[i], spec_), FailureKind::kVerbs);
    }
  }
  return n;
}

std::uint8_t* RcResources::receive_slot(std::size_t qp, std::size_t slot) const {
  return receive_area(qp) + slot * spec_.message_size;
}

std::uint8_t* RcResources::send_slot(std::size_t qp, std::size_t slot) const {
  return send_area(qp) + slot * spec_.message_size;
}

RcResources::Piece RcResources::piece(std::size_t message_size, std::uint32_t pieces,
                                      std::uint32_t k) {
  const std::size_t base = (message_size + pieces - 1) / pieces;
  const std::size_t start = std::min<std::size_t>(message_size, base * k);
  const std::size_t length = std::min<std::size_t>(base, message_size - start);
  return Piece{start, message_size - start - length, length};
}

void RcResources::post_validated_receive(std::size_t queue, std::uint32_t slot) {
  ibv_sge sges[8];
  const std::uint32_t pieces = spec_.receive_sges;
  for (std::uint32_t k = 0; k < pieces; ++k) {
    const Piece p = piece(spec_.message_size, pieces, k);
    sges[k].addr = reinterpret_cast<std::uintptr_t>(receive_slot(queue, slot) + p.slot_offset);
    sges[k].length = static_cast<std::uint32_t>(p.length);
    sges[k].lkey = buffer_.mr->lkey;
  }
  ibv_recv_wr wr{};
  wr.wr_id = payload::encode_wr_id({static_cast<std::uint16_t>(queue), generation_, slot});
  wr.sg_list = sges;
  wr.num_sge = static_cast<int>(pieces);
  ibv_recv_wr* bad = nullptr;
  const int rc =
      srq_ ? ibv_post_srq_recv(srq_.get(), &wr, &bad) : ibv_post_recv(qps_[queue].get(), &wr, &bad);
  if (rc != 0) throw verbs::VerbsError("ibv_post_recv", rc);
}

std::string describe_failed_completion(const ibv_wc& wc, const ProbeSpec& spec) {
  const auto id = payload::decode_wr_id(wc.wr_id);
  std::string text = "completion failed on QP " + std::to_string(id.qp) + ": " +
                     ibv_wc_status_str(wc.status) + " (vendor error " +
                     std::to_string(wc.vendor_err) + ")";
  if (wc.status == IBV_WC_RNR_RETRY_EXC_ERR) {
    text +=
        "; the receiver had no receive posted when the message arrived and answered with RNR "
        "NAKs until the " +
        std::to_string(spec.rc.rnr_retry) +
        " retries rnr_retry allows were used up (receiver back-pressure: posted_receives " +
        std::to_string(spec.posted_receives ? spec.posted_receives : spec.rx_depth) +
        ", tx_depth " + std::to_string(spec.tx_depth) +
        "); the QP is now in the error state and the run cannot go on";
  } else if (wc.status == IBV_WC_RETRY_EXC_ERR) {
    text += "; the peer did not acknowledge within retry_cnt " + std::to_string(spec.rc.retry_cnt) +
            " retransmissions (path or peer lost)";
  }
  return text;
}

}  // namespace ibprobe::probes
