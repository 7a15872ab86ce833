// Pins the statistics to perftest's formulas on sample sets small enough to compute by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "ibprobe/probes.h"

namespace ibprobe::probes {
namespace {

// Post times whose successive differences are `round_trips`, as a ping-pong loop records them.
std::vector<TimestampNs> post_times(const std::vector<TimestampNs>& round_trips) {
  std::vector<TimestampNs> times{1'000'000};
  for (TimestampNs rtt : round_trips) times.push_back(times.back() + rtt);
  return times;
}

TEST(LatencyStats, OddKeptCountHalvesWriteRoundTrips) {
  // Sorted: 1000 1050 1100 1200 1300 | 5000 9000 (the last two are dropped).
  const auto stats =
      latency_stats(post_times({1000, 1200, 1100, 5000, 9000, 1300, 1050}), Operation::kWrite);
  EXPECT_EQ(stats.samples, 5u);
  EXPECT_DOUBLE_EQ(stats.min_ns, 500);
  EXPECT_DOUBLE_EQ(stats.typical_ns, 550);  // middle of 5
  EXPECT_DOUBLE_EQ(stats.average_ns, 565);  // 5650 / 5 / 2
  // One-way 500 525 550 600 650 around 565: squares sum to 14500, / 5 = 2900.
  EXPECT_DOUBLE_EQ(stats.stdev_ns, std::sqrt(2900.0));
  // perftest reports delta[measure_cnt] after dropping the tail: the second largest sample.
  EXPECT_DOUBLE_EQ(stats.max_ns, 2500);
  // ceil(5 * 0.99) = ceil(5 * 0.999) = 5: that same second largest sample.
  EXPECT_DOUBLE_EQ(stats.p99_ns, 2500);
  EXPECT_DOUBLE_EQ(stats.p99_9_ns, 2500);
}

TEST(LatencyStats, HistogramCountsTheKeptOneWaySamplesAtMostEachBound) {
  // Sorted round trips 1800 2000 2002 4000 9000 30000 | 50000 60000 (dropped); one way: 900
  // 1000 1001 2000 4500 15000 ns. A bound holds the samples equal to it.
  const auto stats = latency_stats(post_times({2000, 1800, 9000, 60000, 2002, 4000, 30000, 50000}),
                                   Operation::kWrite);
  ASSERT_EQ(stats.samples, 6u);
  const std::array<std::uint64_t, 13> expected = {2, 4, 5, 5, 6, 6, 6, 6, 6, 6, 6, 6, 6};
  EXPECT_EQ(stats.histogram_counts, expected);
  EXPECT_DOUBLE_EQ(stats.sum_ns, 24401);
  EXPECT_EQ(kLatencyHistogramBoundsNs.front(), 1e3);
  EXPECT_EQ(kLatencyHistogramBoundsNs.back(), 1e7);
}

// perftest's rtt_factor is 1 for READ and ATOMIC: the round trip is the operation's latency.
TEST(LatencyStats, ReadAndAtomicAreNotHalved) {
  const std::vector<TimestampNs> times = post_times({800, 900, 1000, 4000, 4000});
  EXPECT_DOUBLE_EQ(latency_stats(times, Operation::kRead).typical_ns, 900);
  EXPECT_DOUBLE_EQ(latency_stats(times, Operation::kAtomic).typical_ns, 900);
  EXPECT_DOUBLE_EQ(duration_latency_stats(0, 1000, 10, Operation::kAtomic).average_ns, 100);
  EXPECT_DOUBLE_EQ(duration_latency_stats(0, 1000, 10, Operation::kWrite).average_ns, 50);
}

TEST(LatencyStats, SendIsHalvedLikeWrite) {
  const auto write = latency_stats(post_times({800, 900, 1000, 4000, 4000}), Operation::kWrite);
  const auto send = latency_stats(post_times({800, 900, 1000, 4000, 4000}), Operation::kSend);
  EXPECT_DOUBLE_EQ(send.typical_ns, write.typical_ns);
  EXPECT_DOUBLE_EQ(send.typical_ns, 450);
}

TEST(LatencyStats, EvenKeptCountAveragesTheMiddlePairInWholeTicks) {
  // Kept 1000 1001 1004 1010: get_median = (1001 + 1004) / 2 = 1002 in integer ticks, not 1002.5.
  const auto read =
      latency_stats(post_times({1010, 8000, 1001, 7000, 1000, 1004}), Operation::kRead);
  EXPECT_EQ(read.samples, 4u);
  EXPECT_DOUBLE_EQ(read.typical_ns, 1002);  // read: the completion is the round trip, no halving
  EXPECT_DOUBLE_EQ(read.min_ns, 1000);
  EXPECT_DOUBLE_EQ(read.max_ns, 7000);
  EXPECT_DOUBLE_EQ(read.average_ns, 4015.0 / 4);
  EXPECT_DOUBLE_EQ(read.p99_ns, 7000);  // ceil(3.96) = 4

  const auto write =
      latency_stats(post_times({1010, 8000, 1001, 7000, 1000, 1004}), Operation::kWrite);
  EXPECT_DOUBLE_EQ(write.typical_ns, 501);  // the truncated 1002 halved
}

TEST(LatencyStats, TiesGiveZeroSpread) {
  // Ten round trips: ten samples, eight kept.
  const auto stats =
      latency_stats(post_times(std::vector<TimestampNs>(10, 800)), Operation::kWrite);
  EXPECT_EQ(stats.samples, 8u);
  for (double value : {stats.min_ns, stats.max_ns, stats.typical_ns, stats.average_ns, stats.p99_ns,
                       stats.p99_9_ns}) {
    EXPECT_DOUBLE_EQ(value, 400);
  }
  EXPECT_DOUBLE_EQ(stats.stdev_ns, 0);
}

TEST(LatencyStats, FourTimestampsLeaveOneSample) {
  // Three round trips 300 100 200: the two largest go, 100 stays.
  const auto stats = latency_stats(post_times({300, 100, 200}), Operation::kRead);
  EXPECT_EQ(stats.samples, 1u);
  EXPECT_DOUBLE_EQ(stats.min_ns, 100);
  EXPECT_DOUBLE_EQ(stats.typical_ns, 100);
  EXPECT_DOUBLE_EQ(stats.average_ns, 100);
  EXPECT_DOUBLE_EQ(stats.stdev_ns, 0);
  EXPECT_DOUBLE_EQ(stats.max_ns, 200);
  EXPECT_DOUBLE_EQ(stats.p99_ns, 200);  // ceil(0.99) = 1
  EXPECT_DOUBLE_EQ(stats.p99_9_ns, 200);
}

TEST(LatencyStats, PerftestDefaultIterationCountPercentiles) {
  // 1000 iterations give 999 samples, 997 kept. Round trips 2, 4, ..., 1998 (shuffled).
  std::vector<TimestampNs> round_trips(999);
  for (std::size_t i = 0; i < round_trips.size(); ++i) round_trips[i] = 2 * (i + 1);
  std::reverse(round_trips.begin(), round_trips.end());
  std::rotate(round_trips.begin(), round_trips.begin() + 400, round_trips.end());
  const auto stats = latency_stats(post_times(round_trips), Operation::kWrite);
  EXPECT_EQ(stats.samples, 997u);
  EXPECT_DOUBLE_EQ(stats.min_ns, 1);
  EXPECT_DOUBLE_EQ(stats.typical_ns, 499);  // delta[498]
  EXPECT_DOUBLE_EQ(stats.average_ns, 499);  // (1 + ... + 997) / 997
  EXPECT_DOUBLE_EQ(stats.p99_ns, 989);      // delta[ceil(987.03)] = delta[988]
  EXPECT_DOUBLE_EQ(stats.p99_9_ns, 998);    // delta[ceil(996.003)] = delta[997]
  EXPECT_DOUBLE_EQ(stats.max_ns, 998);
}

TEST(LatencyStats, HundredKeptSamplesPercentileIndices) {
  // 102 samples 1..102 (read, unhalved): kept 1..100. ceil(100 * 0.99) = 99 is the largest kept
  // sample; ceil(100 * 0.999) = 100 already is the first dropped one, as in perftest.
  std::vector<TimestampNs> round_trips(102);
  std::iota(round_trips.begin(), round_trips.end(), 1);
  const auto stats = latency_stats(post_times(round_trips), Operation::kRead);
  EXPECT_EQ(stats.samples, 100u);
  EXPECT_DOUBLE_EQ(stats.p99_ns, 100);
  EXPECT_DOUBLE_EQ(stats.p99_9_ns, 101);
  EXPECT_DOUBLE_EQ(stats.typical_ns, 50);  // (50 + 51) / 2 = 50 in whole ticks
}

TEST(LatencyStats, StdevKeepsSubMicrosecondDeviationsThatPerftestTruncates) {
  // One-way 1000, 1200, 1400 ns: every deviation from the 1200 average is 0.2 us, which
  // perftest's `int temp_var` (in microseconds) truncates to 0, printing t_stdev 0. The spread is
  // real, so the true population deviation is reported: sqrt((200^2 + 0 + 200^2) / 3).
  const auto stats = latency_stats(post_times({2000, 2400, 2800, 9000, 9000}), Operation::kWrite);
  EXPECT_DOUBLE_EQ(stats.average_ns, 1200);
  EXPECT_DOUBLE_EQ(stats.stdev_ns, std::sqrt(80000.0 / 3));
}

TEST(LatencyStats, TooFewTimestampsIsAClearError) {
  for (std::size_t count : {0u, 1u, 2u, 3u}) {
    const std::vector<TimestampNs> times(count, 5);
    try {
      latency_stats(times, Operation::kWrite);
      ADD_FAILURE() << count << " timestamps were accepted";
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find("at least 4 timestamps"), std::string::npos)
          << error.what();
    }
  }
}

TEST(LatencyStats, BackwardsTimestampsAreRefused) {
  const std::vector<TimestampNs> times = {100, 200, 150, 300, 400};
  EXPECT_THROW(latency_stats(times, Operation::kWrite), std::invalid_argument);
}

TEST(DurationLatencyStats, AverageOverTheSampleWindow) {
  // 1 s window, 100000 write ping-pongs: 10 us round trip, 5 us one way.
  const auto write =
      duration_latency_stats(2'000'000'000, 3'000'000'000, 100000, Operation::kWrite);
  EXPECT_DOUBLE_EQ(write.average_ns, 5000);
  EXPECT_DOUBLE_EQ(write.transactions_per_second, 100000);
  const auto read = duration_latency_stats(2'000'000'000, 3'000'000'000, 100000, Operation::kRead);
  EXPECT_DOUBLE_EQ(read.average_ns, 10000);
}

TEST(DurationLatencyStats, EmptyWindowOrNoIterationIsAnError) {
  EXPECT_THROW(duration_latency_stats(10, 10, 5, Operation::kWrite), std::invalid_argument);
  EXPECT_THROW(duration_latency_stats(10, 20, 0, Operation::kWrite), std::invalid_argument);
}

ProbeSpec bandwidth_spec(std::uint64_t iterations, std::uint32_t cq_moderation,
                         std::uint32_t post_list) {
  ProbeSpec spec = default_spec(Operation::kWrite, TestKind::kBandwidth);
  spec.message_size = 1000;
  spec.iterations = iterations;
  spec.cq_moderation = cq_moderation;
  spec.post_list = post_list;
  return spec;
}

TEST(BandwidthStats, AverageFromFirstPostToLastCompletion) {
  const std::vector<TimestampNs> posted = {0, 10, 20, 30, 40};
  const std::vector<TimestampNs> completed = {500, 520, 540, 560, 1000};
  const auto stats = bandwidth_stats(posted, completed, bandwidth_spec(5, 1, 1));
  EXPECT_EQ(stats.messages, 5u);
  EXPECT_DOUBLE_EQ(stats.seconds, 1e-6);
  EXPECT_DOUBLE_EQ(stats.bytes_per_second, 5e9);  // 5000 bytes in 1 us
  EXPECT_DOUBLE_EQ(stats.messages_per_second, 5e6);
  EXPECT_DOUBLE_EQ(mebibytes_per_second(stats.bytes_per_second), 5e9 / 1048576);
  EXPECT_DOUBLE_EQ(gigabits_per_second(stats.bytes_per_second), 40);
}

// A run of one 1000-byte message per post, whose peak is 1000 bytes in `ns_per_message`.
struct PeakCase {
  const char* name;
  std::vector<TimestampNs> posted;
  std::vector<TimestampNs> completed;
  std::uint32_t cq_moderation;
  std::uint32_t post_list;
  double ns_per_message;
};

// Test listings name the case rather than dump its bytes.
void PrintTo(const PeakCase& run, std::ostream* os) {
  *os << run.name;
}

const PeakCase kPeakCases[] = {
    // Best: posts 0..3 done by completion 3: (560 - 0) / 4 = 140 ns per 1000-byte message.
    {"BestPerMessageTimeOverAllPairs", {0, 10, 20, 30, 40}, {500, 520, 540, 560, 1000}, 1, 1, 140},
    // (1000 - 0) / 3 = 333 ticks in perftest's integer arithmetic, not 333.33.
    {"PerMessageTimeIsTruncatedToWholeTicks", {0, 1, 2}, {900, 950, 1000}, 1, 1, 333},
    // CQ moderation 2 over 5 messages: completions are stored at 1, 3 and the last (4). Slots 0
    // and 2 hold values that would win if they were read.
    {"ReadsOnlyRecordedCompletions", {0, 10, 20, 30, 40}, {1, 520, 25, 560, 1000}, 2, 1, 140},
    // Post list 2: posts are timed at 0 and 2 only. Slots 1 and 3 would win if they were read.
    // (1000 - 0) / 4.
    {"ReadsOnlyPostListHeads", {0, 519, 20, 999}, {0, 520, 0, 1000}, 2, 2, 250},
};

class BandwidthPeak : public ::testing::TestWithParam<PeakCase> {};

TEST_P(BandwidthPeak, IsTheBestPerMessageTimePerftestFinds) {
  const PeakCase& run = GetParam();
  const auto stats =
      bandwidth_stats(run.posted, run.completed,
                      bandwidth_spec(run.posted.size(), run.cq_moderation, run.post_list));
  ASSERT_TRUE(stats.peak_bytes_per_second);
  EXPECT_DOUBLE_EQ(*stats.peak_bytes_per_second, 1000 * 1e9 / run.ns_per_message);
}

INSTANTIATE_TEST_SUITE_P(BandwidthStats, BandwidthPeak, ::testing::ValuesIn(kPeakCases),
                         [](const ::testing::TestParamInfo<PeakCase>& info) {
                           return std::string(info.param.name);
                         });

TEST(BandwidthStats, SeveralQpsCountEveryQpsMessages) {
  auto spec = bandwidth_spec(3, 1, 1);
  spec.qps = 2;
  const std::vector<TimestampNs> posted = {0, 1, 2, 3, 4, 5};
  const std::vector<TimestampNs> completed = {100, 200, 300, 400, 500, 600};
  const auto stats = bandwidth_stats(posted, completed, spec);
  EXPECT_EQ(stats.messages, 6u);
  EXPECT_DOUBLE_EQ(stats.bytes_per_second, 6000 / 600e-9);
  EXPECT_THROW(bandwidth_stats(std::span(posted).first(3), std::span(completed).first(3), spec),
               std::invalid_argument);
}

TEST(BandwidthStats, NoPeakAboveTwentyThousandIterations) {
  auto spec = bandwidth_spec(kPeakMaxIterations + 1, 100, 1);
  std::vector<TimestampNs> posted(kPeakMaxIterations + 1);
  std::iota(posted.begin(), posted.end(), 0);
  std::vector<TimestampNs> completed(posted);
  for (auto& time : completed) time += 1000;
  EXPECT_FALSE(bandwidth_stats(posted, completed, spec).peak_bytes_per_second);

  spec.iterations = kPeakMaxIterations;
  posted.pop_back();
  completed.pop_back();
  EXPECT_TRUE(bandwidth_stats(posted, completed, spec).peak_bytes_per_second);
  // perftest's -N: the same run without its peak, the average unchanged.
  auto no_peak = spec;
  no_peak.no_peak = true;
  const auto without = bandwidth_stats(posted, completed, no_peak);
  EXPECT_FALSE(without.peak_bytes_per_second);
  EXPECT_DOUBLE_EQ(without.bytes_per_second,
                   bandwidth_stats(posted, completed, spec).bytes_per_second);
}

TEST(BandwidthStats, MalformedInputIsAnError) {
  const std::vector<TimestampNs> posted = {0, 10, 20, 30, 40};
  const std::vector<TimestampNs> late = {500, 520, 540, 560, 1000};
  const std::vector<TimestampNs> early = {0, 0, 0, 0, 0};
  EXPECT_THROW(bandwidth_stats(posted, early, bandwidth_spec(5, 1, 1)), std::invalid_argument);
  EXPECT_THROW(bandwidth_stats(posted, std::span(late).first(4), bandwidth_spec(5, 1, 1)),
               std::invalid_argument);
  EXPECT_THROW(bandwidth_stats({}, {}, bandwidth_spec(0, 1, 1)), std::invalid_argument);
  EXPECT_THROW(bandwidth_stats(posted, late, bandwidth_spec(5, 0, 1)), std::invalid_argument);
  auto duration = bandwidth_spec(5, 1, 1);
  duration.iterations.reset();
  duration.duration_seconds = 10;
  EXPECT_THROW(bandwidth_stats(posted, late, duration), std::invalid_argument);
}

TEST(BandwidthStats, DurationModeUsesTheSampleWindowAndHasNoPeak) {
  // 1000 messages of 64 KiB completed in the 1 s between the margins.
  const auto stats = bandwidth_stats_duration(2'000'000'000, 3'000'000'000, 1000, 65536);
  EXPECT_DOUBLE_EQ(stats.seconds, 1);
  EXPECT_DOUBLE_EQ(stats.bytes_per_second, 65536000);
  EXPECT_DOUBLE_EQ(mebibytes_per_second(stats.bytes_per_second), 62.5);
  EXPECT_DOUBLE_EQ(gigabits_per_second(stats.bytes_per_second), 0.524288);
  EXPECT_DOUBLE_EQ(stats.messages_per_second, 1000);
  EXPECT_FALSE(stats.peak_bytes_per_second);
  EXPECT_THROW(bandwidth_stats_duration(5, 5, 1, 1), std::invalid_argument);
}

TEST(SteadyClock, NeverGoesBackwards) {
  const TimestampNs first = steady_now_ns();
  EXPECT_GE(steady_now_ns(), first);
}

}  // namespace
}  // namespace ibprobe::probes
