// The alert receiver: Alertmanager's webhook message, the alert rules, and the runs a storm of
// alerts may and may not start. The scheduler is the real one; the probe run is a stand-in.
#include "alert_receiver.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <tuple>

#include "hold.h"
#include "probe_api.h"

namespace ibprobe::testing {
namespace {

using exporter::AlertReceiver;
using exporter::parse_alertmanager_webhook;
using exporter::ProbeService;
using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::chrono_literals;

// One alert as Alertmanager's notify/webhook/webhook.go sends it (template.Alert: status,
// labels, annotations, startsAt, endsAt, generatorURL, fingerprint).
json alert(const std::string& alertname, std::map<std::string, std::string> labels,
           const std::string& fingerprint, const std::string& status = "firing") {
  labels["alertname"] = alertname;
  return {{"status", status},
          {"labels", labels},
          {"annotations", {{"summary", "s"}, {"runbook", "r"}}},
          {"startsAt", "2026-12-05T06:00:00.000Z"},
          {"endsAt", "0001-01-01T00:00:00Z"},
          {"generatorURL", "http://prometheus:9090/graph"},
          {"fingerprint", fingerprint}};
}

// The message around them (webhook.go Message: version 4, groupKey, truncatedAlerts, status,
// receiver, groupLabels, commonLabels, commonAnnotations, externalURL, alerts).
std::string message(const std::vector<json>& alerts) {
  return json{{"version", "4"},
              {"groupKey", "{}:{alertname=\"x\"}"},
              {"truncatedAlerts", 0},
              {"status", "firing"},
              {"receiver", "ibprobe"},
              {"groupLabels", json::object()},
              {"commonLabels", json::object()},
              {"commonAnnotations", json::object()},
              {"externalURL", "http://alertmanager:9093"},
              {"alerts", alerts}}
      .dump();
}

TEST(AlertWebhook, ReadsAlertmanagersVersion4Message) {
  const auto parsed = parse_alertmanager_webhook(
      message({alert("IbprobeProbeFailing", {{"target", "hostB:9471"}}, "1a2b"),
               alert("IbprobeProbeFailing", {{"target", "hostC:9471"}}, "3c4d", "resolved")}));
  ASSERT_TRUE(parsed.has_value()) << parsed.error();
  EXPECT_EQ(parsed->receiver, "ibprobe");
  ASSERT_EQ(parsed->alerts.size(), 2u);
  EXPECT_TRUE(parsed->alerts[0].firing);
  EXPECT_FALSE(parsed->alerts[1].firing);
  EXPECT_EQ(parsed->alerts[0].labels.at("target"), "hostB:9471");
  EXPECT_EQ(parsed->alerts[0].labels.at("alertname"), "IbprobeProbeFailing");
  EXPECT_EQ(parsed->alerts[0].fingerprint, "1a2b");
  EXPECT_EQ(parsed->alerts[0].starts_at, "2026-12-05T06:00:00.000Z");
}

TEST(AlertWebhook, RefusesWhatIsNotAMessageWithItsReason) {
  auto with = [](const std::function<void(json&)>& change) {
    json m = json::parse(message({alert("A", {}, "f1")}));
    change(m);
    return parse_alertmanager_webhook(m.dump()).error();
  };
  EXPECT_EQ(parse_alertmanager_webhook("{").error(), "the message is not valid JSON");
  EXPECT_EQ(parse_alertmanager_webhook("[]").error(), "the message must be a JSON object");
  EXPECT_EQ(with([](json& m) { m["version"] = "3"; }),
            "webhook message version '3': this receiver reads Alertmanager's version 4");
  EXPECT_EQ(with([](json& m) { m.erase("alerts"); }), "the message's alerts must be an array");
  EXPECT_EQ(with([](json& m) { m["alerts"][0].erase("fingerprint"); }),
            "alerts[0] has no fingerprint");
  EXPECT_EQ(with([](json& m) { m["alerts"][0]["status"] = "pending"; }),
            "alerts[0].status is 'pending', not firing or resolved");
  EXPECT_EQ(with([](json& m) { m["alerts"][0]["labels"]["port"] = 1; }),
            "alerts[0].labels.port must be a string of at most 1024 bytes");
  EXPECT_EQ(with([](json& m) {
              m["alerts"] = json::array();
              for (int i = 0; i < 1001; ++i) m["alerts"].push_back(alert("A", {}, "f"));
            }),
            "the message holds 1001 alerts, more than 1000");
}

// A scheduler with a stand-in run that waits for `hold` when asked to, and a clock the test
// moves.
class AlertReceiverTest : public ::testing::Test {
 protected:
  void start(const std::string& config_text = "") {
    // The logger exists before the scheduler's thread logs, as the exporter's main makes it
    // before any thread: libspdlog (not built for ThreadSanitizer) creates it on first use, and
    // a thread that then finds it created through the library's unseen fast path is reported.
    spdlog::default_logger();
    ProbeService::Options options;
    options.local = probes::LocalPort{"mlx5_0", 1, "/nonexistent"};
    if (!config_text.empty()) {
      config_path_ = std::filesystem::temp_directory_path() /
                     ("alert_receiver_test_" + std::to_string(::getpid()) + ".yml");
      std::ofstream(config_path_) << config_text;
      options.config_file = config_path_.string();
    }
    service_ = std::make_unique<ProbeService>(
        std::move(options),
        [this](
            const probes::LocalPort&, const std::string& host, const std::string& port,
            const probes::ValidSpec& spec,
            const probes::RunOptions& run) -> std::expected<probes::ProbeOutcome, probes::Error> {
          {
            std::lock_guard lock(mutex_);
            calls_.push_back(host + ":" + port + " " +
                             std::string(probes::to_string(spec.spec().operation)) + "_" +
                             std::string(probes::to_string(spec.spec().test)));
          }
          if (hold_runs_) hold_.wait(run.stop);
          probes::ProbeOutcome outcome;
          outcome.spec = spec.spec();
          outcome.bandwidth = probes::BandwidthStats{5000, 0.25, 1.31072e9, 20000, std::nullopt};
          outcome.local_deltas = {
              {"symbol_error", probes::DeltaStatus::kValid, 120, true, "error"},
              {"port_xmit_data", probes::DeltaStatus::kValid, 3.2e8, false, "informative"}};
          return outcome;
        });
    // hostA, no interface address, listening on 9470: the names this exporter goes by are the
    // test's, whatever machine runs it.
    receiver_ = std::make_unique<AlertReceiver>(
        *service_,
        exporter::SelfNames::Sources{[] { return std::vector<std::string>{}; },
                                     [] { return std::string("hostA"); },
                                     [](const std::string&) { return std::string(); }},
        std::nullopt, [this] { return now_; });
    receiver_->set_listen("", 9470);
  }

  void TearDown() override {
    hold_.release();
    receiver_.reset();
    service_.reset();
    if (!config_path_.empty()) std::filesystem::remove(config_path_);
  }

  AlertReceiver::Answer receive(const std::vector<json>& alerts) {
    const auto parsed = parse_alertmanager_webhook(message(alerts));
    EXPECT_TRUE(parsed.has_value());
    return receiver_->receive(*parsed);
  }

  exporter::ProbeRun finished(std::uint64_t id) {
    const auto run = service_->get(id, 20s);
    EXPECT_TRUE(run && run->done());
    return *run;
  }

  std::vector<std::string> calls() {
    std::lock_guard lock(mutex_);
    return calls_;
  }

  std::string metrics_text() {
    std::string text;
    receiver_->metrics().append_text(text);
    return text;
  }

  static std::vector<std::string> reasons(const AlertReceiver::Answer& answer) {
    std::vector<std::string> out;
    for (const auto& drop : answer.dropped) out.push_back(drop.reason);
    return out;
  }

  std::unique_ptr<ProbeService> service_;
  std::unique_ptr<AlertReceiver> receiver_;
  std::filesystem::path config_path_;
  AlertReceiver::Clock::time_point now_ = AlertReceiver::Clock::time_point(1000h);
  Hold hold_;
  std::atomic<bool> hold_runs_ = false;
  std::mutex mutex_;
  std::vector<std::string> calls_;
};

const std::map<std::string, std::string> kProbeAlert = {{"instance", "hostA"},
                                                        {"job", "ibprobe_probe_write_bw"},
                                                        {"target", "hostB:9471"},
                                                        {"module", "write_bw"},
                                                        {"severity", "warning"}};

TEST_F(AlertReceiverTest, AProbeAlertRerunsItsProbeAndKeepsTheTrigger) {
  start();
  const auto answer = receive({alert("IbprobeProbeFailing", kProbeAlert, "fp1")});
  ASSERT_EQ(answer.started.size(), 1u);
  EXPECT_TRUE(answer.dropped.empty());
  const auto run = finished(answer.started[0].run_id);
  EXPECT_THAT(calls(), ElementsAre("hostB:9471 write_bw"));
  ASSERT_TRUE(run.trigger.has_value());
  EXPECT_EQ(run.trigger->alertname, "IbprobeProbeFailing");
  EXPECT_EQ(run.trigger->fingerprint, "fp1");
  EXPECT_EQ(run.trigger->starts_at, "2026-12-05T06:00:00.000Z");
  const auto shown = exporter::run_to_json(run);
  EXPECT_EQ(shown["trigger"]["alertname"], "IbprobeProbeFailing");
  EXPECT_EQ(shown["trigger"]["labels"]["target"], "hostB:9471");
  // The verdict on /metrics, with the alert's labels (its instance as alert_instance).
  const auto text = metrics_text();
  EXPECT_THAT(text, HasSubstr("ibprobe_alert_probes_started_total 1\n"));
  EXPECT_THAT(text, HasSubstr("ibprobe_alert_probe_success{alertname=\"IbprobeProbeFailing\","
                              "alert_instance=\"hostA\",module=\"write_bw\",severity=\"warning\","
                              "target=\"hostB:9471\",probe_module=\"write_bw\","
                              "probe_target=\"hostB:9471\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("ibprobe_alert_probe_bandwidth_bytes_per_second{"));
  EXPECT_THAT(text, HasSubstr("side=\"local\",counter=\"symbol_error\"} 120\n"));
  EXPECT_THAT(text, Not(HasSubstr("counter=\"port_xmit_data\"")));
}

TEST_F(AlertReceiverTest, OneRunPerAlertPerRepeatWindow) {
  start("modules:\n  write_bw:\n    kind: write_bw\nalerts:\n  repeat: 10m\n");
  const auto first = receive({alert("IbprobeProbeFailing", kProbeAlert, "fp1")});
  ASSERT_EQ(first.started.size(), 1u);
  finished(first.started[0].run_id);
  // Alertmanager repeats the alert, and sends it again with each group change.
  now_ += 9min;
  const auto repeated = receive({alert("IbprobeProbeFailing", kProbeAlert, "fp1")});
  EXPECT_THAT(reasons(repeated), ElementsAre("repeat"));
  EXPECT_THAT(repeated.dropped[0].detail, HasSubstr("answered 540 s ago"));
  // Another alert (another fingerprint) is not held back.
  auto other = kProbeAlert;
  other["target"] = "hostC:9471";
  EXPECT_EQ(receive({alert("IbprobeProbeFailing", other, "fp2")}).started.size(), 1u);
  now_ += 1min;
  EXPECT_EQ(receive({alert("IbprobeProbeFailing", kProbeAlert, "fp1")}).started.size(), 1u);
  EXPECT_THAT(metrics_text(),
              HasSubstr("ibprobe_alert_probes_dropped_total{reason=\"repeat\"} 1\n"));
}

TEST_F(AlertReceiverTest, TheLastVerdictStaysWhileTheNextRunOfTheSameAlertRuns) {
  start("modules:\n  write_bw:\n    kind: write_bw\nalerts:\n  repeat: 10m\n");
  const auto first = receive({alert("IbprobeProbeFailing", kProbeAlert, "fp1")});
  ASSERT_EQ(first.started.size(), 1u);
  finished(first.started[0].run_id);
  const std::string first_run = "run_id=\"" + std::to_string(first.started[0].run_id) + "\"";
  ASSERT_THAT(metrics_text(), HasSubstr(first_run));
  // The next window's notification starts a run that is held running: the page still shows
  // the first run's verdict, its error counters included, not a run without one.
  hold_runs_ = true;
  now_ += 10min;
  const auto second = receive({alert("IbprobeProbeFailing", kProbeAlert, "fp1")});
  ASSERT_EQ(second.started.size(), 1u);
  ASSERT_TRUE(eventually([&] {
    const auto run = service_->get(second.started[0].run_id, 0ms);
    return run && run->state == exporter::RunState::kRunning;
  }));
  auto text = metrics_text();
  EXPECT_THAT(text, HasSubstr(first_run));
  EXPECT_THAT(text, HasSubstr("side=\"local\",counter=\"symbol_error\"} 120\n"));
  EXPECT_THAT(text, Not(HasSubstr("state=\"running\"")));
  // Once it finishes, its own verdict replaces the first.
  hold_.release();
  finished(second.started[0].run_id);
  text = metrics_text();
  EXPECT_THAT(text, HasSubstr("run_id=\"" + std::to_string(second.started[0].run_id) + "\""));
  EXPECT_THAT(text, Not(HasSubstr(first_run)));
}

TEST_F(AlertReceiverTest, ARunningRunIsShownWhileTheAlertHasNoVerdictYet) {
  start();
  hold_runs_ = true;
  const auto answer = receive({alert("IbprobeProbeFailing", kProbeAlert, "fp1")});
  ASSERT_EQ(answer.started.size(), 1u);
  ASSERT_TRUE(eventually([&] {
    const auto run = service_->get(answer.started[0].run_id, 0ms);
    return run && run->state == exporter::RunState::kRunning;
  }));
  EXPECT_THAT(metrics_text(), HasSubstr("state=\"running\""));
}

TEST_F(AlertReceiverTest, AResolvedAlertStartsNothing) {
  start();
  const auto answer = receive({alert("IbprobeProbeFailing", kProbeAlert, "fp1", "resolved")});
  EXPECT_EQ(answer.resolved, 1u);
  EXPECT_TRUE(answer.started.empty());
  EXPECT_TRUE(answer.dropped.empty());
  EXPECT_TRUE(calls().empty());
  EXPECT_THAT(metrics_text(),
              HasSubstr("ibprobe_alert_notifications_total{status=\"resolved\"} 1\n"));
}

TEST_F(AlertReceiverTest, AnAlertWithoutAUsablePeerIsAnsweredWithTheReason) {
  // Alerts about other hosts are not sent on here (dispatch_port 0): they are dropped.
  start("modules:\n  write_bw:\n    kind: write_bw\nalerts:\n  dispatch_port: 0\n");
  auto no_target = kProbeAlert;
  no_target.erase("target");
  auto elsewhere = kProbeAlert;
  elsewhere["instance"] = "hostZ:9470";
  const auto answer = receive({alert("IbprobeExporterDown", {{"instance", "hostA"}}, "f1"),
                               alert("IbprobeProbeFailing", no_target, "f2"),
                               alert("IbprobeProbeFailing", elsewhere, "f3")});
  EXPECT_TRUE(answer.started.empty());
  EXPECT_THAT(reasons(answer), ElementsAre("no_rule", "no_peer", "other_instance"));
  EXPECT_EQ(answer.dropped[1].detail, "the alert has no label 'target' to name a peer");
  EXPECT_EQ(answer.dropped[2].detail,
            "the alert is about instance 'hostZ:9470', which names no address, name or port of "
            "this exporter (hostA)");
  EXPECT_TRUE(calls().empty());
}

TEST_F(AlertReceiverTest, AStormIsBoundedByTheRunsInFlight) {
  start("modules:\n  write_bw:\n    kind: write_bw\nalerts:\n  max_in_flight: 2\n");
  hold_runs_ = true;
  std::vector<json> storm;
  for (int i = 0; i < 5; ++i) {
    auto labels = kProbeAlert;
    labels["target"] = "host" + std::to_string(i) + ":9471";
    storm.push_back(alert("IbprobeProbeFailing", labels, "fp" + std::to_string(i)));
  }
  const auto answer = receive(storm);
  EXPECT_EQ(answer.started.size(), 2u);
  EXPECT_THAT(reasons(answer),
              ElementsAre("in_flight_limit", "in_flight_limit", "in_flight_limit"));
  hold_.release();
  for (const auto& run : answer.started) finished(run.run_id);
  // The runs are done: the next alert starts one.
  EXPECT_EQ(receive({storm[2]}).started.size(), 1u);
  EXPECT_THAT(metrics_text(),
              HasSubstr("ibprobe_alert_probes_dropped_total{reason=\"in_flight_limit\"} 3\n"));
}

TEST_F(AlertReceiverTest, AHundredIdenticalWebhooksStartOneRun) {
  start();
  std::size_t started = 0, repeats = 0;
  for (int i = 0; i < 100; ++i) {
    now_ += 100ms;
    const auto answer = receive({alert("IbprobeProbeFailing", kProbeAlert, "fp1")});
    started += answer.started.size();
    repeats += answer.dropped.size();
  }
  EXPECT_EQ(started, 1u);
  EXPECT_EQ(repeats, 99u);
  EXPECT_THAT(metrics_text(),
              HasSubstr("ibprobe_alert_probes_dropped_total{reason=\"repeat\"} 99\n"));
}

TEST_F(AlertReceiverTest, AThousandDistinctAlertsStartAtMostTheBound) {
  start();
  hold_runs_ = true;
  std::vector<json> storm;
  for (int i = 0; i < 1000; ++i) {
    auto labels = kProbeAlert;
    labels["target"] = "10.1." + std::to_string(i / 250) + "." + std::to_string(i % 250) + ":9471";
    storm.push_back(alert("IbprobeProbeFailing", labels, "fp" + std::to_string(i)));
  }
  const auto answer = receive(storm);
  // The default bound: two runs in flight.
  EXPECT_EQ(answer.started.size(), 2u);
  EXPECT_EQ(answer.dropped.size(), 998u);
  const auto text = metrics_text();
  EXPECT_THAT(text,
              HasSubstr("ibprobe_alert_probes_dropped_total{reason=\"in_flight_limit\"} 998\n"));
  EXPECT_THAT(text, HasSubstr("ibprobe_alert_notifications_total{status=\"firing\"} 1000\n"));
}

TEST_F(AlertReceiverTest, TheSchedulersRefusalIsTheDropReason) {
  start(
      "modules:\n  write_bw:\n    kind: write_bw\nallowed_targets: [\"10.0.0.0/8\"]\n"
      "alerts:\n  rules:\n    - alertname: IbprobeSymbolErrorsRising\n      module: write_bw\n"
      "      peer: 192.0.2.9:9471\n");
  const auto answer = receive(
      {alert("IbprobeSymbolErrorsRising", {{"instance", "hostA"}, {"device", "mlx5_0"}}, "f1"),
       alert("IbprobeProbeFailing", kProbeAlert, "f2")});
  // The file's rules replace the defaults: IbprobeProbeFailing has none.
  EXPECT_THAT(reasons(answer), ElementsAre("target_not_allowed", "no_rule"));
  EXPECT_TRUE(calls().empty());
}

TEST_F(AlertReceiverTest, ARuleMatchesLabelsAndTakesAFixedPeer) {
  start(
      "modules:\n  write_bw:\n    kind: write_bw\n  read_lat:\n    kind: read_lat\n"
      "alerts:\n  instance: hostA\n  rules:\n"
      "    - alertname: IbprobeSymbolErrorsRising\n      match: {device: mlx5_1}\n"
      "      module: read_lat\n      peer: 192.0.2.7\n"
      "    - alertname: IbprobeSymbolErrorsRising\n      module: write_bw\n"
      "      peer: 192.0.2.8:9999\n");
  const auto answer = receive(
      {alert("IbprobeSymbolErrorsRising", {{"instance", "hostA:9470"}, {"device", "mlx5_1"}}, "f1"),
       alert("IbprobeSymbolErrorsRising", {{"instance", "hostA:9470"}, {"device", "mlx5_0"}},
             "f2")});
  ASSERT_EQ(answer.started.size(), 2u);
  finished(answer.started[0].run_id);
  finished(answer.started[1].run_id);
  // A bare host takes the responder's default port.
  EXPECT_THAT(calls(), ElementsAre("192.0.2.7:9471 read_lat", "192.0.2.8:9999 write_bw"));
}

// Two leaves of three hosts each, as a file_sd file Prometheus scrapes them with names them.
exporter::PeerList two_leaves() {
  exporter::PeerList list;
  list.source = "test";
  for (const auto& [host, tor] :
       std::vector<std::pair<std::string, std::string>>{{"hostA", "leaf1"},
                                                        {"hostB", "leaf1"},
                                                        {"hostC", "leaf1"},
                                                        {"hostD", "leaf2"},
                                                        {"hostE", "leaf2"},
                                                        {"hostF", "leaf2"}}) {
    list.peers.push_back({host + ":9470", tor, "ipv4"});
  }
  return list;
}

TEST(ChoosePeer, SameLeafOrOtherLeafNeverItself) {
  using exporter::PeerChoice;
  const auto list = two_leaves();
  std::set<std::string> same, other;
  for (int i = 0; i < 200; ++i) {
    const auto fingerprint = "fp" + std::to_string(i);
    same.insert(exporter::choose_peer(list, "hostA", PeerChoice::kSameLeaf, fingerprint).value());
    other.insert(exporter::choose_peer(list, "hostA", PeerChoice::kOtherLeaf, fingerprint).value());
    // A repeated alert measures the same pair.
    EXPECT_EQ(exporter::choose_peer(list, "hostA", PeerChoice::kSameLeaf, fingerprint),
              exporter::choose_peer(list, "hostA", PeerChoice::kSameLeaf, fingerprint));
  }
  // Spread over every candidate across alerts, and only over them.
  EXPECT_EQ(same, (std::set<std::string>{"hostB", "hostC"}));
  EXPECT_EQ(other, (std::set<std::string>{"hostD", "hostE", "hostF"}));
}

TEST(ChoosePeer, SaysWhyThereIsNone) {
  using exporter::PeerChoice;
  auto list = two_leaves();
  EXPECT_EQ(exporter::choose_peer(list, "hostZ", PeerChoice::kSameLeaf, "f").error(),
            "host 'hostZ' is not in the peer list (6 hosts from test)");
  list.peers.resize(4);  // hostD alone behind leaf2
  EXPECT_EQ(exporter::choose_peer(list, "hostD", PeerChoice::kSameLeaf, "f").error(),
            "no other host behind leaf 'leaf2' in the peer list (4 hosts from test)");
  list.peers[0].tor.clear();
  EXPECT_EQ(exporter::choose_peer(list, "hostA", PeerChoice::kOtherLeaf, "f").error(),
            "host 'hostA' has no leaf (tor) in the peer list (4 hosts from test)");
  // The list names this host by its own target (the mesh's self), whatever the host is called.
  list = two_leaves();
  list.self = "hostE:9470";
  EXPECT_THAT(exporter::choose_peer(list, "some-name", PeerChoice::kSameLeaf, "f").value(),
              ::testing::AnyOf("hostD", "hostF"));
}

// The peer list as a file_sd file (alerts.peers_file), written where the configuration says.
std::string write_peers_file(const exporter::PeerList& list) {
  json groups = json::array();
  for (const auto& peer : list.peers) {
    groups.push_back({{"targets", {peer.target}}, {"labels", {{"tor", peer.tor}}}});
  }
  const auto path = std::filesystem::temp_directory_path() /
                    ("alert_receiver_peers_" + std::to_string(::getpid()) + ".json");
  std::ofstream(path) << groups.dump();
  return path.string();
}

TEST_F(AlertReceiverTest, AHostPortAlertProbesAHostBehindTheSameLeaf) {
  const auto peers = write_peers_file(two_leaves());
  start(
      "modules:\n  write_bw:\n    kind: write_bw\n  write_lat:\n    kind: write_lat\n"
      "alerts:\n  peers_file: " +
      peers + "\n");
  receiver_->set_peer_directory({}, "9555");
  // The shipped defaults: write_bw for symbol errors, write_lat for a link that went down, each
  // to a host behind hostA's leaf, on the responders' port.
  const auto answer = receive(
      {alert("IbprobeSymbolErrorsRising", {{"instance", "hostA:9470"}, {"device", "mlx5_0"}}, "f1"),
       alert("IbprobeLinkDowned", {{"instance", "hostA:9470"}, {"device", "mlx5_0"}}, "f2")});
  ASSERT_EQ(answer.started.size(), 2u) << (answer.dropped.empty() ? "" : answer.dropped[0].detail);
  finished(answer.started[0].run_id);
  finished(answer.started[1].run_id);
  const auto ran = calls();
  ASSERT_EQ(ran.size(), 2u);
  EXPECT_THAT(ran[0], ::testing::AnyOf("hostB:9555 write_bw", "hostC:9555 write_bw"));
  EXPECT_THAT(ran[1], ::testing::AnyOf("hostB:9555 write_lat", "hostC:9555 write_lat"));
  std::filesystem::remove(peers);
}

TEST_F(AlertReceiverTest, WithoutAPeerListAPeerChoiceIsDroppedWithTheReason) {
  start("modules:\n  write_bw:\n    kind: write_bw\n");
  const auto answer = receive(
      {alert("IbprobeRetransmissions", {{"instance", "hostA"}, {"device", "mlx5_0"}}, "f1")});
  EXPECT_THAT(reasons(answer), ElementsAre("no_peer_list"));
  EXPECT_EQ(answer.dropped[0].detail,
            "no peer list: set alerts.peers_file or run the mesh (mesh.enabled)");
  EXPECT_TRUE(calls().empty());
}

TEST_F(AlertReceiverTest, AnUnreadablePeerListSaysWhichAndWhy) {
  start("modules:\n  write_bw:\n    kind: write_bw\nalerts:\n  peers_file: /nonexistent/sd.json\n");
  const auto unreadable = receive(
      {alert("IbprobeRetransmissions", {{"instance", "hostA"}, {"device", "mlx5_0"}}, "f1")});
  ASSERT_THAT(reasons(unreadable), ElementsAre("no_peer_list"));
  EXPECT_THAT(unreadable.dropped[0].detail,
              ::testing::StartsWith("alerts.peers_file: /nonexistent/sd.json"));
  EXPECT_TRUE(calls().empty());
}

TEST_F(AlertReceiverTest, ASwitchPortAlertRunsFromTheHostAtTheCablesFarEnd) {
  const auto peers = write_peers_file(two_leaves());
  start("modules:\n  write_bw:\n    kind: write_bw\nalerts:\n  dispatch_port: 0\n  peers_file: " +
        peers + "\n");
  receiver_->set_peer_directory({}, "9471");
  const auto switch_alert = [](const std::string& far_end, const std::string& fingerprint) {
    return alert("IbprobeSwitchPortSymbolErrors",
                 {{"instance", "fabric-exporter:9470"},
                  {"node_description", "leaf1"},
                  {"port", "3"},
                  {"remote_description", far_end},
                  {"remote_port", "1"}},
                 fingerprint);
  };
  // The far end is this host: a probe from here to a host behind the other leaf, whichever
  // exporter scraped the switch. The far end another host: theirs (dropped here, dispatch_port
  // 0). A switch at the far end, or no far end: not a host to probe from.
  const auto answer =
      receive({switch_alert("hostA mlx5_0", "f1"), switch_alert("hostB mlx5_0", "f2"),
               switch_alert("spine-1", "f3"), switch_alert("", "f4")});
  ASSERT_EQ(answer.started.size(), 1u);
  finished(answer.started[0].run_id);
  ASSERT_EQ(calls().size(), 1u);
  EXPECT_THAT(calls()[0], ::testing::AnyOf("hostD:9471 write_bw", "hostE:9471 write_bw",
                                           "hostF:9471 write_bw"));
  EXPECT_THAT(reasons(answer), ElementsAre("other_instance", "not_a_host", "no_host"));
  EXPECT_EQ(answer.dropped[0].detail,
            "the alert is about instance 'hostB:9470', which names no address, name or port of "
            "this exporter (hostA)");
  EXPECT_EQ(answer.dropped[1].detail,
            "remote_description 'spine-1' names no host of the peer list (6 hosts from "
            "alerts.peers_file " +
                peers + ")");
  std::filesystem::remove(peers);
}

TEST_F(AlertReceiverTest, TheVerdictAsAnAlertForAlertmanager) {
  start();
  auto labels = kProbeAlert;
  const auto answer = receive({alert("IbprobeProbeFailing", labels, "fp1")});
  ASSERT_EQ(answer.started.size(), 1u);
  const auto run = finished(answer.started[0].run_id);
  const auto now = std::chrono::sys_days{std::chrono::December / 5 / 2026} + 6h + 30min;
  const auto verdict = exporter::verdict_alert(run, now, 1h);
  EXPECT_EQ(verdict["labels"]["alertname"], "IbprobeProbeVerdict");
  EXPECT_EQ(verdict["labels"]["verdict_for"], "IbprobeProbeFailing");
  EXPECT_EQ(verdict["labels"]["verdict"], "errors_moved");
  EXPECT_EQ(verdict["labels"]["target"], "hostB:9471");
  EXPECT_EQ(verdict["labels"]["instance"], "hostA");
  EXPECT_EQ(verdict["annotations"]["summary"],
            "write_bw to hostB:9471: error counters moved during the run: local:symbol_error "
            "+120; BW 1310.7 MB/s");
  EXPECT_EQ(verdict["annotations"]["run"], "/api/v1/probes/" + std::to_string(run.id));
  EXPECT_EQ(verdict["startsAt"], "2026-12-05T06:30:00Z");
  EXPECT_EQ(verdict["endsAt"], "2026-12-05T07:30:00Z");
}

TEST(HttpUrl, PlainHttpOnlyWithItsParts) {
  const auto url = exporter::parse_http_url("http://am.example:9093/x");
  ASSERT_TRUE(url.has_value());
  EXPECT_EQ(url->host, "am.example");
  EXPECT_EQ(url->port, "9093");
  EXPECT_EQ(url->path, "/x");
  const auto v6 = exporter::parse_http_url("http://[fd00::1]:9093");
  ASSERT_TRUE(v6.has_value());
  EXPECT_EQ(v6->host, "fd00::1");
  EXPECT_EQ(v6->path, "/");
  EXPECT_EQ(exporter::parse_http_url("http://am").value().port, "80");
  const auto https = exporter::parse_http_url("https://am.example/api");
  ASSERT_TRUE(https.has_value());
  EXPECT_TRUE(https->https);
  EXPECT_EQ(https->port, "443");
  EXPECT_FALSE(url->https);
  EXPECT_THAT(exporter::parse_http_url("am:9093").error(),
              HasSubstr("is not an http:// or https:// URL"));
  EXPECT_THAT(exporter::parse_http_url("http://am:99999").error(), HasSubstr("is not 1..65535"));
  EXPECT_THAT(exporter::parse_http_url("http://:9093").error(), HasSubstr("names no host"));
}

TEST(HttpUrl, APostToAPortWhereNothingListensSaysSo) {
  // Port 1 on the loopback: nothing listens there on a test machine.
  const auto reply = exporter::post_json(exporter::parse_http_url("http://127.0.0.1:1").value(),
                                         "[]", std::chrono::steady_clock::now() + 2s);
  ASSERT_FALSE(reply.has_value());
  EXPECT_THAT(reply.error(), HasSubstr("cannot connect to 127.0.0.1:1: Connection refused"));
}

TEST(AlertRules, TheFilesAlertSectionIsChecked) {
  const auto refused = [](const std::string& alerts) {
    const auto parsed =
        exporter::parse_probe_config("modules:\n  write_bw:\n    kind: write_bw\n" + alerts);
    return parsed ? std::string("accepted") : parsed.error();
  };
  EXPECT_THAT(refused("alerts:\n  rules:\n    - alertname: A\n      module: nope\n      peer: h\n"),
              HasSubstr("alert rule A: no module named nope"));
  EXPECT_THAT(refused("alerts:\n  rules:\n    - alertname: A\n      peer: h\n"),
              HasSubstr("alert rule A needs one of module and module_label"));
  EXPECT_THAT(refused("alerts:\n  rules:\n    - alertname: A\n      module: write_bw\n"),
              HasSubstr("alert rule A needs one of peer, peer_label and peer_choice"));
  EXPECT_THAT(refused("alerts:\n  rules:\n    - alertname: A\n      module: write_bw\n"
                      "      peer: h\n      peer_choice: same_leaf\n"),
              HasSubstr("alert rule A needs one of peer, peer_label and peer_choice"));
  EXPECT_THAT(refused("alerts:\n  rules:\n    - alertname: A\n      module: write_bw\n"
                      "      peer_choice: next_door\n"),
              HasSubstr("alert rule A: peer_choice 'next_door' is none of same_leaf and "
                        "other_leaf"));
  EXPECT_THAT(refused("alerts:\n  max_in_flight: 0\n"), HasSubstr("max_in_flight must be >= 1"));
  EXPECT_THAT(refused("alerts:\n  dispatch_tls: {ca_file: /nonexistent/ca.pem}\n"),
              HasSubstr("dispatch_tls: cannot read the authorities of /nonexistent/ca.pem"));
  EXPECT_THAT(refused("alerts:\n  dispatch_tls: {ca: x}\n"), HasSubstr("ca"));
  const auto tls = exporter::parse_probe_config(
      "modules:\n  write_bw:\n    kind: write_bw\nalerts:\n  dispatch_tls: "
      "{insecure_skip_verify: true}\n");
  ASSERT_TRUE(tls.has_value()) << tls.error();
  ASSERT_TRUE(tls->alerts.dispatch_tls.has_value());
  EXPECT_TRUE(tls->alerts.dispatch_tls->insecure_skip_verify);
  EXPECT_FALSE(exporter::default_probe_config().alerts.dispatch_tls.has_value());
  EXPECT_THAT(
      refused("alerts:\n  dispatch_basic_auth: {username: u, password_file: /nonexistent}\n"),
      HasSubstr("dispatch_basic_auth: cannot read the password from /nonexistent"));
  EXPECT_THAT(refused("alerts:\n  dispatch_port: 70000\n"), HasSubstr("dispatch_port"));
  // The Authorization header for sending on, from the password file's first line (values from
  // Python's base64.b64encode).
  const auto password = std::filesystem::temp_directory_path() /
                        ("alert_rules_password_" + std::to_string(::getpid()));
  for (const auto& [user, secret, header] :
       {std::tuple{"alertmanager", "s3cret\n", "Basic YWxlcnRtYW5hZ2VyOnMzY3JldA=="},
        std::tuple{"u", "pw", "Basic dTpwdw=="}}) {
    std::ofstream(password) << secret;
    const auto parsed = exporter::parse_probe_config(
        "modules:\n  write_bw:\n    kind: write_bw\nalerts:\n  dispatch_basic_auth: {username: " +
        std::string(user) + ", password_file: " + password.string() + "}\n");
    ASSERT_TRUE(parsed.has_value()) << parsed.error();
    EXPECT_EQ(parsed->alerts.dispatch_authorization, header);
  }
  std::filesystem::remove(password);
  EXPECT_THAT(refused("alerts:\n  repeats: 1h\n"), HasSubstr("repeats"));
  EXPECT_EQ(exporter::default_probe_config().alerts.repeat, std::chrono::hours(1));
}

}  // namespace
}  // namespace ibprobe::testing
