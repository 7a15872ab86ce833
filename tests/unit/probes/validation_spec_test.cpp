// Spec rules and wire encoding of correctness probes: validation, posted receives, scattered
// receives, and the responder's verification figures in its Result.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "ibprobe/probes.h"
#include "protocol.h"
#include "round_trip.h"
#include "violations.h"

namespace ibprobe::probes {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

ProbeSpec validating(Operation operation) {
  auto spec = default_spec(operation, TestKind::kBandwidth);
  spec.validation = true;
  return spec;
}

TEST(ValidationSpec, WriteAndSendBandwidthMayValidate) {
  EXPECT_THAT(violations_of(validate(validating(Operation::kWrite))), IsEmpty());
  EXPECT_THAT(violations_of(validate(validating(Operation::kSend))), IsEmpty());
}

TEST(ValidationSpec, ReadAndLatencyMayNot) {
  EXPECT_THAT(violations_of(validate(validating(Operation::kRead))),
              Contains(HasSubstr("validation applies to write, send and atomic")));
  auto latency = default_spec(Operation::kWrite, TestKind::kLatency);
  latency.validation = true;
  latency.message_size = 64;
  EXPECT_THAT(violations_of(validate(latency)),
              Contains(HasSubstr("validation applies to bandwidth probes")));
}

TEST(ValidationSpec, MessageMustHoldHeaderAndTrailer) {
  auto spec = validating(Operation::kSend);
  spec.message_size = 63;
  EXPECT_THAT(violations_of(validate(spec)), Contains(HasSubstr("message_size=63")));
  spec.message_size = 64;
  EXPECT_THAT(violations_of(validate(spec)), IsEmpty());
}

TEST(ValidationSpec, PostedReceivesOnlyForSendBandwidthWithinTheQueue) {
  auto send = default_spec(Operation::kSend, TestKind::kBandwidth);
  send.posted_receives = 1;
  EXPECT_THAT(violations_of(validate(send)), IsEmpty());
  send.posted_receives = send.rx_depth + 1;
  EXPECT_THAT(violations_of(validate(send)),
              Contains(HasSubstr("more than the receive queue holds")));

  for (const auto& [operation, test] : {std::pair{Operation::kWrite, TestKind::kBandwidth},
                                        std::pair{Operation::kSend, TestKind::kLatency}}) {
    auto spec = default_spec(operation, test);
    spec.posted_receives = 1;
    EXPECT_THAT(violations_of(validate(spec)),
                Contains(HasSubstr("applies to send bandwidth only")))
        << to_string(operation) << "_" << to_string(test);
  }
}

TEST(ValidationSpec, ScatteredReceivesNeedAValidatingSend) {
  auto spec = validating(Operation::kSend);
  spec.receive_sges = 3;
  EXPECT_THAT(violations_of(validate(spec)), IsEmpty());
  spec.receive_sges = 0;
  EXPECT_THAT(violations_of(validate(spec)), Contains(HasSubstr("receive_sges=0")));
  spec.receive_sges = 9;
  EXPECT_THAT(violations_of(validate(spec)), Contains(HasSubstr("receive_sges=9")));
  spec = default_spec(Operation::kSend, TestKind::kBandwidth);
  spec.receive_sges = 2;
  EXPECT_THAT(violations_of(validate(spec)),
              Contains(HasSubstr("set validation and operation send")));
}

TEST(ValidationSpec, LimitsCountBothSidesSlots) {
  // 1 QP, tx 128, rx 512, 1 MiB: plain runs need max(tx, rx) slots, validating ones tx + rx.
  auto spec = validating(Operation::kSend);
  spec.message_size = 1 << 20;
  Limits limits;
  limits.max_total_buffer_bytes = 600ull << 20;
  EXPECT_THAT(violations_of(check_limits(spec, limits)),
              Contains(HasSubstr("exceed this responder's limit")));
  spec.validation = false;
  EXPECT_THAT(violations_of(check_limits(spec, limits)), IsEmpty());
}

TEST(ValidationProtocol, NewSpecFieldsRoundTrip) {
  auto spec = validating(Operation::kSend);
  spec.posted_receives = 4;
  spec.receive_sges = 3;
  const protocol::ProbeRequest request{spec};
  EXPECT_EQ(std::get<protocol::ProbeRequest>(protocol::round_trip(request)), request);
}

TEST(ValidationProtocol, PlainSpecOmitsThem) {
  // A peer that predates correctness probes reads a plain request exactly as before.
  const auto frame = protocol::encode(
      protocol::ProbeRequest{default_spec(Operation::kWrite, TestKind::kBandwidth)});
  const std::string body(frame.begin() + protocol::kHeaderSize, frame.end());
  EXPECT_THAT(body, ::testing::Not(HasSubstr("validation")));
  EXPECT_THAT(body, ::testing::Not(HasSubstr("posted_receives")));
}

TEST(ValidationProtocol, OutOfRangeFieldIsRefused) {
  const auto frame = protocol::encode(protocol::ProbeRequest{validating(Operation::kSend)});
  std::string body(frame.begin() + protocol::kHeaderSize, frame.end());
  body.replace(body.find("\"validation\":true"), 17, "\"posted_receives\":-1");
  protocol::Bytes bad(frame.begin(), frame.begin() + protocol::kHeaderSize);
  bad[8] = static_cast<std::uint8_t>(body.size() >> 24);
  bad[9] = static_cast<std::uint8_t>(body.size() >> 16);
  bad[10] = static_cast<std::uint8_t>(body.size() >> 8);
  bad[11] = static_cast<std::uint8_t>(body.size());
  bad.insert(bad.end(), body.begin(), body.end());
  const auto decoded = protocol::decode(bad);
  ASSERT_FALSE(decoded.has_value());
  EXPECT_EQ(decoded.error().kind, protocol::DecodeErrorKind::kOutOfRange);
}

TEST(ValidationProtocol, ResultCarriesTheVerificationFigures) {
  protocol::Result result;
  ValidationReport report;
  report.messages_received = 1000;
  report.checked = 940;
  report.errors = 2;
  report.skipped_overwritten = 60;
  report.races = 5;
  report.rechecks = 1;
  report.tail_checks = 64;
  report.stale_completions = 3;
  report.first_error = "message qp=0 seq=15: checksum mismatch, first bad byte at offset 77";
  result.validation = report;
  EXPECT_EQ(std::get<protocol::Result>(protocol::round_trip(result)), result);
  result.validation.reset();
  EXPECT_EQ(std::get<protocol::Result>(protocol::round_trip(result)), result);
}

}  // namespace
}  // namespace ibprobe::probes
