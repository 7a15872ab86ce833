#include "protocol.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "round_trip.h"
#include "violations.h"

namespace ibprobe::probes::protocol {
namespace {

using ::testing::HasSubstr;

// A frame with a hand-written body, for inputs the encoder would never produce.
Bytes frame(MessageType type, const std::string& body, std::uint16_t version = kProtocolVersion) {
  Bytes bytes = {'I', 'B', 'P', 'R'};
  auto put = [&bytes](std::uint32_t value, int size) {
    for (int shift = 8 * (size - 1); shift >= 0; shift -= 8) {
      bytes.push_back(static_cast<std::uint8_t>(value >> shift));
    }
  };
  put(version, 2);
  put(static_cast<std::uint16_t>(type), 2);
  put(static_cast<std::uint32_t>(body.size()), 4);
  for (char c : body) bytes.push_back(static_cast<std::uint8_t>(c));
  return bytes;
}

DecodeError decode_error(const Bytes& bytes) {
  const auto decoded = decode(bytes);
  if (decoded) {
    ADD_FAILURE() << "decoded without error";
    return {DecodeErrorKind::kMalformed, ""};
  }
  return decoded.error();
}

// A ProbeRequest body with one spec field replaced by `value` (raw JSON text).
std::string request_with(const std::string& field, const std::string& value) {
  const std::string defaults[][2] = {
      {"operation", "\"write\""},
      {"test", "\"bw\""},
      {"message_size", "65536"},
      {"iterations", "5000"},
      {"margin_seconds", "2"},
      {"qps", "1"},
      {"tx_depth", "128"},
      {"rx_depth", "1"},
      {"cq_moderation", "100"},
      {"post_list", "1"},
      {"inline_size", "0"},
      {"use_srq", "false"},
      {"numa", "\"auto\""},
      {"timeout_seconds", "30"},
      {"rc", R"({"timeout":14,"retry_count":7,"rnr_retry":7,"min_rnr_timer":12})"},
  };
  std::string body = R"({"spec":{)";
  bool first = true;
  bool replaced = false;
  for (const auto& [name, default_value] : defaults) {
    const bool is_field = name == field;
    replaced |= is_field;
    if (is_field && value.empty()) continue;  // an empty value drops the field
    body += (first ? "\"" : ",\"") + name + "\":" + (is_field ? value : default_value);
    first = false;
  }
  if (!replaced) body += ",\"" + field + "\":" + value;
  return body + "}}";
}

QpEndpoint endpoint(std::uint32_t qpn) {
  QpEndpoint qp;
  qp.qpn = qpn;
  qp.psn = 0xABCDEF;
  qp.lid = 0xFFFF;
  for (std::size_t i = 0; i < qp.gid.size(); ++i) qp.gid[i] = static_cast<std::uint8_t>(0xF0 + i);
  qp.rkey = 0xFFFFFFFF;
  qp.addr = ~std::uint64_t{0} - 4095;
  qp.mtu = 4096;
  qp.max_rd_atomic = 255;
  return qp;
}

std::string qp_info_with(const std::string& field, const std::string& value) {
  std::string body =
      R"({"qps":[{"qpn":1,"psn":2,"lid":3,"gid":"fe800000000000000000000000000001","rkey":4,)"
      R"("addr":5,"mtu":1024}]})";
  const auto at = body.find("\"" + field + "\":");
  const auto value_start = body.find(':', at) + 1;
  const auto value_end = body.find_first_of(",}", value_start);
  return body.replace(value_start, value_end - value_start, value);
}

TEST(ProtocolRoundTrip, Hello) {
  Hello plain;
  plain.software_version = "0.1.0-3-gabcdef";
  EXPECT_EQ(std::get<Hello>(round_trip(plain)), plain);
  Hello authenticated = plain;
  authenticated.challenge = Bytes(32, 0xA5);
  authenticated.challenge_response = Bytes{0x00, 0x01, 0xFF};
  EXPECT_EQ(std::get<Hello>(round_trip(authenticated)), authenticated);
}

TEST(ProtocolRoundTrip, ProbeRequestCarriesTheWholeSpec) {
  for (auto operation :
       {Operation::kWrite, Operation::kRead, Operation::kSend, Operation::kAtomic}) {
    for (auto test : {TestKind::kBandwidth, TestKind::kLatency}) {
      const ProbeRequest request{default_spec(operation, test)};
      EXPECT_EQ(std::get<ProbeRequest>(round_trip(request)), request);
    }
  }
  ProbeSpec every_option = default_spec(Operation::kSend, TestKind::kBandwidth);
  every_option.iterations.reset();
  every_option.duration_seconds = 20;
  every_option.margin_seconds = 3;
  every_option.qps = 8;
  every_option.post_list = 4;
  every_option.cq_moderation = 4;
  every_option.inline_size = 64;
  every_option.mtu = 2048;
  every_option.gid_index = 3;
  every_option.peer_gid_index = 1;
  every_option.peer_numa = NumaPolicy::kNode;
  every_option.peer_numa_node = 2;
  every_option.rc = {.timeout = 18, .retry_cnt = 3, .rnr_retry = 6, .min_rnr_timer = 1};
  every_option.use_srq = true;
  every_option.numa = NumaPolicy::kNode;
  every_option.numa_node = 1;
  every_option.timeout_seconds = 45;
  every_option.message_size = ~std::uint64_t{0};
  every_option.connection = Connection::kUc;
  every_option.no_peak = true;
  const ProbeRequest request{every_option};
  EXPECT_EQ(std::get<ProbeRequest>(round_trip(request)), request);
  ProbeSpec swap = default_spec(Operation::kAtomic, TestKind::kBandwidth);
  swap.atomic_type = AtomicType::kCompareAndSwap;
  EXPECT_EQ(std::get<ProbeRequest>(round_trip(ProbeRequest{swap})), ProbeRequest{swap});
  // Unset CQ moderation and inline size stay unset: each side applies perftest's rule itself.
  const auto plain = std::get<ProbeRequest>(
      round_trip(ProbeRequest{default_spec(Operation::kWrite, TestKind::kLatency)}));
  EXPECT_FALSE(plain.spec.cq_moderation);
  EXPECT_FALSE(plain.spec.inline_size);
  EXPECT_EQ(plain.spec.peer_numa, NumaPolicy::kAuto);
}

TEST(ProtocolRoundTrip, AcceptRejectReadyError) {
  EXPECT_TRUE(std::holds_alternative<ProbeAccept>(round_trip(ProbeAccept{})));
  EXPECT_TRUE(std::holds_alternative<Ready>(round_trip(Ready{})));
  const ProbeReject reject{"qps=4: several QPs only make sense for bandwidth tests"};
  EXPECT_EQ(std::get<ProbeReject>(round_trip(reject)), reject);
  for (auto code :
       {ErrorCode::kBadRequest, ErrorCode::kLimitExceeded, ErrorCode::kBusy,
        ErrorCode::kUnauthorized, ErrorCode::kTimeout, ErrorCode::kInternal, ErrorCode::kVerbs}) {
    const Error error{code, "text"};
    EXPECT_EQ(std::get<Error>(round_trip(error)), error);
  }
}

TEST(ProtocolRoundTrip, VerifyRequestCarriesCaseParametersAndSpec) {
  VerifyRequest request;
  request.case_name = "qp_rebuild";
  request.spec.message_size = 4096;
  request.spec.rc.retry_cnt = 2;
  request.recv_delay_ms = 20;
  request.seed = 0xFFFFFFFFFFFFFFFFull;
  request.fixed_sizes = true;
  request.rebuild_after = 50;
  request.soak_interval_seconds = 10;
  request.authenticator = Bytes(32, 0xab);
  EXPECT_EQ(std::get<VerifyRequest>(round_trip(request)), request);
  request.authenticator.reset();
  EXPECT_EQ(std::get<VerifyRequest>(round_trip(request)), request);
}

TEST(ProtocolRoundTrip, VerifyStepWithAndWithoutEndpoints) {
  const VerifyStep loss{"qp_destroyed", 59, std::nullopt};
  EXPECT_EQ(std::get<VerifyStep>(round_trip(loss)), loss);
  const VerifyStep rebuilt{"rebuilt", 59, QpInfo{{endpoint(7)}, std::nullopt}};
  EXPECT_EQ(std::get<VerifyStep>(round_trip(rebuilt)), rebuilt);
}

TEST(ProtocolDecode, VerifyRequestFieldsAreRequiredAndBounded) {
  const auto missing = decode_error(frame(MessageType::kVerifyRequest, R"({"case":"soak"})"));
  EXPECT_EQ(missing.kind, DecodeErrorKind::kMissingField);
  const auto long_name = decode_error(
      frame(MessageType::kVerifyStep, R"({"step":")" + std::string(300, 'x') + R"(","value":1})"));
  EXPECT_EQ(long_name.kind, DecodeErrorKind::kOutOfRange);
}

TEST(ProtocolRoundTrip, QpInfoAtTheEdgesOfEveryField) {
  const QpInfo info{{endpoint(0xFFFFFF), endpoint(0)}, std::nullopt};
  EXPECT_EQ(std::get<QpInfo>(round_trip(info)), info);
  EXPECT_EQ(std::get<QpInfo>(round_trip(QpInfo{})), QpInfo{});
  const QpInfo listening{{endpoint(1)}, CmListener{65535, ~std::uint64_t{0}}};
  EXPECT_EQ(std::get<QpInfo>(round_trip(listening)), listening);
}

// The listener's port is where the initiator connects: port 0 is no listener, a port beyond 16
// bits no port at all.
TEST(ProtocolDecode, CmListenerPortIsARealPort) {
  for (const char* port : {"0", "65536"}) {
    const auto error =
        decode_error(frame(MessageType::kQpInfo,
                           std::string(R"({"qps":[],"rdma_cm":{"token":1,"port":)") + port + "}}"));
    EXPECT_EQ(error.kind, DecodeErrorKind::kOutOfRange) << port;
    EXPECT_THAT(error.message, HasSubstr("rdma_cm.port")) << port;
  }
  const auto missing =
      decode_error(frame(MessageType::kQpInfo, R"({"qps":[],"rdma_cm":{"port":4791}})"));
  EXPECT_EQ(missing.kind, DecodeErrorKind::kMissingField);
}

TEST(ProtocolRoundTrip, Result) {
  Result result;
  result.checks = {{"port_active", true, "4: ACTIVE"},
                   {"sm_lid", false, "sm_lid 0"},
                   {"cpu_frequency", false, "no cpufreq policy", false}};
  result.before = {
      // The class names are not sent: the initiator classifies both sides with its own table.
      {"port_xmit_data",
       {.value = 100, .width_bits = 64, .scale = 4, .error_class = false, .counter_class = {}}},
      {"symbol_error",
       {.value = 1, .width_bits = 16, .scale = 1, .error_class = true, .counter_class = {}}},
      {"send queue, errors", CounterSample{}}};
  result.after = result.before;
  result.after["port_xmit_data"].value = ~std::uint64_t{0};
  EXPECT_EQ(std::get<Result>(round_trip(result)), result);
  result.facts = SideFacts{.gid_index = 3,
                           .numa_node = 1,
                           .inline_size = 220,
                           .relaxed_ordering = true,
                           .rate_limiter = std::nullopt,
                           .lane = std::nullopt};
  EXPECT_EQ(std::get<Result>(round_trip(result)), result);
  result.facts->lane = Lane{.sl = 3, .traffic_class = 106, .pkey_index = 1};
  EXPECT_EQ(std::get<Result>(round_trip(result)), result);
  result.facts->lane.reset();
  result.facts->numa_node.reset();
  EXPECT_EQ(std::get<Result>(round_trip(result)), result);
  // A send run's receive count, which a UC run's losses are read from.
  result.messages_received = 1769;
  EXPECT_EQ(std::get<Result>(round_trip(result)), result);
}

TEST(ProtocolEncode, HeaderCarriesMagicVersionTypeAndLength) {
  const Bytes bytes = encode(Ready{});
  ASSERT_EQ(bytes.size(), kHeaderSize + 2);  // "{}"
  EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 4), "IBPR");
  EXPECT_EQ(bytes[5], kProtocolVersion);
  EXPECT_EQ(bytes[7], static_cast<std::uint8_t>(MessageType::kReady));
  EXPECT_EQ(bytes[11], 2);
}

TEST(ProtocolEncode, RefusesABodyOverTheLimit) {
  EXPECT_THROW(encode(ProbeReject{std::string(kMaxBodyBytes, 'x')}), std::length_error);
}

TEST(ProtocolDecode, TruncatedHeader) {
  const Bytes bytes = encode(Ready{});
  for (std::size_t size : {0u, 4u, 11u}) {
    const auto error = decode_error(Bytes(bytes.begin(), bytes.begin() + size));
    EXPECT_EQ(error.kind, DecodeErrorKind::kTruncated);
    EXPECT_THAT(error.message, HasSubstr("needs 12 bytes, got " + std::to_string(size)));
  }
}

TEST(ProtocolDecode, TruncatedBody) {
  Bytes bytes = encode(ProbeReject{"no"});
  bytes.pop_back();
  const auto error = decode_error(bytes);
  EXPECT_EQ(error.kind, DecodeErrorKind::kTruncated);
  EXPECT_THAT(error.message, HasSubstr("announces a 15-byte body, got 14 bytes"));
}

TEST(ProtocolDecode, TrailingBytes) {
  Bytes bytes = encode(Ready{});
  bytes.push_back('x');
  EXPECT_EQ(decode_error(bytes).kind, DecodeErrorKind::kTrailingBytes);
}

TEST(ProtocolDecode, BadMagic) {
  Bytes bytes = encode(Ready{});
  bytes[0] = 'G';  // someone speaking HTTP to the responder port
  EXPECT_EQ(decode_error(bytes).kind, DecodeErrorKind::kBadMagic);
}

TEST(ProtocolDecode, WrongVersion) {
  const auto error = decode_error(frame(MessageType::kReady, "{}", 2));
  EXPECT_EQ(error.kind, DecodeErrorKind::kUnsupportedVersion);
  EXPECT_THAT(error.message, HasSubstr("version 2, this build speaks 1"));
  const auto hello =
      decode_error(frame(MessageType::kHello, R"({"protocol_version":7,"software_version":"x"})"));
  EXPECT_EQ(hello.kind, DecodeErrorKind::kUnsupportedVersion);
}

TEST(ProtocolDecode, UnknownType) {
  for (auto type : {0, 13, 0xFFFF}) {
    const auto error = decode_error(frame(static_cast<MessageType>(type), "{}"));
    EXPECT_EQ(error.kind, DecodeErrorKind::kUnknownType);
    EXPECT_THAT(error.message, HasSubstr(std::to_string(type)));
  }
}

TEST(ProtocolDecode, OversizedLengthIsRefusedFromTheHeaderAlone) {
  // Only the 12 header bytes exist: the length is refused before any body is read.
  Bytes header = frame(MessageType::kResult, "");
  header[8] = 0xFF;
  header[9] = 0xFF;
  header[10] = 0xFF;
  header[11] = 0xFF;
  const auto decoded = decode_header(header);
  ASSERT_FALSE(decoded.has_value());
  EXPECT_EQ(decoded.error().kind, DecodeErrorKind::kOversized);
  EXPECT_THAT(decoded.error().message, HasSubstr("4294967295-byte body"));
  // A caller may set a tighter limit.
  const auto tight = decode(encode(ProbeReject{"a reason"}), 8);
  ASSERT_FALSE(tight.has_value());
  EXPECT_EQ(tight.error().kind, DecodeErrorKind::kOversized);
}

TEST(ProtocolDecode, HeaderThenBodyInTwoSteps) {
  const Bytes bytes = encode(ProbeReject{"busy"});
  const auto header = decode_header(std::span(bytes).first(kHeaderSize));
  ASSERT_TRUE(header.has_value());
  const FrameHeader& parsed = *header;
  EXPECT_EQ(parsed.type, MessageType::kProbeReject);
  EXPECT_EQ(parsed.body_length, bytes.size() - kHeaderSize);
  const auto message = decode_body(parsed, std::span(bytes).subspan(kHeaderSize));
  EXPECT_EQ(std::get<ProbeReject>(message.value()).reason, "busy");
}

TEST(ProtocolDecode, MalformedJson) {
  // 1e999 parses as JSON but overflows a double: still a malformed body, not an exception.
  for (const char* body : {"", "{", "{\"reason\":}", "\xff\xfe", "{} {}", "{\"reason\":1e999}"}) {
    EXPECT_EQ(decode_error(frame(MessageType::kProbeReject, body)).kind,
              DecodeErrorKind::kMalformed)
        << body;
  }
}

TEST(ProtocolDecode, BodyMustBeAnObject) {
  const auto error = decode_error(frame(MessageType::kReady, "[]"));
  EXPECT_EQ(error.kind, DecodeErrorKind::kWrongType);
  EXPECT_THAT(error.message, HasSubstr("body must be a JSON object"));
}

TEST(ProtocolDecode, DeepNestingIsRefused) {
  const std::string deep =
      R"({"reason":)" + std::string(10000, '[') + std::string(10000, ']') + "}";
  const auto error = decode_error(frame(MessageType::kProbeReject, deep));
  EXPECT_EQ(error.kind, DecodeErrorKind::kMalformed);
  EXPECT_THAT(error.message, HasSubstr("nests deeper than"));
}

TEST(ProtocolDecode, MissingField) {
  const auto error = decode_error(frame(MessageType::kProbeRequest, request_with("qps", "")));
  EXPECT_EQ(error.kind, DecodeErrorKind::kMissingField);
  EXPECT_EQ(error.message, "missing field spec.qps");
  EXPECT_EQ(decode_error(frame(MessageType::kProbeRequest, request_with("rc", R"({"timeout":14})")))
                .message,
            "missing field spec.rc.retry_count");
  EXPECT_EQ(decode_error(frame(MessageType::kError, R"({"code":"busy"})")).message,
            "missing field text");
}

// Initiators of earlier releases spell the RC retry count as ibv_qp_attr does; a responder still
// reads it, and the one spelling when both are there.
TEST(ProtocolDecode, TheRetryCountsEarlierSpellingIsRead) {
  const auto earlier = decode(frame(
      MessageType::kProbeRequest,
      request_with("rc", R"({"timeout":14,"retry_cnt":5,"rnr_retry":7,"min_rnr_timer":12})")));
  ASSERT_TRUE(earlier.has_value());
  EXPECT_EQ(std::get<ProbeRequest>(*earlier).spec.rc.retry_cnt, 5u);
  const auto both = decode(frame(
      MessageType::kProbeRequest,
      request_with(
          "rc",
          R"({"timeout":14,"retry_cnt":5,"retry_count":3,"rnr_retry":7,"min_rnr_timer":12})")));
  ASSERT_TRUE(both.has_value());
  EXPECT_EQ(std::get<ProbeRequest>(*both).spec.rc.retry_cnt, 3u);
}

TEST(ProtocolDecode, WrongTypes) {
  const std::pair<const char*, const char*> cases[] = {
      {"qps", "\"1\""}, {"qps", "1.5"}, {"use_srq", "1"}, {"operation", "3"}, {"rc", "[]"}};
  for (const auto& [field, value] : cases) {
    const auto error = decode_error(frame(MessageType::kProbeRequest, request_with(field, value)));
    EXPECT_EQ(error.kind, DecodeErrorKind::kWrongType) << field << "=" << value;
    EXPECT_THAT(error.message, HasSubstr(std::string("spec.") + field)) << error.message;
  }
}

TEST(ProtocolDecode, OutOfRangeSpecNumbers) {
  const auto too_big =
      decode_error(frame(MessageType::kProbeRequest, request_with("qps", "4294967296")));
  EXPECT_EQ(too_big.kind, DecodeErrorKind::kOutOfRange);
  EXPECT_EQ(too_big.message, "spec.qps=4294967296 is out of range (0..4294967295)");
  const auto negative =
      decode_error(frame(MessageType::kProbeRequest, request_with("tx_depth", "-1")));
  EXPECT_EQ(negative.kind, DecodeErrorKind::kOutOfRange);
  EXPECT_EQ(negative.message, "spec.tx_depth=-1 is out of range (0..4294967295)");
  // Beyond 64 bits nlohmann yields a float: not an unsigned integer any more.
  EXPECT_EQ(decode_error(frame(MessageType::kProbeRequest,
                               request_with("message_size", "18446744073709551616")))
                .kind,
            DecodeErrorKind::kWrongType);
  const auto unknown =
      decode_error(frame(MessageType::kProbeRequest, request_with("operation", "\"swap\"")));
  EXPECT_EQ(unknown.kind, DecodeErrorKind::kOutOfRange);
  EXPECT_EQ(unknown.message, "spec.operation='swap' is not one of write, read, send, atomic");
  EXPECT_EQ(decode_error(frame(MessageType::kProbeRequest, request_with("numa", "\"all\""))).kind,
            DecodeErrorKind::kOutOfRange);
}

TEST(ProtocolDecode, SpecSemanticsAreLeftToValidate) {
  // The codec checks representability only; violations_of(validate()) explains what is wrong with
  // it.
  const auto decoded = decode(frame(MessageType::kProbeRequest, request_with("mtu", "3000")));
  ASSERT_TRUE(decoded.has_value());
  const auto& spec = std::get<ProbeRequest>(*decoded).spec;
  EXPECT_EQ(spec.mtu, 3000u);
  EXPECT_THAT(violations_of(validate(spec)),
              ::testing::ElementsAre(HasSubstr("mtu 3000 is not an IB MTU")));
}

TEST(ProtocolDecode, OutOfRangeQpInfo) {
  const std::tuple<const char*, const char*, const char*> cases[] = {
      {"qpn", "16777216", "qps[0].qpn=16777216 is out of range (0..16777215)"},
      {"psn", "16777216", "qps[0].psn=16777216 is out of range (0..16777215)"},
      {"lid", "65536", "qps[0].lid=65536 is out of range (0..65535)"},
      {"rkey", "4294967296", "qps[0].rkey=4294967296 is out of range (0..4294967295)"},
      {"mtu", "3000", "qps[0].mtu=3000 is not an IB MTU (256, 512, 1024, 2048, 4096)"},
      {"gid", "\"fe80\"", "qps[0].gid must be 16..16 bytes in hex, got 4 hex digits"},
  };
  for (const auto& [field, value, message] : cases) {
    const auto error = decode_error(frame(MessageType::kQpInfo, qp_info_with(field, value)));
    EXPECT_EQ(error.kind, DecodeErrorKind::kOutOfRange) << field;
    EXPECT_EQ(error.message, message);
  }
  const auto not_hex = decode_error(
      frame(MessageType::kQpInfo, qp_info_with("gid", "\"fe80000000000000000000000000000g\"")));
  EXPECT_EQ(not_hex.kind, DecodeErrorKind::kWrongType);
  EXPECT_EQ(not_hex.message, "qps[0].gid must hold hex digits only");
}

TEST(ProtocolDecode, TooManyQps) {
  std::string body = R"({"qps":[)";
  for (int i = 0; i < 4097; ++i) body += (i ? ",{}" : "{}");
  const auto error = decode_error(frame(MessageType::kQpInfo, body + "]}"));
  EXPECT_EQ(error.kind, DecodeErrorKind::kOutOfRange);
  EXPECT_EQ(error.message, "qps has 4097 elements, more than the 4096 allowed");
}

TEST(ProtocolDecode, HelloChallengeBounds) {
  const auto short_challenge = decode_error(frame(
      MessageType::kHello, R"({"protocol_version":1,"software_version":"x","challenge":"00ff"})"));
  EXPECT_EQ(short_challenge.kind, DecodeErrorKind::kOutOfRange);
  EXPECT_THAT(short_challenge.message, HasSubstr("challenge must be 16..64 bytes"));
  const auto long_version =
      decode_error(frame(MessageType::kHello, R"({"protocol_version":1,"software_version":")" +
                                                  std::string(300, 'v') + "\"}"));
  EXPECT_EQ(long_version.kind, DecodeErrorKind::kOutOfRange);
  EXPECT_EQ(long_version.message, "software_version is 300 bytes long, more than the 256 allowed");
}

TEST(ProtocolDecode, ResultCounterBounds) {
  auto result_with = [](const std::string& counter) {
    return frame(MessageType::kResult,
                 R"({"checks":[],"after":{},"before":{"port_xmit_data":)" + counter + "}}");
  };
  const auto width = decode_error(result_with(R"({"value":1,"width":65,"scale":4,"error":false})"));
  EXPECT_EQ(width.kind, DecodeErrorKind::kOutOfRange);
  EXPECT_EQ(width.message, "before.port_xmit_data.width=65 is out of range (1..64)");
  EXPECT_EQ(decode_error(result_with(R"({"value":1,"width":0,"scale":4,"error":false})")).kind,
            DecodeErrorKind::kOutOfRange);
  const auto scale =
      decode_error(result_with(R"({"value":1,"width":32,"scale":-4,"error":false})"));
  EXPECT_EQ(scale.kind, DecodeErrorKind::kOutOfRange);
  EXPECT_EQ(scale.message, "before.port_xmit_data.scale must be a positive number");
  EXPECT_EQ(decode_error(result_with(R"({"value":-1,"width":32,"scale":4,"error":false})")).kind,
            DecodeErrorKind::kOutOfRange);
  EXPECT_EQ(decode_error(result_with(R"({"value":1,"width":32,"scale":4})")).message,
            "missing field before.port_xmit_data.error");
}

TEST(ProtocolDecode, UnknownErrorCode) {
  const auto error = decode_error(frame(MessageType::kError, R"({"code":"oops","text":"t"})"));
  EXPECT_EQ(error.kind, DecodeErrorKind::kOutOfRange);
  EXPECT_THAT(error.message, HasSubstr("code='oops' is not one of"));
}

// A responder of an earlier release sends no "applicable": its checks all applied.
TEST(ProtocolDecode, AChecksApplicabilityDefaultsToApplicable) {
  const auto decoded =
      decode(frame(MessageType::kResult,
                   R"({"checks":[{"name":"port_active","passed":true,"detail":"4: ACTIVE"}],)"
                   R"("before":{},"after":{}})"));
  ASSERT_TRUE(decoded.has_value());
  const auto& checks = std::get<Result>(*decoded).checks;
  ASSERT_EQ(checks.size(), 1u);
  EXPECT_TRUE(checks[0].applicable);
  EXPECT_TRUE(checks[0].passed);
}

TEST(ProtocolDecode, UnknownFieldsAreIgnoredForForwardCompatibility) {
  const auto decoded = decode(frame(MessageType::kProbeReject, R"({"reason":"r","hint":42})"));
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(std::get<ProbeReject>(*decoded).reason, "r");
}

TEST(ProtocolRoundTrip, MeshAddressExchange) {
  EXPECT_EQ(std::get<MeshAddressRequest>(round_trip(MeshAddressRequest{})), MeshAddressRequest{});
  const MeshAddressRequest proved{Bytes(32, 0xab)};
  EXPECT_EQ(std::get<MeshAddressRequest>(round_trip(proved)), proved);
  MeshAddress address;
  address.gid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1};
  address.lid = 0xFFFF;
  address.qpn = 0xFFFFFF;
  address.qkey = 0xFFFFFFFF;
  address.gid_family = "ipv4";
  EXPECT_EQ(std::get<MeshAddress>(round_trip(address)), address);
}

TEST(ProtocolDecode, MeshAddressFieldsAreBounded) {
  const std::string gid(32, '0');
  const auto wide_qpn = decode_error(
      frame(MessageType::kMeshAddress,
            R"({"gid":")" + gid + R"(","lid":0,"qpn":16777216,"qkey":1,"gid_family":"ipv4"})"));
  EXPECT_EQ(wide_qpn.kind, DecodeErrorKind::kOutOfRange);
  EXPECT_THAT(wide_qpn.message, HasSubstr("qpn"));
  const auto short_gid = decode_error(frame(
      MessageType::kMeshAddress, R"({"gid":"00ff","lid":0,"qpn":1,"qkey":1,"gid_family":"ipv4"})"));
  EXPECT_THAT(short_gid.message, HasSubstr("gid"));
  EXPECT_EQ(decode_error(frame(MessageType::kMeshAddress,
                               R"({"gid":")" + gid + R"(","lid":0,"qpn":1,"qkey":1})"))
                .message,
            "missing field gid_family");
}

}  // namespace
}  // namespace ibprobe::probes::protocol
