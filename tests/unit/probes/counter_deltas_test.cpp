#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ibprobe/probes.h"

namespace ibprobe::probes {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

CounterSample sample(std::uint64_t value, std::uint32_t width, double scale, bool error_class) {
  return {.value = value,
          .width_bits = width,
          .scale = scale,
          .error_class = error_class,
          .counter_class = error_class ? "error" : "informative"};
}
CounterSample data(std::uint64_t value, std::uint32_t width = 64) {
  return sample(value, width, 4, false);
}
CounterSample plain(std::uint64_t value, std::uint32_t width = 32) {
  return sample(value, width, 1, false);
}
CounterSample error(std::uint64_t value, std::uint32_t width = 16) {
  return sample(value, width, 1, true);
}

const CounterDelta& only(const std::vector<CounterDelta>& deltas) {
  EXPECT_EQ(deltas.size(), 1u);
  return deltas.front();
}

TEST(CounterDeltas, APerPriorityStatisticKeepsItsPriority) {
  CounterSample before = plain(1000, 64), after = plain(5096, 64);
  before.priority = after.priority = 3;
  const auto traffic = only(
      counter_deltas({{"ethtool/tx_prio3_bytes", before}}, {{"ethtool/tx_prio3_bytes", after}}));
  EXPECT_EQ(traffic.delta, 4096.0);
  EXPECT_EQ(traffic.priority, 3u);
  // Read on one side only: still that priority's.
  EXPECT_EQ(only(counter_deltas({}, {{"ethtool/tx_prio3_bytes", after}})).priority, 3u);
  EXPECT_EQ(
      only(counter_deltas({{"port_xmit_data", data(1)}}, {{"port_xmit_data", data(2)}})).priority,
      std::nullopt);
}

TEST(CounterDeltas, DataCountersAreScaledToBytes) {
  const auto delta =
      only(counter_deltas({{"port_xmit_data", data(1000)}}, {{"port_xmit_data", data(1250)}}));
  EXPECT_EQ(delta.status, DeltaStatus::kValid);
  EXPECT_EQ(delta.delta, 1000.0);  // 250 words of 4 bytes
}

TEST(CounterDeltas, UnscaledCountersKeepTheirUnit) {
  const auto delta =
      only(counter_deltas({{"port_xmit_wait", plain(7)}}, {{"port_xmit_wait", plain(19)}}));
  EXPECT_EQ(delta.delta, 12.0);
}

TEST(CounterDeltas, ACounterThatWentDownWasReset) {
  const auto delta =
      only(counter_deltas({{"symbol_error", error(40)}}, {{"symbol_error", error(3)}}));
  EXPECT_EQ(delta.status, DeltaStatus::kReset);
  EXPECT_FALSE(delta.delta);  // unknown, never negative
  EXPECT_TRUE(delta.error_class);
}

TEST(CounterDeltas, SaturatedBeforeOrAfterIsUnknown) {
  // A 32-bit PortXmitData stuck at all ones, and one that reaches it during the run.
  for (const auto& [before, after] :
       {std::pair{0xFFFFFFFFull, 0xFFFFFFFFull}, std::pair{0xFFFFFF00ull, 0xFFFFFFFFull}}) {
    const auto delta = only(counter_deltas({{"port_xmit_data", data(before, 32)}},
                                           {{"port_xmit_data", data(after, 32)}}));
    EXPECT_EQ(delta.status, DeltaStatus::kSaturated) << before << " -> " << after;
    EXPECT_FALSE(delta.delta);
  }
  // 4-bit ExcessiveBufferOverrunErrors at 15.
  EXPECT_EQ(only(counter_deltas({{"excessive_buffer_overrun_errors", error(15, 4)}},
                                {{"excessive_buffer_overrun_errors", error(15, 4)}}))
                .status,
            DeltaStatus::kSaturated);
  // One below all ones still counts.
  EXPECT_EQ(only(counter_deltas({{"link_downed", error(250, 8)}}, {{"link_downed", error(254, 8)}}))
                .delta,
            4.0);
}

TEST(CounterDeltas, SixtyFourBitCountersSaturateAtAllOnesToo) {
  const std::uint64_t max = ~std::uint64_t{0};
  EXPECT_EQ(only(counter_deltas({{"port_rcv_data", data(max - 1)}}, {{"port_rcv_data", data(max)}}))
                .status,
            DeltaStatus::kSaturated);
  EXPECT_EQ(
      only(counter_deltas({{"port_rcv_data", data(max - 10)}}, {{"port_rcv_data", data(max - 1)}}))
          .delta,
      36.0);
}

TEST(CounterDeltas, AResetFromSaturationIsAReset) {
  EXPECT_EQ(
      only(counter_deltas({{"symbol_error", error(0xFFFF)}}, {{"symbol_error", error(0)}})).status,
      DeltaStatus::kReset);
}

TEST(CounterDeltas, CountersInOneSnapshotOnlyAreMissing) {
  const auto deltas =
      counter_deltas({{"a", plain(1)}, {"b", plain(1)}}, {{"b", plain(5)}, {"c", error(1)}});
  ASSERT_EQ(deltas.size(), 3u);
  EXPECT_EQ(deltas[0],
            (CounterDelta{"a", DeltaStatus::kMissing, std::nullopt, false, "informative"}));
  EXPECT_EQ(deltas[1], (CounterDelta{"b", DeltaStatus::kValid, 4.0, false, "informative"}));
  EXPECT_EQ(deltas[2], (CounterDelta{"c", DeltaStatus::kMissing, std::nullopt, true, "error"}));
}

TEST(CounterDeltas, StatusNames) {
  EXPECT_EQ(to_string(DeltaStatus::kValid), "valid");
  EXPECT_EQ(to_string(DeltaStatus::kReset), "reset");
  EXPECT_EQ(to_string(DeltaStatus::kSaturated), "saturated");
  EXPECT_EQ(to_string(DeltaStatus::kMissing), "missing");
}

// 100 Gb/s port: 12.5e9 bytes per second; a 1 s window.
constexpr double kRate = 12.5e9;

std::vector<CounterDelta> sender(std::optional<double> data_bytes, std::optional<double> wait) {
  return {
      {"port_xmit_data", data_bytes ? DeltaStatus::kValid : DeltaStatus::kReset, data_bytes, false,
       "informative"},
      {"port_xmit_wait", wait ? DeltaStatus::kValid : DeltaStatus::kSaturated, wait, false,
       "informative"},
  };
}

TEST(ReadLink, LinkBytesAndLineRateRatio) {
  const auto reading = read_link(2, 6.25e9, kRate, sender(12.5e9, 0), {});
  EXPECT_EQ(reading.link_bytes_per_second, 6.25e9);
  EXPECT_EQ(reading.line_rate_ratio, 0.5);
}

TEST(ReadLink, NearLineRateIsASaturatedLink) {
  const auto reading = read_link(1, 12e9, kRate, sender(12.2e9, 5000), {});
  EXPECT_EQ(reading.diagnosis, Diagnosis::kLinkSaturated);
  EXPECT_THAT(reading.explanation, HasSubstr("96%"));
  EXPECT_THAT(reading.explanation, HasSubstr("port_xmit_wait rising"));
}

TEST(ReadLink, LowBandwidthWithoutWaitIsHostSide) {
  const auto reading = read_link(1, 3e9, kRate, sender(3.1e9, 0), {});
  EXPECT_EQ(reading.diagnosis, Diagnosis::kHostSideBottleneck);
  EXPECT_THAT(reading.explanation, HasSubstr("24%"));
}

TEST(ReadLink, LowBandwidthWithWaitIsCreditsOrArbitration) {
  const auto reading = read_link(1, 3e9, kRate, sender(3.1e9, 120000), {});
  EXPECT_EQ(reading.diagnosis, Diagnosis::kCreditsOrArbitration);
}

TEST(ReadLink, AboveLineRateIsAnAggregatedPath) {
  const auto reading = read_link(1, 20e9, kRate, sender(20.5e9, 0), {});
  EXPECT_EQ(reading.diagnosis, Diagnosis::kAggregatedPath);
}

TEST(ReadLink, LinkMuchBusierThanTheProbeIsExtraTraffic) {
  const auto reading = read_link(1, 3e9, kRate, sender(6e9, 0), {});
  EXPECT_EQ(reading.diagnosis, Diagnosis::kExtraLinkTraffic);
  EXPECT_THAT(reading.explanation, HasSubstr("200%"));
}

TEST(ReadLink, UnknownReadingsAreInconclusive) {
  EXPECT_EQ(read_link(1, 3e9, 0, sender(3e9, 0), {}).diagnosis, Diagnosis::kInconclusive);
  EXPECT_EQ(read_link(1, 0, kRate, sender(3e9, 0), {}).diagnosis, Diagnosis::kInconclusive);
  // The wait counter saturated: host side and credits cannot be told apart.
  const auto no_wait = read_link(1, 3e9, kRate, sender(3e9, std::nullopt), {});
  EXPECT_EQ(no_wait.diagnosis, Diagnosis::kInconclusive);
  EXPECT_THAT(no_wait.explanation, HasSubstr("port_xmit_wait has no valid delta"));
  // A reset data counter leaves no link rate, but the ratio still decides.
  const auto no_data = read_link(1, 3e9, kRate, sender(std::nullopt, 0), {});
  EXPECT_FALSE(no_data.link_bytes_per_second);
  EXPECT_EQ(no_data.diagnosis, Diagnosis::kHostSideBottleneck);
}

TEST(ReadLink, MovedErrorCountersAreListedAndMentioned) {
  const std::vector<CounterDelta> all = {
      {"symbol_error", DeltaStatus::kValid, 0.0, true, "error"},
      {"port_rcv_errors", DeltaStatus::kValid, 3.0, true, "error"},
      {"link_downed", DeltaStatus::kReset, std::nullopt, true, "error"},
      {"port_rcv_packets", DeltaStatus::kValid, 900.0, false, "informative"},
  };
  const auto reading = read_link(1, 12e9, kRate, sender(12.2e9, 0), all);
  EXPECT_THAT(reading.moved_error_counters, ElementsAre("port_rcv_errors", "link_downed"));
  EXPECT_THAT(reading.explanation,
              HasSubstr("error counters moved during the probe: port_rcv_errors, link_downed"));

  const auto clean = read_link(1, 12e9, kRate, sender(12.2e9, 0), {all[0], all[3]});
  EXPECT_THAT(clean.moved_error_counters, IsEmpty());
  EXPECT_THAT(clean.explanation, ::testing::Not(HasSubstr("error counters")));
}

TEST(ReadLink, DiagnosisNames) {
  EXPECT_EQ(to_string(Diagnosis::kLinkSaturated), "link_saturated");
  EXPECT_EQ(to_string(Diagnosis::kHostSideBottleneck), "host_side_bottleneck");
  EXPECT_EQ(to_string(Diagnosis::kCreditsOrArbitration), "credits_or_arbitration");
  EXPECT_EQ(to_string(Diagnosis::kAggregatedPath), "aggregated_path");
  EXPECT_EQ(to_string(Diagnosis::kExtraLinkTraffic), "extra_link_traffic");
  EXPECT_EQ(to_string(Diagnosis::kInconclusive), "inconclusive");
}

// The retransmissions of a lossy link (rxe on both sides, classified by the driver table): they
// are findings on whichever side they moved, congestion and traffic counters are not.
TEST(ReadLink, ErrorClassHwCountersOfBothSidesAreFindings) {
  const std::vector<CounterDelta> all = {
      {"local:hw_counters/completer_retry_err", DeltaStatus::kValid, 7.0, true, "retransmission"},
      {"local:hw_counters/sent_pkts", DeltaStatus::kValid, 5000.0, false, "informative"},
      {"peer:hw_counters/duplicate_request", DeltaStatus::kValid, 5.0, true, "retransmission"},
      {"peer:hw_counters/out_of_seq_request", DeltaStatus::kValid, 0.0, true, "sequence_error"},
      {"peer:hw_counters/np_cnp_sent", DeltaStatus::kValid, 40.0, false, "congestion"},
  };
  const auto reading = read_link(1, 12e9, kRate, sender(12.2e9, 0), all);
  EXPECT_THAT(reading.moved_error_counters, ElementsAre("local:hw_counters/completer_retry_err",
                                                        "peer:hw_counters/duplicate_request"));
  EXPECT_THAT(reading.probe_backpressure_counters, IsEmpty());
  EXPECT_THAT(reading.explanation, HasSubstr("local:hw_counters/completer_retry_err"));
}

TEST(ReadLink, RnrNaksOfTheProbesOwnBackPressureAreNamedAsSuch) {
  // What rxe counted in the lab for send_bw with one receive posted over a clean link: the RNR
  // NAKs, and the go-back-N they cause.
  const std::vector<CounterDelta> all = {
      {"local:hw_counters/rcvd_rnr_err", DeltaStatus::kValid, 31.0, true, "rnr_nak"},
      {"local:hw_counters/completer_retry_err", DeltaStatus::kValid, 12.0, true, "retransmission"},
      {"peer:hw_counters/send_rnr_err", DeltaStatus::kValid, 31.0, true, "rnr_nak"},
      {"peer:hw_counters/duplicate_request", DeltaStatus::kValid, 3.0, true, "retransmission"},
      {"peer:hw_counters/out_of_seq_request", DeltaStatus::kValid, 2.0, true, "sequence_error"},
      {"peer:hw_counters/sent_pkts", DeltaStatus::kValid, 900.0, false, "informative"},
  };
  ProbeSpec spec = default_spec(Operation::kSend, TestKind::kBandwidth);
  spec.posted_receives = 1;
  const auto cause = own_backpressure(spec);
  ASSERT_TRUE(cause);
  EXPECT_EQ(*cause, "posted_receives 1 below 128 messages in flight (tx_depth 128)");

  const auto reading = read_link(1, 3e9, kRate, sender(3.1e9, 0), all, {}, cause);
  EXPECT_THAT(reading.probe_backpressure_counters,
              ElementsAre("local:hw_counters/rcvd_rnr_err", "local:hw_counters/completer_retry_err",
                          "peer:hw_counters/send_rnr_err", "peer:hw_counters/duplicate_request",
                          "peer:hw_counters/out_of_seq_request"));
  EXPECT_THAT(reading.moved_error_counters, IsEmpty());
  EXPECT_THAT(reading.explanation,
              HasSubstr("local:hw_counters/rcvd_rnr_err, local:hw_counters/completer_retry_err, "
                        "peer:hw_counters/send_rnr_err"));
  EXPECT_THAT(reading.explanation, HasSubstr("rose from the probe's own receiver back-pressure "
                                             "(posted_receives 1 below 128"));
  EXPECT_THAT(reading.explanation, ::testing::Not(HasSubstr("error counters moved")));

  // Other error classes stay findings in a starving run.
  auto with_findings = all;
  with_findings.push_back({"peer:hw_counters/resp_remote_access_errors", DeltaStatus::kValid, 1.0,
                           true, "remote_error"});
  with_findings.push_back({"local:symbol_error", DeltaStatus::kValid, 2.0, true, "error"});
  EXPECT_THAT(
      read_link(1, 3e9, kRate, sender(3.1e9, 0), with_findings, {}, cause).moved_error_counters,
      ElementsAre("peer:hw_counters/resp_remote_access_errors", "local:symbol_error"));

  // The same RNR NAKs without a starving spec are findings: the receiver fell behind.
  const auto unprovoked = read_link(1, 3e9, kRate, sender(3.1e9, 0), all);
  EXPECT_THAT(unprovoked.moved_error_counters, ::testing::SizeIs(5));
  EXPECT_THAT(unprovoked.probe_backpressure_counters, IsEmpty());
}

// A starving spec whose run drew no RNR NAK: its retransmissions have no excuse.
TEST(ReadLink, RetransmissionsWithoutRnrNaksStayFindingsInAStarvingRun) {
  const std::vector<CounterDelta> all = {
      {"local:hw_counters/rcvd_rnr_err", DeltaStatus::kValid, 0.0, true, "rnr_nak"},
      {"local:hw_counters/completer_retry_err", DeltaStatus::kValid, 12.0, true, "retransmission"},
  };
  const auto reading = read_link(1, 3e9, kRate, sender(3.1e9, 0), all, {},
                                 std::string("posted_receives 1 below 128 messages in flight"));
  EXPECT_THAT(reading.moved_error_counters, ElementsAre("local:hw_counters/completer_retry_err"));
  EXPECT_THAT(reading.probe_backpressure_counters, IsEmpty());
}

TEST(OwnBackpressure, OnlySendWithFewerReceivesThanMessagesInFlight) {
  ProbeSpec send = default_spec(Operation::kSend, TestKind::kBandwidth);
  EXPECT_FALSE(own_backpressure(send));  // posted_receives 0: rx_depth, as perftest
  send.posted_receives = 128;
  EXPECT_FALSE(own_backpressure(send));  // as many receives as messages in flight
  send.posted_receives = 127;
  EXPECT_TRUE(own_backpressure(send));
  // A shared receive queue serves every QP's messages in flight.
  send.use_srq = true;
  send.qps = 4;
  send.posted_receives = 256;
  EXPECT_EQ(own_backpressure(send),
            "posted_receives 256 below 512 messages in flight (tx_depth 128 x qps, shared "
            "receive queue)");
  ProbeSpec write = default_spec(Operation::kWrite, TestKind::kBandwidth);
  write.posted_receives = 1;
  EXPECT_FALSE(own_backpressure(write));
}

}  // namespace
}  // namespace ibprobe::probes
