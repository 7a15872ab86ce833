// RAII ownership of every verbs object a probe creates, in the order rc_pingpong.c builds them:
// device context -> PD -> MR (over a buffer we own) -> CQ -> QP. Each handle releases its object
// when it goes out of scope, so every path out of a run, success, exception or peer loss,
// returns the HCA's resources.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cstdint>
#include <expected>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "ibprobe/released_by.h"
#include "ibprobe/verbs_probe.h"

namespace ibprobe::probes::verbs {

// Completions a data loop takes from its CQ per ibv_poll_cq.
inline constexpr int kPollBatch = 16;
// Spinning loops look at the clock only every so many turns: reading it costs more than a poll.
inline constexpr unsigned kSpinsPerClockCheck = 1024;

// A failed verbs call, with what was attempted and the errno text.
// A verbs call refused, or no device to make it on: a failed probe of kind kVerbs.
class VerbsError : public ProbeFailure {
 public:
  VerbsError(const std::string& what, int err);
  explicit VerbsError(const std::string& message) : ProbeFailure(message, FailureKind::kVerbs) {}
};

using ibprobe::ReleasedBy;
struct AlignedFree {
  void operator()(std::uint8_t* p) const { std::free(p); }
};

using Context = std::unique_ptr<ibv_context, ReleasedBy<ibv_close_device>>;
using ProtectionDomain = std::unique_ptr<ibv_pd, ReleasedBy<ibv_dealloc_pd>>;
using MemoryRegion = std::unique_ptr<ibv_mr, ReleasedBy<ibv_dereg_mr>>;
using CompletionQueue = std::unique_ptr<ibv_cq, ReleasedBy<ibv_destroy_cq>>;
using QueuePair = std::unique_ptr<ibv_qp, ReleasedBy<ibv_destroy_qp>>;
using SharedReceiveQueue = std::unique_ptr<ibv_srq, ReleasedBy<ibv_destroy_srq>>;
using AddressHandle = std::unique_ptr<ibv_ah, ReleasedBy<ibv_destroy_ah>>;
using CompletionChannel = std::unique_ptr<ibv_comp_channel, ReleasedBy<ibv_destroy_comp_channel>>;
using Buffer = std::unique_ptr<std::uint8_t, AlignedFree>;

// Opens the named device; the error lists the devices that do exist.
Context open_device(const std::string& name);
std::vector<std::string> device_names();

struct PortFacts {
  ibv_port_attr attr{};
  bool is_ethernet = false;
  int gid_index = 0;
  std::array<std::uint8_t, 16> gid{};
};

// Port attributes and the GID to use: `requested` when given, else on RoCE the RoCE v2
// IPv4-mapped entry (routable, what rdma_cm would pick), else any RoCE v2 one, else index 0.
PortFacts query_port(ibv_context* context, std::uint8_t port, int requested_gid_index = -1);

// Active width x active speed in Gbit/s (signalling rate, as the kernel's rate file), 0 when
// the port reports values this build does not know.
double port_rate_gbps(const ibv_port_attr& attr);

ibv_mtu mtu_enum(std::uint32_t bytes);
std::uint32_t mtu_bytes(ibv_mtu mtu);

// A starting PSN for a new queue pair (24 bits), as perftest draws one.
std::uint32_t random_psn();

// "RTS", "ERR", ... as rdma-core's documentation names the states.
std::string_view qp_state_name(ibv_qp_state state);

// ibv_modify_qp, or a VerbsError naming `step` (the state asked for).
void modify_qp(ibv_qp* qp, ibv_qp_attr& attr, int mask, const char* step);

// Nothing when the device executes atomic operations (atomic_cap IBV_ATOMIC_HCA or
// IBV_ATOMIC_GLOB), else why `device` refuses an atomic run. perftest does not ask: its atomics
// fail at the post or in a completion.
std::expected<void, std::string> check_atomics(const ibv_device_attr& attr,
                                               const std::string& device);

// An RC QP from RESET to INIT on `port_number`, with `access` for the peer's requests, using
// entry `pkey_index` of the port's P_Key table (perftest's --pkey_index, 0 by default).
void rc_qp_to_init(ibv_qp* qp, std::uint8_t port_number, unsigned access,
                   std::uint16_t pkey_index = 0);

// The far end of an RC QP and what the two ends agreed on for the connection.
struct RcPeer {
  std::uint32_t qpn = 0;
  std::uint32_t psn = 0;  // the peer's first PSN: our expected receive PSN
  std::uint16_t lid = 0;
  std::array<std::uint8_t, 16> gid{};
  ibv_mtu path_mtu = IBV_MTU_1024;
};

// The lane of an address vector, as perftest's -S, --tclass and --dlid: `sl` its service level,
// `traffic_class` the GRH's (on RoCE v2 the IP TOS byte; InfiniBand within a subnet sends no
// GRH, so no traffic class), `dlid` the LID to send to instead of the peer's own (InfiniBand).
struct AddressLane {
  std::uint8_t sl = 0;
  std::uint8_t traffic_class = 0;
  std::optional<std::uint16_t> dlid = {};
};

// An RC QP from INIT through RTR to RTS against `peer`, sending from `sq_psn`: the path over
// `port` (rtr_attributes), the spec's RC timers, and the RDMA reads in flight each way
// (`max_dest_rd_atomic` the peer's to us, `max_rd_atomic` ours to it).
void rc_qp_to_rts(ibv_qp* qp, const PortFacts& port, std::uint8_t port_number, const RcPeer& peer,
                  std::uint32_t sq_psn, const RcKnobs& rc, std::uint8_t max_dest_rd_atomic,
                  std::uint8_t max_rd_atomic, const AddressLane& lane = {});

// The address vector to `peer` over `port`, as an RC or UC QP's path and a UD address handle
// both use it: by GID on RoCE (with the traffic class in the GRH), by LID on InfiniBand, the
// lane's dlid when it has one (perftest's ctx_modify_qp_to_rtr: `user_param->dlid ?
// user_param->dlid : dest->lid`, for its UD address handles too).
ibv_ah_attr address_vector(const PortFacts& port, std::uint8_t port_number, const RcPeer& peer,
                           const AddressLane& lane);

// RTR's attributes for an RC or UC QP (ibv_modify_qp with IBV_QP_AV, _PATH_MTU, _DEST_QPN and
// _RQ_PSN): the address vector to `peer`, its QP number and first PSN, the path MTU.
ibv_qp_attr rtr_attributes(const PortFacts& port, std::uint8_t port_number, const RcPeer& peer,
                           const AddressLane& lane);

// The sender's GID from the 40 bytes ahead of a UD payload (a receive with IBV_WC_GRH). An
// InfiniBand or RoCE v2/IPv6 GRH (IP version 6) has it at bytes 8..23; for RoCE v2 over IPv4 the
// device leaves bytes 0..19 zero and puts the IPv4 header at 20..39, so the sender is its source
// address (bytes 32..35) as an IPv4-mapped GID.
std::array<std::uint8_t, 16> grh_source_gid(const std::uint8_t* grh);

// A UD QP from RESET through INIT (with `qkey`, the key datagrams to it must carry) to RTS.
void ud_qp_to_rts(ibv_qp* qp, std::uint8_t port_number, std::uint16_t pkey_index,
                  std::uint32_t qkey, std::uint32_t sq_psn);

// A UC QP from INIT through RTR to RTS: the same path as rc_qp_to_rts, without what only a
// reliable connection has (ACK timeout, retries, RNR timer, reads and atomics in flight).
void uc_qp_to_rts(ibv_qp* qp, const PortFacts& port, std::uint8_t port_number, const RcPeer& peer,
                  std::uint32_t sq_psn, const AddressLane& lane);

// Page-aligned, zeroed memory registered for local and remote access.
struct RegisteredBuffer {
  Buffer memory;
  std::size_t size = 0;
  MemoryRegion mr;
  bool relaxed_ordering = false;  // registered with IBV_ACCESS_RELAXED_ORDERING
};
// Registers with IBV_ACCESS_RELAXED_ORDERING as perftest does where rdma-core has it: an optional
// access flag, which a device without relaxed ordering ignores. A kernel that refuses it gets
// the registration without it, and the buffer says so.
// `extra_access` adds to local write, remote write and remote read (IBV_ACCESS_REMOTE_ATOMIC for
// atomic probes: perftest asks for it only then, and a device without atomics may refuse it).
RegisteredBuffer register_buffer(ibv_pd* pd, std::size_t size, int extra_access = 0);

}  // namespace ibprobe::probes::verbs
