// One end of a verification case: its own verbs resources (PD, one MR over its slots, one CQ
// shared by all its QPs), QPs that can be rebuilt on that CQ with a new connection generation,
// and the evidence a failed case reports: CQE status and vendor error, QP state from
// ibv_query_qp, the CQ's outstanding work, the last wr_ids posted, and the device's async events.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "control_channel.h"
#include "ibprobe/verbs_probe.h"
#include "protocol.h"
#include "verbs.h"

namespace ibprobe::probes::verify {

struct Layout {
  std::uint32_t qps = 1;
  std::uint32_t send_slots = 1;  // per QP
  std::uint32_t recv_slots = 1;  // per QP
  std::uint64_t slot_bytes = 4096;
  std::uint32_t inline_size = 0;  // asked of every QP; the device may grant less
  std::uint32_t max_send_sge = 1;
  // The peer may read and run atomics on this end's buffer (IBV_ACCESS_REMOTE_ATOMIC).
  bool remote_atomics = false;
};

// Every wait of a case: the run's deadline and the control connection's liveness.
class Guard {
 public:
  Guard(ControlChannel& channel, std::chrono::seconds timeout);
  // Throws ProbeFailure (kTimeout) once the deadline has passed, (kPeerLost) when the peer closed.
  void check(const std::string& waiting_for) const;
  ControlChannel::Deadline deadline() const { return deadline_; }
  ControlChannel& channel() const { return channel_; }
  // Sleeps `pause`, checking the guard every few milliseconds.
  void sleep(std::chrono::milliseconds pause, const std::string& waiting_for) const;

 private:
  ControlChannel& channel_;
  ControlChannel::Deadline deadline_;
  std::chrono::seconds timeout_;
};

class Endpoint {
 public:
  // `initiator` picks the spec's GID index for this end (gid_index or peer_gid_index).
  Endpoint(const LocalPort& local, const ProbeSpec& spec, bool initiator, const Layout& layout);
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  protocol::QpInfo endpoints() const;
  void connect(std::size_t q, const protocol::QpEndpoint& peer);
  void connect_all(const protocol::QpInfo& peer);
  // Creates QP q's successor on the same CQ (in INIT, new PSN, new generation) and keeps the old
  // one until retire_old() or the next replace(): completions of the old QP may still be due.
  void replace(std::size_t q);
  void retire_old();
  // Destroys QP q at once, as a host that loses it does.
  void destroy(std::size_t q);

  std::uint16_t generation(std::size_t q) const { return qps_[q].generation; }
  std::uint64_t wr_id(std::size_t q, std::uint64_t sequence) const;
  std::uint8_t* send_slot(std::size_t q, std::size_t slot) const;
  std::uint8_t* recv_slot(std::size_t q, std::size_t slot) const;
  std::uint64_t slot_bytes() const { return layout_.slot_bytes; }
  const Layout& layout() const { return layout_; }
  ibv_mr* mr() const { return buffer_.mr.get(); }
  ibv_qp* qp(std::size_t q) const { return qps_[q].qp.get(); }
  std::uint32_t qp_num(std::size_t q) const { return qps_[q].qp->qp_num; }
  // The inline size and send SGEs the device granted QP q.
  std::uint32_t inline_granted(std::size_t q) const { return qps_[q].inline_granted; }
  std::uint32_t send_sge_granted(std::size_t q) const { return qps_[q].send_sge_granted; }
  // The device's atomic_cap is not IBV_ATOMIC_NONE.
  bool atomics_supported() const { return atomics_supported_; }
  const verbs::PortFacts& port() const { return port_; }
  // spec.connection UD: QPs of datagrams, each sending to its peer QP through an address handle.
  bool datagrams() const { return spec_.connection == Connection::kUd; }

  // ibv_post_send's return code (0: posted); the wr_id is remembered for the evidence.
  int try_post_send(std::size_t q, ibv_send_wr& wr);
  // A signaled send of `length` bytes from send slot `slot`; throws when it cannot be posted.
  void send(std::size_t q, std::size_t slot, std::uint32_t length, std::uint64_t wr_id,
            bool inline_data = false);
  void post_recv(std::size_t q, std::size_t slot, std::uint64_t wr_id);
  // ibv_poll_cq; throws on a poll failure (not on a failed completion: cases judge those).
  int poll(ibv_wc* wcs, int max);

  // The state ibv_query_qp reports for QP q, as text ("RTS", "ERR", ...).
  std::string state(std::size_t q) const;
  ibv_qp_state state_code(std::size_t q) const;
  // Async events waiting on the device's nonblocking async fd, each acknowledged.
  std::vector<std::string> async_events();
  // The evidence for a failed case around QP q, with a failed completion when there is one.
  std::string evidence(std::size_t q, const ibv_wc* wc = nullptr) const;
  // Work posted (sends and receives) whose completion has not been reaped yet.
  std::uint64_t outstanding() const { return posted_ - reaped_; }

  CounterSnapshot counters() const;

 private:
  struct Qp {
    verbs::QueuePair qp;
    std::uint32_t psn = 0;
    std::uint16_t generation = 0;
    std::uint32_t inline_granted = 0;
    std::uint32_t send_sge_granted = 0;
    // UD: the peer QP's number and the handle of the path to it (set by connect()).
    std::uint32_t remote_qpn = 0;
    verbs::AddressHandle ah;
  };
  Qp create_qp();

  ProbeSpec spec_;
  Layout layout_;
  LocalPort local_;
  verbs::Context context_;
  verbs::PortFacts port_;
  verbs::ProtectionDomain pd_;
  verbs::RegisteredBuffer buffer_;
  verbs::CompletionQueue cq_;
  std::vector<Qp> qps_;
  std::vector<Qp> retired_;
  bool atomics_supported_ = false;
  std::uint64_t posted_ = 0;
  std::uint64_t reaped_ = 0;
  static constexpr std::size_t kRememberedWrIds = 8;
  std::array<std::uint64_t, kRememberedWrIds> last_wr_ids_{};
  std::uint64_t wr_ids_seen_ = 0;
};

std::string describe(const ibv_wc& wc);

}  // namespace ibprobe::probes::verify
