#include "verify_endpoint.h"

#include <fcntl.h>
#include <fmt/format.h>

#include <cstring>
#include <thread>

#include "payload.h"
#include "run_common.h"

namespace ibprobe::probes::verify {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

std::string describe(const ibv_wc& wc) {
  const auto id = payload::decode_wr_id(wc.wr_id);
  return fmt::format(
      "CQE status {} ({}) vendor_err 0x{:x} opcode {} qp_num {} wr_id qp={} gen={} "
      "seq={}",
      ibv_wc_status_str(wc.status), static_cast<int>(wc.status), wc.vendor_err,
      static_cast<int>(wc.opcode), wc.qp_num, id.qp, id.generation, id.sequence);
}

Guard::Guard(ControlChannel& channel, std::chrono::seconds timeout)
    : channel_(channel), deadline_(Clock::now() + timeout), timeout_(timeout) {}

void Guard::check(const std::string& waiting_for) const {
  channel_.check_still_open();
  if (Clock::now() > deadline_) {
    throw ProbeFailure(fmt::format("timed out: the case's deadline (timeout {} s) passed waiting "
                                   "for {}",
                                   timeout_.count(), waiting_for),
                       FailureKind::kTimeout);
  }
}

void Guard::sleep(std::chrono::milliseconds pause, const std::string& waiting_for) const {
  constexpr auto kStep = std::chrono::milliseconds(5);
  const auto until = Clock::now() + pause;
  while (Clock::now() < until) {
    check(waiting_for);
    std::this_thread::sleep_for(std::min<Clock::duration>(kStep, until - Clock::now()));
  }
}

Endpoint::Endpoint(const LocalPort& local, const ProbeSpec& spec, bool initiator,
                   const Layout& layout)
    : spec_(spec),
      layout_(layout),
      local_(local),
      context_(verbs::open_device(local.device)),
      port_(verbs::query_port(
          context_.get(), local.port,
          static_cast<int>((initiator ? spec.gid_index : spec.peer_gid_index).value_or(-1)))) {
  if (port_.attr.state != IBV_PORT_ACTIVE) {
    throw ProbeFailure(local.device + " port " + std::to_string(local.port) +
                           " is not ACTIVE (state " + ibv_port_state_str(port_.attr.state) + ")",
                       FailureKind::kVerbs);
  }
  // Async events are read between polls, never waited for: a device that raises none must not
  // stall a case.
  const int flags = ::fcntl(context_->async_fd, F_GETFL);
  if (flags < 0 || ::fcntl(context_->async_fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    throw verbs::VerbsError("making the async event fd nonblocking", errno);
  }
  ibv_device_attr device_attr{};
  if (const int rc = ibv_query_device(context_.get(), &device_attr); rc != 0) {
    throw verbs::VerbsError("ibv_query_device", rc);
  }
  atomics_supported_ = verbs::check_atomics(device_attr, local_.device).has_value();
  pd_.reset(ibv_alloc_pd(context_.get()));
  if (!pd_) throw verbs::VerbsError("ibv_alloc_pd", errno);
  buffer_ = verbs::register_buffer(
      pd_.get(), layout_.qps * (layout_.send_slots + layout_.recv_slots) * layout_.slot_bytes,
      layout_.remote_atomics && atomics_supported_ ? IBV_ACCESS_REMOTE_ATOMIC : 0);
  // Room for every QP's sends and receives, and for a replaced QP's leftovers besides.
  const int cq_entries =
      static_cast<int>(2 * layout_.qps * (layout_.send_slots + layout_.recv_slots) + 16);
  cq_.reset(ibv_create_cq(context_.get(), cq_entries, nullptr, nullptr, 0));
  if (!cq_) throw verbs::VerbsError("ibv_create_cq(" + std::to_string(cq_entries) + ")", errno);
  for (std::uint32_t q = 0; q < layout_.qps; ++q) qps_.push_back(create_qp());
}

Endpoint::Qp Endpoint::create_qp() {
  ibv_qp_init_attr init{};
  init.send_cq = cq_.get();
  init.recv_cq = cq_.get();
  init.qp_type = datagrams() ? IBV_QPT_UD : IBV_QPT_RC;
  init.cap.max_send_wr = layout_.send_slots;
  init.cap.max_recv_wr = layout_.recv_slots;
  init.cap.max_send_sge = layout_.max_send_sge;
  init.cap.max_recv_sge = 1;
  init.cap.max_inline_data = layout_.inline_size;
  Qp qp;
  qp.qp.reset(ibv_create_qp(pd_.get(), &init));
  if (!qp.qp) {
    throw verbs::VerbsError(fmt::format("ibv_create_qp (max_inline_data {}, max_send_sge {})",
                                        layout_.inline_size, layout_.max_send_sge),
                            errno);
  }
  // ibv_create_qp writes back what the device granted.
  qp.inline_granted = init.cap.max_inline_data;
  qp.send_sge_granted = init.cap.max_send_sge;
  qp.psn = verbs::random_psn();
  qp.generation = payload::next_generation();
  if (datagrams()) {
    verbs::ud_qp_to_rts(qp.qp.get(), local_.port, 0, kProbeQkey, qp.psn);
    return qp;
  }
  unsigned access = IBV_ACCESS_LOCAL_WRITE;
  if (layout_.remote_atomics) access |= IBV_ACCESS_REMOTE_READ;
  if (layout_.remote_atomics && atomics_supported_) access |= IBV_ACCESS_REMOTE_ATOMIC;
  verbs::rc_qp_to_init(qp.qp.get(), local_.port, access);
  return qp;
}

protocol::QpInfo Endpoint::endpoints() const {
  protocol::QpInfo info;
  const std::uint32_t port_mtu = verbs::mtu_bytes(port_.attr.active_mtu);
  for (const auto& qp : qps_) {
    protocol::QpEndpoint e;
    e.qpn = qp.qp->qp_num;
    e.psn = qp.psn;
    e.lid = port_.attr.lid;
    e.gid = port_.gid;
    e.rkey = buffer_.mr->rkey;
    e.addr = reinterpret_cast<std::uintptr_t>(buffer_.memory.get());
    e.mtu = spec_.mtu ? std::min(*spec_.mtu, port_mtu) : port_mtu;
    info.qps.push_back(e);
  }
  return info;
}

void Endpoint::connect(std::size_t q, const protocol::QpEndpoint& peer) {
  const std::uint32_t port_mtu = verbs::mtu_bytes(port_.attr.active_mtu);
  const verbs::RcPeer path{peer.qpn, peer.psn, peer.lid, peer.gid,
                           verbs::mtu_enum(std::min(peer.mtu, spec_.mtu ? *spec_.mtu : port_mtu))};
  if (datagrams()) {
    ibv_ah_attr attr = verbs::address_vector(port_, local_.port, path, {});
    qps_[q].ah.reset(ibv_create_ah(pd_.get(), &attr));
    if (!qps_[q].ah) throw verbs::VerbsError("ibv_create_ah", errno);
    qps_[q].remote_qpn = peer.qpn;
    return;
  }
  verbs::rc_qp_to_rts(qps_[q].qp.get(), port_, local_.port, path, qps_[q].psn, spec_.rc, 1, 1);
}

void Endpoint::connect_all(const protocol::QpInfo& peer) {
  if (peer.qps.size() != qps_.size()) {
    throw ProbeFailure(
        fmt::format("peer offered {} QPs, the case needs {}", peer.qps.size(), qps_.size()),
        FailureKind::kProtocol);
  }
  for (std::size_t q = 0; q < qps_.size(); ++q) connect(q, peer.qps[q]);
}

void Endpoint::replace(std::size_t q) {
  retired_.push_back(std::move(qps_[q]));
  qps_[q] = create_qp();
}

void Endpoint::retire_old() {
  retired_.clear();
}

void Endpoint::destroy(std::size_t q) {
  qps_[q].qp.reset();
}

std::uint64_t Endpoint::wr_id(std::size_t q, std::uint64_t sequence) const {
  return payload::encode_wr_id(
      {static_cast<std::uint16_t>(q), qps_[q].generation, static_cast<std::uint32_t>(sequence)});
}

std::uint8_t* Endpoint::recv_slot(std::size_t q, std::size_t slot) const {
  return buffer_.memory.get() +
         (q * (layout_.send_slots + layout_.recv_slots) + slot) * layout_.slot_bytes;
}

std::uint8_t* Endpoint::send_slot(std::size_t q, std::size_t slot) const {
  return recv_slot(q, layout_.recv_slots + slot);
}

int Endpoint::try_post_send(std::size_t q, ibv_send_wr& wr) {
  last_wr_ids_[wr_ids_seen_++ % kRememberedWrIds] = wr.wr_id;
  ibv_send_wr* bad = nullptr;
  const int rc = ibv_post_send(qps_[q].qp.get(), &wr, &bad);
  if (rc == 0) ++posted_;
  return rc;
}

void Endpoint::send(std::size_t q, std::size_t slot, std::uint32_t length, std::uint64_t wr_id,
                    bool inline_data) {
  ibv_sge sge{reinterpret_cast<std::uintptr_t>(send_slot(q, slot)), length, buffer_.mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED | (inline_data ? IBV_SEND_INLINE : 0);
  if (datagrams()) {
    wr.wr.ud.ah = qps_[q].ah.get();
    wr.wr.ud.remote_qpn = qps_[q].remote_qpn;
    wr.wr.ud.remote_qkey = kProbeQkey;
  }
  if (const int rc = try_post_send(q, wr); rc != 0) throw verbs::VerbsError("ibv_post_send", rc);
}

void Endpoint::post_recv(std::size_t q, std::size_t slot, std::uint64_t wr_id) {
  ibv_sge sge{reinterpret_cast<std::uintptr_t>(recv_slot(q, slot)),
              static_cast<std::uint32_t>(layout_.slot_bytes), buffer_.mr->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  if (const int rc = ibv_post_recv(qps_[q].qp.get(), &wr, &bad); rc != 0) {
    throw verbs::VerbsError("ibv_post_recv", rc);
  }
  ++posted_;
}

int Endpoint::poll(ibv_wc* wcs, int max) {
  const int n = ibv_poll_cq(cq_.get(), max, wcs);
  if (n < 0) throw ProbeFailure("ibv_poll_cq failed", FailureKind::kVerbs);
  reaped_ += static_cast<std::uint64_t>(n);
  return n;
}

ibv_qp_state Endpoint::state_code(std::size_t q) const {
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  if (!qps_[q].qp || ibv_query_qp(qps_[q].qp.get(), &attr, IBV_QP_STATE, &init) != 0) {
    return static_cast<ibv_qp_state>(-1);
  }
  return attr.qp_state;
}

std::string Endpoint::state(std::size_t q) const {
  if (!qps_[q].qp) return "destroyed";
  return std::string(verbs::qp_state_name(state_code(q)));
}

std::vector<std::string> Endpoint::async_events() {
  std::vector<std::string> events;
  ibv_async_event event{};
  while (ibv_get_async_event(context_.get(), &event) == 0) {
    std::string text = ibv_event_type_str(event.event_type);
    switch (event.event_type) {
      case IBV_EVENT_QP_FATAL:
      case IBV_EVENT_QP_REQ_ERR:
      case IBV_EVENT_QP_ACCESS_ERR:
      case IBV_EVENT_COMM_EST:
      case IBV_EVENT_SQ_DRAINED:
      case IBV_EVENT_PATH_MIG:
      case IBV_EVENT_PATH_MIG_ERR:
      case IBV_EVENT_QP_LAST_WQE_REACHED:
        text += fmt::format(" on qp_num {}", event.element.qp->qp_num);
        break;
      default:
        break;
    }
    ibv_ack_async_event(&event);
    events.push_back(std::move(text));
  }
  return events;
}

std::string Endpoint::evidence(std::size_t q, const ibv_wc* wc) const {
  std::string ids;
  const std::uint64_t remembered = std::min<std::uint64_t>(wr_ids_seen_, kRememberedWrIds);
  for (std::uint64_t i = wr_ids_seen_ - remembered; i < wr_ids_seen_; ++i) {
    const auto id = payload::decode_wr_id(last_wr_ids_[i % kRememberedWrIds]);
    ids += fmt::format("{}{}/{}/{}", ids.empty() ? "" : " ", id.qp, id.generation, id.sequence);
  }
  return fmt::format("{}QP {} (qp_num {}) state {}; CQ outstanding {}; last wr_ids (qp/gen/seq) {}",
                     wc ? describe(*wc) + "; " : "", q, qps_[q].qp ? qps_[q].qp->qp_num : 0u,
                     state(q), outstanding(), ids.empty() ? "none" : ids);
}

CounterSnapshot Endpoint::counters() const {
  return snapshot_after_lifespan(local_);
}

}  // namespace ibprobe::probes::verify
