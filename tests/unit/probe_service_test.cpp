#include "probe_service.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "hold.h"
#include "probe_api.h"
#include "probe_metrics.h"

namespace ibprobe::testing {
namespace {

using namespace std::chrono_literals;
using exporter::ProbeParams;
using exporter::ProbeRun;
using exporter::ProbeService;
using exporter::Refusal;
using exporter::RunState;
using probes::FailureKind;
using probes::ProbeFailure;
using probes::ProbeOutcome;
using probes::RunOptions;
using ::testing::HasSubstr;

struct Call {
  probes::LocalPort local;
  std::string host;
  std::string port;
  probes::ProbeSpec spec;
  std::vector<std::string> fabric_ports;
  std::string shared_secret;
  bool has_cancel = false;
};

ProbeOutcome plain_bandwidth_outcome(const probes::ProbeSpec& spec) {
  ProbeOutcome outcome;
  outcome.spec = spec;
  outcome.peer = "192.0.2.2:9471";
  outcome.bandwidth = probes::BandwidthStats{5000, 0.25, 1.31072e9, 20000, std::nullopt};
  return outcome;
}

// The run_probe stand-in: records what it was asked, runs one behaviour, and checks that the
// service never has two runs going and holds the shared gate while one is.
class StandIn {
 public:
  using Behaviour = std::function<ProbeOutcome(const Call&, const RunOptions&)>;

  explicit StandIn(std::shared_ptr<probes::ProbeGate> gate) : gate_(std::move(gate)) {}

  void set(Behaviour behaviour) {
    std::lock_guard lock(mutex_);
    behaviour_ = std::move(behaviour);
  }

  ProbeService::Runner runner() {
    return [this](const probes::LocalPort& local, const std::string& host, const std::string& port,
                  const probes::ValidSpec& spec,
                  const RunOptions& options) -> std::expected<probes::ProbeOutcome, probes::Error> {
      const int now = ++active_;
      int seen = max_active_;
      while (now > seen && !max_active_.compare_exchange_weak(seen, now)) {
      }
      // The gate is ours for the whole run: a peer's run on the responder must be refused.
      if (gate_->try_enter()) {
        gate_free_during_run_ = true;
        gate_->leave();
      }
      Call call{local,
                host,
                port,
                spec.spec(),
                options.fabric_ports,
                options.shared_secret,
                options.stop.stop_possible()};
      Behaviour behaviour;
      {
        std::lock_guard lock(mutex_);
        calls_.push_back(call);
        behaviour = behaviour_;
      }
      struct Leave {
        std::atomic<int>& active;
        ~Leave() { --active; }
      } leave{active_};
      if (!behaviour) return plain_bandwidth_outcome(spec.spec());
      // A stand-in fails by throwing, as the run inside run_probe does; run_probe's conversion
      // makes that the run's error.
      try {
        return behaviour(call, options);
      } catch (...) {
        return std::unexpected(probes::current_exception_as_error());
      }
    };
  }

  std::vector<Call> calls() const {
    std::lock_guard lock(mutex_);
    return calls_;
  }
  std::size_t call_count() const { return calls().size(); }
  int max_active() const { return max_active_; }
  int active() const { return active_; }
  bool gate_free_during_run() const { return gate_free_during_run_; }

 private:
  std::shared_ptr<probes::ProbeGate> gate_;
  mutable std::mutex mutex_;
  Behaviour behaviour_;
  std::vector<Call> calls_;
  std::atomic<int> active_ = 0;
  std::atomic<int> max_active_ = 0;
  std::atomic<bool> gate_free_during_run_ = false;
};

class TempConfig {
 public:
  TempConfig() {
    static std::atomic<int> counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("probe_service_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) +
             ".yml");
  }
  ~TempConfig() { std::filesystem::remove(path_); }
  void write(const std::string& text) const { std::ofstream(path_) << text; }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

class ProbeServiceTest : public ::testing::Test {
 protected:
  // `config_text` empty: the built-in modules.
  // `runner` empty: the stand-in's.
  void start(const std::string& config_text = "", bool with_local = true,
             ProbeService::Runner runner = {}) {
    ProbeService::Options options;
    if (with_local) options.local = probes::LocalPort{"mlx5_0", 1, "/nonexistent"};
    options.shared_secret = "s3cret";
    options.gate = gate_;
    if (!config_text.empty()) {
      config_.write(config_text);
      options.config_file = config_.path();
    }
    service_ = std::make_unique<ProbeService>(std::move(options),
                                              runner ? std::move(runner) : stand_in_.runner());
  }

  void TearDown() override {
    hold_.release();
    service_.reset();
  }

  std::uint64_t submit_ok(const std::string& target, const std::string& module,
                          std::optional<double> timeout = std::nullopt) {
    auto submitted =
        service_->submit({.target = target, .module = module, .timeout_seconds = timeout});
    if (!submitted) {
      ADD_FAILURE() << "refused " << target << " " << module << ": " << submitted.error().code
                    << " " << submitted.error().message;
      return 0;
    }
    return submitted.value();
  }

  Refusal refused(const std::string& target, const std::string& module,
                  std::optional<double> timeout = std::nullopt) {
    auto submitted =
        service_->submit({.target = target, .module = module, .timeout_seconds = timeout});
    if (submitted.has_value()) {
      ADD_FAILURE() << "accepted " << target << " " << module;
      return {};
    }
    return submitted.error();
  }

  ProbeRun finished(std::uint64_t id) {
    const auto run = service_->get(id, 20s);
    if (!run) {
      ADD_FAILURE() << "run " << id << " is unknown";
      return {};
    }
    EXPECT_TRUE(run->state == RunState::kSucceeded || run->state == RunState::kFailed)
        << "run " << id << " still " << exporter::to_string(run->state);
    return *run;
  }

  RunState state(std::uint64_t id) {
    const auto run = service_->get(id, 0ms);
    return run ? run->state : RunState::kFailed;
  }

  // Every run blocks on hold_ until released, or ends as cancelled when the service says so.
  void hold_every_run() {
    stand_in_.set([this](const Call& call, const RunOptions& options) {
      if (!hold_.wait(options.stop)) {
        cancel_seen_ = true;
        throw ProbeFailure("cancelled by the service", FailureKind::kCancelled);
      }
      return plain_bandwidth_outcome(call.spec);
    });
  }

  std::shared_ptr<probes::ProbeGate> gate_ = std::make_shared<probes::ProbeGate>();
  StandIn stand_in_{gate_};
  Hold hold_;
  std::atomic<bool> cancel_seen_ = false;
  TempConfig config_;
  std::unique_ptr<ProbeService> service_;
};

TEST(ParseTargetTest, HostPortForms) {
  using Pair = std::pair<std::string, std::string>;
  const std::vector<std::pair<std::string, Pair>> good = {
      {"10.0.0.2:9471", {"10.0.0.2", "9471"}},
      {"node1.ib.example:1", {"node1.ib.example", "1"}},
      {"node_1:65535", {"node_1", "65535"}},
      // The responder's default port.
      {"node1", {"node1", "9471"}},
      {"[fd00::1]:9000", {"fd00::1", "9000"}},
      {"[fd00::1]", {"fd00::1", "9471"}},
  };
  for (const auto& [text, expected] : good) {
    const auto parsed = exporter::parse_target(text);
    ASSERT_TRUE(parsed.has_value()) << text << ": " << parsed.error();
    EXPECT_EQ(*parsed, expected) << text;
  }
  for (const std::string& bad : std::vector<std::string>{
           "", ":9471", "host:", "host:0", "host:65536", "host:-1", "host:+1", "host:94x",
           "fd00::1", "fd00::1:9471", "[fd00::1", "[fd00::1]9471", "[fd00::1]:", "[]:9471",
           "ho st:1", "host/x:1", "host%0:1", std::string(254, 'a') + ":1"}) {
    EXPECT_FALSE(exporter::parse_target(bad).has_value()) << bad;
  }
  EXPECT_TRUE(exporter::parse_target(std::string(253, 'a') + ":1").has_value());
}

TEST_F(ProbeServiceTest, RefusalsSayWhy) {
  start();
  const auto unknown = refused("h:1", "write_bandwidth");
  EXPECT_EQ(unknown.status, 400);
  EXPECT_EQ(unknown.code, "unknown_module");
  // The message lists what is configured, so the caller can correct the request.
  for (const auto* name : {"write_bw", "write_lat", "read_bw", "read_lat", "send_bw", "send_lat"}) {
    EXPECT_NE(unknown.message.find(name), std::string::npos) << unknown.message;
  }
  EXPECT_EQ(refused("h:1", "").code, "missing_module");
  EXPECT_EQ(refused("", "write_bw").code, "missing_target");
  const auto bad_target = refused("fd00::1", "write_bw");
  EXPECT_EQ(bad_target.status, 400);
  EXPECT_EQ(bad_target.code, "bad_target");
  for (const double timeout :
       {0.0, 0.99, -5.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    const auto bad = refused("h:1", "write_bw", timeout);
    EXPECT_EQ(bad.status, 400) << timeout;
    EXPECT_EQ(bad.code, "bad_timeout") << timeout;
  }
  EXPECT_EQ(stand_in_.call_count(), 0u);
}

TEST_F(ProbeServiceTest, TheRequestsLaneOverridesTheModulesAndIsCheckedFirst) {
  start();
  ProbeParams lane;
  lane.target = "h:1";
  lane.module = "write_bw";
  lane.sl = 3;
  lane.traffic_class = 106;
  auto submitted = service_->submit(lane);
  ASSERT_TRUE(submitted.has_value()) << submitted.error().message;
  EXPECT_EQ(finished(*submitted).state, RunState::kSucceeded);
  ASSERT_EQ(stand_in_.call_count(), 1u);
  EXPECT_EQ(stand_in_.calls()[0].spec.sl, 3u);
  EXPECT_EQ(stand_in_.calls()[0].spec.traffic_class, 106u);
  EXPECT_EQ(stand_in_.calls()[0].spec.pkey_index, 0u);

  const auto refusal = [&](auto set) {
    ProbeParams params;
    params.target = "h:1";
    params.module = "write_bw";
    set(params);
    auto refused = service_->submit(params);
    if (refused.has_value()) {
      ADD_FAILURE() << "accepted";
      return Refusal{};
    }
    return refused.error();
  };
  const auto sl = refusal([](ProbeParams& p) { p.sl = 16; });
  EXPECT_EQ(sl.status, 400);
  EXPECT_EQ(sl.code, "bad_lane");
  EXPECT_EQ(sl.message, "the lane does not fit module 'write_bw': sl=16: a service level is 0..15");
  EXPECT_EQ(refusal([](ProbeParams& p) { p.traffic_class = 300; }).message,
            "the lane does not fit module 'write_bw': traffic_class=300: a traffic class is one "
            "byte, 0..255 (on RoCE v2 the IP TOS byte)");
  // The port (sysfs at /nonexistent) has no P_Key table: index 1 is refused before queueing.
  const auto pkey = refusal([](ProbeParams& p) { p.pkey_index = 1; });
  EXPECT_EQ(pkey.status, 400);
  EXPECT_EQ(pkey.code, "bad_lane");
  EXPECT_EQ(pkey.message,
            "mlx5_0 port 1: pkey_index=1: the port's P_Key table has 0 entries, no index 1");
  // Nor can a link layer be read there: a destination LID is refused before queueing.
  const auto dlid = refusal([](ProbeParams& p) { p.dlid = 3; });
  EXPECT_EQ(dlid.code, "bad_lane");
  EXPECT_THAT(dlid.message, HasSubstr("mlx5_0 port 1: dlid=3: cannot read "));
  EXPECT_EQ(stand_in_.call_count(), 1u);
}

TEST_F(ProbeServiceTest, NoPortToProbeFrom) {
  start("", /*with_local=*/false);
  const auto refusal = refused("h:1", "write_bw");
  EXPECT_EQ(refusal.status, 503);
  EXPECT_EQ(refusal.code, "no_probe_port");
}

TEST_F(ProbeServiceTest, AllowlistRefusesOtherTargets) {
  start(
      "modules:\n  write_bw:\n    kind: write_bw\n"
      "allowed_targets:\n  - 192.0.2.0/24\n  - fd00:1::/64\n");
  const auto outside = refused("198.51.100.7:9471", "write_bw");
  EXPECT_EQ(outside.status, 403);
  EXPECT_EQ(outside.code, "target_not_allowed");
  EXPECT_EQ(refused("[fd00:2::1]:9471", "write_bw").status, 403);
  const auto inside = submit_ok("192.0.2.9:9471", "write_bw");
  const auto inside6 = submit_ok("[fd00:1::5]", "write_bw");
  EXPECT_EQ(finished(inside).state, RunState::kSucceeded);
  EXPECT_EQ(finished(inside6).state, RunState::kSucceeded);
  const auto calls = stand_in_.calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[1].host, "fd00:1::5");
  EXPECT_EQ(calls[1].port, "9471");
}

TEST_F(ProbeServiceTest, RunnerGetsTheModuleTargetAndOptions) {
  start("modules:\n  fab:\n    kind: read_lat\n    fabric_ports: [\"0x1a:3\"]\n    timeout: 20s\n");
  const auto before = std::chrono::system_clock::now();
  const auto id = submit_ok("node7.ib.example:9500", "fab");
  const auto run = finished(id);
  EXPECT_EQ(run.state, RunState::kSucceeded);
  EXPECT_EQ(run.target, "node7.ib.example:9500");
  EXPECT_EQ(run.module, "fab");
  ASSERT_TRUE(run.outcome);
  EXPECT_EQ(run.outcome->bandwidth->bytes_per_second, 1.31072e9);
  EXPECT_TRUE(run.failure_reason.empty());
  EXPECT_LE(before, run.submitted);
  EXPECT_LE(run.submitted, run.started);
  EXPECT_LE(run.started, run.finished);
  EXPECT_GE(run.duration_seconds, 0);

  const auto calls = stand_in_.calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].local.device, "mlx5_0");
  EXPECT_EQ(calls[0].host, "node7.ib.example");
  EXPECT_EQ(calls[0].port, "9500");
  EXPECT_EQ(calls[0].spec.operation, probes::Operation::kRead);
  EXPECT_EQ(calls[0].spec.test, probes::TestKind::kLatency);
  EXPECT_EQ(calls[0].spec.timeout_seconds, 20u);
  EXPECT_EQ(calls[0].fabric_ports, std::vector<std::string>{"0x1a:3"});
  EXPECT_EQ(calls[0].shared_secret, "s3cret");
  EXPECT_TRUE(calls[0].has_cancel);
  EXPECT_EQ(run.resolved.spec, calls[0].spec);
}

// A caller's bound (a scrape's timeout) may shorten a module's timeout, never lengthen it, and
// specs count whole seconds.
TEST_F(ProbeServiceTest, CallerTimeoutOnlyShortens) {
  start(
      "modules:\n  bw:\n    kind: write_bw\n    timeout: 30s\n"
      "  timed:\n    kind: send_bw\n    duration: 10s\n    timeout: 40s\n");
  const auto shortened = submit_ok("h:1", "bw", 5.9);
  const auto capped = submit_ok("h:1", "bw", 100);
  const auto exact = submit_ok("h:1", "bw", 1);
  const auto untouched = submit_ok("h:1", "bw");
  const auto timed = submit_ok("h:1", "timed", 11);
  for (const auto id : {shortened, capped, exact, untouched, timed}) finished(id);
  const auto calls = stand_in_.calls();
  ASSERT_EQ(calls.size(), 5u);
  EXPECT_EQ(calls[0].spec.timeout_seconds, 5u);
  EXPECT_EQ(calls[1].spec.timeout_seconds, 30u);
  EXPECT_EQ(calls[2].spec.timeout_seconds, 1u);
  EXPECT_EQ(calls[3].spec.timeout_seconds, 30u);
  EXPECT_EQ(calls[4].spec.timeout_seconds, 11u);
  // A 10 s run cannot fit in 10 s: refused up front rather than failing after the handshake.
  const auto too_short = refused("h:1", "timed", 10.5);
  EXPECT_EQ(too_short.status, 400);
  EXPECT_EQ(too_short.code, "timeout_too_short");
  EXPECT_NE(too_short.message.find("timed"), std::string::npos) << too_short.message;
}

// run_probe never throws; what escapes another runner fails that run, and the queue goes on.
TEST_F(ProbeServiceTest, AnExceptionPastTheRunnerFailsTheRunAndTheQueueGoesOn) {
  std::atomic<int> calls = 0;
  start("", true,
        [&calls](const probes::LocalPort&, const std::string&, const std::string&,
                 const probes::ValidSpec& spec,
                 const RunOptions&) -> std::expected<probes::ProbeOutcome, probes::Error> {
          if (++calls == 1) throw std::runtime_error("out of something");
          return plain_bandwidth_outcome(spec.spec());
        });
  const auto failed = finished(submit_ok("h:1", "write_bw"));
  EXPECT_EQ(failed.state, RunState::kFailed);
  EXPECT_EQ(failed.failure_reason, "internal");
  EXPECT_EQ(failed.failure, "out of something");
  EXPECT_EQ(finished(submit_ok("h:2", "write_bw")).state, RunState::kSucceeded);
}

TEST_F(ProbeServiceTest, FailuresKeepTheirKind) {
  start();
  const std::vector<std::pair<FailureKind, std::string>> kinds = {
      {FailureKind::kUnreachable, "unreachable"},
      {FailureKind::kRejected, "rejected"},
      {FailureKind::kUnauthorized, "unauthorized"},
      {FailureKind::kTimeout, "timeout"},
      {FailureKind::kPeerLost, "peer_lost"},
      {FailureKind::kProtocol, "protocol"},
      {FailureKind::kVerbs, "verbs"},
      {FailureKind::kCancelled, "cancelled"},
      {FailureKind::kInternal, "internal"},
  };
  for (const auto& [kind, name] : kinds) {
    stand_in_.set([kind = kind](const Call& call, const RunOptions&) -> ProbeOutcome {
      throw ProbeFailure("stand-in failure for " + call.host, kind);
    });
    const auto run = finished(submit_ok("peer" + name + ":1", "write_bw"));
    EXPECT_EQ(run.state, RunState::kFailed) << name;
    EXPECT_FALSE(run.outcome) << name;
    EXPECT_EQ(run.failure_reason, name);
    EXPECT_EQ(run.failure, "stand-in failure for peer" + name);
  }
  // run_probe's refusal of an inconsistent spec, and anything unexpected.
  stand_in_.set([](const Call&, const RunOptions&) -> ProbeOutcome {
    throw std::invalid_argument("invalid probe: qps=0");
  });
  auto run = finished(submit_ok("h:1", "write_bw"));
  EXPECT_EQ(run.failure_reason, "rejected");
  EXPECT_EQ(run.failure, "invalid probe: qps=0");
  stand_in_.set([](const Call&, const RunOptions&) -> ProbeOutcome {
    throw std::runtime_error("out of something");
  });
  run = finished(submit_ok("h:1", "write_bw"));
  EXPECT_EQ(run.failure_reason, "internal");
  // A failed run leaves the gate free and the service working.
  stand_in_.set(nullptr);
  EXPECT_EQ(finished(submit_ok("h:1", "write_bw")).state, RunState::kSucceeded);
  EXPECT_TRUE(gate_->try_enter());
  gate_->leave();
}

TEST_F(ProbeServiceTest, OneRunAtATimeUnderConcurrentSubmits) {
  start(
      "modules:\n  a:\n    kind: write_bw\n  b:\n    kind: read_lat\n"
      "scheduler:\n  queue_length: 64\n");
  stand_in_.set([](const Call& call, const RunOptions&) {
    std::this_thread::sleep_for(1ms);
    return plain_bandwidth_outcome(call.spec);
  });
  constexpr int kThreads = 4, kEach = 8;
  std::vector<std::thread> threads;
  std::mutex ids_mutex;
  std::vector<std::uint64_t> ids;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Appended, not "h" + to_string(t): GCC 12 at -O3 reports a false -Wrestrict inside
      // operator+(const char*, string&&), which inserts at the front.
      std::string target = "h";
      target.append(std::to_string(t)).append(":1");
      for (int i = 0; i < kEach; ++i) {
        auto submitted = service_->submit(
            {.target = target, .module = i % 2 ? "a" : "b", .timeout_seconds = std::nullopt});
        ASSERT_TRUE(submitted.has_value());
        std::lock_guard lock(ids_mutex);
        ids.push_back(submitted.value());
      }
    });
  }
  for (auto& thread : threads) thread.join();
  ASSERT_EQ(ids.size(), std::size_t{kThreads * kEach});
  EXPECT_EQ(std::set<std::uint64_t>(ids.begin(), ids.end()).size(), ids.size()) << "ids repeat";
  for (const auto id : ids) EXPECT_EQ(finished(id).state, RunState::kSucceeded);
  EXPECT_EQ(stand_in_.call_count(), ids.size());
  EXPECT_EQ(stand_in_.max_active(), 1);
  EXPECT_FALSE(stand_in_.gate_free_during_run());
  const auto totals = service_->totals();
  EXPECT_EQ(totals.at({"a", "success"}) + totals.at({"b", "success"}), ids.size());
  EXPECT_EQ(service_->last_results().size(), std::size_t{kThreads * 2});
}

TEST_F(ProbeServiceTest, FullQueueAnswers429WithRetryAfter) {
  start(
      "modules:\n  bw:\n    kind: write_bw\n    timeout: 7s\n"
      "scheduler:\n  queue_length: 2\n");
  hold_every_run();
  const auto first = submit_ok("h:1", "bw");
  ASSERT_TRUE(eventually([&] { return stand_in_.call_count() == 1; }));
  EXPECT_EQ(state(first), RunState::kRunning);
  const auto second = submit_ok("h:1", "bw");
  const auto third = submit_ok("h:1", "bw");
  EXPECT_EQ(state(second), RunState::kQueued);
  const auto full = refused("h:1", "bw");
  EXPECT_EQ(full.status, 429);
  EXPECT_EQ(full.code, "queue_full");
  // At worst the head of the queue waits one run's timeout.
  EXPECT_EQ(full.retry_after_seconds, std::optional<int>(7));
  hold_.release();
  for (const auto id : {first, second, third}) EXPECT_EQ(finished(id).state, RunState::kSucceeded);
  EXPECT_EQ(stand_in_.call_count(), 3u);
  // Drained, it takes requests again.
  EXPECT_EQ(finished(submit_ok("h:1", "bw")).state, RunState::kSucceeded);
}

// queue_length 0: no waiting behind the running probe, but an idle service still runs one.
TEST_F(ProbeServiceTest, ZeroQueueStillRunsOne) {
  start("modules:\n  bw:\n    kind: write_bw\nscheduler:\n  queue_length: 0\n");
  hold_every_run();
  const auto first = submit_ok("h:1", "bw");
  ASSERT_TRUE(eventually([&] { return stand_in_.call_count() == 1; }));
  EXPECT_EQ(refused("h:1", "bw").status, 429);
  hold_.release();
  EXPECT_EQ(finished(first).state, RunState::kSucceeded);
  EXPECT_EQ(finished(submit_ok("h:1", "bw")).state, RunState::kSucceeded);
}

// A peer's run on our responder holds the shared gate; ours waits for it instead of failing.
TEST_F(ProbeServiceTest, BusyGateMakesTheRunWait) {
  start();
  ASSERT_TRUE(gate_->try_enter());
  const auto id = submit_ok("h:1", "write_bw");
  std::this_thread::sleep_for(150ms);
  EXPECT_EQ(stand_in_.call_count(), 0u) << "ran while the responder held the port";
  EXPECT_NE(state(id), RunState::kSucceeded);
  gate_->leave();
  EXPECT_EQ(finished(id).state, RunState::kSucceeded);
  EXPECT_EQ(stand_in_.call_count(), 1u);
  EXPECT_FALSE(stand_in_.gate_free_during_run());
  // Released after the run: the responder can take the next peer.
  EXPECT_TRUE(gate_->try_enter());
  gate_->leave();
}

TEST_F(ProbeServiceTest, AbandonQueuedRun) {
  start();
  hold_every_run();
  const auto first = submit_ok("h:1", "write_bw");
  ASSERT_TRUE(eventually([&] { return stand_in_.call_count() == 1; }));
  const auto second = submit_ok("other:1", "write_lat");
  service_->abandon(second, "the scrape gave up");
  const auto run = service_->get(second, 0ms);
  ASSERT_TRUE(run);
  EXPECT_EQ(run->state, RunState::kFailed);
  EXPECT_EQ(run->failure_reason, "timeout");
  EXPECT_EQ(run->failure, "the scrape gave up");
  EXPECT_EQ(state(first), RunState::kRunning) << "abandoning one run touched another";
  hold_.release();
  EXPECT_EQ(finished(first).state, RunState::kSucceeded);
  // The abandoned run never reached the runner.
  const auto after = submit_ok("h:1", "write_bw");
  finished(after);
  const auto calls = stand_in_.calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[1].host, "h");
  EXPECT_EQ(service_->totals().at({"write_lat", "failure"}), 1u);
  // Unknown ids and finished runs are left alone.
  service_->abandon(999999, "nobody");
  service_->abandon(first, "too late");
  EXPECT_EQ(finished(first).state, RunState::kSucceeded);
}

TEST_F(ProbeServiceTest, AbandonRunningRunCancelsIt) {
  start();
  hold_every_run();
  const auto id = submit_ok("h:1", "write_bw");
  ASSERT_TRUE(eventually([&] { return stand_in_.call_count() == 1; }));
  service_->abandon(id, "the probe did not finish within its timeout");
  const auto run = finished(id);
  EXPECT_TRUE(cancel_seen_) << "the runner was not told through RunOptions::stop";
  EXPECT_EQ(run.state, RunState::kFailed);
  // The waiter's deadline passed: a timeout, in the waiter's words.
  EXPECT_EQ(run.failure_reason, "timeout");
  EXPECT_EQ(run.failure, "the probe did not finish within its timeout");
  // The next run is not born cancelled.
  hold_.release();
  EXPECT_EQ(finished(submit_ok("h:1", "write_bw")).state, RunState::kSucceeded);
}

TEST_F(ProbeServiceTest, AbandonWhileWaitingForTheGate) {
  start();
  ASSERT_TRUE(gate_->try_enter());
  const auto id = submit_ok("h:1", "write_bw");
  ASSERT_TRUE(eventually([&] { return state(id) == RunState::kRunning; }));
  service_->abandon(id, "gave up waiting");
  const auto run = finished(id);
  EXPECT_EQ(run.failure_reason, "timeout");
  EXPECT_EQ(run.failure, "gave up waiting");
  EXPECT_EQ(stand_in_.call_count(), 0u);
  gate_->leave();
}

TEST_F(ProbeServiceTest, ShutdownCancelsRunningAndFailsQueued) {
  start();
  std::atomic<bool> returned = false;
  stand_in_.set([&](const Call& call, const RunOptions& options) {
    struct Mark {
      std::atomic<bool>& flag;
      ~Mark() { flag = true; }
    } mark{returned};
    if (!hold_.wait(options.stop)) {
      cancel_seen_ = true;
      throw ProbeFailure("stopped", FailureKind::kCancelled);
    }
    return plain_bandwidth_outcome(call.spec);
  });
  const auto running = submit_ok("h:1", "write_bw");
  ASSERT_TRUE(eventually([&] { return stand_in_.call_count() == 1; }));
  const auto queued1 = submit_ok("h:1", "read_bw");
  const auto queued2 = submit_ok("h:1", "send_bw");
  service_->shutdown();
  // Returns only once the run has let go of everything.
  EXPECT_TRUE(returned);
  EXPECT_TRUE(cancel_seen_);
  EXPECT_EQ(stand_in_.active(), 0);
  EXPECT_EQ(stand_in_.call_count(), 1u);
  const auto run = finished(running);
  EXPECT_EQ(run.state, RunState::kFailed);
  EXPECT_EQ(run.failure_reason, "cancelled");
  for (const auto id : {queued1, queued2}) {
    const auto queued = finished(id);
    EXPECT_EQ(queued.state, RunState::kFailed);
    EXPECT_EQ(queued.failure_reason, "cancelled");
  }
  const auto late = refused("h:1", "write_bw");
  EXPECT_EQ(late.status, 503);
  EXPECT_EQ(late.code, "shutting_down");
  EXPECT_TRUE(late.retry_after_seconds);
  service_->shutdown();  // a second call (the destructor's) is harmless
  EXPECT_EQ(service_->totals().at({"write_bw", "failure"}), 1u);
}

TEST_F(ProbeServiceTest, HistoryIsBounded) {
  start("modules:\n  m:\n    kind: write_bw\nscheduler:\n  history_length: 3\n");
  std::vector<std::uint64_t> ids;
  for (int i = 0; i < 5; ++i) {
    ids.push_back(submit_ok("h:" + std::to_string(i + 1), "m"));
    finished(ids.back());
  }
  EXPECT_FALSE(service_->get(ids[0], 0ms));
  EXPECT_FALSE(service_->get(ids[1], 0ms));
  for (int i = 2; i < 5; ++i) EXPECT_TRUE(service_->get(ids[i], 0ms)) << i;
  const auto recent = service_->recent(10);
  ASSERT_EQ(recent.size(), 3u);
  EXPECT_EQ(recent[0].id, ids[4]);
  EXPECT_EQ(recent[1].id, ids[3]);
  EXPECT_EQ(recent[2].id, ids[2]);
  const auto two = service_->recent(2);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].id, ids[4]);
  // The counts go on past the history.
  EXPECT_EQ(service_->totals().at({"m", "success"}), 5u);
}

TEST_F(ProbeServiceTest, FailedRunsOutlastAStreamOfSuccesses) {
  start("modules:\n  m:\n    kind: write_bw\nscheduler:\n  history_length: 2\n");
  stand_in_.set([](const Call& call, const RunOptions&) -> ProbeOutcome {
    if (call.host == "down") throw ProbeFailure("no responder", FailureKind::kUnreachable);
    return plain_bandwidth_outcome(call.spec);
  });
  const auto failed = submit_ok("down:1", "m");
  finished(failed);
  std::vector<std::uint64_t> healthy;
  for (int i = 0; i < 4; ++i) {
    healthy.push_back(submit_ok("h:" + std::to_string(i + 1), "m"));
    finished(healthy.back());
  }
  // Four successes later the failure is still there; of the successes, the last two.
  EXPECT_TRUE(service_->get(failed, 0ms));
  EXPECT_FALSE(service_->get(healthy[1], 0ms));
  EXPECT_TRUE(service_->get(healthy[2], 0ms));
  EXPECT_TRUE(service_->get(healthy[3], 0ms));
  EXPECT_EQ(service_->recent(10).size(), 3u);
}

TEST_F(ProbeServiceTest, RecentIncludesQueuedAndRunning) {
  start();
  hold_every_run();
  const auto running = submit_ok("h:1", "write_bw");
  ASSERT_TRUE(eventually([&] { return stand_in_.call_count() == 1; }));
  const auto queued = submit_ok("h:1", "write_lat");
  const auto recent = service_->recent(10);
  ASSERT_EQ(recent.size(), 2u);
  EXPECT_EQ(recent[0].id, queued);
  EXPECT_EQ(recent[0].state, RunState::kQueued);
  EXPECT_EQ(recent[1].id, running);
  EXPECT_EQ(recent[1].state, RunState::kRunning);
  EXPECT_TRUE(service_->last_results().empty()) << "nothing has finished yet";
}

TEST_F(ProbeServiceTest, LastResultPerTargetAndModule) {
  start();
  stand_in_.set([](const Call& call, const RunOptions&) {
    if (call.host == "a" && call.spec.test == probes::TestKind::kBandwidth && call.port == "1") {
      throw ProbeFailure("no route", FailureKind::kUnreachable);
    }
    return plain_bandwidth_outcome(call.spec);
  });
  const auto a_bw_failed = submit_ok("a:1", "write_bw");
  const auto b_bw = submit_ok("b:1", "write_bw");
  const auto a_lat = submit_ok("a:1", "write_lat");
  for (const auto id : {a_bw_failed, b_bw, a_lat}) finished(id);
  stand_in_.set(nullptr);
  const auto a_bw = submit_ok("a:1", "write_bw");
  // The same host on another port is another target.
  const auto a2_bw = submit_ok("a:2", "write_bw");
  finished(a_bw);
  finished(a2_bw);

  const auto last = service_->last_results();
  std::map<std::pair<std::string, std::string>, ProbeRun> by_key;
  for (const auto& run : last) by_key[{run.target, run.module}] = run;
  ASSERT_EQ(last.size(), 4u);
  ASSERT_EQ(by_key.size(), 4u) << "a (target, module) pair appears twice";
  EXPECT_EQ(by_key.at({"a:1", "write_bw"}).id, a_bw);
  EXPECT_EQ(by_key.at({"a:1", "write_bw"}).state, RunState::kSucceeded);
  EXPECT_EQ(by_key.at({"b:1", "write_bw"}).id, b_bw);
  EXPECT_EQ(by_key.at({"a:1", "write_lat"}).id, a_lat);
  EXPECT_EQ(by_key.at({"a:2", "write_bw"}).id, a2_bw);

  const auto totals = service_->totals();
  EXPECT_EQ(totals.size(), 3u);
  EXPECT_EQ(totals.at({"write_bw", "success"}), 3u);
  EXPECT_EQ(totals.at({"write_bw", "failure"}), 1u);
  EXPECT_EQ(totals.at({"write_lat", "success"}), 1u);
}

TEST_F(ProbeServiceTest, GetWaitsForTheEnd) {
  start();
  hold_every_run();
  const auto id = submit_ok("h:1", "write_bw");
  EXPECT_FALSE(service_->get(id + 1, 0ms));
  const auto now = service_->get(id, 0ms);
  ASSERT_TRUE(now);
  EXPECT_TRUE(now->state == RunState::kQueued || now->state == RunState::kRunning);
  // A bounded wait that ends first returns the run as it is.
  const auto start_wait = std::chrono::steady_clock::now();
  const auto waited = service_->get(id, 100ms);
  EXPECT_GE(std::chrono::steady_clock::now() - start_wait, 100ms);
  ASSERT_TRUE(waited);
  EXPECT_FALSE(waited->outcome);
  std::thread releaser([this] {
    std::this_thread::sleep_for(50ms);
    hold_.release();
  });
  const auto done = service_->get(id, 20s);
  releaser.join();
  ASSERT_TRUE(done);
  EXPECT_EQ(done->state, RunState::kSucceeded);
}

TEST_F(ProbeServiceTest, ReloadSwapsModulesOrKeepsTheOld) {
  start("modules:\n  old:\n    kind: write_bw\n");
  config_.write("modules:\n  new:\n    kind: read_bw\nscheduler:\n  queue_length: 1\n");
  EXPECT_TRUE(service_->reload());
  EXPECT_TRUE(service_->config()->modules.contains("new"));
  EXPECT_EQ(service_->config()->queue_length, 1u);
  EXPECT_EQ(refused("h:1", "old").code, "unknown_module");
  EXPECT_EQ(finished(submit_ok("h:1", "new")).state, RunState::kSucceeded);

  config_.write("modules:\n  broken:\n    kind: read_bw\n    qps: many\n");
  const auto reloaded = service_->reload();
  ASSERT_FALSE(reloaded);
  EXPECT_NE(reloaded.error().find(config_.path()), std::string::npos) << reloaded.error();
  EXPECT_NE(reloaded.error().find("line 4"), std::string::npos) << reloaded.error();
  EXPECT_TRUE(service_->config()->modules.contains("new"));
  EXPECT_FALSE(service_->config()->modules.contains("broken"));
  EXPECT_EQ(finished(submit_ok("h:1", "new")).state, RunState::kSucceeded);
}

TEST_F(ProbeServiceTest, ReloadWithoutAFile) {
  start();
  const auto reloaded = service_->reload();
  ASSERT_FALSE(reloaded);
  EXPECT_NE(reloaded.error().find("--config.file"), std::string::npos) << reloaded.error();
  EXPECT_EQ(service_->config()->modules.size(), 8u);
}

TEST(ProbeServiceStartTest, BadConfigFileIsFatal) {
  TempConfig config;
  config.write("modules:\n  m:\n    kind: nope\n");
  ProbeService::Options options;
  options.config_file = config.path();
  EXPECT_THROW(ProbeService(options, [](auto&&...) -> ProbeOutcome { return {}; }),
               std::runtime_error);
  options.config_file = config.path() + ".missing";
  EXPECT_THROW(ProbeService(options, [](auto&&...) -> ProbeOutcome { return {}; }),
               std::runtime_error);
}

}  // namespace
}  // namespace ibprobe::testing

namespace ibprobe::testing {
namespace {

constexpr const char* kSweepConfig =
    "modules:\n"
    "  sizes:\n"
    "    kind: write_bw\n"
    "    message_size: [4096, 16384, 65536, 262144]\n"
    "  broken:\n"
    "    kind: write_bw\n"
    "    sweep: {tx_depth: [16, 32, 64]}\n";

// BW average grows with the message size up to 64 KiB, then by 2 %: the knee is at 64 KiB.
ProbeOutcome sized_outcome(const probes::ProbeSpec& spec) {
  auto outcome = plain_bandwidth_outcome(spec);
  const std::map<std::uint64_t, double> bw = {
      {4096, 1e8}, {16384, 3e8}, {65536, 6e8}, {262144, 6.12e8}};
  outcome.bandwidth->bytes_per_second = bw.at(spec.message_size);
  return outcome;
}

std::string metric_text(const ProbeRun& run) {
  std::string text;
  exporter::probe_run_metrics(run, false).append_text(text);
  return text;
}

TEST_F(ProbeServiceTest, SweepRunsEveryStepWithOneVariableChangedAndFindsTheKnee) {
  stand_in_.set([](const Call& call, const RunOptions&) { return sized_outcome(call.spec); });
  start(kSweepConfig);
  const auto run = finished(submit_ok("192.0.2.2:9471", "sizes"));
  ASSERT_EQ(run.state, RunState::kSucceeded) << run.failure;
  const auto calls = stand_in_.calls();
  ASSERT_EQ(calls.size(), 4u);
  const std::vector<std::uint64_t> sizes = {4096, 16384, 65536, 262144};
  for (std::size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i].spec.message_size, sizes[i]);
    auto others = calls[i].spec;
    others.message_size = calls[0].spec.message_size;
    EXPECT_EQ(others, calls[0].spec) << "step " << i << " changed more than the message size";
  }
  ASSERT_TRUE(run.sweep);
  EXPECT_EQ(run.sweep->knee, std::optional<std::size_t>(2));
  EXPECT_FALSE(run.outcome);

  const auto text = metric_text(run);
  EXPECT_NE(text.find("probe_success 1"), std::string::npos) << text;
  EXPECT_NE(text.find("rdma_probe_bandwidth_bytes_per_second{step=\"2\"} 600000000"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("rdma_probe_sweep_step_value{step=\"3\",variable=\"message_size\"} 262144"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("rdma_probe_sweep_knee_value{variable=\"message_size\"} 65536"),
            std::string::npos)
      << text;

  const auto json = exporter::run_to_json(run);
  EXPECT_EQ(json["success"], true);
  EXPECT_EQ(json["sweep"]["variable"], "message_size");
  ASSERT_EQ(json["sweep"]["steps"].size(), 4u);
  EXPECT_EQ(json["sweep"]["steps"][1]["value"], 16384);
  EXPECT_EQ(json["sweep"]["steps"][1]["result"]["bandwidth"]["bytes_per_second"], 3e8);
  EXPECT_EQ(json["sweep"]["knee"]["step"], 2);
  EXPECT_EQ(json["sweep"]["knee"]["value"], 65536);
}

TEST_F(ProbeServiceTest, AFailedStepEndsTheSweepWithItsClass) {
  stand_in_.set([](const Call& call, const RunOptions&) -> ProbeOutcome {
    if (call.spec.tx_depth == 32) throw ProbeFailure("link went down", FailureKind::kVerbs);
    return plain_bandwidth_outcome(call.spec);
  });
  start(kSweepConfig);
  const auto run = finished(submit_ok("192.0.2.2:9471", "broken"));
  EXPECT_EQ(run.state, RunState::kFailed);
  EXPECT_EQ(stand_in_.call_count(), 2u) << "the step after the failure ran";
  EXPECT_EQ(run.failure_reason, "verbs");
  EXPECT_NE(run.failure.find("step 1 (tx_depth=32): link went down"), std::string::npos)
      << run.failure;
  const auto text = metric_text(run);
  EXPECT_NE(text.find("probe_success 0"), std::string::npos) << text;
  EXPECT_NE(text.find("rdma_probe_sweep_step_success{step=\"1\"} 0"), std::string::npos) << text;
  EXPECT_NE(text.find("rdma_probe_failure{reason=\"verbs\"} 1"), std::string::npos) << text;
  EXPECT_EQ(exporter::run_to_json(run)["sweep"]["steps"][1]["failure"]["reason"], "verbs");
}

TEST_F(ProbeServiceTest, ASweepsTimeoutShortensEveryStep) {
  start(kSweepConfig);
  const auto run = finished(submit_ok("192.0.2.2:9471", "sizes", 12));
  for (const auto& call : stand_in_.calls()) EXPECT_EQ(call.spec.timeout_seconds, 12u);
  EXPECT_EQ(run.state, RunState::kSucceeded);
}

// The API's timeout bounds the whole sweep, not only each step: with steps of 1 s (1.2 floored)
// that take 0.3 s each, the third and fourth would be allowed past 1.2 s from the start if each
// step's own timeout were all that counted.
TEST_F(ProbeServiceTest, TheAsyncTimeoutBoundsTheWholeSweep) {
  start(kSweepConfig);
  std::mutex mutex;
  std::optional<std::chrono::steady_clock::time_point> first_step;
  std::vector<std::chrono::steady_clock::time_point> deadlines;
  stand_in_.set([&](const Call& call, const RunOptions& options) {
    {
      std::lock_guard lock(mutex);
      if (!first_step) first_step = std::chrono::steady_clock::now();
      deadlines.push_back(*options.deadline);
    }
    std::this_thread::sleep_for(300ms);
    return sized_outcome(call.spec);
  });
  const auto run = finished(submit_ok("192.0.2.2:9471", "sizes", 1.2));
  EXPECT_EQ(run.state, RunState::kSucceeded) << run.failure;
  std::lock_guard lock(mutex);
  ASSERT_TRUE(first_step);
  ASSERT_FALSE(deadlines.empty());
  for (const auto deadline : deadlines) EXPECT_LE(deadline, *first_step + 1200ms);
}

}  // namespace
}  // namespace ibprobe::testing
