// The control protocol between a probe initiator and a peer's responder, spoken over TCP (the
// transport is separate from this codec).
//
// A frame is a fixed 12-byte binary header followed by a JSON body:
//   magic "IBPR" | protocol version (u16, big endian) | message type (u16) | body length (u32)
// The binary header lets a reader check magic, version, type and length - and refuse an
// oversized frame - before it reads or allocates the body. The body is JSON because the control
// path carries a handful of small messages per run, never data-path traffic: readable in a packet
// capture, and a later version can add optional fields that older peers ignore. Every number a
// peer sends is range-checked on decode; the spec's meaning is checked afterwards by validate()
// and check_limits().
#pragma once

#include <array>
#include <cstdint>
#include <expected>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "ibprobe/probes.h"

namespace ibprobe::probes::protocol {

inline constexpr std::uint16_t kProtocolVersion = 1;
inline constexpr std::size_t kHeaderSize = 12;
// Two counter snapshots of a device with a few hundred hw_counters fit with room to spare.
inline constexpr std::uint32_t kMaxBodyBytes = 256 * 1024;

enum class MessageType : std::uint16_t {
  kHello = 1,
  kProbeRequest = 2,
  kProbeAccept = 3,
  kProbeReject = 4,
  kQpInfo = 5,
  kReady = 6,
  kResult = 7,
  kError = 8,
  // The mesh: an initiator asks for the responder's UD pinging address, once per peer and again
  // when pings stop being answered. Types a peer without a mesh does not know it refuses as
  // unknown, so the addition needs no new protocol version.
  kMeshAddressRequest = 9,
  kMeshAddress = 10,
  kVerifyRequest = 11,
  kVerifyStep = 12,
};

using Bytes = std::vector<std::uint8_t>;

// First message in each direction. With a shared secret (peer_auth.h), each side's Hello carries
// a random challenge, and the responder's also carries its proof of the secret in
// challenge_response; the initiator's proof follows in its ProbeRequest, bound to the spec.
struct Hello {
  std::uint32_t protocol_version = kProtocolVersion;
  std::string software_version;
  std::optional<Bytes> challenge;
  std::optional<Bytes> challenge_response;

  bool operator==(const Hello&) const = default;
};

struct ProbeRequest {
  ProbeSpec spec;
  // The initiator's proof of the shared secret over both challenges and this spec.
  std::optional<Bytes> authenticator = std::nullopt;

  bool operator==(const ProbeRequest&) const = default;
};

struct ProbeAccept {
  bool operator==(const ProbeAccept&) const = default;
};

struct ProbeReject {
  std::string reason;

  bool operator==(const ProbeReject&) const = default;
};

// What the other side needs to bring one RC QP to RTR and address its buffer.
struct QpEndpoint {
  std::uint32_t qpn = 0;  // 24 bits
  std::uint32_t psn = 0;  // 24 bits
  std::uint16_t lid = 0;
  std::array<std::uint8_t, 16> gid{};
  std::uint32_t rkey = 0;
  std::uint64_t addr = 0;
  std::uint32_t mtu = 0;  // bytes: 256, 512, 1024, 2048 or 4096
  // RDMA reads this side's QP accepts in flight as a responder (its max_qp_rd_atom): the
  // other side issues no more than that, as perftest exchanges out_reads.
  std::uint32_t max_rd_atomic = 1;

  bool operator==(const QpEndpoint&) const = default;
};

// The responder's rdma_cm listener for a run with spec.rdma_cm: the port it listens on (at the
// address the control connection reached) and the token each connection request must carry in
// its private data, so only this run's initiator connects to its QPs.
struct CmListener {
  std::uint16_t port = 0;
  std::uint64_t token = 0;

  bool operator==(const CmListener&) const = default;
};

struct QpInfo {
  std::vector<QpEndpoint> qps;
  // The responder's, with spec.rdma_cm only.
  std::optional<CmListener> cm;

  bool operator==(const QpInfo&) const = default;
};

struct Ready {
  bool operator==(const Ready&) const = default;
};

struct PreflightCheck {
  std::string name;  // port_active, sm_lid, rate_match, ...
  bool passed = false;
  std::string detail;
  // False for a check with nothing to check on this side (detail: why); `passed` is then false.
  bool applicable = true;

  bool operator==(const PreflightCheck&) const = default;
};

// What one side's session really used, where it decided for itself (device defaults, per-side
// choices).
struct SideFacts {
  std::uint32_t gid_index = 0;
  std::optional<std::uint32_t> numa_node;  // unset: not bound
  std::uint32_t inline_size = 0;
  bool relaxed_ordering = false;  // buffers registered with IBV_ACCESS_RELAXED_ORDERING
  // With a rate limit: who enforced it on this side (software or hardware, never auto).
  std::optional<RateLimiter> rate_limiter;
  // The lane its QPs used; absent from peers that predate lanes (and so ignored them).
  std::optional<Lane> lane;

  bool operator==(const SideFacts&) const = default;
};

// The responder's side of a run: its pre-flight checks and its counters around the run. Raw
// snapshots rather than deltas, so both sides' deltas come from the same code on the initiator.
struct Result {
  std::vector<PreflightCheck> checks;
  CounterSnapshot before;
  CounterSnapshot after;
  // What the responder verified, for a validating probe whose receiving side it is.
  std::optional<ValidationReport> validation;
  std::optional<SideFacts> facts;  // absent from peers that predate it
  // A bidirectional run: the responder's own direction, measured as the initiator measures its.
  std::optional<BandwidthStats> bandwidth;
  // Send bandwidth: receive completions the responder reaped.
  std::optional<std::uint64_t> messages_received;

  bool operator==(const Result&) const = default;
};

// kVerbs: the responder's own verbs resources or completions failed (its device, its link).
enum class ErrorCode {
  kBadRequest,
  kLimitExceeded,
  kBusy,
  kUnauthorized,
  kTimeout,
  kInternal,
  kVerbs
};

struct Error {
  ErrorCode code = ErrorCode::kInternal;
  std::string text;

  bool operator==(const Error&) const = default;
};

// Sent after the Hellos instead of a ProbeRequest. With a shared secret, the initiator's proof
// over both challenges (peer_auth::initiator_mesh_proof).
struct MeshAddressRequest {
  std::optional<Bytes> authenticator;

  bool operator==(const MeshAddressRequest&) const = default;
};

// Where the responder's exporter answers mesh pings: its UD QP, reached with this GID and Q_Key.
struct MeshAddress {
  std::array<std::uint8_t, 16> gid{};
  std::uint16_t lid = 0;  // InfiniBand ports: the destination LID; 0 on RoCE
  std::uint32_t qpn = 0;  // 24 bits
  std::uint32_t qkey = 0;
  std::string gid_family;  // ipv4, ipv6 or ib: never paired with another family

  bool operator==(const MeshAddress&) const = default;
};

// A case of the verification suite (ibprobe/verify.h) in place of a ProbeRequest: the responder
// answers it as it answers a probe (ProbeAccept or ProbeReject, QpInfo both ways, Ready, and a
// Result at the end), bounding it by the same Limits through `spec`. A peer that predates it
// refuses the unknown message type instead of running something else.
struct VerifyRequest {
  std::string case_name;
  ProbeSpec spec;
  std::uint32_t recv_delay_ms = 0;  // delayed_recv: how long each re-post is held back
  std::uint64_t seed = 0;           // random_sizes: the size sequence's seed
  bool fixed_sizes = false;         // random_sizes: the fixed boundary sequence instead
  std::uint32_t rebuild_after = 0;  // qp_rebuild: messages before the responder drops its QP
  std::uint32_t soak_interval_seconds = 0;            // soak: the figures' reporting interval
  std::optional<Bytes> authenticator = std::nullopt;  // as ProbeRequest's, over this request

  bool operator==(const VerifyRequest&) const = default;
};

// What one end of a verification case tells the other mid-case: the events only both ends
// together can stage (a QP destroyed and rebuilt, a phase over).
struct VerifyStep {
  std::string step;
  std::uint64_t value = 0;
  std::optional<QpInfo> endpoints;

  bool operator==(const VerifyStep&) const = default;
};

using Message = std::variant<Hello, ProbeRequest, ProbeAccept, ProbeReject, QpInfo, Ready, Result,
                             Error, MeshAddressRequest, MeshAddress, VerifyRequest, VerifyStep>;

// The whole frame. Throws std::length_error if the body would exceed kMaxBodyBytes.
Bytes encode(const Message& message);

enum class DecodeErrorKind {
  kTruncated,           // fewer bytes than the header or its length announce
  kBadMagic,            // not an ibprobe control frame
  kUnsupportedVersion,  // a protocol version this build does not speak
  kUnknownType,
  kOversized,      // announced body longer than the limit: refused before reading it
  kTrailingBytes,  // more bytes than the header announced
  kMalformed,      // body is not a JSON object of bounded nesting
  kMissingField,
  kWrongType,
  kOutOfRange,
};

struct DecodeError {
  DecodeErrorKind kind;
  std::string message;  // names the field and the offending value
};

struct FrameHeader {
  std::uint16_t version = kProtocolVersion;
  MessageType type = MessageType::kHello;
  std::uint32_t body_length = 0;
};

// First step of reading a frame: `bytes` holds at least the header. A transport reads
// kHeaderSize bytes, calls this, and only then reads body_length more.
std::expected<FrameHeader, DecodeError> decode_header(std::span<const std::uint8_t> bytes,
                                                      std::uint32_t max_body = kMaxBodyBytes);

// Second step: `body` holds exactly header.body_length bytes.
std::expected<Message, DecodeError> decode_body(const FrameHeader& header,
                                                std::span<const std::uint8_t> body);

// Both steps on one complete frame.
std::expected<Message, DecodeError> decode(std::span<const std::uint8_t> frame,
                                           std::uint32_t max_body = kMaxBodyBytes);

}  // namespace ibprobe::probes::protocol
