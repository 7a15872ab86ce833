// One side of a probe's RC connection as verbs resources: the device context, PD, registered
// buffer, CQ, SRQ and QPs a ProbeSpec asks for, their transition to RTS against the peer's QPs,
// and the posting and polling primitives the data loops (rc_session.h) are built from.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cm_connection.h"
#include "ibprobe/probes.h"
#include "ibprobe/verbs_probe.h"
#include "protocol.h"
#include "verbs.h"

namespace ibprobe::probes {

// Binds the calling thread's CPUs and new memory to one NUMA node for as long as it lives, and
// gives the thread its whole machine back afterwards (the thread may be a server's worker).
class NumaBinding {
 public:
  explicit NumaBinding(int node);
  ~NumaBinding();
  NumaBinding(const NumaBinding&) = delete;
  NumaBinding& operator=(const NumaBinding&) = delete;
  int node() const { return node_; }

 private:
  int node_;
};

// Which end of the run a session is: the spec's per-side choices (GID index, NUMA) differ.
enum class Side { kInitiator, kResponder };

// The node a probe on `device` binds to under `policy`; -1 for none (policy none, or a device
// without a NUMA node, such as rxe, or a machine without NUMA support).
int numa_node_for(const std::string& device, NumaPolicy policy, std::optional<std::uint32_t> node);

class RcResources {
 public:
  // Opens the device and creates PD, buffer, CQ and QPs (in INIT). Throws on any failure, with
  // everything created so far released.
  RcResources(const LocalPort& local, const ProbeSpec& spec, Side side);

  const verbs::PortFacts& port() const { return port_; }
  // The message size the run uses: the spec's, cut to the path MTU over UD (after connect()).
  std::uint64_t message_size() const { return spec_.message_size; }
  // This side's pre-flight facts: port_active (ACTIVE and LinkUp), sm_lid (InfiniBand: an SM
  // has configured the port), master_sm (InfiniBand: the SM at that LID answers SMInfo as
  // master, ibprobe/master_sm.h), link_rate (detail: Gbit/s, for the other side to compare),
  // cpu_frequency (the cores this thread is pinned to, ibprobe/cpu_frequency.h; not applicable
  // where the kernel scales no frequency).
  std::vector<protocol::PreflightCheck> preflight_checks() const;
  int numa_node() const { return numa_.node(); }
  // What this side really used where perftest derives it: CQ moderation from the spec's rule,
  // inline size from the device, relaxed ordering from the registration, reads in flight from
  // both sides' limits (after connect()).
  std::uint32_t cq_moderation() const { return cq_moderation_; }
  std::uint32_t inline_size() const { return inline_size_; }
  bool relaxed_ordering() const { return buffer_.relaxed_ordering; }
  std::uint32_t outstanding_reads() const { return outstanding_reads_; }
  // Who enforces the spec's rate limit on this side (after connect()); unset without one.
  std::optional<RateLimiter> rate_limiter() const { return rate_limiter_; }
  protocol::SideFacts facts() const;
  // Calls of ibv_post_send and work completions reaped so far: a post list shows as one call per
  // list, CQ moderation as one completion per cq_moderation messages.
  std::uint64_t post_calls() const { return post_calls_; }
  // Messages posted so far (every work request of every post list).
  std::uint64_t messages_posted() const { return messages_posted_; }
  std::uint64_t completions() const { return completions_; }
  // Completion events this side slept for (cq_events; 0 when polling).
  std::uint64_t cq_events() const { return cq_events_; }
  protocol::QpInfo local_endpoints() const;
  // INIT -> RTR -> RTS against the peer's endpoints (one per QP, same order).
  void connect(const protocol::QpInfo& remote);
  // spec.rdma_cm, the responder: listens at `local_address` (where the control connection came
  // in) for the initiator's connection requests, then accepts one per QP; `remote` carries the
  // initiator's buffer, as over the exchange.
  protocol::CmListener listen_for_connections(const sockaddr_storage& local_address);
  void accept_connections(const protocol::QpInfo& remote, const cm::Wait& wait);
  // spec.rdma_cm, the initiator: connects each QP to the listener `remote.cm` at `peer` (the
  // responder's address as the control connection reached it).
  void connect_through_cm(const protocol::QpInfo& remote, const sockaddr_storage& peer,
                          const cm::Wait& wait);
  // The path MTU the QPs were given, in bytes (after connecting).
  std::uint32_t path_mtu() const { return path_mtu_; }
  // The lane the QPs send in: the spec's, or with rdma_cm the path's the connection manager
  // resolved (after connecting).
  const Lane& lane() const { return lane_; }

 protected:
  // What connect() and its rdma_cm variants share: the peer's buffers and limits before the
  // transitions, the rate limit and the first receives after them.
  void learn_peer(const protocol::QpInfo& remote);
  void finish_connect();
  // A QP from INIT to RTS as the connection manager resolved its path, with the spec's knobs
  // (MTU, RC timers and retries, reads in flight) over it.
  void to_rts_as_resolved(std::size_t qp, cm::QpAttributes& resolved);
  // A UD QP's: the CM's Q_Key, and an address handle to the peer's QP.
  void datagram_to_rts_as_resolved(std::size_t qp, const cm::QpAttributes& resolved);
  cm::ConnectParameters cm_parameters() const;
  cm::LocalDevice cm_device() const;
  std::vector<std::uint32_t> qp_numbers() const;
  // What the peer may do to this side's QPs: RC takes reads, atomic probes atomics.
  unsigned remote_access() const;
  // The MTU this side offers the peer: the port's active MTU, or the spec's where lower.
  std::uint32_t offered_mtu() const;

  // The spec's rate limit on the QPs in RTS: the hardware limiter where it is asked for (or
  // auto) and the device takes it, else the software one of the posting loops.
  void apply_rate_limit();

  struct Peer {
    std::uint64_t addr = 0;
    std::uint32_t rkey = 0;
    std::uint32_t qpn = 0;
    std::uint16_t lid = 0;
    std::array<std::uint8_t, 16> gid{};
  };

  // Piece k of a receive scattered over n pieces: where it starts in the message and where it is
  // placed in the slot. Pieces are placed in reverse address order, so a message that filled them
  // in any order but the posted one would come out scrambled.
  struct Piece {
    std::size_t message_offset;
    std::size_t slot_offset;
    std::size_t length;
  };
  static Piece piece(std::size_t message_size, std::uint32_t pieces, std::uint32_t k);

  // Each QP owns two halves of the buffer: the peer writes into the first (and reads from it),
  // we send from the second.
  std::uint8_t* receive_area(std::size_t qp) const;
  std::uint8_t* send_area(std::size_t qp) const;
  // Validating runs: every message in flight has its own slot, reused only once a completion
  // says the previous message in it is done.
  std::uint8_t* receive_slot(std::size_t qp, std::size_t slot) const;
  std::uint8_t* send_slot(std::size_t qp, std::size_t slot) const;
  // One message-sized scatter/gather entry over `area` of our registered buffer.
  ibv_sge message_at(std::uint8_t* area) const;
  // Posts messages posted_before + 1 .. posted_before + count of one QP with one ibv_post_send,
  // chained as perftest's post list. A message asks for a completion when its number is a
  // multiple of the CQ moderation, or when it is message `last` (0: none).
  void post(std::size_t qp, std::uint32_t count, std::uint64_t posted_before, std::uint64_t last);
  void post_receive(std::size_t qp);
  void post_validated_receive(std::size_t queue, std::uint32_t slot);
  // Atomic probes: the peer's targets each QP cycles through, one per cache line of a page.
  static constexpr std::size_t kAtomicTargets = 64;
  static constexpr std::size_t kAtomicTargetStride = 64;
  // A work request of `qp` (its wr_id) over `sge`, which is set to `length` bytes at `at` of our
  // registered buffer; opcode, flags and remote side are the caller's.
  ibv_send_wr request_over(std::size_t qp, ibv_sge& sge, std::uint8_t* at,
                           std::size_t length) const;
  // The next atomic of `qp` as a work request over `sge` (its fetched value's place): target,
  // opcode and operands, unsignaled and unchained.
  ibv_send_wr atomic_request(std::size_t qp, ibv_sge& sge);
  // Atomics posted so far on `qp`; the n-th went to target n mod kAtomicTargets.
  std::uint64_t atomics_posted(std::size_t qp) const { return atomics_posted_[qp]; }
  // A signaled RDMA read of the peer's targets of `qp` into this side's receive area, and what
  // it brought once its completion was polled.
  void post_atomic_read_back(std::size_t qp);
  std::vector<std::uint64_t> atomic_targets_read_back(std::size_t qp) const;
  // Test-only fault (corrupt_every): whether the n-th atomic of a QP adds or swaps one too many.
  bool corrupt_atomic(std::uint64_t n) const {
    return corrupt_every_ > 0 && (n + 1) % corrupt_every_ == 0;
  }

  // Polls completions, throwing on a failed one; returns how many it reaped. With cq_events, an
  // empty CQ first sleeps until its next completion event, or kEventWait.
  int poll(ibv_wc* wcs, int max);
  // Whether a waiting loop at its `spins`-th empty turn looks at its clock (deadline, stop,
  // peer): every kSpinsPerClockCheck turns of polling, and after every wait for a completion
  // event that timed out, since such a turn took kEventWait.
  bool clock_check_due(unsigned spins) {
    return spins % verbs::kSpinsPerClockCheck == 0 || std::exchange(event_wait_timed_out_, false);
  }

  ProbeSpec spec_;
  // First, so the buffer below is allocated on the node, and released last.
  NumaBinding numa_;
  std::string device_;
  std::uint8_t port_number_;
  std::filesystem::path sysfs_root_;
  verbs::Context context_;
  verbs::PortFacts port_;
  verbs::ProtectionDomain pd_;
  verbs::RegisteredBuffer buffer_;
  // With cq_events only; declared before the CQ, which must be destroyed first.
  verbs::CompletionChannel channel_;
  verbs::CompletionQueue cq_;
  verbs::SharedReceiveQueue srq_;
  std::vector<verbs::QueuePair> qps_;
  // UD: one address handle per QP, to its peer QP; destroyed before the PD.
  std::vector<verbs::AddressHandle> address_handles_;
  // The Q_Key of the peer's UD QPs: perftest's, or with rdma_cm the one the CM gave.
  std::uint32_t remote_qkey_ = kProbeQkey;
  std::vector<std::uint32_t> psns_;
  std::vector<Peer> peers_;
  std::uint32_t path_mtu_ = 0;
  Lane lane_;
  // The initiator's --dlid, which replaces the LID the responder announced.
  std::optional<std::uint16_t> destination_lid_;
  // spec.rdma_cm: the connections stay for the session, and go (with a DREQ to the peer)
  // before the QPs.
  std::optional<cm::Acceptor> acceptor_;
  std::optional<cm::Connector> connector_;
  std::uint32_t max_rd_atomic_ = 1;
  std::uint32_t outstanding_reads_ = 1;
  std::uint32_t cq_moderation_ = 1;
  std::uint32_t inline_size_ = 0;
  std::optional<RateLimiter> rate_limiter_;
  std::uint64_t post_calls_ = 0;
  std::uint64_t messages_posted_ = 0;
  std::uint64_t completions_ = 0;
  std::uint64_t cq_events_ = 0;
  bool event_wait_timed_out_ = false;
  std::vector<ibv_send_wr> chain_;
  std::vector<ibv_sge> chain_sges_;
  std::vector<std::uint64_t> atomics_posted_;
  std::uint64_t corrupt_every_ = 0;
  // Bytes of one slot: the message size, or an atomic probe's page of targets.
  std::size_t slot_bytes_ = 0;
  // Slots per QP in each half of the buffer: 1 and 1 unless validating.
  std::size_t receive_slots_ = 1;
  std::size_t send_slots_ = 1;
  std::uint16_t generation_ = 0;
};

// Why a completion failed, in words an operator can act on; for RNR retry exhaustion, what it
// means and which knobs led there.
std::string describe_failed_completion(const ibv_wc& wc, const ProbeSpec& spec);

}  // namespace ibprobe::probes
