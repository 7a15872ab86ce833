#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <string>
#include <utility>

#include "ibprobe/enum_names.h"
#include "ibprobe/probes.h"

namespace ibprobe::probes {
namespace {

// perftest refuses fewer iterations than this (MIN_ITER).
constexpr std::uint64_t kMinIterations = 5;
constexpr std::array kIbMtus = {256u, 512u, 1024u, 2048u, 4096u};
// ibv_global_route::sgid_index is 8 bits wide.
constexpr std::uint32_t kMaxGidIndex = 255;
// A service level is 4 bits (ibv_ah_attr::sl), a traffic class 8 (ibv_global_route), a P_Key
// index 16 (ibv_qp_attr::pkey_index).
constexpr std::uint32_t kMaxServiceLevel = 15;
constexpr std::uint32_t kMaxTrafficClass = 255;
constexpr std::uint32_t kMaxPkeyIndex = 65535;
// Unicast LIDs; 0xC000..0xFFFE are multicast and 0xFFFF the permissive LID (IBA 4.1.3).
constexpr std::uint32_t kMaxUnicastLid = 0xBFFF;
// ibv_qp_attr: timeout and min_rnr_timer are 5-bit fields, retry_cnt and rnr_retry 3-bit.
constexpr std::uint32_t kMaxFiveBit = 31;
constexpr std::uint32_t kMaxThreeBit = 7;
constexpr std::uint32_t kMaxNumaNode = 1023;

constexpr EnumNames<Operation, 4> kOperationNames{{{Operation::kWrite, "write"},
                                                   {Operation::kRead, "read"},
                                                   {Operation::kSend, "send"},
                                                   {Operation::kAtomic, "atomic"}}};
constexpr EnumNames<AtomicType, 2> kAtomicTypeNames{
    {{AtomicType::kFetchAndAdd, "FETCH_AND_ADD"}, {AtomicType::kCompareAndSwap, "CMP_AND_SWAP"}}};
constexpr EnumNames<Connection, 3> kConnectionNames{
    {{Connection::kRc, "RC"}, {Connection::kUc, "UC"}, {Connection::kUd, "UD"}}};
constexpr EnumNames<TestKind, 2> kTestKindNames{
    {{TestKind::kBandwidth, "bw"}, {TestKind::kLatency, "lat"}}};
constexpr EnumNames<NumaPolicy, 3> kNumaPolicyNames{
    {{NumaPolicy::kAuto, "auto"}, {NumaPolicy::kNone, "none"}, {NumaPolicy::kNode, "node"}}};
constexpr EnumNames<RateUnit, 3> kRateUnitNames{
    {{RateUnit::kGbps, "Gbps"}, {RateUnit::kMiBps, "MiBps"}, {RateUnit::kPps, "pps"}}};
constexpr EnumNames<RateLimiter, 3> kRateLimiterNames{{{RateLimiter::kSoftware, "software"},
                                                       {RateLimiter::kHardware, "hardware"},
                                                       {RateLimiter::kAuto, "auto"}}};

// perftest_parameters.h: DEF_CQ_MOD, MSG_SIZE_CQ_MOD_LIMIT, DEF_INLINE_WRITE and
// DEF_INLINE_SEND_RC_UC_XRC.
constexpr std::uint32_t kPerftestCqModeration = 100;
constexpr std::uint64_t kCqModerationSizeLimit = 8192;
constexpr std::uint32_t kPerftestInlineWrite = 220;
constexpr std::uint32_t kPerftestInlineSendRc = 236;
constexpr std::uint32_t kPerftestInlineSendUd = 188;
// perftest_parameters.h: UC_MAX_RX, DEF_RX_SEND.
constexpr std::uint32_t kPerftestUnreliableMaxRx = 16000;
constexpr std::uint32_t kPerftestRxSend = 512;

// The device families perftest's ib_dev_name() tells apart where its inline default differs;
// every other recognised device is kOther, an unrecognised one kUnknown.
enum class PerftestDevice {
  kUnknown,
  kOther,
  kNetXtreme,
  kEfa,
  kQlogicE4,
  kErdma,
  kHns,
  kIntelGen1,
  kIntelGen2
};

PerftestDevice perftest_device(std::uint32_t vendor_id, std::uint32_t part) {
  constexpr std::uint32_t kChelsio = 5157, kIntel = 0x8086;
  if (vendor_id == kChelsio) {
    switch (part >> 12) {
      case 4:
      case 5:
      case 6:
      case 10:
      case 11:
        return PerftestDevice::kOther;
      default:
        return PerftestDevice::kUnknown;
    }
  }
  if (vendor_id == kIntel) {
    return part == 14289 ? PerftestDevice::kIntelGen1 : PerftestDevice::kIntelGen2;
  }
  // ib_dev_name's table by part id alone, whatever the vendor (ConnectX, BlueField, Skyhawk,
  // QLogic AH/AHP, then the families with their own inline size).
  constexpr std::array kOtherParts = {
      4099u,  4100u,  4103u,  4104u,  4113u,  4115u,  4116u,  4117u,  4118u,  4119u,  4120u,
      4121u,  4122u,  4123u,  4124u,  4125u,  4126u,  4127u,  4129u,  4131u,  41682u, 41683u,
      41686u, 41692u, 26418u, 26428u, 26438u, 26448u, 26458u, 26468u, 26478u, 25408u, 25418u,
      25428u, 25448u, 1824u,  32880u, 32881u, 32882u, 32883u, 32912u, 33136u, 33168u};
  constexpr std::array kQlogicE4Parts = {5684u, 5700u, 5716u, 5718u, 5734u};
  constexpr std::array kNetXtremeParts = {
      5638u, 5652u, 5824u, 5825u, 5827u, 5839u, 5846u, 5847u, 5848u, 5849u,  5855u,  5858u, 5859u,
      5861u, 5867u, 5869u, 5871u, 5872u, 5873u, 5968u, 5984u, 6169u, 55296u, 55298u, 55300u};
  constexpr std::array kEfaParts = {61344u, 61345u, 61346u, 61347u};
  constexpr std::array kHnsParts = {41506u, 41507u, 41508u, 41509u, 41510u, 41512u, 41519u};
  auto in = [part](const auto& parts) { return std::ranges::find(parts, part) != parts.end(); };
  if (in(kOtherParts)) return PerftestDevice::kOther;
  if (in(kQlogicE4Parts)) return PerftestDevice::kQlogicE4;
  if (in(kNetXtremeParts)) return PerftestDevice::kNetXtreme;
  if (in(kEfaParts)) return PerftestDevice::kEfa;
  if (in(kHnsParts)) return PerftestDevice::kHns;
  if (part == 4223) return PerftestDevice::kErdma;
  return PerftestDevice::kUnknown;
}

std::string field(std::string_view name, std::uint64_t value) {
  return std::string(name) + "=" + std::to_string(value);
}

using Violations = std::vector<std::string>;

void check_run_length(const ProbeSpec& spec, Violations& out) {
  if (spec.iterations && spec.duration_seconds) {
    out.push_back("duration and iterations are exclusive: set one of them");
  } else if (!spec.iterations && !spec.duration_seconds) {
    out.push_back("neither iterations nor duration is set: a probe needs one of them");
  }
  if (spec.iterations && *spec.iterations < kMinIterations) {
    out.push_back(field("iterations", *spec.iterations) + ": at least " +
                  std::to_string(kMinIterations) + " are needed (perftest's minimum)");
  }
  if (spec.duration_seconds) {
    const std::uint64_t margins = 2ull * spec.margin_seconds;
    if (*spec.duration_seconds <= margins) {
      out.push_back(field("duration", *spec.duration_seconds) +
                    ": must exceed the warm-up and cool-down margins (2 x " +
                    std::to_string(spec.margin_seconds) + " s), or nothing is measured");
    }
    if (spec.timeout_seconds <= *spec.duration_seconds) {
      out.push_back(field("timeout", spec.timeout_seconds) + ": must exceed the duration (" +
                    std::to_string(*spec.duration_seconds) + " s) or every run times out");
    }
  }
  if (spec.timeout_seconds == 0) out.push_back("timeout=0: a probe needs time to run");
}

void check_queues(const ProbeSpec& spec, Violations& out) {
  const bool latency = spec.test == TestKind::kLatency;
  if (spec.qps == 0) out.push_back("qps=0: a probe needs at least one QP");
  if (spec.qps > 1 && latency) {
    out.push_back(field("qps", spec.qps) + ": several QPs only make sense for bandwidth tests");
  }
  if (spec.tx_depth == 0) out.push_back("tx_depth=0: nothing could be posted");
  if (spec.rx_depth == 0) out.push_back("rx_depth=0: the receive queue needs at least one entry");
  if (spec.cq_moderation == 0u) {
    out.push_back("cq_moderation=0: some sends must request a completion");
  }
  if (spec.post_list == 0) out.push_back("post_list=0: a post list holds at least one request");
  if (spec.cq_moderation && *spec.cq_moderation > spec.tx_depth) {
    out.push_back(field("cq_moderation", *spec.cq_moderation) +
                  ": CQ moderation larger than tx depth (" + std::to_string(spec.tx_depth) +
                  ") would fill the send queue before any completion is signalled");
  }
  if (spec.post_list > spec.tx_depth) {
    out.push_back(field("post_list", spec.post_list) + ": post list larger than tx depth (" +
                  std::to_string(spec.tx_depth) + ") cannot be posted at once");
  }
  if (latency && spec.post_list > 1) {
    out.push_back(
        field("post_list", spec.post_list) +
        ": post lists only apply to bandwidth tests (a ping-pong has one message in flight)");
  }
  if (latency && spec.tx_depth > 1) {
    out.push_back(field("tx_depth", spec.tx_depth) +
                  ": a latency ping-pong has one message in flight; tx depth must be 1");
  }
  // perftest: "Post list size must be a multiple of CQ moderation".
  if (spec.post_list > 1 && spec.cq_moderation && *spec.cq_moderation > 0 &&
      spec.post_list % *spec.cq_moderation != 0) {
    out.push_back(field("post_list", spec.post_list) + ": must be a multiple of CQ moderation (" +
                  std::to_string(*spec.cq_moderation) +
                  ") so every list ends on a signalled request");
  }
  // perftest: "Number of iterations must be a multiple of post list size".
  if (spec.post_list > 1 && spec.iterations && *spec.iterations % spec.post_list != 0) {
    out.push_back(field("post_list", spec.post_list) + ": iterations (" +
                  std::to_string(*spec.iterations) +
                  ") must be a multiple of the post list, so every list is whole");
  }
  if (spec.post_list > 1 && spec.validation) {
    out.push_back(field("post_list", spec.post_list) +
                  ": a validating run posts each message into its own checked slot; post "
                  "lists apply to plain runs");
  }
}

void check_message(const ProbeSpec& spec, Violations& out) {
  if (spec.message_size == 0) out.push_back("message_size=0: a message carries at least one byte");
  const bool atomic = spec.operation == Operation::kAtomic;
  if (atomic && spec.message_size != kAtomicMessageSize) {
    out.push_back(field("message_size", spec.message_size) + ": an atomic operand is " +
                  std::to_string(kAtomicMessageSize) +
                  " bytes (perftest: message size cannot be changed for atomic tests)");
  }
  if (spec.inline_size > 0u && (spec.operation == Operation::kRead || atomic)) {
    out.push_back(std::string(to_string(spec.operation)) +
                  (spec.test == TestKind::kLatency ? " latency" : " bandwidth") +
                  " cannot use inline: the request carries no payload to inline");
  } else if (spec.inline_size && *spec.inline_size > spec.message_size) {
    out.push_back(field("inline_size", *spec.inline_size) +
                  ": inline size larger than the message (" + std::to_string(spec.message_size) +
                  " bytes)");
  }
  if (spec.use_srq && spec.operation != Operation::kSend) {
    out.push_back("use_srq applies only to send: RDMA " + std::string(to_string(spec.operation)) +
                  " consumes no receive requests");
  }
  // perftest refuses -e with WRITE: the side written to learns of a write by polling memory,
  // which raises no completion to sleep on.
  if (spec.cq_events && spec.operation == Operation::kWrite) {
    out.push_back(
        "cq_events applies to read and send: an RDMA write raises no completion at the side it "
        "writes to, which polls memory for it (perftest refuses -e with WRITE too)");
  }
}

// perftest's rules for which test takes which transport and atomic type.
void check_transport(const ProbeSpec& spec, Violations& out) {
  const bool atomic = spec.operation == Operation::kAtomic;
  if (!atomic && spec.atomic_type != AtomicType::kFetchAndAdd) {
    out.push_back("atomic_type " + std::string(to_string(spec.atomic_type)) +
                  " applies to atomic probes, not " + std::string(to_string(spec.operation)));
  }
  if (atomic && spec.rate_limit && spec.rate_limit->limiter != RateLimiter::kHardware) {
    out.push_back(
        "rate_limit on an atomic probe needs limiter hardware: the software limiter paces by "
        "payload, which an atomic does not carry (perftest refuses it too)");
  }
  if (spec.connection == Connection::kRc) return;
  const std::string name(to_string(spec.connection));
  if (spec.connection == Connection::kUd && spec.operation != Operation::kSend) {
    out.push_back(
        "connection UD carries send only: a datagram has no remote memory to write, "
        "read or update (perftest: UD connection only possible in SEND verb)");
  } else if (spec.operation == Operation::kRead || atomic) {
    out.push_back("connection UC cannot carry " + std::string(to_string(spec.operation)) +
                  ": an unreliable connection has no responder resources for reads and "
                  "atomics (perftest: UC connection not possible in READ/ATOMIC verbs)");
  }
  if (spec.bidirectional && spec.operation == Operation::kSend) {
    out.push_back("bidirectional send over " + name +
                  ": each side counts the other's messages to know when the run is over, and "
                  "an unreliable transport loses some");
  }
  if (spec.validation) {
    out.push_back("validation over " + name +
                  ": an unreliable transport drops a message it loses, which the check would "
                  "report as corruption; validate over RC");
  }
  if (spec.rc != RcKnobs{}) {
    out.push_back("rc timeout, retry_count, rnr_retry and min_rnr_timer apply to RC: a " + name +
                  " QP waits for no acknowledgement and retries nothing");
  }
  if (spec.rdma_cm && spec.connection == Connection::kUc) {
    out.push_back("rdma_cm over " + name +
                  ": the connection manager connects RC QPs and reaches UD ones by SIDR; UC "
                  "exchanges its QP numbers over the control channel (perftest: UC is not "
                  "supported in librdmacm)");
  }
}

// What the connection manager decides when it connects the QPs: the path's SL (InfiniBand: the
// SA's path record, which the SM's QoS policy chose), the P_Key (the IP interface's partition)
// and the GIDs (the addresses'). A value asked for here would not be the one the workload's own
// rdma_cm connections get.
void check_connection_manager(const ProbeSpec& spec, Violations& out) {
  if (!spec.rdma_cm) return;
  if (spec.sl != 0) {
    out.push_back(field("sl", spec.sl) +
                  " with rdma_cm: the SL is the path's the connection manager resolves (the SA's "
                  "path record on InfiniBand); choose the lane by traffic_class, which it "
                  "applies, as perftest -R does");
  }
  if (spec.dlid) {
    out.push_back(field("dlid", *spec.dlid) +
                  " with rdma_cm: the destination LID is the path record's the connection "
                  "manager resolves");
  }
  if (spec.pkey_index != 0) {
    out.push_back(field("pkey_index", spec.pkey_index) +
                  " with rdma_cm: the P_Key is the partition of the IP interface the peer's "
                  "address is reached through (an IPoIB child interface per partition)");
  }
  for (const auto& [name, index] :
       {std::pair{"gid_index", spec.gid_index}, std::pair{"peer_gid_index", spec.peer_gid_index}}) {
    if (index) {
      out.push_back(field(name, *index) +
                    " with rdma_cm: each side's GID is the one of its address the connection "
                    "manager resolves");
    }
  }
}

void check_link(const ProbeSpec& spec, Violations& out) {
  if (spec.mtu && !is_ib_mtu(*spec.mtu)) {
    out.push_back("mtu " + std::to_string(*spec.mtu) +
                  " is not an IB MTU (256, 512, 1024, 2048, 4096)");
  }
  for (const auto& [name, index] :
       {std::pair{"gid_index", spec.gid_index}, std::pair{"peer_gid_index", spec.peer_gid_index}}) {
    if (index && *index > kMaxGidIndex) {
      out.push_back(field(name, *index) + ": a GID index is 0..255");
    }
  }
  for (auto& problem : lane_problems(spec)) out.push_back(std::move(problem));
  const RcKnobs& rc = spec.rc;
  if (rc.timeout == 0) {
    out.push_back("timeout exponent 0 waits forever for an ACK: a lost peer would hang the probe");
  } else if (rc.timeout > kMaxFiveBit) {
    out.push_back(field("rc timeout exponent", rc.timeout) + ": the field is 0..31");
  }
  if (rc.retry_cnt > kMaxThreeBit)
    out.push_back(field("retry_count", rc.retry_cnt) + ": must be 0..7");
  if (rc.rnr_retry > kMaxThreeBit)
    out.push_back(field("rnr_retry", rc.rnr_retry) + ": must be 0..7");
  if (rc.min_rnr_timer > kMaxFiveBit) {
    out.push_back(field("min_rnr_timer", rc.min_rnr_timer) + ": must be 0..31");
  }
}

// Receive pieces a validating send may scatter one message over; rxe and mlx5 offer far more.
constexpr std::uint32_t kMaxReceiveSges = 8;
constexpr std::uint64_t kMinValidatedMessage = 64;  // header, trailer and some payload

void check_validation(const ProbeSpec& spec, Violations& out) {
  const bool send = spec.operation == Operation::kSend;
  if (spec.validation) {
    if (spec.test != TestKind::kBandwidth) {
      out.push_back(
          "validation applies to bandwidth probes: a latency ping-pong's timing is its "
          "result and checking each message would change it");
    }
    if (spec.operation == Operation::kRead) {
      out.push_back(
          "validation applies to write, send and atomic: a read's data is checked by nobody "
          "but the reader, which would be checking its own peer's unverified buffer");
    }
    if (spec.operation != Operation::kAtomic && spec.message_size < kMinValidatedMessage) {
      out.push_back(field("message_size", spec.message_size) +
                    ": a validated message needs at least " + std::to_string(kMinValidatedMessage) +
                    " bytes (header, pseudo-random payload, trailer)");
    }
  }
  if (spec.posted_receives > 0) {
    if (!send || spec.test != TestKind::kBandwidth) {
      out.push_back(field("posted_receives", spec.posted_receives) +
                    ": applies to send bandwidth only, the one probe whose receiver posts "
                    "receives while messages stream in");
    } else if (spec.posted_receives > spec.rx_depth) {
      out.push_back(field("posted_receives", spec.posted_receives) +
                    ": more than the receive queue holds (rx_depth " +
                    std::to_string(spec.rx_depth) + ")");
    }
  }
  if (spec.receive_sges == 0 || spec.receive_sges > kMaxReceiveSges) {
    out.push_back(field("receive_sges", spec.receive_sges) + ": must be 1.." +
                  std::to_string(kMaxReceiveSges));
  } else if (spec.receive_sges > 1 && !(spec.validation && send)) {
    out.push_back(field("receive_sges", spec.receive_sges) +
                  ": scattered receives are a check of validating send probes; set validation "
                  "and operation send");
  }
}

void check_numa_side(const char* side, NumaPolicy policy, std::optional<std::uint32_t> node,
                     Violations& out) {
  const std::string prefix = std::string(side) + " ";
  if (policy == NumaPolicy::kNode) {
    if (!node) {
      out.push_back(prefix + "numa policy 'node' needs a node number");
    } else if (*node > kMaxNumaNode) {
      out.push_back(prefix + field("numa_node", *node) + ": beyond any NUMA node Linux supports");
    }
  } else if (node) {
    out.push_back(prefix + "numa_node is set but the policy is '" + std::string(to_string(policy)) +
                  "': only policy 'node' uses it");
  }
}

void check_modes(const ProbeSpec& spec, Violations& out) {
  const bool bandwidth = spec.test == TestKind::kBandwidth;
  if (spec.bidirectional) {
    if (!bandwidth) {
      out.push_back(
          "bidirectional applies to bandwidth probes: a ping-pong already goes both ways");
    }
    if (spec.validation) {
      out.push_back("bidirectional with validation: the validating loops check one direction");
    }
  }
  if (const auto& limit = spec.rate_limit) {
    if (!bandwidth) {
      out.push_back(
          "rate_limit applies to bandwidth probes: a ping-pong has one message in flight");
    }
    if (!(limit->value > 0) || !std::isfinite(limit->value)) {
      out.push_back("rate_limit must be a positive number");
    }
    if (spec.validation) {
      out.push_back("rate_limit with validation: the validating loop posts without pacing");
    }
  }
}

void check_numa(const ProbeSpec& spec, Violations& out) {
  check_numa_side("initiator", spec.numa, spec.numa_node, out);
  check_numa_side("responder", spec.peer_numa, spec.peer_numa_node, out);
}

// a * b, or nullopt when it does not fit in 64 bits.
std::optional<std::uint64_t> checked_multiply(std::uint64_t a, std::uint64_t b) {
  std::uint64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}

}  // namespace

std::vector<std::string> lane_problems(const ProbeSpec& spec) {
  std::vector<std::string> out;
  if (spec.sl > kMaxServiceLevel) {
    out.push_back(field("sl", spec.sl) + ": a service level is 0..15");
  }
  if (spec.traffic_class > kMaxTrafficClass) {
    out.push_back(field("traffic_class", spec.traffic_class) +
                  ": a traffic class is one byte, 0..255 (on RoCE v2 the IP TOS byte)");
  }
  if (spec.pkey_index > kMaxPkeyIndex) {
    out.push_back(field("pkey_index", spec.pkey_index) + ": a P_Key index is 0..65535");
  }
  if (spec.dlid && (*spec.dlid == 0 || *spec.dlid > kMaxUnicastLid)) {
    out.push_back(field("dlid", *spec.dlid) +
                  ": a destination LID is a unicast LID, 1..49151 (0xBFFF); 0xC000 and above "
                  "are multicast and permissive LIDs");
  }
  return out;
}

bool is_ib_mtu(std::uint32_t bytes) {
  return std::ranges::find(kIbMtus, bytes) != kIbMtus.end();
}

std::string_view to_string(Operation operation) {
  return name_of(kOperationNames, operation);
}

std::string_view to_string(AtomicType type) {
  return name_of(kAtomicTypeNames, type);
}

std::string_view to_string(Connection connection) {
  return name_of(kConnectionNames, connection);
}

std::string_view connected_by(const ProbeSpec& spec) {
  return spec.rdma_cm ? "rdma_cm" : "qp_exchange";
}

std::optional<AtomicType> parse_atomic_type(std::string_view text) {
  return value_named(kAtomicTypeNames, text);
}

std::optional<Connection> parse_connection(std::string_view text) {
  return value_named(kConnectionNames, text);
}

std::string_view to_string(TestKind test) {
  return name_of(kTestKindNames, test);
}

std::string_view to_string(NumaPolicy policy) {
  return name_of(kNumaPolicyNames, policy);
}

std::string_view to_string(RateUnit unit) {
  return name_of(kRateUnitNames, unit);
}

std::string_view to_string(RateLimiter limiter) {
  return name_of(kRateLimiterNames, limiter);
}

std::optional<RateUnit> parse_rate_unit(std::string_view text) {
  return value_named(kRateUnitNames, text);
}

std::optional<RateLimiter> parse_rate_limiter(std::string_view text) {
  return value_named(kRateLimiterNames, text);
}

double rate_limit_bytes_per_second(const RateLimit& limit, std::uint64_t message_size) {
  switch (limit.unit) {
    case RateUnit::kGbps:
      return limit.value * 1e9 / 8;
    case RateUnit::kMiBps:
      return limit.value * 1024 * 1024;
    case RateUnit::kPps:
      return limit.value * static_cast<double>(message_size);
  }
  return 0;
}

std::optional<Operation> parse_operation(std::string_view text) {
  return value_named(kOperationNames, text);
}

std::optional<TestKind> parse_test_kind(std::string_view text) {
  return value_named(kTestKindNames, text);
}

std::optional<NumaPolicy> parse_numa_policy(std::string_view text) {
  return value_named(kNumaPolicyNames, text);
}

std::optional<NumaChoice> parse_numa_choice(std::string_view text) {
  if (const auto named = parse_numa_policy(text); named && *named != NumaPolicy::kNode) {
    return NumaChoice{*named, std::nullopt};
  }
  std::uint32_t node = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), node);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return NumaChoice{NumaPolicy::kNode, node};
}

ProbeSpec default_spec(Operation operation, TestKind test) {
  ProbeSpec spec;
  spec.operation = operation;
  spec.test = test;
  // perftest: DEF_RX_SEND for send, DEF_RX_RDMA (1) for RDMA verbs, which post no receives.
  spec.rx_depth = operation == Operation::kSend ? 512 : 1;
  if (test == TestKind::kBandwidth) {
    spec.message_size = 65536;
    spec.tx_depth = 128;
    // perftest: DEF_ITERS_WB for write bandwidth, DEF_ITERS otherwise.
    spec.iterations = operation == Operation::kWrite ? 5000 : 1000;
  } else {
    spec.message_size = 2;
    spec.tx_depth = 1;
    spec.iterations = 1000;
  }
  if (operation == Operation::kAtomic) spec.message_size = kAtomicMessageSize;
  return spec;
}

std::uint32_t effective_cq_moderation(const ProbeSpec& spec) {
  if (spec.test == TestKind::kLatency) return 1;
  if (spec.cq_moderation) return *spec.cq_moderation;
  std::uint32_t moderation = kPerftestCqModeration;
  // perftest keeps the moderation for UD, whose messages are cut to the path MTU.
  if (spec.message_size > kCqModerationSizeLimit && spec.connection != Connection::kUd) {
    moderation = 1;
  }
  if (spec.post_list > 1) moderation = spec.post_list;
  return std::max(1u, std::min(moderation, spec.tx_depth));
}

std::uint32_t perftest_unreliable_rx_depth(const ProbeSpec& spec, std::uint32_t max_depth) {
  if (spec.connection == Connection::kRc || spec.operation != Operation::kSend ||
      !spec.iterations || spec.rx_depth != kPerftestRxSend) {
    return spec.rx_depth;
  }
  return static_cast<std::uint32_t>(
      std::min<std::uint64_t>({*spec.iterations, kPerftestUnreliableMaxRx, max_depth}));
}

std::uint32_t perftest_default_inline(std::uint32_t vendor_id, std::uint32_t vendor_part_id,
                                      Operation operation, TestKind test, Connection connection) {
  const auto device = perftest_device(vendor_id, vendor_part_id);
  if (device == PerftestDevice::kUnknown || test != TestKind::kLatency ||
      operation == Operation::kRead || operation == Operation::kAtomic) {
    return 0;
  }
  switch (device) {
    case PerftestDevice::kNetXtreme:
    case PerftestDevice::kErdma:
      return 96;
    case PerftestDevice::kEfa:
    case PerftestDevice::kHns:
      return 32;
    case PerftestDevice::kQlogicE4:
      return 128;
    case PerftestDevice::kIntelGen1:
      return 48;
    case PerftestDevice::kIntelGen2:
      return 101;
    default:
      break;
  }
  if (operation == Operation::kWrite) return kPerftestInlineWrite;
  return connection == Connection::kUd ? kPerftestInlineSendUd : kPerftestInlineSendRc;
}

std::string SpecViolations::message() const {
  std::string joined;
  for (const auto& problem : problems) joined += (joined.empty() ? "" : "; ") + problem;
  return joined;
}

std::expected<ValidSpec, SpecViolations> validate(ProbeSpec spec) {
  Violations out;
  check_run_length(spec, out);
  check_queues(spec, out);
  check_message(spec, out);
  check_transport(spec, out);
  check_connection_manager(spec, out);
  check_link(spec, out);
  check_numa(spec, out);
  check_validation(spec, out);
  check_modes(spec, out);
  if (!out.empty()) return std::unexpected(SpecViolations{std::move(out)});
  return ValidSpec(std::move(spec));
}

std::expected<void, SpecViolations> check_limits(const ProbeSpec& spec, const Limits& limits) {
  Violations out;
  if (spec.message_size > limits.max_message_size) {
    out.push_back(field("message_size", spec.message_size) + ": above this responder's limit of " +
                  std::to_string(limits.max_message_size) + " bytes");
  }
  for (const auto& [name, depth] :
       {std::pair{"tx_depth", spec.tx_depth}, std::pair{"rx_depth", spec.rx_depth}}) {
    if (depth > limits.max_depth) {
      out.push_back(field(name, depth) + ": above this responder's limit of " +
                    std::to_string(limits.max_depth));
    }
  }
  if (spec.qps > limits.max_qps) {
    out.push_back(field("qps", spec.qps) + ": above this responder's limit of " +
                  std::to_string(limits.max_qps) + " QPs");
  }
  if (spec.duration_seconds && *spec.duration_seconds > limits.max_duration_seconds) {
    out.push_back(field("duration", *spec.duration_seconds) + ": above this responder's limit of " +
                  std::to_string(limits.max_duration_seconds) + " s");
  }
  if (spec.timeout_seconds > limits.max_timeout_seconds) {
    out.push_back(field("timeout", spec.timeout_seconds) + ": above this responder's limit of " +
                  std::to_string(limits.max_timeout_seconds) + " s");
  }
  if (spec.iterations && *spec.iterations > limits.max_iterations) {
    out.push_back(field("iterations", *spec.iterations) + ": above this responder's limit of " +
                  std::to_string(limits.max_iterations));
  }
  // A validating run gives every message in flight its own slot on both sides.
  const std::uint64_t depth =
      spec.validation ? std::uint64_t{spec.tx_depth} + std::max(spec.tx_depth, spec.rx_depth)
                      : std::max(spec.tx_depth, spec.rx_depth);
  const auto per_qp = checked_multiply(depth, spec.message_size);
  const auto total = per_qp ? checked_multiply(*per_qp, spec.qps) : std::nullopt;
  if (!total || *total > limits.max_total_buffer_bytes) {
    out.push_back("buffers of qps x depth x message size = " + std::to_string(spec.qps) + " x " +
                  std::to_string(depth) + " x " + std::to_string(spec.message_size) +
                  " bytes exceed this responder's limit of " +
                  std::to_string(limits.max_total_buffer_bytes) + " bytes");
  }
  if (!out.empty()) return std::unexpected(SpecViolations{std::move(out)});
  return {};
}

std::expected<ValidSpec, SpecViolations> validate_within(ProbeSpec spec, const Limits& limits) {
  auto fits = check_limits(spec, limits);
  auto valid = validate(std::move(spec));
  if (valid && fits) return valid;
  SpecViolations all = valid ? SpecViolations{} : std::move(valid).error();
  if (!fits) {
    auto& over = fits.error().problems;
    all.problems.insert(all.problems.end(), over.begin(), over.end());
  }
  return std::unexpected(std::move(all));
}

}  // namespace ibprobe::probes
