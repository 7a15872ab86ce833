// What a responder accepts of a verification request: every case bounded by the same Limits as a
// probe, and the soak past the duration cap only through its own limit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "verify_cases.h"

namespace ibprobe::probes::verify {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::string problems_of(const protocol::VerifyRequest& request, const Limits& limits = {}) {
  return ::testing::PrintToString(check_request(request, limits));
}

TEST(VerifyRequest, EveryCaseOfTheDefaultOptionsFitsTheDefaultLimits) {
  for (const auto& c : catalogue()) {
    SCOPED_TRACE(std::string(c.name));
    EXPECT_THAT(check_request(request_for(c.id, Options{}), Limits{}), IsEmpty());
  }
}

TEST(VerifyRequest, AnUnknownCaseIsRefused) {
  auto request = request_for(Case::kBidirectional, Options{});
  request.case_name = "flood";
  EXPECT_THAT(problems_of(request), HasSubstr("unknown verify case 'flood'"));
}

TEST(VerifyRequest, TheSoakPassesTheDurationCapOnlyThroughItsOwnLimit) {
  Options o;
  o.soak_seconds = 600;
  const auto request = request_for(Case::kSoak, o);
  EXPECT_THAT(problems_of(request), HasSubstr("duration"));
  Limits soak_allowed;
  soak_allowed.max_soak_seconds = 900;
  EXPECT_THAT(check_request(request, soak_allowed), IsEmpty());
  soak_allowed.max_soak_seconds = 599;
  EXPECT_THAT(problems_of(request, soak_allowed), HasSubstr("duration"));
}

TEST(VerifyRequest, OtherCasesGetNoDurationAndNoLongerTimeout) {
  auto request = request_for(Case::kBidirectional, Options{});
  request.spec.iterations.reset();
  request.spec.duration_seconds = 10;
  request.spec.margin_seconds = 0;
  Limits soak_allowed;
  soak_allowed.max_soak_seconds = 900;
  EXPECT_THAT(problems_of(request, soak_allowed), HasSubstr("only the soak runs for a duration"));
  auto slow = request_for(Case::kDelayedRecv, Options{});
  slow.spec.timeout_seconds = 600;
  EXPECT_THAT(problems_of(slow, soak_allowed), HasSubstr("timeout"));
}

TEST(VerifyRequest, PeerSuppliedNumbersAreBounded) {
  auto big = request_for(Case::kRandomSizes, Options{});
  big.spec.message_size = 1ull << 30;
  EXPECT_THAT(problems_of(big), HasSubstr("message_size"));
  auto slow = request_for(Case::kDelayedRecv, Options{});
  slow.recv_delay_ms = 60000;
  EXPECT_THAT(problems_of(slow), HasSubstr("recv_delay_ms 60000 above 1000"));
  auto rebuild = request_for(Case::kQpRebuild, Options{});
  rebuild.rebuild_after = 1000;
  EXPECT_THAT(problems_of(rebuild), HasSubstr("rebuild_after must fall inside the run"));
  auto deep = request_for(Case::kSoak, Options{});
  deep.spec.tx_depth = 100000;
  EXPECT_THAT(problems_of(deep), HasSubstr("depth"));
}

TEST(VerifyRequest, BothEndsBuildTheirShareOfTheCase) {
  const auto delayed = request_for(Case::kDelayedRecv, Options{});
  EXPECT_EQ(layout_for(Case::kDelayedRecv, delayed, false).recv_slots, 2u);
  EXPECT_EQ(layout_for(Case::kDelayedRecv, delayed, true).recv_slots, delayed.spec.rx_depth);
  const auto errors = request_for(Case::kLocalErrorLkey, Options{});
  EXPECT_EQ(layout_for(Case::kLocalErrorLkey, errors, true).qps, 2u);
  Options o;
  o.inline_size = 200;
  const auto inline_case = request_for(Case::kInlineReuse, o);
  EXPECT_EQ(layout_for(Case::kInlineReuse, inline_case, true).inline_size, 200u);
  EXPECT_EQ(layout_for(Case::kInlineReuse, inline_case, false).inline_size, 0u);
  o.soak_message_size = 2048;
  o.soak_seconds = 45;
  const auto soak = request_for(Case::kSoak, o);
  EXPECT_EQ(soak.spec.message_size, 2048u);
  EXPECT_EQ(soak.spec.duration_seconds, 45u);
}

}  // namespace
}  // namespace ibprobe::probes::verify
