// The probe and mesh families as the exporter writes them (/probe's answer, the last results on
// /metrics, the mesh's series), byte for byte against pages kept in tests/unit/pages/: those were
// written by the exporter's writer of prometheus-cpp families before the families moved to the
// metric set, and say that the move changed no byte. prometheus-cpp's TextSerializer, given the
// families the metric set hands back, writes the same pages. The runs below reach every family and
// every branch of the probe's metrics; the values are chosen to print differently.
#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "mesh_fabrics.h"
#include "mesh_metrics.h"
#include "probe_metrics.h"

namespace ibprobe::testing {
namespace {

using exporter::ProbeRun;
using mesh::MeshClock;
using mesh::MeshFabric;
using mesh::MeshMetrics;
using mesh::MeshReason;
using mesh::PlannedPing;
using probes::CounterDelta;
using probes::DeltaStatus;
using probes::ProbeOutcome;

// The set's text; prometheus-cpp's of the families the set hands back must be the same.
std::string page_of(const collectors::MetricSet& set) {
  std::string text;
  set.append_text(text);
  auto copy = set;
  EXPECT_EQ(prometheus::TextSerializer().Serialize(std::move(copy).take()), text);
  return text;
}

std::string probe_page(const ProbeRun& run) {
  return page_of(exporter::probe_run_metrics(run, false));
}

std::string last_results_page(
    const std::vector<ProbeRun>& runs,
    const std::map<std::pair<std::string, std::string>, std::uint64_t>& totals) {
  return page_of(exporter::last_result_metrics(runs, totals));
}

std::string mesh_page(const MeshMetrics& metrics) {
  return page_of(metrics.collect());
}

// Compares with tests/unit/pages/NAME.txt; a page that differs is written beside the test's
// working directory (pages-actual/NAME.txt) for a diff.
void expect_page(const std::string& name, const std::string& actual) {
  const auto path =
      std::filesystem::path(IBPROBE_SOURCE_DIR) / "tests/unit/pages" / (name + ".txt");
  std::ifstream in(path, std::ios::binary);
  std::ostringstream expected;
  expected << in.rdbuf();
  if (!in || expected.str() != actual) {
    std::filesystem::create_directories("pages-actual");
    std::ofstream("pages-actual/" + name + ".txt", std::ios::binary) << actual;
    ADD_FAILURE() << name << ": the page differs from " << path
                  << " (or that is missing); written to "
                  << std::filesystem::absolute("pages-actual/" + name + ".txt");
  }
}

CounterDelta valid(std::string counter, double delta, std::string counter_class = {}) {
  return {.counter = std::move(counter), .delta = delta, .counter_class = std::move(counter_class)};
}

CounterDelta unknown(std::string counter, DeltaStatus status, std::string counter_class = {}) {
  return {.counter = std::move(counter),
          .status = status,
          .delta = std::nullopt,
          .counter_class = std::move(counter_class)};
}

ProbeRun run_of(std::string target, std::string module, double seconds) {
  ProbeRun run;
  run.target = std::move(target);
  run.module = std::move(module);
  run.state = exporter::RunState::kSucceeded;
  run.duration_seconds = seconds;
  run.finished = std::chrono::system_clock::time_point(std::chrono::milliseconds(1796360000123));
  return run;
}

// A bidirectional write_bw under a software MiB/s cap, with every reading a run can carry.
ProbeOutcome bandwidth_outcome() {
  CounterDelta tx_priority_3 = valid("ethtool/tx_prio3_bytes", 2.62144e9, "informative");
  tx_priority_3.priority = 3;
  ProbeOutcome o;
  o.spec.message_size = 65536;
  o.spec.bidirectional = true;
  o.spec.rate_limit =
      probes::RateLimit{250, probes::RateUnit::kMiBps, probes::RateLimiter::kSoftware};
  o.bandwidth = probes::BandwidthStats{20000, 5.0, 5.125e8, 7820.3125, 6.0e8};
  o.initiator_direction = probes::BandwidthStats{10000, 5.0, 2.6e8, 3967.28515625, std::nullopt};
  o.responder_direction = probes::BandwidthStats{10000, 5.0, 2.525e8, 3852.84423828125, 2.9e8};
  o.rate_limiter = probes::RateLimiter::kSoftware;
  o.peer_rate_limiter = probes::RateLimiter::kHardware;
  o.setup_seconds = 0.0421875;
  o.link.link_bytes_per_second = 2.71828e8;
  o.link.line_rate_ratio = 0.0205;
  o.link.diagnosis = probes::Diagnosis::kHostSideBottleneck;
  o.checks = {{"local", "port_active", true, ""},
              {"peer", "rate_match", false, "100 Gb/s against 200 Gb/s"},
              {"both", "version_match", true, ""},
              // Not applicable: absent from the page.
              {"peer", "cpu_frequency", false, "no cpufreq policy for cpu 0", false}};
  o.local_deltas = {valid("port_xmit_data", 2.62144e9, "informative"),
                    valid("symbol_error", 3, "error"),
                    unknown("port_rcv_errors", DeltaStatus::kReset, "error"),
                    valid("hw_counters/out_of_sequence", 12), tx_priority_3};
  o.peer_deltas = {unknown("port_xmit_wait", DeltaStatus::kSaturated, "congestion"),
                   unknown("hw_counters/rnr_nak_retry_err", DeltaStatus::kMissing, "error")};
  o.fabric_deltas = {{"12:3", {valid("port_xmit_discards", 0, "error")}},
                     {"12:7", {valid("port_rcv_data", 1.5e9, "informative")}}};
  return o;
}

ProbeOutcome latency_outcome() {
  ProbeOutcome o;
  o.spec.message_size = 2;
  o.latency = probes::LatencyStats{1000, 1820, 9350.5, 2110, 2240.25, 310.75, 4020, 8800};
  o.latency->histogram_counts = {0,    412,  993,  1000, 1000, 1000, 1000,
                                 1000, 1000, 1000, 1000, 1000, 1000};
  o.latency->sum_ns = 2240250;
  o.setup_seconds = 0.0125;
  o.link.diagnosis = probes::Diagnosis::kInconclusive;
  return o;
}

ProbeOutcome duration_latency_outcome() {
  ProbeOutcome o;
  o.latency_duration = probes::DurationLatencyStats{40000, 2500.5, 399920.0159936};
  o.setup_seconds = 0.5;
  o.link.moved_error_counters = {"local:symbol_error"};
  o.link.diagnosis = probes::Diagnosis::kExtraLinkTraffic;
  return o;
}

ProbeOutcome validation_outcome() {
  ProbeOutcome o;
  o.bandwidth = probes::BandwidthStats{4096, 1.5, 1.79e8, 2730.6, std::nullopt};
  probes::ValidationReport v;
  v.messages_sent = 4096;
  v.messages_received = 4096;
  v.checked = 4000;
  v.errors = 2;
  v.skipped_overwritten = 96;
  v.races = 5;
  v.rechecks = 1;
  v.tail_checks = 7;
  v.stale_completions = 0;
  o.validation = v;
  return o;
}

ProbeOutcome verify_outcome() {
  ProbeOutcome o;
  o.verify_results = {
      {probes::verify::Case::kDelayedRecv, probes::verify::Verdict::kPass, 0.75, {}},
      {probes::verify::Case::kRnrRetryExceeded,
       probes::verify::Verdict::kFail,
       1.25,
       {"status IBV_WC_RNR_RETRY_EXC_ERR"}},
      {probes::verify::Case::kLocalErrorMaxSge,
       probes::verify::Verdict::kSkipped,
       0,
       {"max_sge 1"}}};
  o.setup_seconds = 0.25;
  return o;
}

ProbeRun sweep_run() {
  auto run = run_of("192.0.2.7:9471", "sizes", 12.5);
  probes::SweepOutcome sweep;
  sweep.sweep.variable = probes::SweepVariable::kMessageSize;
  for (const double size : {4096.0, 65536.0, 1048576.0}) {
    probes::SweepStepOutcome step;
    step.value = size;
    ProbeOutcome o;
    o.spec.message_size = static_cast<std::uint64_t>(size);
    o.bandwidth = probes::BandwidthStats{1000, 1, size * 1000, 1000, std::nullopt};
    o.setup_seconds = 0.01;
    step.outcome = o;
    sweep.steps.push_back(step);
  }
  sweep.knee = 1;
  run.sweep = sweep;
  return run;
}

ProbeRun failed_sweep_run() {
  auto run = run_of("192.0.2.7:9471", "depths", 3);
  run.state = exporter::RunState::kFailed;
  probes::SweepOutcome sweep;
  sweep.sweep.variable = probes::SweepVariable::kTxDepth;
  probes::SweepStepOutcome ok;
  ok.value = 16;
  ok.outcome = ProbeOutcome{};
  probes::SweepStepOutcome failed;
  failed.value = 32;
  failed.error = "link went down";
  failed.failure = probes::FailureKind::kVerbs;
  sweep.steps = {ok, failed};
  run.sweep = sweep;
  run.failure_reason = "verbs";
  return run;
}

ProbeRun failed_run() {
  auto run = run_of("peer \"b\"\\x:9471", "write_bw", 0.125);
  run.state = exporter::RunState::kFailed;
  run.failure_reason = "unreachable";
  run.failure = "connect: refused";
  return run;
}

ProbeRun run_with(std::string target, std::string module, double seconds, ProbeOutcome outcome) {
  auto run = run_of(std::move(target), std::move(module), seconds);
  run.outcome = std::move(outcome);
  return run;
}

ProbeRun bandwidth_run() {
  return run_with("192.0.2.2:9471", "write_bw", 5.375, bandwidth_outcome());
}

ProbeRun latency_run() {
  return run_with("192.0.2.4:9471", "write_lat", 1.5, latency_outcome());
}

TEST(MetricsPage, ProbeAnswersAreTheKeptPages) {
  const std::vector<std::pair<std::string, ProbeRun>> answers = {
      {"probe_bandwidth", bandwidth_run()},
      {"probe_latency", latency_run()},
      {"probe_duration_latency",
       run_with("192.0.2.2:9471", "send_lat", 6.25, duration_latency_outcome())},
      {"probe_validation", run_with("192.0.2.3:9471", "validate", 2, validation_outcome())},
      {"probe_verify", run_with("192.0.2.3:9471", "verify", 2.25, verify_outcome())},
      {"probe_sweep", sweep_run()},
      {"probe_sweep_failed", failed_sweep_run()},
      {"probe_failed", failed_run()}};
  for (const auto& [page, run] : answers) expect_page(page, probe_page(run));
}

TEST(MetricsPage, LastResultsAreTheKeptPage) {
  const std::vector<ProbeRun> runs = {bandwidth_run(), latency_run(), sweep_run(), failed_run()};
  const std::map<std::pair<std::string, std::string>, std::uint64_t> totals = {
      {{"write_bw", "success"}, 41},
      {{"write_bw", "unreachable"}, 2},
      {{"write_lat", "success"}, 7}};
  expect_page("last_results", last_results_page(runs, totals));
  expect_page("last_results_none", last_results_page({}, {}));
}

// Without mesh.per_peer_rtt (the default) and with it.
TEST(MetricsPage, MeshSeriesAreTheKeptPages) {
  const MeshFabric fabric(
      {{"a1:9470", "leaf-a", ""}, {"a2:9470", "leaf-a", ""}, {"b1:9470", "leaf-b", ""}});
  for (const bool per_peer_rtt : {false, true}) {
    const std::string suffix = per_peer_rtt ? "_per_peer_rtt" : "";
    MeshMetrics metrics("leaf-a", 100, MeshClock::kDevice, per_peer_rtt);
    expect_page("mesh_before_a_plan" + suffix, mesh_page(metrics));
    metrics.set_plan(fabric, {{*fabric.find("a2:9470"), MeshReason::kSameTor, 1.0},
                              {*fabric.find("b1:9470"), MeshReason::kCrossTor, 2.5}});
    metrics.record("b1:9470", {true, 7e-6, MeshClock::kDevice});
    metrics.record("b1:9470", {true, 30e-6, MeshClock::kDevice});
    metrics.record("b1:9470", {true, 0.5, MeshClock::kDevice});  // past the last bucket
    metrics.record("b1:9470", {false, 0, MeshClock::kDevice});
    metrics.record("b1:9470", {true, 3e-6, MeshClock::kSoftware});
    metrics.record("a2:9470", {true, 4.5e-5, MeshClock::kDevice});
    expect_page("mesh" + suffix, mesh_page(metrics));
  }
}

}  // namespace
}  // namespace ibprobe::testing
