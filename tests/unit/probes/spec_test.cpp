#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>

#include "ibprobe/probe_failure.h"
#include "ibprobe/probes.h"
#include "violations.h"

namespace ibprobe::probes {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

ProbeSpec write_bw() {
  return default_spec(Operation::kWrite, TestKind::kBandwidth);
}
ProbeSpec write_lat() {
  return default_spec(Operation::kWrite, TestKind::kLatency);
}

TEST(DefaultSpec, BandwidthMatchesPerftest) {
  for (auto operation : {Operation::kWrite, Operation::kRead, Operation::kSend}) {
    const ProbeSpec spec = default_spec(operation, TestKind::kBandwidth);
    EXPECT_EQ(spec.message_size, 65536u);
    EXPECT_EQ(spec.tx_depth, 128u);
    // Unset: perftest forces a completion per message above 8 KiB unless -Q is given.
    EXPECT_FALSE(spec.cq_moderation);
    EXPECT_EQ(effective_cq_moderation(spec), 1u);
    EXPECT_EQ(spec.qps, 1u);
    EXPECT_EQ(spec.post_list, 1u);
    EXPECT_FALSE(spec.duration_seconds);
  }
  // ib_write_bw defaults to 5000 iterations, ib_read_bw and ib_send_bw to 1000.
  EXPECT_EQ(default_spec(Operation::kWrite, TestKind::kBandwidth).iterations, 5000u);
  EXPECT_EQ(default_spec(Operation::kRead, TestKind::kBandwidth).iterations, 1000u);
  EXPECT_EQ(default_spec(Operation::kSend, TestKind::kBandwidth).iterations, 1000u);
  EXPECT_EQ(default_spec(Operation::kSend, TestKind::kBandwidth).rx_depth, 512u);
  EXPECT_EQ(default_spec(Operation::kWrite, TestKind::kBandwidth).rx_depth, 1u);
}

TEST(DefaultSpec, LatencyMatchesPerftest) {
  for (auto operation : {Operation::kWrite, Operation::kRead, Operation::kSend}) {
    const ProbeSpec spec = default_spec(operation, TestKind::kLatency);
    EXPECT_EQ(spec.message_size, 2u);
    EXPECT_EQ(spec.tx_depth, 1u);
    EXPECT_EQ(spec.iterations, 1000u);
  }
}

// ib_atomic_bw and ib_atomic_lat: DEF_SIZE_ATOMIC 8-byte operands, fetch-and-add, DEF_ITERS;
// the bandwidth test's CQ moderation is DEF_CQ_MOD, 8 bytes being below MSG_SIZE_CQ_MOD_LIMIT.
TEST(DefaultSpec, AtomicMatchesPerftest) {
  const ProbeSpec bw = default_spec(Operation::kAtomic, TestKind::kBandwidth);
  EXPECT_EQ(bw.message_size, 8u);
  EXPECT_EQ(bw.atomic_type, AtomicType::kFetchAndAdd);
  EXPECT_EQ(bw.iterations, 1000u);
  EXPECT_EQ(bw.tx_depth, 128u);
  EXPECT_EQ(bw.rx_depth, 1u);
  EXPECT_EQ(effective_cq_moderation(bw), 100u);
  const ProbeSpec lat = default_spec(Operation::kAtomic, TestKind::kLatency);
  EXPECT_EQ(lat.message_size, 8u);
  EXPECT_EQ(lat.tx_depth, 1u);
  EXPECT_EQ(lat.iterations, 1000u);
  EXPECT_TRUE(validate(bw).has_value());
  EXPECT_TRUE(validate(lat).has_value());
  // perftest's inline default leaves atomics out, as reads: nothing to inline.
  EXPECT_EQ(perftest_default_inline(0x15b3, 4119, Operation::kAtomic, TestKind::kLatency), 0u);
}

std::vector<std::string> problems(ProbeSpec spec) {
  const auto valid = validate(std::move(spec));
  return valid ? std::vector<std::string>{} : valid.error().problems;
}

TEST(TransportRules, AtomicsArePerftestsEightByteOperandsWithoutInline) {
  auto spec = default_spec(Operation::kAtomic, TestKind::kBandwidth);
  spec.message_size = 16;
  EXPECT_THAT(problems(spec),
              ElementsAre(HasSubstr("message_size=16: an atomic operand is 8 bytes")));
  spec.message_size = 8;
  spec.inline_size = 8;
  EXPECT_THAT(problems(spec), ElementsAre(HasSubstr("atomic bandwidth cannot use inline")));
  spec.inline_size.reset();
  spec.rate_limit = RateLimit{1, RateUnit::kPps, RateLimiter::kSoftware};
  EXPECT_THAT(problems(spec), ElementsAre(HasSubstr("needs limiter hardware")));
  spec.rate_limit->limiter = RateLimiter::kHardware;
  EXPECT_THAT(problems(spec), IsEmpty());
  spec.rate_limit.reset();
  // Validation of atomics is the targets' read-back, for any 8-byte run.
  spec.validation = true;
  EXPECT_THAT(problems(spec), IsEmpty());
  spec.atomic_type = AtomicType::kCompareAndSwap;
  EXPECT_THAT(problems(spec), IsEmpty());
}

TEST(TransportRules, AtomicTypeBelongsToAtomics) {
  auto spec = write_bw();
  spec.atomic_type = AtomicType::kCompareAndSwap;
  EXPECT_THAT(problems(spec),
              ElementsAre("atomic_type CMP_AND_SWAP applies to atomic probes, not write"));
}

TEST(TransportRules, UcCarriesWriteAndSendOnly) {
  for (auto operation : {Operation::kWrite, Operation::kSend}) {
    for (auto test : {TestKind::kBandwidth, TestKind::kLatency}) {
      auto spec = default_spec(operation, test);
      spec.connection = Connection::kUc;
      EXPECT_THAT(problems(spec), IsEmpty()) << to_string(operation) << " " << to_string(test);
    }
  }
  for (auto operation : {Operation::kRead, Operation::kAtomic}) {
    auto spec = default_spec(operation, TestKind::kBandwidth);
    spec.connection = Connection::kUc;
    EXPECT_THAT(problems(spec), ElementsAre(HasSubstr("connection UC cannot carry " +
                                                      std::string(to_string(operation)))));
  }
  auto send = default_spec(Operation::kSend, TestKind::kBandwidth);
  send.connection = Connection::kUc;
  send.bidirectional = true;
  EXPECT_THAT(problems(send), ElementsAre(HasSubstr("bidirectional send over UC")));
  auto spec = write_bw();
  spec.connection = Connection::kUc;
  spec.bidirectional = true;
  EXPECT_THAT(problems(spec), IsEmpty());
  spec.bidirectional = false;
  spec.validation = true;
  EXPECT_THAT(problems(spec), ElementsAre(HasSubstr("validation over UC")));
  spec.validation = false;
  spec.rc.timeout = 18;
  EXPECT_THAT(problems(spec), ElementsAre(HasSubstr("apply to RC: a UC QP waits for")));
}

TEST(TransportRules, UdCarriesSendOnly) {
  for (auto test : {TestKind::kBandwidth, TestKind::kLatency}) {
    auto spec = default_spec(Operation::kSend, test);
    spec.connection = Connection::kUd;
    // 64 KiB is no error: the run cuts it to the path MTU, as perftest does.
    EXPECT_THAT(problems(spec), IsEmpty());
  }
  for (auto operation : {Operation::kWrite, Operation::kRead, Operation::kAtomic}) {
    auto spec = default_spec(operation, TestKind::kBandwidth);
    spec.connection = Connection::kUd;
    EXPECT_THAT(problems(spec), ElementsAre(HasSubstr("connection UD carries send only")));
  }
  auto spec = default_spec(Operation::kSend, TestKind::kBandwidth);
  spec.connection = Connection::kUd;
  // perftest keeps DEF_CQ_MOD over UD: its 64 KiB become one MTU-sized datagram.
  EXPECT_EQ(effective_cq_moderation(spec), 100u);
  spec.rc.rnr_retry = 3;
  EXPECT_THAT(problems(spec), ElementsAre(HasSubstr("a UD QP waits for no acknowledgement")));
}

// force_dependecies: over UC and UD a send run of N iterations with the default rx depth (512)
// posts min(N, UC_MAX_RX) receives; here never above the responders' depth limit.
TEST(TransportRules, UnreliableSendPostsAReceivePerMessage) {
  auto spec = default_spec(Operation::kSend, TestKind::kBandwidth);
  EXPECT_EQ(perftest_unreliable_rx_depth(spec, 8192), 512u);  // RC keeps its depth
  spec.connection = Connection::kUd;
  EXPECT_EQ(perftest_unreliable_rx_depth(spec, 8192), 1000u);
  spec.iterations = 100;
  EXPECT_EQ(perftest_unreliable_rx_depth(spec, 8192), 100u);
  spec.iterations = 50000;
  EXPECT_EQ(perftest_unreliable_rx_depth(spec, 20000), 16000u);
  EXPECT_EQ(perftest_unreliable_rx_depth(spec, 8192), 8192u);
  spec.rx_depth = 64;  // given, not the default
  EXPECT_EQ(perftest_unreliable_rx_depth(spec, 8192), 64u);
  spec.rx_depth = 512;
  spec.iterations.reset();
  spec.duration_seconds = 10;
  EXPECT_EQ(perftest_unreliable_rx_depth(spec, 8192), 512u);
  auto write = default_spec(Operation::kWrite, TestKind::kBandwidth);
  write.connection = Connection::kUc;
  EXPECT_EQ(perftest_unreliable_rx_depth(write, 8192), 1u);
}

TEST(DefaultSpec, RcKnobsMatchPerftest) {
  const RcKnobs rc = write_bw().rc;
  EXPECT_EQ(rc.timeout, 14u);
  EXPECT_EQ(rc.retry_cnt, 7u);
  EXPECT_EQ(rc.rnr_retry, 7u);
  EXPECT_EQ(rc.min_rnr_timer, 12u);
}

TEST(Validate, EveryDefaultIsValid) {
  for (auto operation : {Operation::kWrite, Operation::kRead, Operation::kSend}) {
    for (auto test : {TestKind::kBandwidth, TestKind::kLatency}) {
      EXPECT_THAT(violations_of(validate(default_spec(operation, test))), IsEmpty())
          << to_string(operation) << "_" << to_string(test);
    }
  }
}

TEST(Validate, SeveralQpsOnlyForBandwidth) {
  ProbeSpec spec = write_lat();
  spec.qps = 4;
  EXPECT_THAT(violations_of(validate(spec)),
              ElementsAre("qps=4: several QPs only make sense for bandwidth tests"));
  spec = write_bw();
  spec.qps = 4;
  EXPECT_THAT(violations_of(validate(spec)), IsEmpty());
  spec.qps = 0;
  EXPECT_THAT(violations_of(validate(spec)), ElementsAre(HasSubstr("qps=0")));
}

TEST(Validate, SrqOnlyForSend) {
  ProbeSpec spec = write_bw();
  spec.use_srq = true;
  EXPECT_THAT(violations_of(validate(spec)),
              ElementsAre(HasSubstr("use_srq applies only to send")));
  spec = default_spec(Operation::kSend, TestKind::kBandwidth);
  spec.use_srq = true;
  EXPECT_THAT(violations_of(validate(spec)), IsEmpty());
}

TEST(Validate, MtuMustBeAnIbMtu) {
  ProbeSpec spec = write_bw();
  for (std::uint32_t mtu : {256u, 512u, 1024u, 2048u, 4096u}) {
    spec.mtu = mtu;
    EXPECT_THAT(violations_of(validate(spec)), IsEmpty()) << mtu;
  }
  spec.mtu = 3000;
  EXPECT_THAT(violations_of(validate(spec)),
              ElementsAre("mtu 3000 is not an IB MTU (256, 512, 1024, 2048, 4096)"));
}

TEST(Validate, InlineNoLargerThanTheMessage) {
  ProbeSpec spec = write_lat();
  spec.inline_size = 64;
  EXPECT_THAT(violations_of(validate(spec)),
              ElementsAre(HasSubstr("inline size larger than the message")));
  spec.inline_size = 2;
  EXPECT_THAT(violations_of(validate(spec)), IsEmpty());
}

TEST(Validate, ReadHasNoInline) {
  ProbeSpec spec = default_spec(Operation::kRead, TestKind::kLatency);
  spec.inline_size = 1;
  EXPECT_THAT(violations_of(validate(spec)),
              ElementsAre(HasSubstr("read latency cannot use inline")));
  spec = default_spec(Operation::kRead, TestKind::kBandwidth);
  spec.inline_size = 1;
  EXPECT_THAT(violations_of(validate(spec)),
              ElementsAre(HasSubstr("read bandwidth cannot use inline")));
}

// force_dependecies in perftest_parameters.c, in its order: DEF_CQ_MOD 100; above
// MSG_SIZE_CQ_MOD_LIMIT (8192) and not asked for, 1; with a post list and not asked for, the
// list's size; never above the tx depth. Given with -Q, it stays.
TEST(EffectiveCqModeration, FollowsPerftestsRules) {
  ProbeSpec spec = write_bw();
  EXPECT_EQ(effective_cq_moderation(spec), 1u);
  spec.message_size = 8192;
  EXPECT_EQ(effective_cq_moderation(spec), 100u);
  spec.message_size = 8193;
  EXPECT_EQ(effective_cq_moderation(spec), 1u);
  spec.post_list = 16;
  EXPECT_EQ(effective_cq_moderation(spec), 16u);
  spec.message_size = 64;
  EXPECT_EQ(effective_cq_moderation(spec), 16u);
  spec.post_list = 1;
  spec.tx_depth = 32;
  EXPECT_EQ(effective_cq_moderation(spec), 32u);
  spec.cq_moderation = 4;
  spec.message_size = 65536;
  EXPECT_EQ(effective_cq_moderation(spec), 4u);
  EXPECT_EQ(effective_cq_moderation(write_lat()), 1u);
}

// ctx_set_max_inline with ib_dev_name's device table: rxe (vendor 0xffffff, part 0) is unknown
// to perftest, which then inlines nothing.
TEST(PerftestDefaultInline, FollowsPerftestsDeviceTable) {
  constexpr std::uint32_t kMellanox = 0x02c9, kRxe = 0xffffff;
  constexpr std::uint32_t kConnectX6 = 4123;
  EXPECT_EQ(perftest_default_inline(kMellanox, kConnectX6, Operation::kWrite, TestKind::kLatency),
            220u);
  // DEF_INLINE_SEND_UD for send latency over UD.
  EXPECT_EQ(perftest_default_inline(kMellanox, kConnectX6, Operation::kSend, TestKind::kLatency,
                                    Connection::kUd),
            188u);
  EXPECT_EQ(perftest_default_inline(kMellanox, kConnectX6, Operation::kSend, TestKind::kLatency),
            236u);
  EXPECT_EQ(perftest_default_inline(kMellanox, kConnectX6, Operation::kRead, TestKind::kLatency),
            0u);
  EXPECT_EQ(perftest_default_inline(kMellanox, kConnectX6, Operation::kWrite, TestKind::kBandwidth),
            0u);
  EXPECT_EQ(perftest_default_inline(kRxe, 0, Operation::kWrite, TestKind::kLatency), 0u);
  EXPECT_EQ(perftest_default_inline(kRxe, 0, Operation::kSend, TestKind::kLatency), 0u);
  // Vendors with their own figure: Broadcom NetXtreme 96, EFA 32, Intel 48 / 101, Chelsio T6
  // the ConnectX figure.
  EXPECT_EQ(perftest_default_inline(0x14e4, 5968, Operation::kWrite, TestKind::kLatency), 96u);
  EXPECT_EQ(perftest_default_inline(0x1d0f, 61345, Operation::kSend, TestKind::kLatency), 32u);
  EXPECT_EQ(perftest_default_inline(0x8086, 14289, Operation::kWrite, TestKind::kLatency), 48u);
  EXPECT_EQ(perftest_default_inline(0x8086, 5522, Operation::kWrite, TestKind::kLatency), 101u);
  EXPECT_EQ(perftest_default_inline(5157, 0x6401, Operation::kWrite, TestKind::kLatency), 220u);
  EXPECT_EQ(perftest_default_inline(5157, 0x7401, Operation::kWrite, TestKind::kLatency), 0u);
}

TEST(Validate, QueueRelations) {
  ProbeSpec spec = write_bw();
  spec.cq_moderation = 200;
  EXPECT_THAT(violations_of(validate(spec)),
              ElementsAre(HasSubstr("CQ moderation larger than tx depth")));

  spec = write_bw();
  spec.iterations = 256 * 20;
  spec.post_list = 256;
  spec.cq_moderation = 128;
  EXPECT_THAT(violations_of(validate(spec)),
              ElementsAre(HasSubstr("post list larger than tx depth")));

  spec = write_bw();
  spec.iterations = 3000;
  spec.post_list = 30;
  spec.cq_moderation = 100;
  EXPECT_THAT(violations_of(validate(spec)),
              ElementsAre(HasSubstr("must be a multiple of CQ moderation (100)")));
  spec.cq_moderation = 10;
  EXPECT_THAT(violations_of(validate(spec)), IsEmpty());
  // perftest: "Number of iterations must be a multiple of post list size".
  spec.iterations = 3001;
  EXPECT_THAT(violations_of(validate(spec)),
              ElementsAre(HasSubstr("must be a multiple of the post list")));
  // A validating run checks every message in its own slot; perftest has no such mode, and a
  // post list would hand several slots to one call.
  spec = write_bw();
  spec.validation = true;
  spec.post_list = 10;
  EXPECT_THAT(violations_of(validate(spec)),
              ElementsAre(HasSubstr("post lists apply to plain runs")));

  spec = write_lat();
  spec.tx_depth = 16;
  EXPECT_THAT(violations_of(validate(spec)), ElementsAre(HasSubstr("tx depth must be 1")));
}

TEST(Validate, DurationAndIterationsAreExclusive) {
  ProbeSpec spec = write_bw();
  spec.duration_seconds = 10;
  EXPECT_THAT(violations_of(validate(spec)),
              ElementsAre(HasSubstr("duration and iterations are exclusive")));
  spec.iterations.reset();
  EXPECT_THAT(violations_of(validate(spec)), IsEmpty());
  spec.duration_seconds.reset();
  EXPECT_THAT(violations_of(validate(spec)),
              ElementsAre(HasSubstr("neither iterations nor duration")));
}

TEST(Validate, DurationMustOutlastBothMargins) {
  ProbeSpec spec = write_bw();
  spec.iterations.reset();
  spec.duration_seconds = 4;  // perftest: DURATION > 2 * MARGIN
  EXPECT_THAT(violations_of(validate(spec)),
              ElementsAre(HasSubstr("warm-up and cool-down margins")));
  spec.duration_seconds = 5;
  EXPECT_THAT(violations_of(validate(spec)), IsEmpty());
  spec.duration_seconds = 30;
  EXPECT_THAT(violations_of(validate(spec)),
              ElementsAre(HasSubstr("timeout=30: must exceed the duration")));
}

TEST(Validate, TooFewIterations) {
  ProbeSpec spec = write_lat();
  spec.iterations = 4;
  EXPECT_THAT(violations_of(validate(spec)), ElementsAre(HasSubstr("iterations=4: at least 5")));
}

TEST(Validate, RcKnobRanges) {
  ProbeSpec spec = write_bw();
  spec.rc = {.timeout = 0, .retry_cnt = 8, .rnr_retry = 9, .min_rnr_timer = 32};
  EXPECT_THAT(violations_of(validate(spec)),
              ElementsAre(HasSubstr("waits forever"), HasSubstr("retry_count=8"),
                          HasSubstr("rnr_retry=9"), HasSubstr("min_rnr_timer=32")));
  spec.rc = {.timeout = 31, .retry_cnt = 0, .rnr_retry = 0, .min_rnr_timer = 0};
  EXPECT_THAT(violations_of(validate(spec)), IsEmpty());
  spec.rc.timeout = 32;
  EXPECT_THAT(violations_of(validate(spec)), ElementsAre(HasSubstr("0..31")));
}

TEST(Validate, GidIndexFitsTheAddressVector) {
  ProbeSpec spec = write_bw();
  spec.gid_index = 255;
  EXPECT_THAT(violations_of(validate(spec)), IsEmpty());
  spec.gid_index = 256;
  EXPECT_THAT(violations_of(validate(spec)), ElementsAre(HasSubstr("gid_index=256")));
}

TEST(Validate, NumaNodeGoesWithNodePolicy) {
  ProbeSpec spec = write_bw();
  spec.numa = NumaPolicy::kNode;
  EXPECT_THAT(violations_of(validate(spec)), ElementsAre(HasSubstr("needs a node number")));
  spec.numa_node = 1;
  EXPECT_THAT(violations_of(validate(spec)), IsEmpty());
  spec.numa = NumaPolicy::kNone;
  EXPECT_THAT(violations_of(validate(spec)), ElementsAre(HasSubstr("only policy 'node' uses it")));
}

TEST(Validate, ReportsEveryViolationAtOnce) {
  ProbeSpec spec = write_lat();
  spec.qps = 2;
  spec.use_srq = true;
  spec.mtu = 9000;
  spec.message_size = 0;
  EXPECT_THAT(violations_of(validate(spec)), SizeIs(4));
}

TEST(ParseEnums, RoundTripTheirNames) {
  for (auto operation :
       {Operation::kWrite, Operation::kRead, Operation::kSend, Operation::kAtomic}) {
    EXPECT_EQ(parse_operation(to_string(operation)), operation);
  }
  for (auto test : {TestKind::kBandwidth, TestKind::kLatency}) {
    EXPECT_EQ(parse_test_kind(to_string(test)), test);
  }
  for (auto policy : {NumaPolicy::kAuto, NumaPolicy::kNone, NumaPolicy::kNode}) {
    EXPECT_EQ(parse_numa_policy(to_string(policy)), policy);
  }
  for (auto type : {AtomicType::kFetchAndAdd, AtomicType::kCompareAndSwap}) {
    EXPECT_EQ(parse_atomic_type(to_string(type)), type);
  }
  for (auto connection : {Connection::kRc, Connection::kUc, Connection::kUd}) {
    EXPECT_EQ(parse_connection(to_string(connection)), connection);
  }
  // perftest's spellings only.
  EXPECT_EQ(parse_atomic_type("CMP_AND_SWAP"), AtomicType::kCompareAndSwap);
  EXPECT_FALSE(parse_atomic_type("fetch_and_add"));
  EXPECT_FALSE(parse_connection("XRC"));
  EXPECT_FALSE(parse_operation("atomics"));
  EXPECT_FALSE(parse_test_kind("BW"));
  EXPECT_FALSE(parse_numa_policy(""));
}

TEST(CheckLimits, DefaultsFitTheDefaultLimits) {
  for (auto operation : {Operation::kWrite, Operation::kRead, Operation::kSend}) {
    for (auto test : {TestKind::kBandwidth, TestKind::kLatency}) {
      EXPECT_THAT(violations_of(check_limits(default_spec(operation, test), Limits{})), IsEmpty());
    }
  }
}

TEST(CheckLimits, EachCapIsEnforced) {
  const Limits limits{.max_message_size = 1 << 20,
                      .max_depth = 256,
                      .max_qps = 4,
                      .max_duration_seconds = 10,
                      .max_iterations = 10000,
                      .max_total_buffer_bytes = 1ull << 40};
  ProbeSpec spec = write_bw();
  spec.message_size = (1 << 20) + 1;
  EXPECT_THAT(violations_of(check_limits(spec, limits)),
              ElementsAre(HasSubstr("message_size=1048577")));
  spec = write_bw();
  spec.tx_depth = 257;
  spec.rx_depth = 300;
  EXPECT_THAT(violations_of(check_limits(spec, limits)),
              ElementsAre(HasSubstr("tx_depth=257"), HasSubstr("rx_depth=300")));
  spec = write_bw();
  spec.qps = 5;
  EXPECT_THAT(violations_of(check_limits(spec, limits)), ElementsAre(HasSubstr("qps=5")));
  spec = write_bw();
  spec.iterations.reset();
  spec.duration_seconds = 11;
  EXPECT_THAT(violations_of(check_limits(spec, limits)), ElementsAre(HasSubstr("duration=11")));
  spec = write_bw();
  spec.iterations = 10001;
  EXPECT_THAT(violations_of(check_limits(spec, limits)),
              ElementsAre(HasSubstr("iterations=10001")));
  // A peer cannot hold this side's resources longer than the cap, whatever its spec says.
  spec = write_bw();
  spec.timeout_seconds = Limits{}.max_timeout_seconds + 1;
  EXPECT_THAT(violations_of(check_limits(spec, Limits{})), ElementsAre(HasSubstr("timeout=181")));
}

TEST(CheckLimits, TotalBufferIsQpsTimesDepthTimesSize) {
  Limits limits;
  limits.max_total_buffer_bytes = 4ull * 128 * 65536;
  ProbeSpec spec = write_bw();
  spec.qps = 4;
  EXPECT_THAT(violations_of(check_limits(spec, limits)), IsEmpty());
  spec.qps = 5;
  EXPECT_THAT(violations_of(check_limits(spec, limits)), ElementsAre(HasSubstr("5 x 128 x 65536")));
  // The larger of the two depths counts: a send responder posts rx_depth receives.
  spec.qps = 4;
  spec.rx_depth = 129;
  EXPECT_THAT(violations_of(check_limits(spec, limits)), ElementsAre(HasSubstr("4 x 129 x 65536")));
}

TEST(CheckLimits, HostileNumbersCannotOverflowPastTheCheck) {
  ProbeSpec spec = write_bw();
  spec.message_size = std::numeric_limits<std::uint64_t>::max();
  spec.tx_depth = std::numeric_limits<std::uint32_t>::max();
  spec.qps = std::numeric_limits<std::uint32_t>::max();
  const Limits unlimited{.max_message_size = std::numeric_limits<std::uint64_t>::max(),
                         .max_depth = std::numeric_limits<std::uint32_t>::max(),
                         .max_qps = std::numeric_limits<std::uint32_t>::max(),
                         .max_duration_seconds = 0,
                         .max_iterations = std::numeric_limits<std::uint64_t>::max(),
                         .max_total_buffer_bytes = std::numeric_limits<std::uint64_t>::max()};
  EXPECT_THAT(violations_of(check_limits(spec, unlimited)),
              ElementsAre(HasSubstr("buffers of qps x depth")));
}

TEST(NumaChoice, AutoNoneOrANodeNumberAndNothingElse) {
  const auto choice = [](std::string_view text) {
    const auto parsed = parse_numa_choice(text);
    return parsed ? std::string(to_string(parsed->policy)) +
                        (parsed->node ? "=" + std::to_string(*parsed->node) : "")
                  : "refused";
  };
  EXPECT_EQ(choice("auto"), "auto");
  EXPECT_EQ(choice("none"), "none");
  EXPECT_EQ(choice("0"), "node=0");
  EXPECT_EQ(choice("3"), "node=3");
  EXPECT_EQ(choice("4294967295"), "node=4294967295");
  for (const char* text : {"node", "", "-1", "3x", " 3", "4294967296", "Auto"}) {
    EXPECT_EQ(choice(text), "refused") << "'" << text << "'";
  }
}

TEST(RunError, WhatARunThrewBecomesItsKindAndText) {
  const auto error_of = [](auto thrown) {
    try {
      throw thrown;
    } catch (...) {
      return current_exception_as_error();
    }
  };
  const auto failure = error_of(ProbeFailure("peer went away", FailureKind::kPeerLost));
  EXPECT_EQ(failure.kind, FailureKind::kPeerLost);
  EXPECT_EQ(failure.message, "peer went away");
  const auto refused = error_of(std::invalid_argument("fabric port 'x' is not LID:PORT"));
  EXPECT_EQ(refused.kind, FailureKind::kRejected);
  EXPECT_EQ(refused.message, "fabric port 'x' is not LID:PORT");
  const auto other = error_of(std::runtime_error("out of something"));
  EXPECT_EQ(other.kind, FailureKind::kInternal);
  EXPECT_EQ(other.message, "out of something");
  EXPECT_EQ(error_of(42).kind, FailureKind::kInternal);
}

}  // namespace
}  // namespace ibprobe::probes
