#include "probe_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "exporter_test_helpers.h"
#include "yaml-cpp/yaml.h"

namespace ibprobe::testing {
namespace {

using exporter::parse_probe_config;
using probes::NumaPolicy;
using probes::Operation;
using probes::TestKind;

// The error names `line` (1-based) first and says `why` somewhere.
void expect_error_at(const std::string& yaml, int line, const std::string& why) {
  const auto error = probe_config_error(yaml);
  EXPECT_TRUE(error.starts_with("line " + std::to_string(line) + ", column "))
      << "expected line " << line << ": " << error << "\n"
      << yaml;
  EXPECT_NE(error.find(why), std::string::npos) << "expected '" << why << "' in: " << error;
}

std::string one_module(const std::string& fields) {
  return "modules:\n  m:\n    kind: write_bw\n" + fields;
}

probes::ProbeSpec module_spec(const std::string& fields) {
  const auto config = probe_config_ok(one_module(fields));
  if (!config.modules.contains("m")) return {};
  return config.modules.at("m").spec;
}

// perftest's defaults (perftest_parameters.h): DEF_SIZE_BW 65536, DEF_SIZE_LAT 2, DEF_TX_BW 128,
// DEF_TX_LAT 1, DEF_CQ_MOD 100, DEF_ITERS 1000, DEF_ITERS_WB 5000, DEF_RX_RDMA 1,
// DEF_RX_SEND 512, DEF_QP_TIME 14, DEF_SIZE_ATOMIC 8, one QP; a latency ping-pong signals every
// message.
struct PerftestDefaults {
  const char* module;
  Operation operation;
  TestKind test;
  std::uint64_t message_size;
  std::uint64_t iterations;
  std::uint32_t tx_depth;
  std::uint32_t rx_depth;
  std::uint32_t effective_cq_moderation;  // perftest's rule: 1 above 8 KiB
};
constexpr PerftestDefaults kPerftest[] = {
    {"write_bw", Operation::kWrite, TestKind::kBandwidth, 65536, 5000, 128, 1, 1},
    {"write_lat", Operation::kWrite, TestKind::kLatency, 2, 1000, 1, 1, 1},
    {"read_bw", Operation::kRead, TestKind::kBandwidth, 65536, 1000, 128, 1, 1},
    {"read_lat", Operation::kRead, TestKind::kLatency, 2, 1000, 1, 1, 1},
    {"send_bw", Operation::kSend, TestKind::kBandwidth, 65536, 1000, 128, 512, 1},
    {"send_lat", Operation::kSend, TestKind::kLatency, 2, 1000, 1, 512, 1},
    // 8 bytes: DEF_CQ_MOD below MSG_SIZE_CQ_MOD_LIMIT.
    {"atomic_bw", Operation::kAtomic, TestKind::kBandwidth, 8, 1000, 128, 1, 100},
    {"atomic_lat", Operation::kAtomic, TestKind::kLatency, 8, 1000, 1, 1, 1},
};

TEST(ProbeConfigTest, BuiltInModulesArePerftestsDefaults) {
  const auto config = exporter::default_probe_config();
  ASSERT_EQ(config.modules.size(), std::size(kPerftest));
  for (const auto& expected : kPerftest) {
    SCOPED_TRACE(expected.module);
    ASSERT_TRUE(config.modules.contains(expected.module));
    const auto& module = config.modules.at(expected.module);
    const auto& spec = module.spec;
    EXPECT_EQ(spec.operation, expected.operation);
    EXPECT_EQ(spec.test, expected.test);
    EXPECT_EQ(spec.message_size, expected.message_size);
    EXPECT_EQ(spec.iterations, std::optional<std::uint64_t>(expected.iterations));
    EXPECT_FALSE(spec.duration_seconds);
    EXPECT_EQ(spec.tx_depth, expected.tx_depth);
    EXPECT_EQ(spec.rx_depth, expected.rx_depth);
    // Unset, so perftest's rules decide: a completion per message above 8 KiB.
    EXPECT_FALSE(spec.cq_moderation);
    EXPECT_FALSE(spec.inline_size);
    EXPECT_EQ(probes::effective_cq_moderation(spec), expected.effective_cq_moderation);
    EXPECT_EQ(spec.qps, 1u);
    EXPECT_EQ(spec.post_list, 1u);
    EXPECT_EQ(spec.rc.timeout, 14u);
    EXPECT_EQ(spec.numa, NumaPolicy::kAuto);
    EXPECT_EQ(spec.atomic_type, probes::AtomicType::kFetchAndAdd);
    EXPECT_EQ(spec.connection, probes::Connection::kRc);
    EXPECT_TRUE(module.fabric_ports.empty());
    EXPECT_TRUE(probes::validate(spec).has_value());
    EXPECT_TRUE(probes::check_limits(spec, config.limits).has_value());
  }
  EXPECT_TRUE(config.allowed_targets.empty());
  EXPECT_EQ(config.allowlist, nullptr);
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream file(path);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

const std::filesystem::path kShippedConfig =
    std::filesystem::path(IBPROBE_SOURCE_DIR) / "exporter/config/ibprobe.yml";

// The example file documents the built-in modules: when either changes alone, this fails.
TEST(ProbeConfigTest, ShippedFileEqualsTheBuiltIns) {
  auto loaded = exporter::load_probe_config(kShippedConfig.string());
  ASSERT_TRUE(loaded.has_value()) << loaded.error();
  const auto& shipped = loaded.value();
  const auto builtin = exporter::default_probe_config();
  ASSERT_EQ(shipped.modules.size(), builtin.modules.size());
  for (const auto& [name, module] : builtin.modules) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(shipped.modules.contains(name));
    EXPECT_EQ(shipped.modules.at(name).spec, module.spec);
    EXPECT_EQ(shipped.modules.at(name).fabric_ports, module.fabric_ports);
  }
  EXPECT_TRUE(shipped.allowed_targets.empty());
  EXPECT_EQ(shipped.queue_length, builtin.queue_length);
  EXPECT_EQ(shipped.history_length, builtin.history_length);
  const probes::Limits ceiling;
  EXPECT_EQ(shipped.limits.max_message_size, ceiling.max_message_size);
  EXPECT_EQ(shipped.limits.max_depth, ceiling.max_depth);
  EXPECT_EQ(shipped.limits.max_qps, ceiling.max_qps);
  EXPECT_EQ(shipped.limits.max_duration_seconds, ceiling.max_duration_seconds);
  EXPECT_EQ(shipped.limits.max_iterations, ceiling.max_iterations);
  EXPECT_EQ(shipped.limits.max_total_buffer_bytes, ceiling.max_total_buffer_bytes);
}

// What the file shows commented out must work once uncommented.
TEST(ProbeConfigTest, ShippedAllowlistExampleParsesWhenUncommented) {
  std::istringstream in(read_text(kShippedConfig));
  std::string text, line;
  bool in_example = false;
  int uncommented = 0;
  while (std::getline(in, line)) {
    if (line == "# allowed_targets:") in_example = true;
    if (in_example && line.starts_with("# ")) {
      line = line.substr(2);
      ++uncommented;
    } else {
      in_example = false;
    }
    text += line + "\n";
  }
  ASSERT_GE(uncommented, 2) << "no commented allowed_targets example in " << kShippedConfig;
  const auto config = probe_config_ok(text);
  EXPECT_GE(config.allowed_targets.size(), 1u);
  ASSERT_NE(config.allowlist, nullptr);
  EXPECT_TRUE(config.allowlist->admit("10.0.3.4"));
  EXPECT_FALSE(config.allowlist->admit("192.0.2.1"));
}

TEST(ProbeConfigTest, KindAloneTakesItsDefaults) {
  const auto config = probe_config_ok("modules:\n  quick:\n    kind: send_lat\n");
  ASSERT_EQ(config.modules.size(), 1u);
  const auto& spec = config.modules.at("quick").spec;
  EXPECT_EQ(spec.operation, Operation::kSend);
  EXPECT_EQ(spec.test, TestKind::kLatency);
  EXPECT_EQ(spec.message_size, 2u);
  EXPECT_EQ(spec.rx_depth, 512u);
  // A file replaces the built-in modules; it does not add to them.
  EXPECT_FALSE(config.modules.contains("write_bw"));
  // Scheduler and limits keep their built-in values when the file has no such section.
  EXPECT_EQ(config.queue_length, 4u);
  EXPECT_EQ(config.history_length, 64u);
  EXPECT_EQ(config.limits.max_qps, probes::Limits{}.max_qps);
}

TEST(ProbeConfigTest, EveryFieldReachesTheSpec) {
  const auto spec = module_spec(
      "    message_size: 4096\n    duration: 20s\n    margin: 3s\n    qps: 4\n"
      "    tx_depth: 256\n    rx_depth: 64\n    cq_moderation: 16\n    post_list: 16\n"
      "    inline_size: 64\n    mtu: 2048\n    gid_index: 3\n    numa: 1\n    timeout: 1m\n"
      "    rc:\n      timeout: 18\n      retry_count: 5\n      rnr_retry: 6\n"
      "      min_rnr_timer: 20\n    fabric_ports: [\"0x12:3\", \"7:1\"]\n");
  EXPECT_EQ(spec.message_size, 4096u);
  EXPECT_EQ(spec.duration_seconds, std::optional<std::uint32_t>(20));
  EXPECT_FALSE(spec.iterations) << "a duration replaces the kind's iteration count";
  EXPECT_EQ(spec.margin_seconds, 3u);
  EXPECT_EQ(spec.qps, 4u);
  EXPECT_EQ(spec.tx_depth, 256u);
  EXPECT_EQ(spec.rx_depth, 64u);
  EXPECT_EQ(spec.cq_moderation, 16u);
  EXPECT_EQ(spec.post_list, 16u);
  EXPECT_EQ(spec.inline_size, 64u);
  EXPECT_EQ(spec.mtu, std::optional<std::uint32_t>(2048));
  EXPECT_EQ(spec.gid_index, std::optional<std::uint32_t>(3));
  EXPECT_EQ(spec.numa, NumaPolicy::kNode);
  EXPECT_EQ(spec.numa_node, std::optional<std::uint32_t>(1));
  EXPECT_EQ(spec.timeout_seconds, 60u);
  EXPECT_EQ(spec.rc.timeout, 18u);
  EXPECT_EQ(spec.rc.retry_cnt, 5u);
  EXPECT_EQ(spec.rc.rnr_retry, 6u);
  EXPECT_EQ(spec.rc.min_rnr_timer, 20u);
  const auto config = probe_config_ok(one_module("    fabric_ports: [\"0x12:3\", \"7:1\"]\n"));
  EXPECT_EQ(config.modules.at("m").fabric_ports, (std::vector<std::string>{"0x12:3", "7:1"}));
}

TEST(ProbeConfigTest, TheLaneReachesTheSpec) {
  const auto spec =
      module_spec("    sl: 5\n    traffic_class: 106\n    pkey_index: 1\n    dlid: 31\n");
  EXPECT_EQ(spec.dlid, std::optional<std::uint32_t>(31));
  EXPECT_EQ(spec.sl, 5u);
  EXPECT_EQ(spec.traffic_class, 106u);
  EXPECT_EQ(spec.pkey_index, 1u);
  const auto plain = module_spec("");
  EXPECT_EQ(plain.sl, 0u);
  EXPECT_EQ(plain.traffic_class, 0u);
  EXPECT_EQ(plain.pkey_index, 0u);
  EXPECT_EQ(plain.dlid, std::nullopt);
}

TEST(ProbeConfigTest, SendBandwidthWithSharedReceiveQueue) {
  const auto config = probe_config_ok("modules:\n  srq:\n    kind: send_bw\n    use_srq: true\n");
  EXPECT_TRUE(config.modules.at("srq").spec.use_srq);
  expect_error_at("modules:\n  srq:\n    kind: send_bw\n    use_srq: yes\n", 4,
                  "use_srq must be true or false");
}

TEST(ProbeConfigTest, DurationsInWholeSeconds) {
  for (const auto& [text, seconds] : std::vector<std::pair<std::string, std::uint32_t>>{
           {"45", 45}, {"45s", 45}, {"2m", 120}, {"1h", 3600}, {"0s", 0}}) {
    auto parsed = parse_probe_config(one_module("    timeout: " + text + "\n"));
    if (seconds > probes::Limits{}.max_timeout_seconds) {
      // Parsed as a duration, then refused: longer than a responder lets a peer hold it.
      ASSERT_FALSE(parsed.has_value());
      EXPECT_NE(parsed.error().find("timeout=" + std::to_string(seconds)), std::string::npos)
          << parsed.error();
      continue;
    }
    if (seconds == 0) {
      // Parsed as a duration, then refused by the probe rules: a run needs time.
      ASSERT_FALSE(parsed.has_value());
      EXPECT_NE(parsed.error().find("timeout=0"), std::string::npos) << parsed.error();
      continue;
    }
    ASSERT_TRUE(parsed.has_value()) << text << ": " << parsed.error();
    EXPECT_EQ(parsed.value().modules.at("m").spec.timeout_seconds, seconds) << text;
  }
  for (const std::string bad :
       {"1500ms", "1.5s", "10x", "s", "-5s", "+5s", "10 s", "2d", "''", "99999999999h"}) {
    expect_error_at(one_module("    timeout: " + bad + "\n"), 4, "timeout");
  }
  const auto refused = probe_config_error(one_module("    timeout: 1500ms\n"));
  EXPECT_NE(refused.find("whole seconds"), std::string::npos) << refused;
  const auto too_long = probe_config_error(one_module("    timeout: 99999999999h\n"));
  EXPECT_NE(too_long.find("too long"), std::string::npos) << too_long;
}

TEST(ProbeConfigTest, NumaPolicies) {
  EXPECT_EQ(module_spec("    numa: auto\n").numa, NumaPolicy::kAuto);
  const auto none = module_spec("    numa: none\n");
  EXPECT_EQ(none.numa, NumaPolicy::kNone);
  EXPECT_FALSE(none.numa_node);
  const auto node = module_spec("    numa: 0\n");
  EXPECT_EQ(node.numa, NumaPolicy::kNode);
  EXPECT_EQ(node.numa_node, std::optional<std::uint32_t>(0));
  // "node" without a number has nothing to bind to.
  expect_error_at(one_module("    numa: node\n"), 4, "numa");
  expect_error_at(one_module("    numa: -1\n"), 4, "numa");
  expect_error_at(one_module("    numa: auto1\n"), 4, "numa");
  // Linux supports at most 1024 nodes (0..1023).
  EXPECT_EQ(module_spec("    numa: 1023\n").numa_node, std::optional<std::uint32_t>(1023));
  expect_error_at(one_module("    numa: 1024\n"), 3, "numa_node=1024");
}

TEST(ProbeConfigTest, IntegersAreStrict) {
  for (const std::string bad : {"-1", "1.5", "0x10", "1e3", "ten", "''", "[1]"}) {
    expect_error_at(one_module("    message_size: " + bad + "\n"), 4, "message_size");
  }
  expect_error_at(one_module("    qps: 4294967296\n"), 4, "above its maximum 4294967295");
  expect_error_at(one_module("    message_size: 18446744073709551616\n"), 4, "message_size");
}

TEST(ProbeConfigTest, ErrorsNameTheirLine) {
  struct Case {
    std::string yaml;
    int line;
    std::string why;
  };
  const std::vector<Case> cases = {
      {"- a\n- b\n", 1, "the file must be a mapping"},
      {"limits:\n  max_depth: 64\n", 2, "the built-in module atomic_bw does not fit the limits"},
      {"modules:\n  - write_bw\n", 2, "modules must be a mapping"},
      {"modules:\n  m: 3\n", 2, "module m must be a mapping"},
      {"modules:\n  m:\n    message_size: 2\n", 3, "module m has no kind"},
      {"modules:\n  m:\n    kind: write\n", 3, "kind 'write' is not one of"},
      {"modules:\n  m:\n    kind: [write_bw]\n", 3, "kind must be a single value"},
      {"modules:\n  m:\n    kind: write_bw\n    rc: 3\n", 4, "rc must be a mapping"},
      {"modules:\n  m:\n    kind: write_bw\n    rc:\n      timeout: x\n", 5, "rc.timeout"},
      {"modules:\n  m:\n    kind: write_bw\n    fabric_ports: 5:1\n", 4,
       "fabric_ports must be a list"},
      {"modules:\n  m:\n    kind: write_bw\n    fabric_ports:\n      - 5:1\n      - [5]\n", 6,
       "fabric_ports must be a single value"},
      {"modules:\n  m:\n    kind: write_bw\nscheduler: 4\n", 4, "scheduler must be a mapping"},
      {"modules:\n  m:\n    kind: write_bw\nlimits: [1]\n", 4, "limits must be a mapping"},
      {"modules:\n  m:\n    kind: write_bw\nallowed_targets: 10.0.0.0/8\n", 4,
       "allowed_targets must be a list"},
      // yaml-cpp's own syntax errors carry their position too.
      {"modules:\n  m:\n    kind: write_bw\n    qps: [1, 2\n", 5, "yaml-cpp"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.yaml);
    const auto error = probe_config_error(c.yaml);
    if (c.why == "yaml-cpp") {
      EXPECT_TRUE(error.starts_with("yaml-cpp: error at line " + std::to_string(c.line))) << error;
      continue;
    }
    EXPECT_TRUE(error.starts_with("line " + std::to_string(c.line) + ", column ")) << error;
    EXPECT_NE(error.find(c.why), std::string::npos) << error;
  }
}

// A section the file does not hold keeps its defaults: a file of one concern (the mesh, the
// alerts) starts with the built-in modules beside it; `modules: {}` written out means none.
TEST(ProbeConfigTest, ASectionTheFileDoesNotHoldKeepsItsDefaults) {
  const auto builtin = exporter::default_probe_config();
  const auto expect_builtin_modules = [&](const exporter::ProbeConfig& config) {
    ASSERT_EQ(config.modules.size(), builtin.modules.size());
    for (const auto& [name, module] : builtin.modules) {
      SCOPED_TRACE(name);
      ASSERT_TRUE(config.modules.contains(name));
      EXPECT_EQ(config.modules.at(name).spec, module.spec);
    }
  };
  for (const std::string text : {"", "# only a comment\n"}) {
    SCOPED_TRACE(text);
    const auto config = parse_probe_config(text);
    ASSERT_TRUE(config.has_value()) << config.error();
    expect_builtin_modules(*config);
    EXPECT_FALSE(config->mesh.enabled);
  }
  const auto mesh_only = parse_probe_config("mesh:\n  enabled: true\n  peers_file: /p.json\n");
  ASSERT_TRUE(mesh_only.has_value()) << mesh_only.error();
  expect_builtin_modules(*mesh_only);
  EXPECT_TRUE(mesh_only->mesh.enabled);
  EXPECT_EQ(mesh_only->queue_length, builtin.queue_length);

  const auto alerts_only = parse_probe_config(
      "alerts:\n  repeat: 10m\n  rules:\n    - alertname: A\n      module: send_lat\n"
      "      peer: h:9471\n");
  ASSERT_TRUE(alerts_only.has_value()) << alerts_only.error();
  expect_builtin_modules(*alerts_only);
  ASSERT_EQ(alerts_only->alerts.rules.size(), 1u);
  EXPECT_EQ(alerts_only->alerts.rules[0].module, "send_lat");
  EXPECT_EQ(alerts_only->alerts.repeat, std::chrono::minutes(10));
  // Without a rules key the alert rules are the shipped ones, as without the section.
  const auto alerts_window = parse_probe_config("alerts:\n  repeat: 10m\n");
  ASSERT_TRUE(alerts_window.has_value()) << alerts_window.error();
  EXPECT_EQ(alerts_window->alerts.rules.size(), builtin.alerts.rules.size());

  // Tighter limits the built-in modules fit keep them; written modules replace them all.
  const auto limits_only = parse_probe_config("limits:\n  max_qps: 4\n");
  ASSERT_TRUE(limits_only.has_value()) << limits_only.error();
  expect_builtin_modules(*limits_only);
  const auto own = parse_probe_config("modules:\n  mine:\n    kind: write_bw\n");
  ASSERT_TRUE(own.has_value()) << own.error();
  EXPECT_EQ(own->modules.size(), 1u);

  const auto none = parse_probe_config("modules: {}\nmesh:\n  enabled: true\n  peers_file: /p\n");
  ASSERT_TRUE(none.has_value()) << none.error();
  EXPECT_TRUE(none->modules.empty());
  // With none, a rule naming a module has nothing to name.
  expect_error_at(
      "modules: {}\nalerts:\n  rules:\n    - alertname: A\n      module: write_bw\n"
      "      peer: h\n",
      5, "alert rule A: no module named write_bw");
}

TEST(ProbeConfigTest, AlertsInstanceIsAHostOrHostAndPort) {
  for (const std::string instance :
       {"node-7", "node-7.example:9470", "10.0.0.7:9470", "[fd00::7]:9470"}) {
    const auto config = parse_probe_config("alerts:\n  instance: \"" + instance + "\"\n");
    ASSERT_TRUE(config.has_value()) << instance << ": " << config.error();
    EXPECT_EQ(config->alerts.instance, instance);
  }
  expect_error_at("alerts:\n  instance: \"node-7:port\"\n", 2,
                  "alerts.instance 'node-7:port' is neither HOST nor HOST:PORT");
  expect_error_at("alerts:\n  dispatch_to_instance_port: maybe\n", 2, "dispatch_to_instance_port");
}

TEST(ProbeConfigTest, UnknownKeysAtEveryLevel) {
  expect_error_at("modules:\n  m:\n    kind: write_bw\nmodule:\n  x: 1\n", 4,
                  "unknown field 'module' in the file");
  expect_error_at(one_module("    msg_size: 4\n"), 4, "unknown field 'msg_size' in module m");
  expect_error_at(one_module("    rc:\n      retry_cnt: 3\n"), 5,
                  "unknown field 'retry_cnt' in rc");
  expect_error_at(one_module("") + "scheduler:\n  queue: 3\n", 5,
                  "unknown field 'queue' in scheduler");
  expect_error_at(one_module("") + "limits:\n  max_size: 3\n", 5,
                  "unknown field 'max_size' in limits");
  // A perftest option the module has no field for is refused, not dropped.
  expect_error_at(one_module("    report_gbits: true\n"), 4, "unknown field 'report_gbits'");
}

// yaml-cpp lets a repeated key through and answers lookups with the first one; a file that says
// two things must not silently mean one of them.
TEST(ProbeConfigTest, RepeatedKeysAreRefused) {
  expect_error_at(one_module("    message_size: 4096\n    message_size: 8192\n"), 5,
                  "message_size is given twice");
  expect_error_at("modules:\n  a:\n    kind: write_bw\nmodules:\n  b:\n    kind: read_bw\n", 4,
                  "modules is given twice");
  expect_error_at(
      "modules:\n  a:\n    kind: write_bw\n  b:\n    kind: read_bw\n  a:\n    kind: send_bw\n", 6,
      "module a is defined twice");
}

// A key with nothing after it: the error names the key's line, not the next token's.
TEST(ProbeConfigTest, KeysWithoutValues) {
  expect_error_at("modules:\n  m:\n    kind:\n    qps: 2\n", 3, "kind in module m has no value");
  expect_error_at("modules:\n  m:\n    kind: write_bw\n    timeout:\n\n\n", 4,
                  "timeout in module m has no value");
  expect_error_at("modules:\n  m:\n  n:\n    kind: write_bw\n", 2, "module m has no fields");
  expect_error_at("modules:\nscheduler:\n  queue_length: 1\n", 1,
                  "modules in the file has no value");
  expect_error_at(one_module("") + "allowed_targets:\n# - 10.0.0.0/8\n", 4,
                  "allowed_targets in the file has no value");
}

TEST(ProbeConfigTest, ProbeRulesApplyToModules) {
  struct Case {
    std::string fields;
    std::string why;
  };
  // Each breaks one rule of a consistent probe (probes.h, perftest's own checks).
  const std::vector<Case> cases = {
      {"    kind: write_lat\n    tx_depth: 2\n", "tx depth must be 1"},
      {"    kind: write_bw\n    duration: 10s\n    iterations: 100\n", "exclusive"},
      {"    kind: write_bw\n    duration: 30s\n", "must exceed the duration"},
      {"    kind: write_bw\n    duration: 4s\n", "margins"},
      {"    kind: write_bw\n    iterations: 4\n", "iterations=4"},
      {"    kind: read_bw\n    inline_size: 16\n", "cannot use inline"},
      {"    kind: write_bw\n    use_srq: true\n", "use_srq applies only to send"},
      {"    kind: write_bw\n    mtu: 1500\n", "not an IB MTU"},
      {"    kind: write_bw\n    gid_index: 256\n", "gid_index=256"},
      {"    kind: write_bw\n    sl: 16\n", "sl=16: a service level is 0..15"},
      {"    kind: write_bw\n    traffic_class: 256\n",
       "traffic_class=256: a traffic class is one byte, 0..255"},
      {"    kind: write_bw\n    pkey_index: 65536\n",
       "pkey_index=65536: a P_Key index is 0..65535"},
      {"    kind: write_bw\n    dlid: 49152\n",
       "dlid=49152: a destination LID is a unicast LID, 1..49151 (0xBFFF); 0xC000 and above are "
       "multicast and permissive LIDs"},
      {"    kind: write_bw\n    cq_moderation: 200\n", "cq_moderation=200"},
      {"    kind: write_bw\n    post_list: 3\n    cq_moderation: 2\n", "multiple of CQ"},
      {"    kind: write_bw\n    rc:\n      timeout: 0\n", "timeout exponent 0"},
      {"    kind: write_bw\n    rc:\n      retry_count: 8\n", "retry_count=8"},
      {"    kind: write_bw\n    rc:\n      min_rnr_timer: 32\n", "min_rnr_timer=32"},
      {"    kind: write_lat\n    qps: 2\n", "only make sense for bandwidth"},
  };
  for (const auto& c : cases) {
    // The module's mapping starts on line 3 (its first field).
    expect_error_at("modules:\n  m:\n" + c.fields, 3, "module m is not a valid probe: ");
    expect_error_at("modules:\n  m:\n" + c.fields, 3, c.why);
  }
  // Inside the rules: a duration just long enough and a timeout just longer.
  const auto spec = module_spec("    duration: 5s\n    margin: 2s\n    timeout: 6s\n");
  EXPECT_EQ(spec.duration_seconds, std::optional<std::uint32_t>(5));
}

TEST(ProbeConfigTest, LimitsOnlyTighten) {
  const probes::Limits ceiling;
  struct Field {
    std::string name;
    std::uint64_t ceiling;
  };
  for (const auto& [name, max] :
       std::vector<Field>{{"max_message_size", ceiling.max_message_size},
                          {"max_depth", ceiling.max_depth},
                          {"max_qps", ceiling.max_qps},
                          {"max_iterations", ceiling.max_iterations},
                          {"max_total_buffer_bytes", ceiling.max_total_buffer_bytes}}) {
    SCOPED_TRACE(name);
    probe_config_ok(one_module("") + "limits:\n  " + name + ": " + std::to_string(max) + "\n");
    expect_error_at(one_module("") + "limits:\n  " + name + ": " + std::to_string(max + 1) + "\n",
                    5, "above its maximum");
  }
  EXPECT_EQ(
      probe_config_ok(one_module("") + "limits:\n  max_duration: 2m\n").limits.max_duration_seconds,
      120u);
  expect_error_at(one_module("") + "limits:\n  max_duration: 121s\n", 5, "max_duration");
  expect_error_at(one_module("") + "limits:\n  max_duration: 1h\n", 5, "max_duration");
  // Only the verify soak's own limit goes past the duration cap, and only when the file says so.
  EXPECT_EQ(probe_config_ok(one_module("")).limits.max_soak_seconds, ceiling.max_duration_seconds);
  EXPECT_EQ(probe_config_ok(one_module("") + "limits:\n  max_soak_duration: 1h\n")
                .limits.max_soak_seconds,
            3600u);
  expect_error_at(one_module("") + "limits:\n  max_soak_duration: 25h\n", 5,
                  "max_soak_duration is above its maximum 86400s");

  const auto tight = probe_config_ok(one_module("") +
                                     "limits:\n  max_message_size: 65536\n  max_depth: 256\n"
                                     "  max_qps: 2\n  max_duration: 30s\n  max_iterations: 5000\n"
                                     "  max_total_buffer_bytes: 16777216\n");
  EXPECT_EQ(tight.limits.max_message_size, 65536u);
  EXPECT_EQ(tight.limits.max_depth, 256u);
  EXPECT_EQ(tight.limits.max_qps, 2u);
  EXPECT_EQ(tight.limits.max_duration_seconds, 30u);
  EXPECT_EQ(tight.limits.max_iterations, 5000u);
  EXPECT_EQ(tight.limits.max_total_buffer_bytes, 16777216u);
}

// The file's own limits bound its modules, wherever the limits section stands in it.
TEST(ProbeConfigTest, ModulesMustFitTheFilesLimits) {
  const std::string modules = "modules:\n  big:\n    kind: write_bw\n    message_size: 1048576\n";
  expect_error_at(modules + "limits:\n  max_message_size: 65536\n", 3,
                  "message_size=1048576: above this responder's limit of 65536");
  expect_error_at("limits:\n  max_message_size: 65536\n" + modules, 5, "message_size=1048576");
  // 4 QPs x 128 deep x 64 KiB = 32 MiB of buffers.
  expect_error_at(
      "limits:\n  max_total_buffer_bytes: 16777216\n"
      "modules:\n  wide:\n    kind: write_bw\n    qps: 4\n",
      5, "exceed this responder's limit of 16777216 bytes");
  probe_config_ok(
      "limits:\n  max_total_buffer_bytes: 33554432\n"
      "modules:\n  wide:\n    kind: write_bw\n    qps: 4\n");
  expect_error_at(
      "limits:\n  max_duration: 10s\n"
      "modules:\n  long:\n    kind: write_bw\n    duration: 20s\n",
      5, "duration=20");
  expect_error_at("limits:\n  max_iterations: 4999\nmodules:\n  m:\n    kind: write_bw\n", 5,
                  "iterations=5000");
}

TEST(ProbeConfigTest, SchedulerBounds) {
  const auto config =
      probe_config_ok(one_module("") + "scheduler:\n  queue_length: 0\n  history_length: 1\n");
  EXPECT_EQ(config.queue_length, 0u);
  EXPECT_EQ(config.history_length, 1u);
  EXPECT_EQ(probe_config_ok(one_module("") + "scheduler:\n  queue_length: 64\n").queue_length, 64u);
  expect_error_at(one_module("") + "scheduler:\n  queue_length: 65\n", 5, "queue_length");
  expect_error_at(one_module("") + "scheduler:\n  history_length: 0\n", 5, "history_length");
  expect_error_at(one_module("") + "scheduler:\n  history_length: 4097\n", 5, "history_length");
  expect_error_at(one_module("") + "scheduler:\n  queue_length: -1\n", 5, "queue_length");
}

TEST(ProbeConfigTest, AllowedTargets) {
  const auto config = probe_config_ok(one_module("") +
                                      "allowed_targets:\n  - 192.0.2.0/24\n  - node1.ib.example\n");
  EXPECT_EQ(config.allowed_targets, (std::vector<std::string>{"192.0.2.0/24", "node1.ib.example"}));
  ASSERT_NE(config.allowlist, nullptr);
  EXPECT_TRUE(config.allowlist->admit("192.0.2.200"));
  EXPECT_FALSE(config.allowlist->admit("198.51.100.1"));
  EXPECT_TRUE(config.allowlist->admit("node1.ib.example"));
  // The bad entry's own line, not the list's first.
  expect_error_at(one_module("") + "allowed_targets:\n  - 192.0.2.0/24\n  - 10.0.0.0/33\n", 6,
                  "allowed_targets: ");
  expect_error_at(one_module("") + "allowed_targets:\n  - 192.0.2.0/24\n  - [a]\n", 6,
                  "allowed_targets must be a single value");
  // An empty list is no restriction.
  const auto open = probe_config_ok(one_module("") + "allowed_targets: []\n");
  EXPECT_EQ(open.allowlist, nullptr);
}

// A bad fabric port would otherwise fail every run, after the peer has already set up its side.
TEST(ProbeConfigTest, FabricPortsAreLidColonPort) {
  for (const std::string bad : {"abc", "5", "5:all", "0:1", "5:255", "5:1:2"}) {
    expect_error_at(one_module("    fabric_ports:\n      - 7:1\n      - \"" + bad + "\"\n"), 6,
                    "fabric port '" + bad + "' is not LID:PORT");
  }
  EXPECT_EQ(probe_config_ok(one_module("    fabric_ports: [\"0xbfff:0\", \"1:254\"]\n"))
                .modules.at("m")
                .fabric_ports.size(),
            2u);
}

TEST(ProbeConfigTest, LoadNamesTheFile) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("probe_config_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = (dir / "ibprobe.yml").string();
  const auto missing = exporter::load_probe_config((dir / "missing.yml").string());
  ASSERT_FALSE(missing.has_value());
  EXPECT_NE(missing.error().find((dir / "missing.yml").string()), std::string::npos);

  std::ofstream(path) << "modules:\n  m:\n    kind: write_bw\n    qps: x\n";
  const auto bad = exporter::load_probe_config(path);
  ASSERT_FALSE(bad.has_value());
  EXPECT_TRUE(bad.error().starts_with(path + ": line 4, column ")) << bad.error();

  std::ofstream(path) << "modules:\n  m:\n    kind: read_lat\n";
  const auto good = exporter::load_probe_config(path);
  ASSERT_TRUE(good.has_value()) << good.error();
  EXPECT_EQ(good.value().modules.at("m").spec.operation, Operation::kRead);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ibprobe::testing

namespace ibprobe::testing {
namespace {

exporter::ProbeModule one_parsed_module(const std::string& fields) {
  const auto config = probe_config_ok(one_module(fields));
  if (!config.modules.contains("m")) return {};
  return config.modules.at("m");
}

TEST(ProbeConfigModesTest, BidirectionalAndRateLimitReachTheSpec) {
  const auto spec = module_spec(
      "    bidirectional: true\n"
      "    rate_limit: {value: 2.5, unit: MiBps, limiter: auto}\n");
  EXPECT_TRUE(spec.bidirectional);
  ASSERT_TRUE(spec.rate_limit);
  EXPECT_DOUBLE_EQ(spec.rate_limit->value, 2.5);
  EXPECT_EQ(spec.rate_limit->unit, probes::RateUnit::kMiBps);
  EXPECT_EQ(spec.rate_limit->limiter, probes::RateLimiter::kAuto);
  const auto defaults = module_spec("    rate_limit: {value: 1}\n");
  EXPECT_EQ(defaults.rate_limit,
            (probes::RateLimit{1, probes::RateUnit::kGbps, probes::RateLimiter::kSoftware}));
  expect_error_at(one_module("    rate_limit: {value: 1, unit: Tbps}\n"), 4,
                  "must be Gbps, MiBps or pps");
  expect_error_at(one_module("    rate_limit: {value: 0}\n"), 4, "above 0");
  expect_error_at("modules:\n  m:\n    kind: write_lat\n    bidirectional: true\n", 3,
                  "bidirectional applies to bandwidth probes");
  const auto send_both_ways =
      probe_config_ok("modules:\n  m:\n    kind: send_bw\n    bidirectional: true\n");
  EXPECT_TRUE(send_both_ways.modules.at("m").spec.bidirectional);
}

TEST(ProbeConfigModesTest, CqEventsReachTheSpec) {
  const auto send_lat = [](const std::string& field) {
    return probe_config_ok("modules:\n  m:\n    kind: send_lat\n" + field).modules.at("m").spec;
  };
  EXPECT_TRUE(send_lat("    cq_events: true\n").cq_events);
  EXPECT_FALSE(send_lat("    cq_events: false\n").cq_events);
  EXPECT_FALSE(send_lat("").cq_events);
  expect_error_at(one_module("    cq_events: sometimes\n"), 4, "cq_events");
  expect_error_at(one_module("    cq_events: true\n"), 3, "cq_events applies to read and send");
}

TEST(ProbeConfigModesTest, RdmaCmReachesTheSpec) {
  const auto spec_of = [](const std::string& field) {
    return probe_config_ok(one_module(field)).modules.at("m").spec;
  };
  EXPECT_TRUE(spec_of("    rdma_cm: true\n").rdma_cm);
  EXPECT_FALSE(spec_of("    rdma_cm: false\n").rdma_cm);
  EXPECT_FALSE(spec_of("").rdma_cm);
  expect_error_at(one_module("    rdma_cm: maybe\n"), 4, "rdma_cm");
  expect_error_at(one_module("    rdma_cm: true\n    sl: 2\n"), 3,
                  "sl=2 with rdma_cm: the SL is the path's");
  expect_error_at(one_module("    rdma_cm: true\n    connection: UC\n"), 3, "rdma_cm over UC");
}

TEST(ProbeConfigModesTest, AtomicTypeConnectionAndNoPeakReachTheSpec) {
  const auto spec_of = [](const std::string& kind, const std::string& field) {
    return probe_config_ok("modules:\n  m:\n    kind: " + kind + "\n" + field).modules.at("m").spec;
  };
  const auto swap = spec_of("atomic_bw", "    atomic_type: CMP_AND_SWAP\n");
  EXPECT_EQ(swap.operation, probes::Operation::kAtomic);
  EXPECT_EQ(swap.atomic_type, probes::AtomicType::kCompareAndSwap);
  EXPECT_EQ(spec_of("atomic_lat", "").atomic_type, probes::AtomicType::kFetchAndAdd);
  EXPECT_EQ(spec_of("send_lat", "    connection: UC\n").connection, probes::Connection::kUc);
  EXPECT_EQ(spec_of("send_lat", "    connection: RC\n").connection, probes::Connection::kRc);
  EXPECT_TRUE(spec_of("write_bw", "    no_peak: true\n").no_peak);
  EXPECT_FALSE(spec_of("write_bw", "").no_peak);
  expect_error_at(one_module("    atomic_type: SWAP\n"), 4,
                  "atomic_type must be FETCH_AND_ADD or CMP_AND_SWAP, not 'SWAP'");
  expect_error_at(one_module("    atomic_type: CMP_AND_SWAP\n"), 3,
                  "atomic_type CMP_AND_SWAP applies to atomic probes, not write");
  expect_error_at(one_module("    connection: XRC\n"), 4,
                  "connection must be RC, UC or UD, not 'XRC'");
  expect_error_at(one_module("    connection: UD\n"), 3, "connection UD carries send only");
  // perftest's receive depth over UC and UD: one receive per message of an iteration run.
  EXPECT_EQ(spec_of("send_bw", "    connection: UD\n").rx_depth, 1000u);
  EXPECT_EQ(spec_of("send_bw", "    connection: UC\n    iterations: 20000\n").rx_depth, 8192u);
  EXPECT_EQ(spec_of("send_bw", "    connection: UC\n    duration: 10s\n").rx_depth, 512u);
  EXPECT_EQ(spec_of("send_bw", "    connection: UC\n    rx_depth: 64\n").rx_depth, 64u);
  EXPECT_EQ(spec_of("send_bw", "").rx_depth, 512u);
  expect_error_at("modules:\n  m:\n    kind: read_bw\n    connection: UC\n", 3,
                  "connection UC cannot carry read");
  expect_error_at("modules:\n  m:\n    kind: atomic_bw\n    message_size: 64\n", 3,
                  "an atomic operand is 8 bytes");
}

TEST(ProbeConfigModesTest, AListOfSizesIsASweepOverMessageSize) {
  const auto module = one_parsed_module("    message_size: [4096, 65536]\n    duration: 5s\n");
  ASSERT_TRUE(module.sweep);
  EXPECT_EQ(module.sweep->variable, probes::SweepVariable::kMessageSize);
  EXPECT_EQ(module.sweep->values, (std::vector<double>{4096, 65536}));
  EXPECT_EQ(module.sweep->base, module.spec);
  EXPECT_EQ(module.spec.duration_seconds, std::optional<std::uint32_t>(5));
  EXPECT_DOUBLE_EQ(module.sweep->knee_threshold, 0.05);
}

TEST(ProbeConfigModesTest, SweepOfOneVariableWithItsThreshold) {
  const auto module =
      one_parsed_module("    sweep: {tx_depth: [16, 64, 128], knee_threshold: 0.1}\n");
  ASSERT_TRUE(module.sweep);
  EXPECT_EQ(module.sweep->variable, probes::SweepVariable::kTxDepth);
  EXPECT_EQ(module.sweep->values.size(), 3u);
  EXPECT_DOUBLE_EQ(module.sweep->knee_threshold, 0.1);
  EXPECT_FALSE(one_parsed_module("    tx_depth: 64\n").sweep);
}

TEST(ProbeConfigModesTest, TwoVariablesAreRefusedWithTheReason) {
  expect_error_at(one_module("    sweep: {tx_depth: [16, 64], qps: [1, 2]}\n"), 4,
                  "sweeps tx_depth and qps: a sweep varies exactly one variable");
  expect_error_at(one_module("    message_size: [4096, 8192]\n    sweep: {post_list: [1, 4]}\n"), 5,
                  "sweeps message_size and post_list");
  expect_error_at(one_module("    sweep: {iterations: [1000, 2000]}\n"), 4,
                  "sweep variable 'iterations'");
  expect_error_at(one_module("    sweep: {mtu: [1024, 1000]}\n"), 4, "step 1 (mtu=1000)");
  expect_error_at(one_module("    sweep: {knee_threshold: 0.1}\n"), 4, "names no variable");
}

TEST(ProbeConfigModesTest, EveryStepMustFitTheLimits) {
  expect_error_at(
      "limits: {max_message_size: 65536}\n" + one_module("    message_size: [4096, 1048576]\n"), 4,
      "above this responder's limit");
}

// Without an alerts section, every shipped alert whose runbook runs a probe has a rule that runs
// the runbook's module (the first one its runbook's API call names), but the two whose runbook
// needs a person: the exporter that would run it is down, or the alert names no host.
TEST(AlertRules, TheDefaultsRunEachShippedRunbooksProbe) {
  // The module, or the template naming the label that holds it.
  std::map<std::string, std::string> runbook_module;
  for (const auto& file : std::filesystem::directory_iterator(
           std::filesystem::path(IBPROBE_SOURCE_DIR) / "dashboards/prometheus")) {
    if (!file.path().string().ends_with(".rules.yml")) continue;
    for (const auto& group : YAML::LoadFile(file.path().string())["groups"]) {
      for (const auto& rule : group["rules"]) {
        if (!rule["alert"]) continue;
        const auto runbook = rule["annotations"]["runbook"].as<std::string>("");
        if (runbook.find("/api/v1/probes") == std::string::npos) continue;
        const auto at = runbook.find("\"module\":\"");
        ASSERT_NE(at, std::string::npos) << rule["alert"].as<std::string>();
        runbook_module[rule["alert"].as<std::string>()] =
            runbook.substr(at + 10, runbook.find('"', at + 10) - (at + 10));
      }
    }
  }
  ASSERT_GT(runbook_module.size(), 20u);
  std::map<std::string, std::string> default_module;
  for (const auto& rule : exporter::default_alert_rules()) {
    default_module[rule.alertname] =
        rule.module.empty() ? "{{ $labels." + rule.module_label + " }}" : rule.module;
  }
  runbook_module.erase("IbprobeExporterDown");
  runbook_module.erase("IbprobeMeshTorPairLoss");
  EXPECT_EQ(default_module, runbook_module);
}

}  // namespace
}  // namespace ibprobe::testing
