// The port_events collector. Its bookkeeping (events to counts, states to flaps) is fed here by
// hand, as the event thread feeds it; the verbs path itself runs against rxe in the lab
// (tests/lab/port_flaps_two_host.sh). Against a fixture tree, whose devices libibverbs does not
// have, the collector shows its fallback: the status series at 0 with the reason, and flaps and
// state changes read from the state files on each scrape.
#include "ibprobe/port_events.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "captured_log.h"
#include "collect_helpers.h"
#include "port_event_log.h"
#include "sysfs_fixture.h"

namespace ibprobe::testing {
namespace {

using collectors::MetricSet;
using collectors::PortEvent;
using collectors::PortEventLog;
using std::chrono::seconds;

const PortEventLog::WallClock::time_point kStart{seconds(1'700'000'000)};

// What a log writes for port 1 of mlx5_0 (and its device series with `with_events`).
Families written(const PortEventLog& log, bool with_events) {
  MetricSet out;
  const auto port = out.label_set({{"device", "mlx5_0"}, {"port", "1"}});
  log.write_port("mlx5_0", 1, port, with_events, out);
  if (with_events) log.write_device("mlx5_0", out.label_set({{"device", "mlx5_0"}}), out);
  return std::move(out).take();
}

const LabelMap kPort{{"device", "mlx5_0"}, {"port", "1"}};

LabelMap event_labels(const std::string& event) {
  return {{"device", "mlx5_0"}, {"port", "1"}, {"event", event}};
}

TEST(PortEventLog, ThreeDownUpCyclesAreThreeFlaps) {
  PortEventLog log;
  log.observe_state("mlx5_0", 1, true, kStart);  // ACTIVE when the device was opened
  auto at = kStart;
  for (int cycle = 0; cycle < 3; ++cycle) {
    at += seconds(1);
    log.count("mlx5_0", 1, PortEvent::kPortError, at);
    at += seconds(2);
    log.count("mlx5_0", 1, PortEvent::kPortActive, at);
  }
  const auto families = written(log, true);
  EXPECT_EQ(sample(families, "rdma_port_flaps_total", kPort), 3);
  EXPECT_EQ(sample(families, "rdma_port_events_total", event_labels("port_error")), 3);
  EXPECT_EQ(sample(families, "rdma_port_events_total", event_labels("port_active")), 3);
  EXPECT_EQ(sample(families, "rdma_port_events_total", event_labels("gid_change")), 0);
  // The last change: the third return to ACTIVE, 9 s after the start.
  EXPECT_EQ(sample(families, "rdma_port_last_state_change_timestamp_seconds", kPort),
            1'700'000'009);
  EXPECT_EQ(sample(families, "rdma_device_events_total",
                   {{"device", "mlx5_0"}, {"event", "device_fatal"}}),
            0);
}

// rxe says ACTIVE on NETDEV_UP and again on a carrier change; a port that is down may report
// its error twice. Neither is a state change: the events count, the flaps do not.
TEST(PortEventLog, RepeatedEventsAreNoStateChange) {
  PortEventLog log;
  log.observe_state("mlx5_0", 1, true, kStart);
  log.count("mlx5_0", 1, PortEvent::kPortActive, kStart + seconds(1));
  log.count("mlx5_0", 1, PortEvent::kPortError, kStart + seconds(2));
  log.count("mlx5_0", 1, PortEvent::kPortError, kStart + seconds(3));
  log.count("mlx5_0", 1, PortEvent::kPortActive, kStart + seconds(4));
  log.count("mlx5_0", 1, PortEvent::kPortActive, kStart + seconds(5));
  const auto families = written(log, true);
  EXPECT_EQ(sample(families, "rdma_port_flaps_total", kPort), 1);
  EXPECT_EQ(sample(families, "rdma_port_events_total", event_labels("port_error")), 2);
  EXPECT_EQ(sample(families, "rdma_port_events_total", event_labels("port_active")), 3);
  EXPECT_EQ(sample(families, "rdma_port_last_state_change_timestamp_seconds", kPort),
            1'700'000'004);
}

// A port first seen down that comes up (a cable plugged in, an SM that configured it) has not
// flapped; one that goes down and stays down has not completed a flap yet. Both changed state.
TEST(PortEventLog, AFlapIsADownAndUpCycleFromActive) {
  PortEventLog coming_up;
  coming_up.observe_state("mlx5_0", 1, false, kStart);
  coming_up.count("mlx5_0", 1, PortEvent::kPortActive, kStart + seconds(7));
  auto families = written(coming_up, false);
  EXPECT_EQ(sample(families, "rdma_port_flaps_total", kPort), 0);
  EXPECT_EQ(sample(families, "rdma_port_last_state_change_timestamp_seconds", kPort),
            1'700'000'007);
  EXPECT_EQ(series_count(families, "rdma_port_events_total"), 0u);

  PortEventLog going_down;
  going_down.observe_state("mlx5_0", 1, true, kStart);
  going_down.observe_state("mlx5_0", 1, false, kStart + seconds(4));
  families = written(going_down, false);
  EXPECT_EQ(sample(families, "rdma_port_flaps_total", kPort), 0);
  EXPECT_EQ(sample(families, "rdma_port_last_state_change_timestamp_seconds", kPort),
            1'700'000'004);
}

// Before any change the port has no time of one, and its counters start at 0, every event's
// included, so that Prometheus sees the first increase.
TEST(PortEventLog, AQuietPortHasZeroesAndNoChangeTime) {
  PortEventLog log;
  log.observe_state("mlx5_0", 1, true, kStart);
  log.count("mlx5_0", 1, PortEvent::kLidChange, kStart + seconds(1));
  log.count_device_fatal("mlx5_1");
  const auto families = written(log, true);
  EXPECT_EQ(sample(families, "rdma_port_flaps_total", kPort), 0);
  EXPECT_FALSE(sample(families, "rdma_port_last_state_change_timestamp_seconds", kPort));
  EXPECT_EQ(series_count(families, "rdma_port_events_total"), 7u);
  EXPECT_EQ(sample(families, "rdma_port_events_total", event_labels("lid_change")), 1);
  EXPECT_EQ(sample(families, "rdma_port_events_total", event_labels("client_reregister")), 0);
  // Another device's fatal event is not this one's.
  EXPECT_EQ(sample(families, "rdma_device_events_total",
                   {{"device", "mlx5_0"}, {"event", "device_fatal"}}),
            0);
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A fixture's device is no verbs device: libibverbs lists none of that name (not_found), or on
// a machine without RDMA support none at all (ibv_get_device_list fails with ENOSYS:
// not_implemented). Either way the collector says so in the status series and once in the log,
// writes no event counts it does not have, and reads the ports' state files instead: a port
// that went DOWN and came back between scrapes is a flap.
TEST(PortEvents, ADeviceThatCannotBeOpenedFallsBackToTheStateFiles) {
  const CapturedLog log;
  SysfsTree tree;
  tree.add(mlx5_ib_device("mlx5_0", 2, 3));
  collectors::Options options;
  options.sysfs_root = tree.root();
  Scrapes scrapes(options, collectors::make_port_events_collector());

  auto result = scrapes.scrape();
  const auto* up = find_family(result.families, "rdma_device_events_up");
  ASSERT_NE(up, nullptr);
  ASSERT_EQ(up->metric.size(), 1u);
  const auto up_labels = labels_of(up->metric[0]);
  EXPECT_EQ(up_labels.at("device"), "mlx5_0");
  EXPECT_TRUE(up_labels.at("reason") == "not_found" || up_labels.at("reason") == "not_implemented")
      << up_labels.at("reason");
  EXPECT_EQ(value_of(*up, up->metric[0]), 0);
  EXPECT_EQ(series_count(result.families, "rdma_port_events_total"), 0u);
  EXPECT_EQ(series_count(result.families, "rdma_device_events_total"), 0u);
  EXPECT_EQ(series_count(result.families, "rdma_port_flaps_total"), 2u);
  EXPECT_EQ(sample(result.families, "rdma_port_flaps_total", kPort), 0);
  EXPECT_EQ(series_count(result.families, "rdma_port_last_state_change_timestamp_seconds"), 0u);

  tree.write(tree.port_dir("mlx5_0", 1) / "state", "1: DOWN");
  const double before_down = unix_now();
  result = scrapes.scrape();
  const double after_down = unix_now();
  EXPECT_EQ(sample(result.families, "rdma_port_flaps_total", kPort), 0);
  const auto changed =
      sample(result.families, "rdma_port_last_state_change_timestamp_seconds", kPort);
  ASSERT_TRUE(changed);
  EXPECT_GE(*changed, before_down);
  EXPECT_LE(*changed, after_down);

  tree.write(tree.port_dir("mlx5_0", 1) / "state", "4: ACTIVE");
  result = scrapes.scrape();
  EXPECT_EQ(sample(result.families, "rdma_port_flaps_total", kPort), 1);
  EXPECT_EQ(sample(result.families, "rdma_port_flaps_total", {{"device", "mlx5_0"}, {"port", "2"}}),
            0);
  EXPECT_EQ(sample(result.families, "rdma_device_events_up",
                   {{"device", "mlx5_0"}, {"reason", up_labels.at("reason")}}),
            0);
  // Said once, when the reason first appeared; the retry interval is longer than this test.
  EXPECT_EQ(log.lines_with("port_events: mlx5_0: async events not read").size(), 1u);
}

}  // namespace
}  // namespace ibprobe::testing
