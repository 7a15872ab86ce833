#include "protocol.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string_view>
#include <type_traits>

#include "ibprobe/spec_json.h"

namespace ibprobe::probes::protocol {
namespace {

using nlohmann::json;

constexpr std::array<std::uint8_t, 4> kMagic = {'I', 'B', 'P', 'R'};
// Our deepest message (Result) nests three levels; anything far deeper is hostile.
constexpr int kMaxJsonDepth = 8;
constexpr std::size_t kMaxShortText = 256;  // versions, names
constexpr std::size_t kMaxLongText = 4096;  // reasons, error texts, check details
constexpr std::size_t kMinChallengeBytes = 16;
constexpr std::size_t kMaxChallengeBytes = 64;
constexpr std::size_t kMaxQpEndpoints = 4096;
constexpr std::size_t kMaxChecks = 64;
constexpr std::size_t kMaxCounters = 4096;
constexpr std::uint64_t kMax24Bit = 0xFFFFFF;
constexpr std::uint64_t kMaxU16 = std::numeric_limits<std::uint16_t>::max();
constexpr std::uint64_t kMaxU32 = std::numeric_limits<std::uint32_t>::max();
constexpr std::uint64_t kMaxU64 = std::numeric_limits<std::uint64_t>::max();

// ------------------------------------------------------------------------------- encoding

std::string hex(std::span<const std::uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text;
  text.reserve(bytes.size() * 2);
  for (std::uint8_t byte : bytes) {
    text.push_back(kDigits[byte >> 4]);
    text.push_back(kDigits[byte & 0xF]);
  }
  return text;
}

std::string_view to_wire(ErrorCode code) {
  switch (code) {
    case ErrorCode::kBadRequest:
      return "bad_request";
    case ErrorCode::kLimitExceeded:
      return "limit_exceeded";
    case ErrorCode::kBusy:
      return "busy";
    case ErrorCode::kUnauthorized:
      return "unauthorized";
    case ErrorCode::kTimeout:
      return "timeout";
    case ErrorCode::kInternal:
      return "internal";
    case ErrorCode::kVerbs:
      return "verbs";
  }
  return "internal";
}

json snapshot_to_json(const CounterSnapshot& snapshot) {
  json out = json::object();
  for (const auto& [name, sample] : snapshot) {
    out[name] = {{"value", sample.value},
                 {"width", sample.width_bits},
                 {"scale", sample.scale},
                 {"error", sample.error_class}};
  }
  return out;
}

json body_of(const Hello& hello) {
  json out = {{"protocol_version", hello.protocol_version},
              {"software_version", hello.software_version}};
  if (hello.challenge) out["challenge"] = hex(*hello.challenge);
  if (hello.challenge_response) out["challenge_response"] = hex(*hello.challenge_response);
  return out;
}
json body_of(const ProbeRequest& request) {
  json out = {{"spec", spec_to_json(request.spec)}};
  if (request.authenticator) out["authenticator"] = hex(*request.authenticator);
  return out;
}
json body_of(const ProbeAccept&) {
  return json::object();
}
json body_of(const ProbeReject& reject) {
  return {{"reason", reject.reason}};
}
json body_of(const QpInfo& info) {
  json qps = json::array();
  for (const auto& qp : info.qps) {
    qps.push_back({{"qpn", qp.qpn},
                   {"psn", qp.psn},
                   {"lid", qp.lid},
                   {"gid", hex(qp.gid)},
                   {"rkey", qp.rkey},
                   {"addr", qp.addr},
                   {"mtu", qp.mtu},
                   {"max_rd_atomic", qp.max_rd_atomic}});
  }
  json out = {{"qps", qps}};
  if (info.cm) out["rdma_cm"] = {{"port", info.cm->port}, {"token", info.cm->token}};
  return out;
}
json body_of(const Ready&) {
  return json::object();
}
json body_of(const Result& result) {
  json checks = json::array();
  for (const auto& check : result.checks) {
    json entry = {{"name", check.name}, {"passed", check.passed}, {"detail", check.detail}};
    // Sent only when false, so that a peer that predates it reads the rest unchanged.
    if (!check.applicable) entry["applicable"] = false;
    checks.push_back(std::move(entry));
  }
  json out = {{"checks", checks},
              {"before", snapshot_to_json(result.before)},
              {"after", snapshot_to_json(result.after)}};
  if (const auto& v = result.validation) {
    out["validation"] = {{"messages_received", v->messages_received},
                         {"checked", v->checked},
                         {"errors", v->errors},
                         {"skipped_overwritten", v->skipped_overwritten},
                         {"races", v->races},
                         {"rechecks", v->rechecks},
                         {"tail_checks", v->tail_checks},
                         {"stale_completions", v->stale_completions},
                         {"first_error", v->first_error}};
  }
  if (const auto& f = result.facts) {
    out["facts"] = {{"gid_index", f->gid_index},
                    {"inline_size", f->inline_size},
                    {"relaxed_ordering", f->relaxed_ordering}};
    if (f->numa_node) out["facts"]["numa_node"] = *f->numa_node;
    if (f->rate_limiter) out["facts"]["rate_limiter"] = to_string(*f->rate_limiter);
    if (const auto& lane = f->lane) {
      out["facts"]["lane"] = {{"sl", lane->sl},
                              {"traffic_class", lane->traffic_class},
                              {"pkey_index", lane->pkey_index}};
    }
  }
  if (const auto& bw = result.bandwidth) {
    out["bandwidth"] = {{"messages", bw->messages},
                        {"seconds", bw->seconds},
                        {"bytes_per_second", bw->bytes_per_second},
                        {"messages_per_second", bw->messages_per_second}};
    if (bw->peak_bytes_per_second) {
      out["bandwidth"]["peak_bytes_per_second"] = *bw->peak_bytes_per_second;
    }
  }
  if (result.messages_received) out["messages_received"] = *result.messages_received;
  return out;
}
json body_of(const Error& error) {
  return {{"code", to_wire(error.code)}, {"text", error.text}};
}
json body_of(const VerifyRequest& request) {
  json out = {{"case", request.case_name},
              {"spec", spec_to_json(request.spec)},
              {"recv_delay_ms", request.recv_delay_ms},
              {"seed", request.seed},
              {"fixed_sizes", request.fixed_sizes},
              {"rebuild_after", request.rebuild_after},
              {"soak_interval_seconds", request.soak_interval_seconds}};
  if (request.authenticator) out["authenticator"] = hex(*request.authenticator);
  return out;
}
json body_of(const VerifyStep& step) {
  json out = {{"step", step.step}, {"value", step.value}};
  if (step.endpoints) out["endpoints"] = body_of(*step.endpoints);
  return out;
}

json body_of(const MeshAddressRequest& request) {
  json out = json::object();
  if (request.authenticator) out["authenticator"] = hex(*request.authenticator);
  return out;
}

json body_of(const MeshAddress& address) {
  return {{"gid", hex(address.gid)},
          {"lid", address.lid},
          {"qpn", address.qpn},
          {"qkey", address.qkey},
          {"gid_family", address.gid_family}};
}

void put_u16(Bytes& out, std::uint16_t value) {
  out.push_back(static_cast<std::uint8_t>(value >> 8));
  out.push_back(static_cast<std::uint8_t>(value));
}

void put_u32(Bytes& out, std::uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) {
    out.push_back(static_cast<std::uint8_t>(value >> shift));
  }
}

std::uint32_t get_u32(std::span<const std::uint8_t> bytes) {
  return std::uint32_t{bytes[0]} << 24 | std::uint32_t{bytes[1]} << 16 |
         std::uint32_t{bytes[2]} << 8 | std::uint32_t{bytes[3]};
}

std::uint16_t get_u16(std::span<const std::uint8_t> bytes) {
  return static_cast<std::uint16_t>(bytes[0] << 8 | bytes[1]);
}

// ------------------------------------------------------------------------------- decoding

// Thrown inside the decoder only; decode_body turns it into its DecodeError result.
struct Failure {
  DecodeErrorKind kind;
  std::string message;
};

std::string join(std::string_view path, std::string_view key) {
  return path.empty() ? std::string(key) : std::string(path) + "." + std::string(key);
}

// A JSON object being read, with the path of its fields for error messages.
class Fields {
 public:
  Fields(const json& object, std::string path) : object_(object), path_(std::move(path)) {
    if (!object_.is_object()) {
      throw Failure{DecodeErrorKind::kWrongType,
                    (path_.empty() ? std::string("body") : path_) + " must be a JSON object"};
    }
  }

  bool has(std::string_view key) const {
    const auto it = object_.find(key);
    return it != object_.end() && !it->is_null();
  }

  const json& at(std::string_view key) const {
    const auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) {
      throw Failure{DecodeErrorKind::kMissingField, "missing field " + join(path_, key)};
    }
    return *it;
  }

  std::uint64_t unsigned_number(std::string_view key, std::uint64_t max,
                                std::uint64_t min = 0) const {
    const json& value = at(key);
    const std::string name = join(path_, key);
    if (value.is_number_unsigned()) {
      const auto number = value.get<std::uint64_t>();
      if (number < min || number > max) throw out_of_range(name, std::to_string(number), min, max);
      return number;
    }
    if (value.is_number_integer()) {  // only negative integers are not "unsigned" to nlohmann
      throw out_of_range(name, std::to_string(value.get<std::int64_t>()), min, max);
    }
    throw Failure{DecodeErrorKind::kWrongType, name + " must be an unsigned integer"};
  }

  std::uint32_t u32(std::string_view key) const {
    return static_cast<std::uint32_t>(unsigned_number(key, kMaxU32));
  }

  std::optional<std::uint32_t> optional_u32(std::string_view key) const {
    if (!has(key)) return std::nullopt;
    return u32(key);
  }

  // A finite, non-negative number (JSON has no NaN or infinity, but a large exponent overflows).
  double non_negative(std::string_view key) const {
    const json& value = at(key);
    const std::string name = join(path_, key);
    if (!value.is_number()) throw Failure{DecodeErrorKind::kWrongType, name + " must be a number"};
    const auto number = value.get<double>();
    if (!std::isfinite(number) || number < 0) {
      throw Failure{DecodeErrorKind::kOutOfRange, name + " must be a finite number >= 0"};
    }
    return number;
  }

  bool boolean(std::string_view key) const {
    const json& value = at(key);
    if (!value.is_boolean()) {
      throw Failure{DecodeErrorKind::kWrongType, join(path_, key) + " must be true or false"};
    }
    return value.get<bool>();
  }

  std::string text(std::string_view key, std::size_t max_length) const {
    const json& value = at(key);
    const std::string name = join(path_, key);
    if (!value.is_string()) throw Failure{DecodeErrorKind::kWrongType, name + " must be a string"};
    const auto& string = value.get_ref<const std::string&>();
    if (string.size() > max_length) {
      throw Failure{DecodeErrorKind::kOutOfRange, name + " is " + std::to_string(string.size()) +
                                                      " bytes long, more than the " +
                                                      std::to_string(max_length) + " allowed"};
    }
    return string;
  }

  Bytes hex_bytes(std::string_view key, std::size_t min_bytes, std::size_t max_bytes) const {
    const std::string name = join(path_, key);
    const std::string digits = text(key, 2 * max_bytes);
    if (digits.size() % 2 != 0 || digits.size() < 2 * min_bytes) {
      throw Failure{DecodeErrorKind::kOutOfRange,
                    name + " must be " + std::to_string(min_bytes) + ".." +
                        std::to_string(max_bytes) + " bytes in hex, got " +
                        std::to_string(digits.size()) + " hex digits"};
    }
    Bytes bytes;
    bytes.reserve(digits.size() / 2);
    for (std::size_t i = 0; i < digits.size(); i += 2) {
      const int high = hex_value(digits[i]);
      const int low = hex_value(digits[i + 1]);
      if (high < 0 || low < 0) {
        throw Failure{DecodeErrorKind::kWrongType, name + " must hold hex digits only"};
      }
      bytes.push_back(static_cast<std::uint8_t>(high << 4 | low));
    }
    return bytes;
  }

  const json& array(std::string_view key, std::size_t max_elements) const {
    const json& value = at(key);
    const std::string name = join(path_, key);
    if (!value.is_array()) throw Failure{DecodeErrorKind::kWrongType, name + " must be an array"};
    if (value.size() > max_elements) {
      throw Failure{DecodeErrorKind::kOutOfRange, name + " has " + std::to_string(value.size()) +
                                                      " elements, more than the " +
                                                      std::to_string(max_elements) + " allowed"};
    }
    return value;
  }

  Fields object(std::string_view key) const { return Fields(at(key), join(path_, key)); }

  const json& value() const { return object_; }
  const std::string& path() const { return path_; }

 private:
  static Failure out_of_range(const std::string& name, const std::string& value, std::uint64_t min,
                              std::uint64_t max) {
    return Failure{DecodeErrorKind::kOutOfRange, name + "=" + value + " is out of range (" +
                                                     std::to_string(min) + ".." +
                                                     std::to_string(max) + ")"};
  }

  static int hex_value(char digit) {
    if (digit >= '0' && digit <= '9') return digit - '0';
    if (digit >= 'a' && digit <= 'f') return digit - 'a' + 10;
    if (digit >= 'A' && digit <= 'F') return digit - 'A' + 10;
    return -1;
  }

  const json& object_;
  std::string path_;
};

template <typename Enum>
Enum enum_field(const Fields& fields, std::string_view key,
                std::optional<Enum> (*parse)(std::string_view), std::string_view choices) {
  const std::string value = fields.text(key, kMaxShortText);
  const auto parsed = parse(value);
  if (!parsed) {
    throw Failure{DecodeErrorKind::kOutOfRange, join(fields.path(), key) + "='" + value +
                                                    "' is not one of " + std::string(choices)};
  }
  return *parsed;
}

std::optional<ErrorCode> parse_error_code(std::string_view text) {
  for (auto code :
       {ErrorCode::kBadRequest, ErrorCode::kLimitExceeded, ErrorCode::kBusy,
        ErrorCode::kUnauthorized, ErrorCode::kTimeout, ErrorCode::kInternal, ErrorCode::kVerbs}) {
    if (text == to_wire(code)) return code;
  }
  return std::nullopt;
}

ProbeSpec spec_from(const Fields& in) {
  ProbeSpec spec;
  spec.operation = enum_field(in, "operation", parse_operation, "write, read, send, atomic");
  if (in.has("atomic_type")) {
    spec.atomic_type =
        enum_field(in, "atomic_type", parse_atomic_type, "FETCH_AND_ADD, CMP_AND_SWAP");
  }
  if (in.has("connection")) {
    spec.connection = enum_field(in, "connection", parse_connection, "RC, UC, UD");
  }
  spec.test = enum_field(in, "test", parse_test_kind, "bw, lat");
  spec.message_size = in.unsigned_number("message_size", kMaxU64);
  // Optional fields are absent rather than defaulted: the peer runs exactly what was sent.
  spec.iterations = in.has("iterations") ? std::optional(in.unsigned_number("iterations", kMaxU64))
                                         : std::nullopt;
  spec.duration_seconds = in.optional_u32("duration_seconds");
  spec.margin_seconds = in.u32("margin_seconds");
  spec.qps = in.u32("qps");
  spec.tx_depth = in.u32("tx_depth");
  spec.rx_depth = in.u32("rx_depth");
  spec.cq_moderation = in.optional_u32("cq_moderation");
  spec.post_list = in.u32("post_list");
  spec.inline_size = in.optional_u32("inline_size");
  spec.mtu = in.optional_u32("mtu");
  spec.gid_index = in.optional_u32("gid_index");
  spec.peer_gid_index = in.optional_u32("peer_gid_index");
  const Fields rc = in.object("rc");
  spec.rc.timeout = rc.u32("timeout");
  // "retry_cnt": the spelling of peers before the API's, YAML's and the wire's became one.
  const bool earlier_spelling = rc.has("retry_cnt") && !rc.has("retry_count");
  spec.rc.retry_cnt = rc.u32(earlier_spelling ? "retry_cnt" : "retry_count");
  spec.rc.rnr_retry = rc.u32("rnr_retry");
  spec.rc.min_rnr_timer = rc.u32("min_rnr_timer");
  spec.use_srq = in.boolean("use_srq");
  spec.cq_events = in.has("cq_events") && in.boolean("cq_events");
  spec.no_peak = in.has("no_peak") && in.boolean("no_peak");
  spec.rdma_cm = in.has("rdma_cm") && in.boolean("rdma_cm");
  spec.numa = enum_field(in, "numa", parse_numa_policy, "auto, none, node");
  spec.numa_node = in.optional_u32("numa_node");
  if (in.has("peer_numa")) {
    spec.peer_numa = enum_field(in, "peer_numa", parse_numa_policy, "auto, none, node");
  }
  spec.peer_numa_node = in.optional_u32("peer_numa_node");
  spec.timeout_seconds = in.u32("timeout_seconds");
  spec.validation = in.has("validation") && in.boolean("validation");
  spec.posted_receives = in.optional_u32("posted_receives").value_or(0);
  spec.receive_sges = in.optional_u32("receive_sges").value_or(1);
  spec.bidirectional = in.has("bidirectional") && in.boolean("bidirectional");
  spec.sl = in.optional_u32("sl").value_or(0);
  spec.traffic_class = in.optional_u32("traffic_class").value_or(0);
  spec.pkey_index = in.optional_u32("pkey_index").value_or(0);
  spec.dlid = in.optional_u32("dlid");
  if (in.has("rate_limit")) {
    const Fields limit = in.object("rate_limit");
    spec.rate_limit = RateLimit{
        limit.non_negative("value"), enum_field(limit, "unit", parse_rate_unit, "Gbps, MiBps, pps"),
        enum_field(limit, "limiter", parse_rate_limiter, "software, hardware, auto")};
  }
  return spec;
}

CounterSnapshot snapshot_from(const Fields& in) {
  const json& object = in.value();
  if (object.size() > kMaxCounters) {
    throw Failure{DecodeErrorKind::kOutOfRange,
                  in.path() + " has " + std::to_string(object.size()) +
                      " counters, more than the " + std::to_string(kMaxCounters) + " allowed"};
  }
  CounterSnapshot snapshot;
  for (const auto& [name, value] : object.items()) {
    if (name.empty() || name.size() > kMaxShortText) {
      throw Failure{DecodeErrorKind::kOutOfRange, in.path() + " has a counter name of " +
                                                      std::to_string(name.size()) + " bytes (1.." +
                                                      std::to_string(kMaxShortText) + " allowed)"};
    }
    const Fields counter = in.object(name);
    CounterSample sample;
    sample.value = counter.unsigned_number("value", kMaxU64);
    sample.width_bits = static_cast<std::uint32_t>(counter.unsigned_number("width", 64, 1));
    const json& scale = counter.at("scale");
    if (!scale.is_number()) {
      throw Failure{DecodeErrorKind::kWrongType,
                    join(counter.path(), "scale") + " must be a number"};
    }
    sample.scale = scale.get<double>();
    if (!std::isfinite(sample.scale) || sample.scale <= 0) {
      throw Failure{DecodeErrorKind::kOutOfRange,
                    join(counter.path(), "scale") + " must be a positive number"};
    }
    sample.error_class = counter.boolean("error");
    snapshot.emplace(name, sample);
  }
  return snapshot;
}

Hello hello_from(const Fields& in, std::uint16_t frame_version) {
  Hello hello;
  hello.protocol_version =
      static_cast<std::uint32_t>(in.unsigned_number("protocol_version", kMaxU16));
  if (hello.protocol_version != frame_version) {
    throw Failure{DecodeErrorKind::kUnsupportedVersion,
                  "protocol_version=" + std::to_string(hello.protocol_version) +
                      " disagrees with the frame's version " + std::to_string(frame_version)};
  }
  hello.software_version = in.text("software_version", kMaxShortText);
  if (in.has("challenge")) {
    hello.challenge = in.hex_bytes("challenge", kMinChallengeBytes, kMaxChallengeBytes);
  }
  if (in.has("challenge_response")) {
    hello.challenge_response = in.hex_bytes("challenge_response", 1, kMaxChallengeBytes);
  }
  return hello;
}

QpInfo qp_info_from(const Fields& in) {
  QpInfo info;
  const json& qps = in.array("qps", kMaxQpEndpoints);
  info.qps.reserve(qps.size());
  for (std::size_t i = 0; i < qps.size(); ++i) {
    const Fields qp(qps[i], "qps[" + std::to_string(i) + "]");
    QpEndpoint endpoint;
    endpoint.qpn = static_cast<std::uint32_t>(qp.unsigned_number("qpn", kMax24Bit));
    endpoint.psn = static_cast<std::uint32_t>(qp.unsigned_number("psn", kMax24Bit));
    endpoint.lid = static_cast<std::uint16_t>(qp.unsigned_number("lid", kMaxU16));
    const Bytes gid = qp.hex_bytes("gid", endpoint.gid.size(), endpoint.gid.size());
    std::copy(gid.begin(), gid.end(), endpoint.gid.begin());
    endpoint.rkey = qp.u32("rkey");
    endpoint.addr = qp.unsigned_number("addr", kMaxU64);
    endpoint.mtu = qp.u32("mtu");
    if (!is_ib_mtu(endpoint.mtu)) {
      throw Failure{DecodeErrorKind::kOutOfRange,
                    qp.path() + ".mtu=" + std::to_string(endpoint.mtu) +
                        " is not an IB MTU (256, 512, 1024, 2048, 4096)"};
    }
    if (qp.has("max_rd_atomic")) {
      // ibv_qp_attr::max_rd_atomic is 8 bits wide; 0 would forbid every read.
      endpoint.max_rd_atomic =
          static_cast<std::uint32_t>(qp.unsigned_number("max_rd_atomic", 255, 1));
    }
    info.qps.push_back(endpoint);
  }
  if (in.has("rdma_cm")) {
    const Fields cm = in.object("rdma_cm");
    // Port 0 is no listener: the kernel gives an ephemeral port to the one bound to it.
    info.cm = CmListener{static_cast<std::uint16_t>(cm.unsigned_number("port", kMaxU16, 1)),
                         cm.unsigned_number("token", kMaxU64)};
  }
  return info;
}

Result result_from(const Fields& in) {
  Result result;
  const json& checks = in.array("checks", kMaxChecks);
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const Fields check(checks[i], "checks[" + std::to_string(i) + "]");
    result.checks.push_back(
        {.name = check.text("name", kMaxShortText),
         .passed = check.boolean("passed"),
         .detail = check.text("detail", kMaxLongText),
         .applicable = !check.has("applicable") || check.boolean("applicable")});
  }
  result.before = snapshot_from(in.object("before"));
  result.after = snapshot_from(in.object("after"));
  if (in.has("validation")) {
    const Fields v(in.at("validation"), "validation");
    ValidationReport report;
    report.messages_received = v.unsigned_number("messages_received", kMaxU64);
    report.checked = v.unsigned_number("checked", kMaxU64);
    report.errors = v.unsigned_number("errors", kMaxU64);
    report.skipped_overwritten = v.unsigned_number("skipped_overwritten", kMaxU64);
    report.races = v.unsigned_number("races", kMaxU64);
    report.rechecks = v.unsigned_number("rechecks", kMaxU64);
    report.tail_checks = v.unsigned_number("tail_checks", kMaxU64);
    report.stale_completions = v.unsigned_number("stale_completions", kMaxU64);
    report.first_error = v.text("first_error", kMaxLongText);
    result.validation = report;
  }
  if (in.has("facts")) {
    const Fields f(in.at("facts"), "facts");
    SideFacts facts;
    facts.gid_index = static_cast<std::uint32_t>(f.unsigned_number("gid_index", 255));
    facts.numa_node = f.optional_u32("numa_node");
    facts.inline_size = f.u32("inline_size");
    facts.relaxed_ordering = f.boolean("relaxed_ordering");
    if (f.has("rate_limiter")) {
      facts.rate_limiter =
          enum_field(f, "rate_limiter", parse_rate_limiter, "software, hardware, auto");
    }
    if (f.has("lane")) {
      const Fields lane = f.object("lane");
      facts.lane = Lane{lane.u32("sl"), lane.u32("traffic_class"), lane.u32("pkey_index")};
    }
    result.facts = facts;
  }
  if (in.has("bandwidth")) {
    const Fields b(in.at("bandwidth"), "bandwidth");
    BandwidthStats bw;
    bw.messages = b.unsigned_number("messages", kMaxU64);
    bw.seconds = b.non_negative("seconds");
    bw.bytes_per_second = b.non_negative("bytes_per_second");
    bw.messages_per_second = b.non_negative("messages_per_second");
    if (b.has("peak_bytes_per_second")) {
      bw.peak_bytes_per_second = b.non_negative("peak_bytes_per_second");
    }
    result.bandwidth = bw;
  }
  if (in.has("messages_received")) {
    result.messages_received = in.unsigned_number("messages_received", kMaxU64);
  }
  return result;
}

MeshAddress mesh_address_from(const Fields& in) {
  MeshAddress address;
  const Bytes gid = in.hex_bytes("gid", address.gid.size(), address.gid.size());
  std::copy(gid.begin(), gid.end(), address.gid.begin());
  address.lid = static_cast<std::uint16_t>(in.unsigned_number("lid", kMaxU16));
  address.qpn = static_cast<std::uint32_t>(in.unsigned_number("qpn", kMax24Bit));
  address.qkey = in.u32("qkey");
  address.gid_family = in.text("gid_family", kMaxShortText);
  return address;
}

Message message_from(const FrameHeader& header, const json& body) {
  const Fields in(body, "");
  switch (header.type) {
    case MessageType::kHello:
      return hello_from(in, header.version);
    case MessageType::kProbeRequest:
      return ProbeRequest{spec_from(in.object("spec")),
                          in.has("authenticator")
                              ? std::optional(in.hex_bytes("authenticator", 1, kMaxChallengeBytes))
                              : std::nullopt};
    case MessageType::kProbeAccept:
      return ProbeAccept{};
    case MessageType::kProbeReject:
      return ProbeReject{in.text("reason", kMaxLongText)};
    case MessageType::kQpInfo:
      return qp_info_from(in);
    case MessageType::kReady:
      return Ready{};
    case MessageType::kResult:
      return result_from(in);
    case MessageType::kError:
      return Error{
          enum_field(in, "code", parse_error_code,
                     "bad_request, limit_exceeded, busy, unauthorized, timeout, internal, verbs"),
          in.text("text", kMaxLongText)};
    case MessageType::kMeshAddressRequest:
      return MeshAddressRequest{
          in.has("authenticator")
              ? std::optional(in.hex_bytes("authenticator", 1, kMaxChallengeBytes))
              : std::nullopt};
    case MessageType::kMeshAddress:
      return mesh_address_from(in);
    case MessageType::kVerifyRequest:
      return VerifyRequest{in.text("case", kMaxShortText),
                           spec_from(in.object("spec")),
                           in.u32("recv_delay_ms"),
                           in.unsigned_number("seed", kMaxU64),
                           in.boolean("fixed_sizes"),
                           in.u32("rebuild_after"),
                           in.u32("soak_interval_seconds"),
                           in.has("authenticator")
                               ? std::optional(in.hex_bytes("authenticator", 1, kMaxChallengeBytes))
                               : std::nullopt};
    case MessageType::kVerifyStep:
      return VerifyStep{
          in.text("step", kMaxShortText), in.unsigned_number("value", kMaxU64),
          in.has("endpoints") ? std::optional(qp_info_from(in.object("endpoints"))) : std::nullopt};
  }
  throw Failure{DecodeErrorKind::kUnknownType, "unknown message type"};
}

json parse_json(std::span<const std::uint8_t> body) {
  const json::parser_callback_t limit_depth = [](int depth, json::parse_event_t, json&) {
    if (depth > kMaxJsonDepth) {
      throw Failure{DecodeErrorKind::kMalformed,
                    "body nests deeper than " + std::to_string(kMaxJsonDepth) + " levels"};
    }
    return true;
  };
  try {
    return json::parse(body.begin(), body.end(), limit_depth);
  } catch (const json::exception& error) {
    // Not only parse_error: a number too large for a double ("1e999") throws out_of_range.
    throw Failure{DecodeErrorKind::kMalformed,
                  std::string("body is not valid JSON: ") + error.what()};
  }
}

}  // namespace

Bytes encode(const Message& message) {
  const std::string body = std::visit([](const auto& m) { return body_of(m); }, message)
                               .dump(-1, ' ', false, json::error_handler_t::replace);
  if (body.size() > kMaxBodyBytes) {
    throw std::length_error("control message body of " + std::to_string(body.size()) +
                            " bytes exceeds the " + std::to_string(kMaxBodyBytes) + "-byte limit");
  }
  Bytes frame(kMagic.begin(), kMagic.end());
  frame.reserve(kHeaderSize + body.size());
  put_u16(frame, kProtocolVersion);
  // Variant alternatives are declared in MessageType order, starting at 1.
  static_assert(
      std::is_same_v<std::variant_alternative_t<0, Message>, Hello> &&
      std::is_same_v<
          std::variant_alternative_t<static_cast<std::size_t>(MessageType::kError) - 1, Message>,
          Error> &&
      std::is_same_v<std::variant_alternative_t<
                         static_cast<std::size_t>(MessageType::kMeshAddress) - 1, Message>,
                     MeshAddress> &&
      std::is_same_v<std::variant_alternative_t<
                         static_cast<std::size_t>(MessageType::kVerifyStep) - 1, Message>,
                     VerifyStep> &&
      std::variant_size_v<Message> == static_cast<std::size_t>(MessageType::kVerifyStep));
  put_u16(frame, static_cast<std::uint16_t>(message.index() + 1));
  put_u32(frame, static_cast<std::uint32_t>(body.size()));
  frame.insert(frame.end(), body.begin(), body.end());
  return frame;
}

std::expected<FrameHeader, DecodeError> decode_header(std::span<const std::uint8_t> bytes,
                                                      std::uint32_t max_body) {
  if (bytes.size() < kHeaderSize) {
    return std::unexpected(DecodeError{DecodeErrorKind::kTruncated,
                                       "frame header needs " + std::to_string(kHeaderSize) +
                                           " bytes, got " + std::to_string(bytes.size())});
  }
  if (!std::equal(kMagic.begin(), kMagic.end(), bytes.begin())) {
    return std::unexpected(
        DecodeError{DecodeErrorKind::kBadMagic, "not an ibprobe control frame (bad magic)"});
  }
  FrameHeader header;
  header.version = get_u16(bytes.subspan(4));
  if (header.version != kProtocolVersion) {
    return std::unexpected(DecodeError{DecodeErrorKind::kUnsupportedVersion,
                                       "peer speaks protocol version " +
                                           std::to_string(header.version) + ", this build speaks " +
                                           std::to_string(kProtocolVersion)});
  }
  const std::uint16_t type = get_u16(bytes.subspan(6));
  if (type < static_cast<std::uint16_t>(MessageType::kHello) ||
      type > static_cast<std::uint16_t>(MessageType::kVerifyStep)) {
    return std::unexpected(
        DecodeError{DecodeErrorKind::kUnknownType, "unknown message type " + std::to_string(type)});
  }
  header.type = static_cast<MessageType>(type);
  header.body_length = get_u32(bytes.subspan(8));
  if (header.body_length > max_body) {
    return std::unexpected(DecodeError{DecodeErrorKind::kOversized,
                                       "frame announces a " + std::to_string(header.body_length) +
                                           "-byte body, more than the " + std::to_string(max_body) +
                                           "-byte limit"});
  }
  return header;
}

std::expected<Message, DecodeError> decode_body(const FrameHeader& header,
                                                std::span<const std::uint8_t> body) {
  if (body.size() != header.body_length) {
    return std::unexpected(
        DecodeError{body.size() < header.body_length ? DecodeErrorKind::kTruncated
                                                     : DecodeErrorKind::kTrailingBytes,
                    "frame announces a " + std::to_string(header.body_length) + "-byte body, got " +
                        std::to_string(body.size()) + " bytes"});
  }
  try {
    return message_from(header, parse_json(body));
  } catch (const Failure& failure) {
    return std::unexpected(DecodeError{failure.kind, failure.message});
  }
}

std::expected<Message, DecodeError> decode(std::span<const std::uint8_t> frame,
                                           std::uint32_t max_body) {
  const auto header = decode_header(frame, max_body);
  if (!header) return std::unexpected(header.error());
  return decode_body(*header, frame.subspan(kHeaderSize));
}

}  // namespace ibprobe::probes::protocol
