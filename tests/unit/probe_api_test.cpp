// The probe endpoints as Prometheus and runbooks see them, through Routes::handle (no sockets),
// with a stand-in for the verbs run.
#include "probe_api.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "collect_helpers.h"
#include "exporter_test_helpers.h"
#include "hold.h"
#include "ibprobe/exporter.h"
#include "probe_config.h"
#include "sysfs_fixture.h"

namespace ibprobe::testing {
namespace {

using namespace std::chrono_literals;
using exporter::HttpRequest;
using exporter::HttpResponse;
using exporter::ProbeService;
using nlohmann::json;
using probes::FailureKind;
using probes::ProbeFailure;
using probes::ProbeOutcome;
using probes::RunOptions;
using ::testing::HasSubstr;

// One series of the text exposition format, its labels in name order so the expectation does
// not depend on the order the exporter writes them in.
std::string series(const std::string& name, std::map<std::string, std::string> labels = {}) {
  std::string out = name;
  if (labels.empty()) return out;
  out += "{";
  bool first = true;
  for (const auto& [label, value] : labels) {
    out += (first ? "" : ",") + label + "=\"" + value + "\"";
    first = false;
  }
  return out + "}";
}

// Every sample of a text-format body, keyed as series() writes them.
std::map<std::string, double> samples(const std::string& body) {
  std::map<std::string, double> out;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line.starts_with("#")) continue;
    std::size_t i = line.find_first_of("{ ");
    const std::string name = line.substr(0, i);
    std::map<std::string, std::string> labels;
    if (line[i] == '{') {
      ++i;
      while (line[i] != '}') {
        const auto equals = line.find('=', i);
        const auto label = line.substr(i, equals - i);
        std::string value;
        for (i = equals + 2; line[i] != '"'; ++i) {
          if (line[i] == '\\') ++i;
          value += line[i];
        }
        labels[label] = value;
        ++i;
        if (line[i] == ',') ++i;
      }
      ++i;
    }
    EXPECT_TRUE(out.emplace(series(name, labels), std::stod(line.substr(i + 1))).second)
        << "series repeated: " << line;
  }
  return out;
}

int type_lines(const std::string& body, const std::string& family) {
  int count = 0;
  for (std::size_t at = 0; (at = body.find("# TYPE " + family + " ", at)) != std::string::npos;
       ++at) {
    ++count;
  }
  return count;
}

std::optional<std::string> header(const HttpResponse& response, const std::string& name) {
  for (const auto& [key, value] : response.headers) {
    if (key == name) return value;
  }
  return std::nullopt;
}

// A bandwidth run with everything /probe can report: checks, a diagnosis, and counter deltas of
// both ports and a fabric port, some of them unknown.
ProbeOutcome bandwidth_outcome(const probes::ProbeSpec& spec) {
  ProbeOutcome outcome;
  outcome.spec = spec;
  outcome.peer = "192.0.2.2:9471";
  outcome.setup_seconds = 0.125;
  outcome.window_seconds = 0.5;
  // 5000 messages of 64 KiB in 0.25 s.
  outcome.bandwidth = probes::BandwidthStats{5000, 0.25, 1310720000, 20000, 1.5e9};
  outcome.checks = {{"local", "port_active", true, "ACTIVE"},
                    {"both", "rate_match", false, "100 vs 200 Gb/s"},
                    {"local", "cpu_frequency", false, "cpu 1: governor powersave, not performance"},
                    {"peer", "cpu_frequency", false, "no cpufreq policy for cpu 0", false}};
  outcome.local_deltas = {
      {"port_xmit_data", probes::DeltaStatus::kValid, 335544320, false, "informative"},
      {"symbol_error", probes::DeltaStatus::kValid, 0, true, "error"},
      {"ethtool/rx_prio3_pause", probes::DeltaStatus::kValid, 4, false, "congestion", 3},
  };
  outcome.peer_deltas = {
      {"port_rcv_data", probes::DeltaStatus::kReset, std::nullopt, false, "informative"},
      {"hw_counters/out_of_buffer", probes::DeltaStatus::kMissing, std::nullopt, true,
       "out_of_buffer"},
  };
  outcome.fabric_deltas = {
      {"0x1a:3",
       {{"port_xmit_wait", probes::DeltaStatus::kSaturated, std::nullopt, false, "informative"}}}};
  outcome.link.link_bytes_per_second = 671088640;
  outcome.link.line_rate_ratio = 0.105;
  outcome.link.moved_error_counters = {"peer:hw_counters/out_of_buffer"};
  outcome.link.diagnosis = probes::Diagnosis::kHostSideBottleneck;
  outcome.link.explanation = "far below line rate, no transmit wait";
  return outcome;
}

ProbeOutcome latency_outcome(const probes::ProbeSpec& spec) {
  ProbeOutcome outcome;
  outcome.spec = spec;
  probes::LatencyStats latency;
  latency.samples = 998;
  latency.min_ns = 1200;
  latency.max_ns = 9000;
  latency.typical_ns = 1500;
  latency.average_ns = 1600;
  latency.stdev_ns = 100;
  latency.p99_ns = 4000;
  latency.p99_9_ns = 8000;
  outcome.latency = latency;
  outcome.link.diagnosis = probes::Diagnosis::kInconclusive;
  return outcome;
}

class ProbeApiTest : public OnePortExporterTest {
 protected:
  ProbeApiTest() {
    config_path_ = std::filesystem::temp_directory_path() /
                   ("probe_api_test_" + std::to_string(::getpid()) + ".yml");
  }

  ~ProbeApiTest() override {
    hold_.release();
    routes_.reset();
    api_.reset();
    service_.reset();
    std::filesystem::remove(config_path_);
  }

  // `config_text` empty: the built-in modules, no file.
  void start(const std::string& config_text = "") {
    ProbeService::Options options;
    options.local = probes::LocalPort{"mlx5_0", 1, tree_.root()};
    if (!config_text.empty()) {
      write_config(config_text);
      options.config_file = config_path_.string();
    }
    service_ = std::make_unique<ProbeService>(
        std::move(options),
        [this](const probes::LocalPort&, const std::string& host, const std::string& port,
               const probes::ValidSpec& valid,
               const RunOptions& run_options) -> std::expected<ProbeOutcome, probes::Error> {
          const auto& spec = valid.spec();
          std::function<ProbeOutcome(const probes::ProbeSpec&, const RunOptions&)> behaviour;
          {
            std::lock_guard lock(mutex_);
            specs_.push_back(spec);
            targets_.push_back(host + " " + port);
            behaviour = behaviour_;
          }
          // A stand-in fails by throwing, as the run inside run_probe does; run_probe's
          // conversion makes that the run's error.
          if (behaviour) {
            try {
              return behaviour(spec, run_options);
            } catch (...) {
              return std::unexpected(probes::current_exception_as_error());
            }
          }
          return spec.test == probes::TestKind::kLatency ? latency_outcome(spec)
                                                         : bandwidth_outcome(spec);
        });
    api_ = std::make_unique<exporter::ProbeApi>(*service_);
    routes_ = std::make_unique<exporter::Routes>(config_, *scraper_, api_.get());
  }

  void write_config(const std::string& text) const { std::ofstream(config_path_) << text; }

  void behave(std::function<ProbeOutcome(const probes::ProbeSpec&, const RunOptions&)> b) {
    std::lock_guard lock(mutex_);
    behaviour_ = std::move(b);
  }

  void hold_every_run() {
    behave([this](const probes::ProbeSpec& spec, const RunOptions& options) {
      if (!hold_.wait(options.stop)) {
        cancel_seen_ = true;
        throw ProbeFailure("cancelled", FailureKind::kCancelled);
      }
      return bandwidth_outcome(spec);
    });
  }

  std::vector<probes::ProbeSpec> specs() const {
    std::lock_guard lock(mutex_);
    return specs_;
  }
  std::vector<std::string> targets() const {
    std::lock_guard lock(mutex_);
    return targets_;
  }

  HttpResponse request(const std::string& method, const std::string& path,
                       const std::string& query = "", std::string body = "",
                       std::map<std::string, std::string> headers = {}) const {
    return routes_->handle(HttpRequest{method, path, query, std::move(headers), std::move(body)});
  }
  HttpResponse probe(const std::string& query, std::map<std::string, std::string> headers = {}) {
    return request("GET", "/probe", query, "", std::move(headers));
  }
  json body_json(const HttpResponse& response) const {
    const auto parsed = json::parse(response.body, nullptr, false);
    EXPECT_FALSE(parsed.is_discarded()) << response.body;
    return parsed;
  }
  std::string start_run(const std::string& target, const std::string& module) {
    const auto response =
        request("POST", "/api/v1/probes", "", json{{"target", target}, {"module", module}}.dump());
    EXPECT_EQ(response.status, 202) << response.body;
    return body_json(response).value("id", "");
  }
  json wait_for(const std::string& id) {
    const auto response = request("GET", "/api/v1/probes/" + id, "wait=20s");
    EXPECT_EQ(response.status, 200) << response.body;
    return body_json(response);
  }

  std::filesystem::path config_path_;
  mutable std::mutex mutex_;
  std::function<ProbeOutcome(const probes::ProbeSpec&, const RunOptions&)> behaviour_;
  std::vector<probes::ProbeSpec> specs_;
  std::vector<std::string> targets_;
  Hold hold_;
  std::atomic<bool> cancel_seen_ = false;
  std::unique_ptr<ProbeService> service_;
  std::unique_ptr<exporter::ProbeApi> api_;
  std::unique_ptr<exporter::Routes> routes_;
};

TEST_F(ProbeApiTest, ProbesOffAnswer503) {
  routes_ = std::make_unique<exporter::Routes>(config_, *scraper_);
  for (const auto& [method, path] :
       std::vector<std::pair<std::string, std::string>>{{"GET", "/probe"},
                                                        {"GET", "/api/v1/probes"},
                                                        {"POST", "/api/v1/probes"},
                                                        {"GET", "/api/v1/probes/1"},
                                                        {"POST", "/-/reload"}}) {
    EXPECT_EQ(request(method, path, "target=h:1&module=write_bw").status, 503)
        << method << " " << path;
  }
  const auto metrics = request("GET", "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_EQ(metrics.body.find("ibprobe_probes_total"), std::string::npos);
  EXPECT_EQ(metrics.body.find("probe_success"), std::string::npos);
}

TEST_F(ProbeApiTest, WrongMethodsAnswer405WithAllow) {
  start();
  struct Case {
    std::string method, path, allow;
  };
  for (const auto& c : std::vector<Case>{{"POST", "/probe", "GET"},
                                         {"DELETE", "/probe", "GET"},
                                         // HEAD would start a probe nobody reads the result of.
                                         {"HEAD", "/probe", "GET"},
                                         {"PUT", "/api/v1/probes", "GET, HEAD, POST"},
                                         {"DELETE", "/api/v1/probes/1", "GET, HEAD"},
                                         {"GET", "/-/reload", "POST, PUT"},
                                         {"POST", "/metrics", "GET, HEAD"}}) {
    const auto response = request(c.method, c.path);
    EXPECT_EQ(response.status, 405) << c.method << " " << c.path;
    EXPECT_EQ(header(response, "Allow"), std::optional<std::string>(c.allow))
        << c.method << " " << c.path;
  }
  // Near misses of the API's paths are not the API.
  EXPECT_EQ(request("GET", "/api/v1/probes/").status, 404);
  EXPECT_EQ(request("GET", "/api/v1/probesX").status, 404);
  EXPECT_EQ(request("GET", "/probe/").status, 404);
  EXPECT_EQ(specs().size(), 0u);
}

TEST_F(ProbeApiTest, ProbeSuccessBandwidth) {
  start();
  const auto response = probe("target=192.0.2.2:9471&module=write_bw");
  ASSERT_EQ(response.status, 200) << response.body;
  EXPECT_EQ(response.content_type, "text/plain; version=0.0.4; charset=utf-8");
  const auto got = samples(response.body);
  EXPECT_EQ(got.at("probe_success"), 1);
  EXPECT_GE(got.at("probe_duration_seconds"), 0);
  EXPECT_EQ(got.at("rdma_probe_bandwidth_bytes_per_second"), 1310720000);
  EXPECT_EQ(got.at("rdma_probe_bandwidth_peak_bytes_per_second"), 1.5e9);
  EXPECT_EQ(got.at("rdma_probe_message_rate_per_second"), 20000);
  EXPECT_EQ(got.at("rdma_probe_setup_seconds"), 0.125);
  EXPECT_EQ(got.at("rdma_probe_link_bytes_per_second"), 671088640);
  EXPECT_EQ(got.at("rdma_probe_line_rate_ratio"), 0.105);
  EXPECT_EQ(got.at(series("rdma_probe_check", {{"side", "local"}, {"check", "port_active"}})), 1);
  EXPECT_EQ(got.at(series("rdma_probe_check", {{"side", "both"}, {"check", "rate_match"}})), 0);
  EXPECT_EQ(got.at(series("rdma_probe_check", {{"side", "local"}, {"check", "cpu_frequency"}})), 0);
  // The peer's cores have no cpufreq policy: neither a pass nor a failure.
  EXPECT_FALSE(
      got.contains(series("rdma_probe_check", {{"side", "peer"}, {"check", "cpu_frequency"}})));
  // An error-class counter moved (or is unknown): the run is not clean.
  EXPECT_EQ(got.at(series("rdma_probe_check", {{"side", "both"}, {"check", "errors_clean"}})), 0);
  EXPECT_EQ(got.at(series("rdma_probe_diagnosis", {{"diagnosis", "host_side_bottleneck"}})), 1);
  EXPECT_EQ(
      got.at(series("rdma_probe_counter_delta",
                    {{"side", "local"}, {"counter", "port_xmit_data"}, {"class", "informative"}})),
      335544320);
  EXPECT_EQ(got.at(series("rdma_probe_counter_delta",
                          {{"side", "local"}, {"counter", "symbol_error"}, {"class", "error"}})),
            0);
  // Unknown deltas are flagged with why, never reported as a number.
  for (const auto& [side, counter, counter_class, status] : std::vector<std::array<std::string, 4>>{
           {"peer", "port_rcv_data", "informative", "reset"},
           {"peer", "hw_counters/out_of_buffer", "out_of_buffer", "missing"},
           {"fabric:0x1a:3", "port_xmit_wait", "informative", "saturated"}}) {
    EXPECT_EQ(
        got.at(series(
            "rdma_probe_counter_delta_unknown",
            {{"side", side}, {"counter", counter}, {"class", counter_class}, {"status", status}})),
        1)
        << side << " " << counter;
  }
  EXPECT_FALSE(got.contains(
      series("rdma_probe_counter_delta", {{"side", "peer"}, {"counter", "port_rcv_data"}})));
  for (const auto& [key, value] : got) {
    EXPECT_FALSE(key.starts_with("rdma_probe_latency")) << key;
    EXPECT_FALSE(key.starts_with("rdma_probe_failure")) << key;
    // /probe answers for one run: Prometheus adds the target labels itself.
    EXPECT_EQ(key.find("target="), std::string::npos) << key;
  }
  EXPECT_EQ(type_lines(response.body, "rdma_probe_check"), 1);
  EXPECT_EQ(type_lines(response.body, "rdma_probe_counter_delta"), 1);
  EXPECT_EQ(targets(), std::vector<std::string>{"192.0.2.2 9471"});
}

TEST_F(ProbeApiTest, ProbeSuccessLatency) {
  start();
  const auto response = probe("target=node2&module=read_lat");
  ASSERT_EQ(response.status, 200) << response.body;
  const auto got = samples(response.body);
  EXPECT_EQ(got.at("probe_success"), 1);
  // Seconds, the base unit, from the nanoseconds the stats carry.
  EXPECT_DOUBLE_EQ(got.at(series("rdma_probe_latency_seconds", {{"quantile", "0.5"}})), 1.5e-6);
  EXPECT_DOUBLE_EQ(got.at(series("rdma_probe_latency_seconds", {{"quantile", "0.99"}})), 4e-6);
  EXPECT_DOUBLE_EQ(got.at(series("rdma_probe_latency_seconds", {{"quantile", "0.999"}})), 8e-6);
  EXPECT_DOUBLE_EQ(got.at("rdma_probe_latency_min_seconds"), 1.2e-6);
  EXPECT_DOUBLE_EQ(got.at("rdma_probe_latency_max_seconds"), 9e-6);
  EXPECT_DOUBLE_EQ(got.at("rdma_probe_latency_average_seconds"), 1.6e-6);
  EXPECT_DOUBLE_EQ(got.at("rdma_probe_latency_stdev_seconds"), 1e-7);
  // One message per average latency.
  EXPECT_DOUBLE_EQ(got.at("rdma_probe_message_rate_per_second"), 625000);
  EXPECT_EQ(got.at(series("rdma_probe_diagnosis", {{"diagnosis", "inconclusive"}})), 1);
  EXPECT_EQ(got.at(series("rdma_probe_check", {{"side", "both"}, {"check", "errors_clean"}})), 1);
  for (const auto& [key, value] : got) {
    EXPECT_FALSE(key.starts_with("rdma_probe_bandwidth")) << key;
    EXPECT_FALSE(key.starts_with("rdma_probe_counter_delta")) << key;
  }
  // A bare host goes to the responder's default port.
  EXPECT_EQ(targets(), std::vector<std::string>{"node2 9471"});
}

TEST_F(ProbeApiTest, ProbeFailureBody) {
  start();
  behave([](const probes::ProbeSpec&, const RunOptions&) -> ProbeOutcome {
    throw ProbeFailure("connect to 192.0.2.9:9471: connection refused", FailureKind::kUnreachable);
  });
  // blackbox_exporter's contract: a failed probe is a successful scrape saying probe_success 0.
  const auto response = probe("target=192.0.2.9&module=send_bw");
  ASSERT_EQ(response.status, 200) << response.body;
  const auto got = samples(response.body);
  EXPECT_EQ(got.at("probe_success"), 0);
  EXPECT_EQ(got.at(series("rdma_probe_failure", {{"reason", "unreachable"}})), 1);
  EXPECT_TRUE(got.contains("probe_duration_seconds"));
  for (const auto& [key, value] : got) {
    EXPECT_TRUE(key.starts_with("probe_") || key.starts_with("rdma_probe_failure")) << key;
  }

  const auto debug = probe("target=192.0.2.9&module=send_bw&debug=true");
  ASSERT_EQ(debug.status, 200);
  EXPECT_EQ(debug.content_type.find("version=0.0.4"), std::string::npos)
      << "a debug page is not exposition format";
  EXPECT_TRUE(debug.body.starts_with("Logs for the probe:")) << debug.body;
  EXPECT_NE(debug.body.find("send_bw"), std::string::npos);
  EXPECT_NE(debug.body.find("connection refused"), std::string::npos) << debug.body;
  EXPECT_NE(debug.body.find("unreachable"), std::string::npos);
  EXPECT_NE(debug.body.find("Metrics that would have been returned:"), std::string::npos);
  EXPECT_NE(debug.body.find("probe_success 0"), std::string::npos);
}

TEST_F(ProbeApiTest, DebugShowsTheResolvedModule) {
  start(
      "modules:\n  fab:\n    kind: write_bw\n    message_size: 4096\n"
      "    fabric_ports: [\"7:1\"]\n");
  const auto debug = probe("target=h:1&module=fab&debug=true");
  ASSERT_EQ(debug.status, 200) << debug.body;
  EXPECT_NE(debug.body.find("\"message_size\":4096"), std::string::npos) << debug.body;
  EXPECT_NE(debug.body.find("7:1"), std::string::npos) << debug.body;
  EXPECT_NE(debug.body.find("Check both/rate_match: FAILED"), std::string::npos) << debug.body;
  EXPECT_NE(
      debug.body.find("Check peer/cpu_frequency: not applicable (no cpufreq policy for cpu 0)"),
      std::string::npos)
      << debug.body;
  EXPECT_NE(debug.body.find("probe_success 1"), std::string::npos);
}

// Prometheus says how long it will wait; the run must end half a second before that, in the
// whole seconds a spec counts, and never later than the module allows.
TEST_F(ProbeApiTest, ScrapeTimeoutHeaderShortensTheRun) {
  start("modules:\n  bw:\n    kind: write_bw\n    timeout: 20s\n");
  const std::string header = "x-prometheus-scrape-timeout-seconds";
  ASSERT_EQ(probe("target=h:1&module=bw", {{header, "5"}}).status, 200);
  ASSERT_EQ(probe("target=h:1&module=bw", {{header, "10.4"}}).status, 200);
  ASSERT_EQ(probe("target=h:1&module=bw", {{header, "60"}}).status, 200);
  ASSERT_EQ(probe("target=h:1&module=bw").status, 200);
  // The client's own bound and the scrape's: the smaller wins.
  ASSERT_EQ(probe("target=h:1&module=bw&timeout=3", {{header, "10"}}).status, 200);
  ASSERT_EQ(probe("target=h:1&module=bw&timeout=30", {{header, "8"}}).status, 200);
  const auto got = specs();
  ASSERT_EQ(got.size(), 6u);
  EXPECT_EQ(got[0].timeout_seconds, 4u);   // 5 - 0.5 = 4.5
  EXPECT_EQ(got[1].timeout_seconds, 9u);   // 10.4 - 0.5 = 9.9
  EXPECT_EQ(got[2].timeout_seconds, 20u);  // the module's own
  EXPECT_EQ(got[3].timeout_seconds, 20u);
  EXPECT_EQ(got[4].timeout_seconds, 3u);
  EXPECT_EQ(got[5].timeout_seconds, 7u);  // 8 - 0.5 = 7.5

  // Too little time left to run at all, or a header that is no number.
  const auto tiny = probe("target=h:1&module=bw", {{header, "1.2"}});
  EXPECT_EQ(tiny.status, 400);
  EXPECT_NE(tiny.body.find("at least 1 second"), std::string::npos) << tiny.body;
  const auto junk = probe("target=h:1&module=bw", {{header, "soon"}});
  EXPECT_EQ(junk.status, 400);
  EXPECT_NE(junk.body.find("X-Prometheus-Scrape-Timeout-Seconds"), std::string::npos);
  EXPECT_EQ(specs().size(), 6u);
}

// A run still going when the scrape's time is up is abandoned: cancelled through RunOptions and
// reported as a timeout, in time for Prometheus to read the answer.
TEST_F(ProbeApiTest, RunPastTheScrapeTimeoutIsAbandoned) {
  start();
  hold_every_run();
  const auto before = std::chrono::steady_clock::now();
  const auto response =
      probe("target=h:1&module=write_bw", {{"x-prometheus-scrape-timeout-seconds", "2"}});
  const auto took = std::chrono::steady_clock::now() - before;
  ASSERT_EQ(response.status, 200) << response.body;
  EXPECT_TRUE(cancel_seen_);
  const auto got = samples(response.body);
  EXPECT_EQ(got.at("probe_success"), 0);
  EXPECT_EQ(got.at(series("rdma_probe_failure", {{"reason", "timeout"}})), 1);
  EXPECT_GE(took, 1400ms);
  EXPECT_LT(took, 10s);
}

TEST_F(ProbeApiTest, BadProbeRequestsAnswer400WithTheReason) {
  start();
  struct Case {
    std::string query, why;
  };
  for (const auto& c : std::vector<Case>{
           {"module=write_bw", "target is missing"},
           {"target=h:1", "module is missing"},
           {"target=h:1&module=write_bandwidth", "unknown module 'write_bandwidth'"},
           {"target=h:1&module=write_bw&module=read_bw", "more than once"},
           {"target=h:1&module=write_bw&hostname=x", "unknown parameter 'hostname'"},
           {"target=h:1&module=write_bw&debug=yes", "debug must be true or false"},
           {"target=h:1%0a&module=write_bw", "control characters"},
           {"target=h:99999&module=write_bw", "port must be 1-65535"},
           {"target=fd00::1&module=write_bw", "brackets"},
           {"target=h:1&module=write_bw&timeout=0.5", "at least 1 second"},
           {"target=%zz&module=write_bw", "%-escape"},
       }) {
    const auto response = probe(c.query);
    EXPECT_EQ(response.status, 400) << c.query;
    EXPECT_NE(response.body.find(c.why), std::string::npos) << c.query << ": " << response.body;
  }
  EXPECT_EQ(specs().size(), 0u);
}

TEST_F(ProbeApiTest, TargetOutsideTheAllowlistIs403) {
  start("modules:\n  write_bw:\n    kind: write_bw\nallowed_targets:\n  - 192.0.2.0/24\n");
  const auto refused = probe("target=198.51.100.1:9471&module=write_bw");
  EXPECT_EQ(refused.status, 403);
  EXPECT_NE(refused.body.find("198.51.100.1"), std::string::npos) << refused.body;
  const auto api = request("POST", "/api/v1/probes", "",
                           R"({"target": "[2001:db8::1]:9471", "module": "write_bw"})");
  EXPECT_EQ(api.status, 403);
  EXPECT_EQ(body_json(api)["error"]["code"], "target_not_allowed");
  EXPECT_EQ(specs().size(), 0u);
  EXPECT_EQ(probe("target=192.0.2.77:9471&module=write_bw").status, 200);
  EXPECT_EQ(specs().size(), 1u);
}

TEST_F(ProbeApiTest, FullQueueIs429WithRetryAfter) {
  start("modules:\n  bw:\n    kind: write_bw\n    timeout: 12s\nscheduler:\n  queue_length: 0\n");
  hold_every_run();
  const auto id = start_run("h:1", "bw");
  ASSERT_FALSE(id.empty());
  for (int i = 0; i < 2000 && specs().empty(); ++i) std::this_thread::sleep_for(2ms);
  ASSERT_EQ(specs().size(), 1u);
  const auto api = request("POST", "/api/v1/probes", "", R"({"target":"h:1","module":"bw"})");
  EXPECT_EQ(api.status, 429);
  EXPECT_EQ(body_json(api)["error"]["code"], "queue_full");
  EXPECT_EQ(header(api, "Retry-After"), std::optional<std::string>("12"));
  const auto scrape = probe("target=h:1&module=bw");
  EXPECT_EQ(scrape.status, 429);
  EXPECT_EQ(header(scrape, "Retry-After"), std::optional<std::string>("12"));
  hold_.release();
  EXPECT_EQ(wait_for(id)["state"], "succeeded");
}

TEST_F(ProbeApiTest, AsyncApiStartAndWait) {
  start();
  const auto response =
      request("POST", "/api/v1/probes", "", R"({"target":"192.0.2.2:9471","module":"write_bw"})");
  ASSERT_EQ(response.status, 202) << response.body;
  EXPECT_EQ(response.content_type, "application/json");
  const auto started = body_json(response);
  ASSERT_TRUE(started["id"].is_string()) << started;
  const std::string id = started["id"];
  EXPECT_EQ(header(response, "Location"), std::optional<std::string>("/api/v1/probes/" + id));

  const auto run = wait_for(id);
  EXPECT_EQ(run["id"], id);
  EXPECT_EQ(run["state"], "succeeded");
  EXPECT_EQ(run["success"], true);
  EXPECT_EQ(run["target"], "192.0.2.2:9471");
  EXPECT_EQ(run["module"], "write_bw");
  EXPECT_EQ(run["spec"]["operation"], "write");
  EXPECT_EQ(run["spec"]["test"], "bw");
  EXPECT_EQ(run["spec"]["message_size"], 65536);
  EXPECT_EQ(run["spec"]["iterations"], 5000);
  EXPECT_LE(run["submitted"].get<double>(), run["started"].get<double>());
  EXPECT_LE(run["started"].get<double>(), run["finished"].get<double>());
  EXPECT_FALSE(run.contains("failure"));
  const auto& result = run["result"];
  EXPECT_EQ(result["bandwidth"]["bytes_per_second"], 1310720000);
  // perftest's MiB/s: 2^20 bytes.
  EXPECT_DOUBLE_EQ(result["bandwidth"]["mebibytes_per_second"].get<double>(), 1250);
  EXPECT_EQ(result["link"]["diagnosis"], "host_side_bottleneck");
  // The receive depth the run used: a write's is perftest's DEF_RX_RDMA, 1.
  EXPECT_EQ(result["used"]["rx_depth"], 1);
  EXPECT_TRUE(result["deltas"]["peer"][0]["delta"].is_null());
  EXPECT_EQ(result["deltas"]["peer"][0]["status"], "reset");
  EXPECT_EQ(result["deltas"]["fabric"]["0x1a:3"][0]["counter"], "port_xmit_wait");
  // A netdev's per-priority statistic says which priority it counts; the others say none.
  EXPECT_EQ(result["deltas"]["local"][2]["priority"], 3);
  EXPECT_FALSE(result["deltas"]["local"][0].contains("priority"));
  ASSERT_EQ(result["checks"].size(), 4u);
  EXPECT_EQ(result["checks"][2], json({{"side", "local"},
                                       {"name", "cpu_frequency"},
                                       {"applicable", true},
                                       {"passed", false},
                                       {"detail", "cpu 1: governor powersave, not performance"}}));
  EXPECT_EQ(result["checks"][3], json({{"side", "peer"},
                                       {"name", "cpu_frequency"},
                                       {"applicable", false},
                                       {"passed", nullptr},
                                       {"detail", "no cpufreq policy for cpu 0"}}));
}

TEST_F(ProbeApiTest, AsyncApiShowsQueuedRunningAndFailed) {
  start();
  hold_every_run();
  const auto first = start_run("h:1", "write_bw");
  for (int i = 0; i < 2000 && specs().empty(); ++i) std::this_thread::sleep_for(2ms);
  const auto second = start_run("h:1", "read_lat");
  const auto running = body_json(request("GET", "/api/v1/probes/" + first));
  EXPECT_EQ(running["state"], "running");
  EXPECT_TRUE(running.contains("started"));
  EXPECT_FALSE(running.contains("finished"));
  EXPECT_FALSE(running.contains("success"));
  const auto queued = body_json(request("GET", "/api/v1/probes/" + second));
  EXPECT_EQ(queued["state"], "queued");
  EXPECT_FALSE(queued.contains("started"));
  // A wait that ends first answers with the run as it is.
  const auto waited = request("GET", "/api/v1/probes/" + second, "wait=200ms");
  EXPECT_EQ(waited.status, 200);
  EXPECT_EQ(body_json(waited)["state"], "queued");

  behave([](const probes::ProbeSpec&, const RunOptions&) -> ProbeOutcome {
    throw ProbeFailure("peer went away", FailureKind::kPeerLost);
  });
  hold_.release();
  EXPECT_EQ(wait_for(first)["state"], "succeeded");
  const auto failed = wait_for(second);
  EXPECT_EQ(failed["state"], "failed");
  EXPECT_EQ(failed["success"], false);
  EXPECT_EQ(failed["failure"]["reason"], "peer_lost");
  EXPECT_EQ(failed["failure"]["message"], "peer went away");
  EXPECT_FALSE(failed.contains("result"));
}

TEST_F(ProbeApiTest, AsyncApiRefusals) {
  start();
  const auto unknown = request("GET", "/api/v1/probes/424242");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(body_json(unknown)["error"]["code"], "not_found");
  for (const auto* id : {"abc", "-1", "1x", "18446744073709551616"}) {
    const auto bad = request("GET", std::string("/api/v1/probes/") + id);
    EXPECT_EQ(bad.status, 400) << id;
    EXPECT_EQ(body_json(bad)["error"]["code"], "bad_request") << id;
  }
  const auto id = start_run("h:1", "write_bw");
  for (const auto* query : {"wait=301s", "wait=forever", "wait=-1", "limit=1", "wait=1&wait=2"}) {
    EXPECT_EQ(request("GET", "/api/v1/probes/" + id, query).status, 400) << query;
  }
  EXPECT_EQ(request("GET", "/api/v1/probes/" + id, "wait=5m").status, 200);

  struct Case {
    std::string body;
    int status;
    std::string code;
  };
  for (const auto& c : std::vector<Case>{
           {"not json", 400, "bad_request"},
           {R"({"target":"h:1"})", 400, "bad_request"},
           {R"({"target":"h:1","module":"m","extra":1})", 400, "bad_request"},
           {R"({"target":"h:1","module":"nope"})", 400, "unknown_module"},
           {R"({"target":"h:x","module":"write_bw"})", 400, "bad_target"},
           {R"({"target":"h:1","module":"write_bw","timeout_seconds":0.2})", 400, "bad_timeout"},
       }) {
    const auto response = request("POST", "/api/v1/probes", "", c.body);
    EXPECT_EQ(response.status, c.status) << c.body;
    const auto error = body_json(response)["error"];
    EXPECT_EQ(error["code"], c.code) << c.body;
    EXPECT_TRUE(error["message"].is_string() && !error["message"].get<std::string>().empty());
  }
}

TEST_F(ProbeApiTest, ListIsNewestFirstWithALimit) {
  start();
  std::vector<std::string> ids;
  for (const auto* module : {"write_bw", "read_bw", "send_lat", "write_lat"}) {
    ids.push_back(start_run("h:1", module));
    wait_for(ids.back());
  }
  const auto all = body_json(request("GET", "/api/v1/probes"));
  ASSERT_EQ(all["probes"].size(), 4u) << all;
  EXPECT_EQ(all["probes"][0]["id"], ids[3]);
  EXPECT_EQ(all["probes"][0]["module"], "write_lat");
  EXPECT_EQ(all["probes"][3]["id"], ids[0]);
  const auto two = body_json(request("GET", "/api/v1/probes", "limit=2"));
  ASSERT_EQ(two["probes"].size(), 2u);
  EXPECT_EQ(two["probes"][0]["id"], ids[3]);
  EXPECT_EQ(two["probes"][1]["id"], ids[2]);
  for (const auto* query : {"limit=0", "limit=abc", "limit=-1", "limit=4097", "since=1"}) {
    EXPECT_EQ(request("GET", "/api/v1/probes", query).status, 400) << query;
  }
}

TEST_F(ProbeApiTest, ReloadSwapsModulesAndRefusesABadFile) {
  start("modules:\n  first:\n    kind: write_bw\n");
  write_config("modules:\n  second:\n    kind: send_lat\n  third:\n    kind: read_bw\n");
  const auto ok = request("POST", "/-/reload");
  ASSERT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(body_json(ok)["status"], "reloaded");
  EXPECT_EQ(body_json(ok)["modules"], (json{"second", "third"}));
  EXPECT_EQ(probe("target=h:1&module=first").status, 400);
  EXPECT_EQ(probe("target=h:1&module=second").status, 200);

  write_config("modules:\n  fourth:\n    kind: send_lat\n    tx_depth: 8\n");
  const auto refused = request("PUT", "/-/reload");
  EXPECT_EQ(refused.status, 400);
  const auto error = body_json(refused)["error"];
  EXPECT_EQ(error["code"], "invalid_config");
  EXPECT_NE(error["message"].get<std::string>().find("line 3"), std::string::npos) << error;
  // The refused file changed nothing.
  EXPECT_EQ(probe("target=h:1&module=fourth").status, 400);
  EXPECT_EQ(probe("target=h:1&module=second").status, 200);
}

TEST_F(ProbeApiTest, ReloadWithoutAFileIsRefused) {
  start();
  const auto response = request("POST", "/-/reload");
  EXPECT_EQ(response.status, 400);
  EXPECT_EQ(body_json(response)["error"]["code"], "invalid_config");
  EXPECT_EQ(probe("target=h:1&module=write_bw").status, 200);
}

TEST_F(ProbeApiTest, MetricsCarryTheLastResultPerTargetAndModule) {
  start();
  behave([](const probes::ProbeSpec& spec, const RunOptions&) -> ProbeOutcome {
    if (spec.operation == probes::Operation::kRead) {
      throw ProbeFailure("handshake timed out", FailureKind::kTimeout);
    }
    return spec.test == probes::TestKind::kLatency ? latency_outcome(spec)
                                                   : bandwidth_outcome(spec);
  });
  ASSERT_EQ(probe("target=a:1&module=write_bw").status, 200);
  ASSERT_EQ(probe("target=a:1&module=write_bw").status, 200);
  ASSERT_EQ(probe("target=b:1&module=read_bw").status, 200);
  ASSERT_EQ(wait_for(start_run("a:1", "send_lat"))["state"], "succeeded");

  const auto response = request("GET", "/metrics");
  ASSERT_EQ(response.status, 200);
  const auto got = samples(response.body);
  const std::map<std::string, std::string> a_bw = {{"target", "a:1"}, {"module", "write_bw"}};
  const std::map<std::string, std::string> b_read = {{"target", "b:1"}, {"module", "read_bw"}};
  const std::map<std::string, std::string> a_lat = {{"target", "a:1"}, {"module", "send_lat"}};
  EXPECT_EQ(got.at(series("probe_success", a_bw)), 1);
  EXPECT_EQ(got.at(series("probe_success", b_read)), 0);
  EXPECT_EQ(got.at(series("probe_success", a_lat)), 1);
  EXPECT_EQ(got.at(series("rdma_probe_bandwidth_bytes_per_second", a_bw)), 1310720000);
  auto with = [](std::map<std::string, std::string> labels, const std::string& name,
                 const std::string& value) {
    labels[name] = value;
    return labels;
  };
  EXPECT_EQ(got.at(series("rdma_probe_failure", with(b_read, "reason", "timeout"))), 1);
  EXPECT_DOUBLE_EQ(got.at(series("rdma_probe_latency_seconds", with(a_lat, "quantile", "0.5"))),
                   1.5e-6);
  EXPECT_EQ(got.at(series("rdma_probe_counter_delta_unknown",
                          with(with(with(with(a_bw, "side", "peer"), "counter", "port_rcv_data"),
                                    "class", "informative"),
                               "status", "reset"))),
            1);
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const double last_run = got.at(series("rdma_probe_last_run_timestamp_seconds", a_bw));
  EXPECT_LE(last_run, now);
  EXPECT_GT(last_run, now - 60);
  EXPECT_EQ(got.at(series("ibprobe_probes_total", {{"module", "write_bw"}, {"result", "success"}})),
            2);
  EXPECT_EQ(got.at(series("ibprobe_probes_total", {{"module", "read_bw"}, {"result", "failure"}})),
            1);
  EXPECT_EQ(got.at(series("ibprobe_probes_total", {{"module", "send_lat"}, {"result", "success"}})),
            1);
  EXPECT_FALSE(got.contains(
      series("ibprobe_probes_total", {{"module", "write_bw"}, {"result", "failure"}})));
  EXPECT_FALSE(got.contains("probe_success")) << "an unlabelled series has no place on /metrics";
  // One family each, however many pairs it carries, and the port counters still there.
  EXPECT_EQ(type_lines(response.body, "probe_success"), 1);
  EXPECT_EQ(type_lines(response.body, "rdma_probe_message_rate_per_second"), 1);
  EXPECT_NE(response.body.find("# TYPE ibprobe_probes_total counter"), std::string::npos);
  EXPECT_NE(response.body.find("rdma_port_data_transmitted_bytes_total{"), std::string::npos);
}

// kind: verify reaches the runner as the cases and options the module names, and its table comes
// back in the API's result and as per-case series on /metrics.
TEST_F(ProbeApiTest, VerifyModulesRunTheirCasesAndReportTheTable) {
  start(
      "modules:\n"
      "  suite:\n"
      "    kind: verify\n"
      "    cases: [qp_rebuild, delayed_recv]\n"
      "    messages: 80\n"
      "    recv_delay: 30ms\n"
      "    seed: 99\n"
      "    timeout: 40s\n");
  std::vector<probes::verify::Case> seen_cases;
  probes::verify::Options seen_options;
  behave([&](const probes::ProbeSpec& spec, const RunOptions& options) -> ProbeOutcome {
    seen_cases = options.verify_cases;
    seen_options = options.verify_options;
    ProbeOutcome outcome;
    outcome.spec = spec;
    outcome.verify_results = {
        {probes::verify::Case::kDelayedRecv, probes::verify::Verdict::kPass, 1.5, {"RNR NAKs 9"}},
        {probes::verify::Case::kQpRebuild, probes::verify::Verdict::kFail, 2.5, {"QP state RTS"}}};
    return outcome;
  });
  const auto run = wait_for(start_run("a:1", "suite"));
  ASSERT_EQ(run["state"], "succeeded") << run.dump();
  EXPECT_THAT(seen_cases, ::testing::ElementsAre(probes::verify::Case::kDelayedRecv,
                                                 probes::verify::Case::kQpRebuild));
  EXPECT_EQ(seen_options.messages, 80u);
  EXPECT_EQ(seen_options.recv_delay_ms, 30u);
  EXPECT_EQ(seen_options.seed, 99u);
  ASSERT_EQ(specs().size(), 1u);
  EXPECT_EQ(specs()[0].timeout_seconds, 40u);
  const auto& cases = run["result"]["verify"]["cases"];
  ASSERT_EQ(cases.size(), 2u) << run.dump();
  EXPECT_EQ(cases[1]["case"], "qp_rebuild");
  EXPECT_EQ(cases[1]["result"], "FAIL");
  EXPECT_EQ(cases[1]["details"][0], "QP state RTS");
  EXPECT_THAT(run["result"]["verify"]["table"].get<std::string>(),
              HasSubstr("verify: 2 cases, 1 passed, 1 failed, 0 skipped"));

  const auto got = samples(request("GET", "/metrics").body);
  const std::map<std::string, std::string> base = {{"target", "a:1"}, {"module", "suite"}};
  auto with_case = [&](const std::string& name, const std::string& result) {
    auto labels = base;
    labels["case"] = name;
    labels["result"] = result;
    return labels;
  };
  EXPECT_EQ(got.at(series("rdma_probe_verify_case", with_case("qp_rebuild", "fail"))), 1);
  EXPECT_EQ(got.at(series("rdma_probe_verify_case", with_case("qp_rebuild", "pass"))), 0);
  EXPECT_EQ(got.at(series("rdma_probe_verify_case", with_case("delayed_recv", "pass"))), 1);
}

TEST_F(ProbeApiTest, VerifyModulesAreCheckedAgainstTheLimits) {
  start();
  const auto bad = exporter::parse_probe_config(
      "modules:\n  suite: {kind: verify, cases: [soak], soak_duration: 10m}\n");
  ASSERT_FALSE(bad.has_value());
  EXPECT_THAT(bad.error(), HasSubstr("soak: duration"));
  const auto allowed = exporter::parse_probe_config(
      "modules:\n  suite: {kind: verify, cases: [soak], soak_duration: 10m}\n"
      "limits:\n  max_soak_duration: 1h\n");
  ASSERT_TRUE(allowed.has_value()) << allowed.error();
  const auto unknown =
      exporter::parse_probe_config("modules:\n  suite: {kind: verify, cases: [flood]}\n");
  ASSERT_FALSE(unknown.has_value());
  EXPECT_THAT(unknown.error(), HasSubstr("unknown verify case 'flood'"));
}

}  // namespace
}  // namespace ibprobe::testing
