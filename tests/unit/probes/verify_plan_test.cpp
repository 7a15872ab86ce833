#include "ibprobe/verify_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <set>
#include <stdexcept>

#include "violations.h"

namespace ibprobe::probes::verify {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(VerifySelection, NoNameMeansEveryCaseInCatalogueOrder) {
  const auto cases = select_cases({});
  ASSERT_EQ(cases.size(), 13u);
  EXPECT_EQ(cases.front(), Case::kDelayedRecv);
  EXPECT_EQ(cases.back(), Case::kSoak);
  EXPECT_EQ(info(Case::kQpRebuild).name, "qp_rebuild");
  EXPECT_EQ(info(Case::kAtomics).name, "atomics");
}

TEST(VerifySelection, NamedCasesRunOnceInCatalogueOrder) {
  EXPECT_THAT(select_cases({"soak", "delayed_recv", "soak", "local_error_lkey"}),
              ElementsAre(Case::kDelayedRecv, Case::kLocalErrorLkey, Case::kSoak));
}

TEST(VerifySelection, AnUnknownCaseIsRefusedWithTheKnownOnes) {
  try {
    select_cases({"bidirectional", "rnr"});
    FAIL() << "an unknown case was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("unknown verify case 'rnr'"));
    EXPECT_THAT(e.what(), HasSubstr("delayed_recv, rnr_retry_exceeded, local_error_mr_length"));
  }
}

TEST(VerifyOptions, DefaultsAreConsistent) {
  EXPECT_THAT(violations_of(validate(Options{})), ::testing::IsEmpty());
}

TEST(VerifyOptions, EveryBrokenRuleIsNamed) {
  Options o;
  o.messages = 0;
  o.recv_delay_ms = 5000;
  o.max_message_size = 10;
  o.inline_size = 32;
  o.soak_seconds = 10;
  o.soak_interval_seconds = 11;
  o.soak_message_size = 8;
  o.case_timeout_seconds = 1;
  const auto problems = violations_of(validate(o));
  const std::string all = ::testing::PrintToString(problems);
  for (const char* expected :
       {"messages must be 1..100000, not 0", "recv delay must be 1..1000 ms, not 5000",
        "max message size must be 64 bytes at least, not 10", "rebuild_after must be 1..messages-1",
        "inline size must be 64 bytes at least",
        "soak interval must be 1..10 s (the soak time), not 11",
        "soak message size must be 64 bytes at least, not 8", "case timeout must be 5 s"}) {
    EXPECT_THAT(all, HasSubstr(expected));
  }
  EXPECT_EQ(problems.size(), 8u);
}

TEST(VerifyOptions, RebuildMustFallInsideTheRun) {
  Options o;
  o.messages = 50;
  o.rebuild_after = 50;
  EXPECT_THAT(::testing::PrintToString(violations_of(validate(o))),
              HasSubstr("rebuild_after must be 1..messages-1 (49), not 50"));
  // Only qp_rebuild reads it.
  EXPECT_THAT(violations_of(validate(o, {Case::kRandomSizes, Case::kSoak})), ::testing::IsEmpty());
  EXPECT_THAT(::testing::PrintToString(violations_of(validate(o, {Case::kQpRebuild}))),
              HasSubstr("rebuild_after"));
  o.rebuild_after = 49;
  EXPECT_THAT(violations_of(validate(o)), ::testing::IsEmpty());
}

// splitmix64's published reference outputs for seed 1234567 (Vigna's splitmix64.c): the size
// sequence is splitmix64, so a failing size reproduces from the printed seed on any build.
TEST(SizeSequence, IsSplitmix64OfTheSeed) {
  const SizeSequence sizes(1234567, std::numeric_limits<std::uint64_t>::max(), false);
  EXPECT_EQ(sizes.size(0), 6457827717110365317ull + 1);
  EXPECT_EQ(sizes.size(1), 3203168211198807973ull + 1);
}

TEST(SizeSequence, SameSeedSameSizesAllInRange) {
  const SizeSequence a(42, 65536, false), b(42, 65536, false), other(43, 65536, false);
  std::uint64_t smallest = 65536, largest = 0, differing = 0;
  for (std::uint64_t i = 0; i < 2000; ++i) {
    ASSERT_EQ(a.size(i), b.size(i));
    ASSERT_GE(a.size(i), 1u);
    ASSERT_LE(a.size(i), 65536u);
    smallest = std::min(smallest, a.size(i));
    largest = std::max(largest, a.size(i));
    differing += a.size(i) != other.size(i);
  }
  // The whole range is drawn from: both ends within one percent.
  EXPECT_LT(smallest, 656u);
  EXPECT_GT(largest, 64880u);
  EXPECT_GT(differing, 1990u);
}

TEST(SizeSequence, OneByteMaximumGivesOneByteMessages) {
  const SizeSequence sizes(7, 1, false);
  for (std::uint64_t i = 0; i < 100; ++i) ASSERT_EQ(sizes.size(i), 1u);
}

TEST(SizeSequence, FixedModeCyclesTheBoundariesThatFit) {
  const SizeSequence big(0, 65536, true);
  std::vector<std::uint64_t> first;
  for (std::uint64_t i = 0; i < 11; ++i) first.push_back(big.size(i));
  EXPECT_THAT(first, ElementsAre(1, 2, 63, 64, 65, 4095, 4096, 4097, 65535, 65536, 1));
  const SizeSequence small(0, 100, true);
  std::vector<std::uint64_t> seven;
  for (std::uint64_t i = 0; i < 7; ++i) seven.push_back(small.size(i));
  EXPECT_THAT(seven, ElementsAre(1, 2, 63, 64, 65, 99, 100));
  // The seed plays no part in the fixed sequence.
  EXPECT_EQ(SizeSequence(99, 100, true).size(5), 99u);
}

TEST(PatternByte, DependsOnSeedSequenceAndOffset) {
  std::set<std::uint8_t> values;
  for (std::uint64_t offset = 0; offset < 256; ++offset) {
    values.insert(pattern_byte(1, 0, offset));
  }
  // Not a constant fill: a shifted or stale block must not look right.
  EXPECT_GT(values.size(), 100u);
  int same_as_next_sequence = 0, same_as_other_seed = 0;
  for (std::uint64_t offset = 0; offset < 256; ++offset) {
    same_as_next_sequence += pattern_byte(1, 0, offset) == pattern_byte(1, 1, offset);
    same_as_other_seed += pattern_byte(1, 0, offset) == pattern_byte(2, 0, offset);
    ASSERT_EQ(pattern_byte(1, 0, offset), pattern_byte(1, 0, offset));
  }
  EXPECT_LT(same_as_next_sequence, 10);
  EXPECT_LT(same_as_other_seed, 10);
}

TEST(VerifyTable, RowsVerdictsDetailsAndSummary) {
  const std::vector<CaseResult> results{
      {Case::kDelayedRecv, Verdict::kPass, 2.04, {"RNR NAKs: 12"}},
      {Case::kQpRebuild, Verdict::kFail, 13.25, {"CQE status 12", "QP state ERR"}},
      {Case::kInlineReuse, Verdict::kSkipped, 0.3, {"no inline data"}},
  };
  const auto table = format_table(results);
  const std::string pad(41, ' ');
  EXPECT_EQ(table,
            "case                   result    seconds  what is checked (pass criterion)\n"
            "delayed_recv           pass          2.0  " +
                std::string(info(Case::kDelayedRecv).checks) + "\n" + pad +
                "observed: RNR NAKs: 12\n"
                "qp_rebuild             FAIL         13.2  " +
                std::string(info(Case::kQpRebuild).checks) + "\n" + pad +
                "evidence: CQE status 12\n" + pad +
                "evidence: QP state ERR\n"
                "inline_reuse           skipped       0.3  " +
                std::string(info(Case::kInlineReuse).checks) + "\n" + pad +
                "reason: no inline data\n"
                "verify: 3 cases, 1 passed, 1 failed, 1 skipped\n");
}

TEST(BatchHistogram, CountsNonEmptyPollsByBatchSize) {
  BatchHistogram h;
  for (int n : {0, 1, 2, 3, 4, 7, 8, 15, 16, 16, 32}) h.add(n);
  EXPECT_THAT(h.buckets, ElementsAre(1, 2, 2, 2, 3));
  EXPECT_EQ(h.describe(), "1:1 (10.0%) 2-3:2 (20.0%) 4-7:2 (20.0%) 8-15:2 (20.0%) 16+:3 (30.0%)");
}

std::vector<SoakInterval> with_backlogs(std::initializer_list<double> means) {
  std::vector<SoakInterval> out;
  for (double m : means) out.push_back({5, 1000, 32, m});
  return out;
}

TEST(BacklogGrowth, SteadyOrSmallBacklogIsNotFlagged) {
  EXPECT_FALSE(backlog_grows(with_backlogs({18, 20, 17, 19, 21, 18})));
  // Tripled, but still within one poll batch.
  EXPECT_FALSE(backlog_grows(with_backlogs({3, 4, 5, 9, 10, 12})));
  // Too few intervals to speak of a trend.
  EXPECT_FALSE(backlog_grows(with_backlogs({1, 100})));
}

TEST(BacklogGrowth, ABacklogThatKeepsGrowingIsFlagged) {
  EXPECT_TRUE(backlog_grows(with_backlogs({10, 12, 20, 40, 60, 90})));
  EXPECT_FALSE(backlog_grows(with_backlogs({10, 12, 20, 40, 20, 22})));
  EXPECT_TRUE(backlog_grows(with_backlogs({5, 6, 20, 30})));
}

// A 20 s soak's four 5 s intervals as a lab run reported them: the receiver drained 8.5, 10.2,
// 8.6 and then 20.0 CQEs per poll at the same completion rate. One interval of late polls is no
// trend, and with one interval per third it alone decided the verdict.
TEST(BacklogGrowth, OneLateIntervalIsNotATrend) {
  EXPECT_FALSE(backlog_grows(with_backlogs({8.5, 10.2, 8.6, 20.0})));
  EXPECT_FALSE(backlog_grows(with_backlogs({8, 9, 30, 9, 10, 11})));
  EXPECT_FALSE(backlog_grows(with_backlogs({8, 9, 10})));
}

}  // namespace
}  // namespace ibprobe::probes::verify
