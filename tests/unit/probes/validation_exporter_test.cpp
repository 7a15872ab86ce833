// Correctness probes in the exporter: the YAML module fields, and the validation figures as
// metrics of a run.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "exporter_test_helpers.h"
#include "probe_config.h"
#include "probe_metrics.h"

namespace ibprobe::exporter {
namespace {

using ::testing::HasSubstr;
using testing::probe_config_error;
using testing::probe_config_ok;

ProbeModule module_of(const std::string& yaml, const std::string& name) {
  return probe_config_ok(yaml).modules.at(name);
}

TEST(ValidationModules, FieldsReachTheSpec) {
  const auto module = module_of(R"(modules:
  checked:
    kind: send_bw
    message_size: 4096
    validation: on
    receive_sges: 3
    posted_receives: 16
)",
                                "checked");
  EXPECT_TRUE(module.spec.validation);
  EXPECT_EQ(module.spec.receive_sges, 3u);
  EXPECT_EQ(module.spec.posted_receives, 16u);
}

TEST(ValidationModules, OffByDefault) {
  const auto module = module_of("modules:\n  plain:\n    kind: write_bw\n", "plain");
  EXPECT_FALSE(module.spec.validation);
  EXPECT_EQ(module.spec.posted_receives, 0u);
  EXPECT_EQ(module.spec.receive_sges, 1u);
}

TEST(ValidationModules, PostedReceivesAboveTheDefaultDepthRaiseIt) {
  const auto module =
      module_of("modules:\n  deep:\n    kind: send_bw\n    posted_receives: 2048\n", "deep");
  EXPECT_EQ(module.spec.posted_receives, 2048u);
  EXPECT_GE(module.spec.rx_depth, 2048u);
}

TEST(ValidationModules, BadValuesAreRefusedWithTheReason) {
  EXPECT_THAT(probe_config_error("modules:\n  m:\n    kind: send_bw\n    validation: maybe\n"),
              HasSubstr("validation must be on or off"));
  EXPECT_THAT(probe_config_error("modules:\n  m:\n    kind: read_bw\n    validation: on\n"),
              HasSubstr("validation applies to write, send and atomic"));
  EXPECT_THAT(probe_config_error("modules:\n  m:\n    kind: write_bw\n    posted_receives: 4\n"),
              HasSubstr("applies to send bandwidth only"));
  EXPECT_THAT(probe_config_error("modules:\n  m:\n    kind: send_bw\n    posted_receives: 8\n"
                                 "    rx_depth: 4\n"),
              HasSubstr("more than the receive queue holds"));
}

TEST(ValidationModules, TheTestFaultSwitchIsNoModuleField) {
  for (const char* key : {"test_corrupt_every", "corrupt_after_checksum", "corrupt_every"}) {
    EXPECT_THAT(
        probe_config_error(std::string("modules:\n  m:\n    kind: send_bw\n    ") + key + ": 16\n"),
        HasSubstr(key));
  }
}

const prometheus::MetricFamily* family(const std::vector<prometheus::MetricFamily>& families,
                                       const std::string& name) {
  for (const auto& f : families) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

TEST(ValidationMetrics, VerdictAndCoverageAreSeparateSeries) {
  ProbeRun run;
  run.outcome.emplace();
  run.outcome->validation = probes::ValidationReport{.messages_sent = 1000,
                                                     .checked = 400,
                                                     .skipped_overwritten = 600,
                                                     .races = 7,
                                                     .tail_checks = 128,
                                                     .first_error = ""};
  const auto families = probe_run_metrics(run, false).take();

  const auto* checked = family(families, "rdma_probe_validation_messages_checked");
  ASSERT_NE(checked, nullptr);
  EXPECT_EQ(checked->metric.at(0).gauge.value, 400);
  const auto* sent = family(families, "rdma_probe_validation_messages_sent");
  ASSERT_NE(sent, nullptr);
  EXPECT_EQ(sent->metric.at(0).gauge.value, 1000);
  const auto* errors = family(families, "rdma_probe_validation_errors");
  ASSERT_NE(errors, nullptr);
  EXPECT_EQ(errors->metric.at(0).gauge.value, 0);
  const auto* skipped = family(families, "rdma_probe_validation_skipped");
  ASSERT_NE(skipped, nullptr);
  EXPECT_EQ(skipped->metric.at(0).label.at(0).value, "overwritten");
  EXPECT_EQ(skipped->metric.at(0).gauge.value, 600);
  const auto* transient = family(families, "rdma_probe_validation_transient");
  ASSERT_NE(transient, nullptr);
  double races = -1, tail = -1;
  for (const auto& m : transient->metric) {
    if (m.label.at(0).value == "race") races = m.gauge.value;
    if (m.label.at(0).value == "tail") tail = m.gauge.value;
  }
  EXPECT_EQ(races, 7);
  EXPECT_EQ(tail, 128);
}

TEST(ValidationMetrics, PlainRunsHaveNone) {
  ProbeRun run;
  run.outcome.emplace();
  const auto families = probe_run_metrics(run, false).take();
  EXPECT_EQ(family(families, "rdma_probe_validation_messages_checked"), nullptr);
  EXPECT_EQ(family(families, "rdma_probe_validation_errors"), nullptr);
}

}  // namespace
}  // namespace ibprobe::exporter
