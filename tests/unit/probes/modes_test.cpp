// The bidirectional, rate-limited and sweep modes: their rules, their wire form, the software
// pacer's schedule and the knee of a sweep.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ibprobe/probes.h"
#include "ibprobe/spec_json.h"
#include "ibprobe/sweep.h"
#include "protocol.h"
#include "rate_pacer.h"
#include "round_trip.h"
#include "violations.h"

namespace ibprobe::probes {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(BidirectionalSpec, BandwidthOnly) {
  for (auto operation : {Operation::kWrite, Operation::kRead, Operation::kSend}) {
    auto spec = default_spec(operation, TestKind::kBandwidth);
    spec.bidirectional = true;
    EXPECT_THAT(violations_of(validate(spec)), IsEmpty());
  }
  auto latency = default_spec(Operation::kWrite, TestKind::kLatency);
  latency.bidirectional = true;
  EXPECT_THAT(violations_of(validate(latency)),
              Contains(HasSubstr("bidirectional applies to bandwidth")));
  auto validating = default_spec(Operation::kWrite, TestKind::kBandwidth);
  validating.bidirectional = validating.validation = true;
  EXPECT_THAT(violations_of(validate(validating)),
              Contains(HasSubstr("validating loops check one direction")));
}

TEST(RateLimitSpec, BandwidthWithAPositiveRate) {
  auto spec = default_spec(Operation::kWrite, TestKind::kBandwidth);
  spec.rate_limit = RateLimit{1.5, RateUnit::kGbps, RateLimiter::kAuto};
  EXPECT_THAT(violations_of(validate(spec)), IsEmpty());
  spec.rate_limit->value = 0;
  EXPECT_THAT(violations_of(validate(spec)), Contains(HasSubstr("positive number")));
  auto latency = default_spec(Operation::kSend, TestKind::kLatency);
  latency.rate_limit = RateLimit{1, RateUnit::kPps, RateLimiter::kSoftware};
  EXPECT_THAT(violations_of(validate(latency)),
              Contains(HasSubstr("rate_limit applies to bandwidth")));
}

TEST(RateLimitSpec, UnitsInPayloadBytesPerSecond) {
  EXPECT_DOUBLE_EQ(rate_limit_bytes_per_second({8, RateUnit::kGbps}, 4096), 1e9);
  EXPECT_DOUBLE_EQ(rate_limit_bytes_per_second({3, RateUnit::kMiBps}, 4096), 3.0 * 1048576);
  EXPECT_DOUBLE_EQ(rate_limit_bytes_per_second({1000, RateUnit::kPps}, 4096), 4096e3);
  for (auto unit : {RateUnit::kGbps, RateUnit::kMiBps, RateUnit::kPps}) {
    EXPECT_EQ(parse_rate_unit(to_string(unit)), unit);
  }
  for (auto limiter : {RateLimiter::kSoftware, RateLimiter::kHardware, RateLimiter::kAuto}) {
    EXPECT_EQ(parse_rate_limiter(to_string(limiter)), limiter);
  }
  EXPECT_FALSE(parse_rate_unit("gbps"));
}

TEST(ModesOnTheWire, SpecAndResultCarryThem) {
  auto spec = default_spec(Operation::kRead, TestKind::kBandwidth);
  spec.bidirectional = true;
  spec.rate_limit = RateLimit{2.25, RateUnit::kMiBps, RateLimiter::kHardware};
  const protocol::ProbeRequest request{spec};
  EXPECT_EQ(std::get<protocol::ProbeRequest>(protocol::round_trip(request)), request);

  protocol::Result result;
  result.facts = protocol::SideFacts{3, 1, 0, true, RateLimiter::kSoftware, std::nullopt};
  result.bandwidth = BandwidthStats{1000, 2.5, 4e8, 4e2, 5e8};
  EXPECT_EQ(std::get<protocol::Result>(protocol::round_trip(result)), result);
  result.bandwidth->peak_bytes_per_second.reset();
  EXPECT_EQ(std::get<protocol::Result>(protocol::round_trip(result)), result);
}

// -e reaches the responder, which sleeps on its own CQ's events too; a spec without it reads as
// it always did to a responder that predates it.
TEST(CqEventsSpec, ReadAndSendOnlyAsPerftest) {
  for (auto test : {TestKind::kBandwidth, TestKind::kLatency}) {
    for (auto operation : {Operation::kRead, Operation::kSend}) {
      auto spec = default_spec(operation, test);
      spec.cq_events = true;
      EXPECT_THAT(violations_of(validate(spec)), IsEmpty());
    }
    auto write = default_spec(Operation::kWrite, test);
    write.cq_events = true;
    EXPECT_THAT(violations_of(validate(write)),
                Contains(HasSubstr("cq_events applies to read and send: an RDMA write raises no "
                                   "completion at the side it writes to")));
  }
}

TEST(ModesOnTheWire, CqEventsTravelOnlyWhenAsked) {
  auto spec = default_spec(Operation::kSend, TestKind::kLatency);
  EXPECT_FALSE(spec_to_json(spec).contains("cq_events"));
  spec.cq_events = true;
  EXPECT_EQ(spec_to_json(spec).at("cq_events"), true);
  const protocol::ProbeRequest request{spec};
  const auto decoded = std::get<protocol::ProbeRequest>(protocol::round_trip(request));
  EXPECT_TRUE(decoded.spec.cq_events);
  EXPECT_EQ(decoded, request);
}

// perftest -R: every RC operation and test connects through the CM; what the CM decides (the
// path's SL, the P_Key of the address's interface, the GIDs of the addresses) cannot also be
// asked for; UD is reached by SIDR, and UC keeps the QP exchange (perftest: "UC is not supported
// in librdmacm").
TEST(RdmaCmSpec, RcAndUdAndNothingTheConnectionManagerDecides) {
  for (auto test : {TestKind::kBandwidth, TestKind::kLatency}) {
    for (auto operation :
         {Operation::kWrite, Operation::kRead, Operation::kSend, Operation::kAtomic}) {
      auto spec = default_spec(operation, test);
      spec.rdma_cm = true;
      spec.traffic_class = 106;
      EXPECT_THAT(violations_of(validate(spec)), IsEmpty());
    }
  }
  const auto refused = [](auto change) {
    auto spec = default_spec(Operation::kSend, TestKind::kBandwidth);
    spec.rdma_cm = true;
    change(spec);
    return violations_of(validate(spec));
  };
  EXPECT_THAT(refused([](ProbeSpec& s) { s.connection = Connection::kUc; }),
              Contains(HasSubstr("rdma_cm over UC: the connection manager connects RC QPs and "
                                 "reaches UD ones by SIDR; UC exchanges")));
  for (auto test : {TestKind::kBandwidth, TestKind::kLatency}) {
    auto datagrams = default_spec(Operation::kSend, test);
    datagrams.connection = Connection::kUd;
    datagrams.rdma_cm = true;
    datagrams.traffic_class = 106;
    EXPECT_THAT(violations_of(validate(datagrams)), IsEmpty());
  }
  EXPECT_THAT(refused([](ProbeSpec& s) { s.sl = 3; }),
              Contains(HasSubstr("sl=3 with rdma_cm: the SL is the path's")));
  EXPECT_THAT(refused([](ProbeSpec& s) { s.pkey_index = 1; }),
              Contains(HasSubstr("pkey_index=1 with rdma_cm: the P_Key is the partition")));
  EXPECT_THAT(refused([](ProbeSpec& s) { s.dlid = 9; }),
              Contains(HasSubstr("dlid=9 with rdma_cm: the destination LID is the path record's")));
  EXPECT_THAT(refused([](ProbeSpec& s) { s.gid_index = 0; }),
              Contains(HasSubstr("gid_index=0 with rdma_cm")));
  EXPECT_THAT(refused([](ProbeSpec& s) { s.peer_gid_index = 3; }),
              Contains(HasSubstr("peer_gid_index=3 with rdma_cm")));
  // Without rdma_cm the same lane and GIDs are the QP exchange's to apply.
  auto exchanged = default_spec(Operation::kSend, TestKind::kBandwidth);
  exchanged.sl = 3;
  exchanged.pkey_index = 1;
  exchanged.gid_index = 0;
  EXPECT_THAT(violations_of(validate(exchanged)), IsEmpty());
}

TEST(ModesOnTheWire, RdmaCmTravelsOnlyWhenAsked) {
  auto spec = default_spec(Operation::kRead, TestKind::kBandwidth);
  EXPECT_FALSE(spec_to_json(spec).contains("rdma_cm"));
  spec.rdma_cm = true;
  EXPECT_EQ(spec_to_json(spec).at("rdma_cm"), true);
  const protocol::ProbeRequest request{spec};
  const auto decoded = std::get<protocol::ProbeRequest>(protocol::round_trip(request));
  EXPECT_TRUE(decoded.spec.rdma_cm);
  EXPECT_EQ(decoded, request);
}

TEST(ModesOnTheWire, ARateLimitWithAnUnknownUnitIsRefused) {
  auto spec = default_spec(Operation::kWrite, TestKind::kBandwidth);
  spec.rate_limit = RateLimit{1, RateUnit::kGbps, RateLimiter::kSoftware};
  auto bytes = protocol::encode(protocol::ProbeRequest{spec});
  std::string text(bytes.begin(), bytes.end());
  const auto at = text.find("\"Gbps\"");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 6, "\"Tbps\"");
  // The frame's length field still holds: same number of bytes.
  const auto decoded = protocol::decode(protocol::Bytes(text.begin(), text.end()));
  ASSERT_FALSE(decoded.has_value());
  EXPECT_THAT(decoded.error().message, HasSubstr("Tbps"));
}

TEST(RatePacer, ListsGoOutNoFasterThanTheRate) {
  // 1000 bytes per message at 1e6 bytes/s: one message per millisecond.
  RatePacer pacer(1e6, 1000);
  const TimestampNs start = 5'000'000'000;
  EXPECT_TRUE(pacer.may_post(start));
  pacer.posted(4, start);  // a list of four may go at once, and then the next waits 4 ms
  EXPECT_FALSE(pacer.may_post(start + 3'999'999));
  EXPECT_TRUE(pacer.may_post(start + 4'000'000));
  // Posted 1 ms late: the next is still due at 8 ms, not 9.
  pacer.posted(4, start + 5'000'000);
  EXPECT_FALSE(pacer.may_post(start + 7'999'999));
  EXPECT_TRUE(pacer.may_post(start + 8'000'000));
  RatePacer unlimited(0, 1000);
  EXPECT_FALSE(unlimited.limited());
  unlimited.posted(1'000'000, start);
  EXPECT_TRUE(unlimited.may_post(start));
}

// After a stall, a schedule counted from the first post would let every list missed in the
// stall out at once: 24 lists at 100 ms here, 96 messages in a moment at a rate of 1 per ms.
TEST(RatePacer, ASenderHeldUpDoesNotCatchUpWithABurst) {
  RatePacer pacer(1e6, 1000);
  const TimestampNs start = 5'000'000'000;
  pacer.posted(4, start);
  const TimestampNs resumed = start + 100'000'000;
  int lists_at_once = 0;
  while (pacer.may_post(resumed) && lists_at_once < 100) {
    pacer.posted(4, resumed);
    ++lists_at_once;
  }
  EXPECT_EQ(lists_at_once, 2);  // the one due and one list of credit
  EXPECT_FALSE(pacer.may_post(resumed + 3'999'999));
  EXPECT_TRUE(pacer.may_post(resumed + 4'000'000));
}

TEST(Sweep, StepsDifferInTheSweptVariableOnly) {
  SweepSpec sweep{default_spec(Operation::kWrite, TestKind::kBandwidth),
                  SweepVariable::kMessageSize,
                  {4096, 65536, 1048576}};
  const auto valid_sweep = validate(sweep);
  ASSERT_TRUE(valid_sweep) << valid_sweep.error().message();
  const auto& steps = valid_sweep->steps();
  ASSERT_EQ(steps.size(), 3u);
  for (std::size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i]->message_size, static_cast<std::uint64_t>(sweep.values[i]));
    auto same = steps[i].spec();
    same.message_size = sweep.base.message_size;
    EXPECT_EQ(same, sweep.base);
  }
  sweep.variable = SweepVariable::kTxDepth;
  sweep.values = {16, 64};
  EXPECT_EQ(validate(sweep).value().steps()[1]->tx_depth, 64u);
  sweep.variable = SweepVariable::kRateLimit;
  sweep.values = {0.5, 1.5};
  EXPECT_THAT(violations_of(validate(sweep)),
              ElementsAre(HasSubstr("needs the module's rate limit")));
  sweep.base.rate_limit = RateLimit{1, RateUnit::kGbps, RateLimiter::kSoftware};
  EXPECT_DOUBLE_EQ(validate(sweep).value().steps()[1]->rate_limit->value, 1.5);
}

TEST(Sweep, RefusesStepsTheSpecWouldRefuseNamingTheStep) {
  SweepSpec sweep{
      default_spec(Operation::kWrite, TestKind::kBandwidth), SweepVariable::kMtu, {1024, 1000}};
  EXPECT_THAT(violations_of(validate(sweep)),
              ElementsAre(AllOf(HasSubstr("step 1 (mtu=1000)"), HasSubstr("not an IB MTU"))));
  sweep.values = {1024};
  EXPECT_THAT(violations_of(validate(sweep)), ElementsAre(HasSubstr("at least two values")));
  sweep.variable = SweepVariable::kQps;
  sweep.values = {1, 2.5};
  EXPECT_THAT(violations_of(validate(sweep)), ElementsAre(HasSubstr("not a valid value for qps")));
  EXPECT_EQ(parse_sweep_variable("inline_size"), SweepVariable::kInlineSize);
  EXPECT_FALSE(parse_sweep_variable("iterations"));
}

TEST(Sweep, PerftestAllSizesAreTwoToEightMebibytes) {
  const auto sizes = perftest_all_sizes();
  ASSERT_EQ(sizes.size(), 23u);
  EXPECT_EQ(sizes.front(), 2);
  EXPECT_EQ(sizes.back(), 8388608);
}

TEST(Sweep, KneeIsTheFirstStepAfterWhichBandwidthRisesByLessThanTheThreshold) {
  const std::vector<double> rising = {100, 200, 300, 310, 400};
  EXPECT_EQ(find_knee(rising, 0.05), 2u);  // 300 -> 310 is +3.3 %
  EXPECT_EQ(find_knee(rising, 0.02), std::nullopt);
  EXPECT_EQ(find_knee(std::vector<double>{100, 104.9}, 0.05), 0u);
  EXPECT_EQ(find_knee(std::vector<double>{100, 105.1}, 0.05), std::nullopt);
  EXPECT_EQ(find_knee(std::vector<double>{100, 90}, 0.05), 0u);  // a fall is a knee too
  EXPECT_EQ(find_knee(std::vector<double>{100}, 0.05), std::nullopt);
}

TEST(Bidirectional, FiguresAreTheSumOfBothDirectionsAsPerftestPrintsThem) {
  const BandwidthStats initiator{1000, 2.0, 3e8, 4e3, 3.5e8};
  const BandwidthStats responder{900, 2.1, 2e8, 3e3, 2.5e8};
  const auto sum = combine_directions(initiator, responder);
  EXPECT_DOUBLE_EQ(sum.bytes_per_second, 5e8);
  EXPECT_DOUBLE_EQ(sum.messages_per_second, 7e3);
  EXPECT_DOUBLE_EQ(*sum.peak_bytes_per_second, 6e8);
  EXPECT_EQ(sum.messages, 1000u);  // perftest prints its own side's iterations
  auto no_peak = responder;
  no_peak.peak_bytes_per_second.reset();
  EXPECT_FALSE(combine_directions(initiator, no_peak).peak_bytes_per_second);
}

}  // namespace
}  // namespace ibprobe::probes
