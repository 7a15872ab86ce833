// Alerts about another host, sent on over real HTTP: exporter A's receiver gets an alert whose
// instance is B, and B's receiver, behind its own HTTP server, runs the probe. The scheduler is
// the real one on both; the probe runs are stand-ins.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "collect_helpers.h"
#include "hold.h"
#include "http_client.h"
#include "ibprobe/exporter.h"
#include "probe_api.h"
#include "sysfs_fixture.h"
#include "web_config.h"

namespace ibprobe::testing {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

// One exporter: a scheduler with a stand-in run, its API and receiver, its HTTP server.
class Exporter {
 public:
  // `web`: the server's TLS and authentication (none by default); `listen`: its address. Its
  // names are the system's (this machine's interface addresses), its host name `name`.
  Exporter(const std::string& name, const std::string& config_text,
           const exporter::WebConfig& web = {}, const std::string& listen = "127.0.0.1") {
    spdlog::default_logger();  // before any thread logs, as in alert_receiver_test
    config_path_ = std::filesystem::temp_directory_path() /
                   ("alert_dispatch_" + name + "_" + std::to_string(::getpid()) + ".yml");
    std::ofstream(config_path_) << config_text;
    exporter::ProbeService::Options options;
    options.local = probes::LocalPort{"mlx5_0", 1, "/nonexistent"};
    options.config_file = config_path_.string();
    service_ = std::make_unique<exporter::ProbeService>(
        std::move(options),
        [this](const probes::LocalPort&, const std::string& host, const std::string& port,
               const probes::ValidSpec& spec,
               const probes::RunOptions&) -> std::expected<probes::ProbeOutcome, probes::Error> {
          std::lock_guard lock(mutex_);
          calls_.push_back(host + ":" + port);
          probes::ProbeOutcome outcome;
          outcome.spec = spec.spec();
          return outcome;
        });
    auto names = exporter::SelfNames::system();
    names.host_name = [name] { return name; };
    api_ = std::make_unique<exporter::ProbeApi>(*service_, 4, std::move(names));
    tree_.add(mlx5_ib_device("mlx5_0", 1, 0));
    scraper_ = scraper_over(tree_.root());
    routes_ = std::make_unique<exporter::Routes>(config_, *scraper_, api_.get());
    server_ = std::make_unique<exporter::HttpServer>(listen + ":0", 4, *routes_, web);
    api_->set_listen(listen, static_cast<std::uint16_t>(server_->port()));
  }
  ~Exporter() {
    server_.reset();
    api_.reset();
    service_.reset();
    std::filesystem::remove(config_path_);
  }

  int port() const { return server_->port(); }
  std::vector<std::string> calls() {
    std::lock_guard lock(mutex_);
    return calls_;
  }
  exporter::ProbeService& service() { return *service_; }

  // POSTs a webhook message; `sent_on`: with the header another receiver adds.
  RawResponse post_alerts(const json& message, bool sent_on = false) {
    const std::string body = message.dump();
    return http_request(port(), std::string("POST /api/v1/alerts HTTP/1.1\r\nHost: localhost\r\n") +
                                    (sent_on ? "X-Ibprobe-Sent-On-By: other\r\n" : "") +
                                    "Content-Type: application/json\r\nContent-Length: " +
                                    std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
                                    body);
  }

 private:
  std::filesystem::path config_path_;
  std::mutex mutex_;
  std::vector<std::string> calls_;
  SysfsTree tree_;
  exporter::Config config_;
  std::unique_ptr<exporter::ProbeService> service_;
  std::unique_ptr<exporter::ProbeApi> api_;
  std::unique_ptr<collectors::Scraper> scraper_;
  std::unique_ptr<exporter::Routes> routes_;
  std::unique_ptr<exporter::HttpServer> server_;
};

json probe_alert(const std::string& instance, const std::string& fingerprint) {
  return {{"version", "4"},
          {"status", "firing"},
          {"receiver", "ibprobe"},
          {"alerts",
           {{{"status", "firing"},
             {"labels",
              {{"alertname", "IbprobeProbeFailing"},
               {"instance", instance},
               {"target", "192.0.2.5:9471"},
               {"module", "write_bw"}}},
             {"annotations", json::object()},
             {"startsAt", "2026-12-05T06:00:00Z"},
             {"fingerprint", fingerprint}}}}};
}

const std::string kModules = "modules:\n  write_bw:\n    kind: write_bw\n";

TEST(AlertDispatch, AnAlertAboutAnotherExporterGoesToThePortItsInstanceNames) {
  // Both on 127.0.0.1, each on a port of its own, neither told its instance: an alert about B
  // (instance 127.0.0.1:B's port, as file_sd of addresses gives it) reaching A is B's, and goes
  // to B's port, not to dispatch_port (9470 by default).
  Exporter b("b", kModules);
  Exporter a("a", kModules);
  const std::string instance_b = "127.0.0.1:" + std::to_string(b.port());
  const auto answer = a.post_alerts(probe_alert(instance_b, "f1"));
  ASSERT_EQ(answer.status, 200) << answer.body;
  const auto body = json::parse(answer.body);
  EXPECT_TRUE(body["started"].empty());
  ASSERT_EQ(body["sent_on"].size(), 1u) << answer.body;
  EXPECT_EQ(body["sent_on"][0]["exporter"], instance_b);
  ASSERT_TRUE(eventually([&] { return b.calls().size() == 1; }));
  EXPECT_THAT(b.calls(), ElementsAre("192.0.2.5:9471"));
  EXPECT_TRUE(a.calls().empty());
  // B's run carries the alert as its trigger.
  const auto runs = b.service().recent(10);
  ASSERT_EQ(runs.size(), 1u);
  ASSERT_TRUE(runs[0].trigger);
  EXPECT_EQ(runs[0].trigger->fingerprint, "f1");
  EXPECT_EQ(runs[0].trigger->labels.at("instance"), instance_b);
  ASSERT_TRUE(eventually([&] {
    return http_get(a.port(), "/metrics")
               .body.find("ibprobe_alert_sent_on_requests_total{result=\"sent\"} 1\n") !=
           std::string::npos;
  }));
  // The same alert again within the repeat window is not sent again.
  const auto again = json::parse(a.post_alerts(probe_alert(instance_b, "f1")).body);
  EXPECT_TRUE(again["sent_on"].empty());
  EXPECT_EQ(again["dropped"][0]["reason"], "repeat");
}

TEST(AlertDispatch, AnExporterReachedByIpRunsTheProbeOfAnAlertAboutItself) {
  // No alerts.instance: the exporter knows itself by its address and port, by every interface
  // address at that port, and by a bare address (a relabelled instance without port).
  Exporter a("a", kModules);
  const std::string port = std::to_string(a.port());
  for (const auto& [instance, fingerprint] : std::vector<std::pair<std::string, std::string>>{
           {"127.0.0.1:" + port, "f1"}, {"localhost:" + port, "f2"}, {"127.0.0.1", "f3"}}) {
    SCOPED_TRACE(instance);
    const auto body = json::parse(a.post_alerts(probe_alert(instance, fingerprint)).body);
    EXPECT_EQ(body["started"].size(), 1u) << body.dump();
    EXPECT_TRUE(body["sent_on"].empty()) << body.dump();
  }
  ASSERT_TRUE(eventually([&] { return a.calls().size() == 3; }));
}

TEST(AlertDispatch, AnAlertInstanceNamedInTheConfigurationWithItsPortIsThisExporters) {
  // A relabelled instance the host cannot know itself by, written as host:port in
  // alerts.instance: that exporter alone answers it; the same name at another port is another
  // exporter's.
  Exporter a("a", kModules + "alerts:\n  instance: ib-node-7.example:9470\n  dispatch_port: 0\n");
  const auto own = json::parse(a.post_alerts(probe_alert("ib-node-7.example:9470", "f1")).body);
  EXPECT_EQ(own["started"].size(), 1u) << own.dump();
  const auto other = json::parse(a.post_alerts(probe_alert("ib-node-7.example:9471", "f2")).body);
  ASSERT_EQ(other["dropped"].size(), 1u) << other.dump();
  EXPECT_EQ(other["dropped"][0]["reason"], "other_instance");
}

TEST(AlertDispatch, AnAlertSentOnToItsOwnSenderRunsThere) {
  // 127.0.0.2 is this machine (loopback) but no interface's address, so the exporter on every
  // address does not know itself by it and sends the alert on, to itself: it runs there, once,
  // and is not sent on again.
  Exporter a("a", kModules, {}, "");
  const std::string instance = "127.0.0.2:" + std::to_string(a.port());
  const auto body = json::parse(a.post_alerts(probe_alert(instance, "f1")).body);
  ASSERT_EQ(body["sent_on"].size(), 1u) << body.dump();
  ASSERT_TRUE(eventually([&] { return a.calls().size() == 1; }));
  EXPECT_TRUE(eventually([&] {
    const auto page = http_get(a.port(), "/metrics").body;
    return page.find("ibprobe_alert_probes_started_total 1\n") != std::string::npos &&
           page.find("ibprobe_alert_probes_sent_on_total 1\n") != std::string::npos;
  }));
  EXPECT_THAT(a.calls(), ElementsAre("192.0.2.5:9471"));
}

TEST(AlertDispatch, DispatchToInstancePortOffSendsToDispatchPort) {
  // A relabelled instance whose port is not an exporter's (1: nothing listens): with
  // dispatch_to_instance_port false the alert goes to dispatch_port, where B runs it.
  Exporter b("b", kModules);
  Exporter a("a", kModules + "alerts:\n  dispatch_to_instance_port: false\n  dispatch_port: " +
                      std::to_string(b.port()) + "\n");
  const auto body = json::parse(a.post_alerts(probe_alert("127.0.0.1:1", "f1")).body);
  ASSERT_EQ(body["sent_on"].size(), 1u) << body.dump();
  EXPECT_EQ(body["sent_on"][0]["exporter"], "127.0.0.1:" + std::to_string(b.port()));
  ASSERT_TRUE(eventually([&] { return b.calls().size() == 1; }));
}

// B serves TLS with a self-signed certificate for 127.0.0.1. Without dispatch_tls, A's plain
// request gets no HTTP answer from it (counted failed); with dispatch_tls naming B's certificate,
// the alert goes over HTTPS and B runs the probe.
TEST(AlertDispatch, DispatchTlsSendsAlertsOnOverHttps) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("alert_dispatch_tls_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string d = dir.string();
  ASSERT_EQ(std::system(("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
                         "-nodes -days 2 -keyout " +
                         d + "/server.key -out " + d +
                         "/server.crt -subj /CN=localhost -addext subjectAltName=IP:127.0.0.1 "
                         ">/dev/null 2>&1")
                            .c_str()),
            0);
  std::ofstream(dir / "web.yml") << "tls_server_config:\n  cert_file: server.crt\n"
                                    "  key_file: server.key\n";
  const auto web = exporter::load_web_config(dir / "web.yml");
  ASSERT_TRUE(web.has_value()) << web.error();
  Exporter b("b", kModules, *web);
  const std::string to_b = "alerts:\n  instance: hosta\n";
  const std::string instance_b = "127.0.0.1:" + std::to_string(b.port());

  Exporter plain("plain", kModules + to_b);
  ASSERT_EQ(json::parse(plain.post_alerts(probe_alert(instance_b, "f5")).body)["sent_on"].size(),
            1u);
  EXPECT_TRUE(eventually([&] {
    return http_get(plain.port(), "/metrics")
               .body.find("ibprobe_alert_sent_on_requests_total{result=\"failed\"} 1\n") !=
           std::string::npos;
  }));
  EXPECT_TRUE(b.calls().empty());

  Exporter a("a", kModules + to_b + "  dispatch_tls: {ca_file: " + d + "/server.crt}\n");
  ASSERT_EQ(json::parse(a.post_alerts(probe_alert(instance_b, "f6")).body)["sent_on"].size(), 1u);
  ASSERT_TRUE(eventually([&] { return b.calls().size() == 1; }));
  EXPECT_THAT(b.calls(), ElementsAre("192.0.2.5:9471"));
  EXPECT_TRUE(eventually([&] {
    return http_get(a.port(), "/metrics")
               .body.find("ibprobe_alert_sent_on_requests_total{result=\"sent\"} 1\n") !=
           std::string::npos;
  }));
  std::filesystem::remove_all(dir);
}

TEST(AlertDispatch, AnAlertSentOnRunsWhereItArrivesAndIsNeverSentFurther) {
  // Sent on by another receiver to the address its instance names, so this exporter is that
  // instance by a name it does not know itself by: it runs here.
  Exporter b("b", kModules + "alerts:\n  instance: hostb\n");
  const auto answer = b.post_alerts(probe_alert("hostc:9470", "f2"), /*sent_on=*/true);
  ASSERT_EQ(answer.status, 200) << answer.body;
  const auto body = json::parse(answer.body);
  EXPECT_TRUE(body["sent_on"].empty());
  EXPECT_EQ(body["started"].size(), 1u) << answer.body;
  ASSERT_TRUE(eventually([&] { return b.calls().size() == 1; }));
}

TEST(AlertDispatch, AnExporterThatCannotBeReachedIsCounted) {
  // Port 1 of the loopback: nothing listens.
  Exporter a("a", kModules + "alerts:\n  instance: hosta\n");
  const auto body = json::parse(a.post_alerts(probe_alert("127.0.0.1:1", "f3")).body);
  ASSERT_EQ(body["sent_on"].size(), 1u);
  EXPECT_TRUE(eventually([&] {
    return http_get(a.port(), "/metrics")
               .body.find("ibprobe_alert_sent_on_requests_total{result=\"failed\"} 1\n") !=
           std::string::npos;
  }));
}

}  // namespace
}  // namespace ibprobe::testing
