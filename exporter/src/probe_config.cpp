#include "probe_config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "ibprobe/remote_pma.h"
#include "ibprobe/verify.h"
#include "ibprobe/yaml_reader.h"
#include "self_names.h"

namespace ibprobe::exporter {
namespace {

using yaml::boolean;
using yaml::fail;
using yaml::positive_number;
using yaml::reject_unknown_keys;
using yaml::require_map;
using yaml::scalar;
using yaml::seconds;
using yaml::u32;
using yaml::unsigned_value;

using probes::Operation;
using probes::TestKind;

struct Kind {
  const char* name;
  Operation operation;
  TestKind test;
};
constexpr Kind kKinds[] = {
    {"write_bw", Operation::kWrite, TestKind::kBandwidth},
    {"write_lat", Operation::kWrite, TestKind::kLatency},
    {"read_bw", Operation::kRead, TestKind::kBandwidth},
    {"read_lat", Operation::kRead, TestKind::kLatency},
    {"send_bw", Operation::kSend, TestKind::kBandwidth},
    {"send_lat", Operation::kSend, TestKind::kLatency},
    {"atomic_bw", Operation::kAtomic, TestKind::kBandwidth},
    {"atomic_lat", Operation::kAtomic, TestKind::kLatency},
};

// A scalar naming one value of an enum, by the probes library's spelling of it; `choices` lists
// them for the error.
template <typename Enum>
Enum enum_value(const YAML::Node& node, const std::string& key,
                std::optional<Enum> (*parse)(std::string_view), const std::string& choices) {
  const auto text = scalar(node, key);
  const auto parsed = parse(text);
  if (!parsed) fail(node, key + " must be " + choices + ", not '" + text + "'");
  return *parsed;
}

probes::RateLimit parse_rate_limit(const YAML::Node& node) {
  require_map(node, "rate_limit");
  reject_unknown_keys(node, "rate_limit", {"value", "unit", "limiter"});
  if (!node["value"]) fail(node, "rate_limit has no value");
  probes::RateLimit limit;
  limit.value = positive_number(node["value"], "rate_limit.value", 1e12);
  if (const auto unit = node["unit"]) {
    limit.unit = enum_value(unit, "rate_limit.unit", probes::parse_rate_unit, "Gbps, MiBps or pps");
  }
  if (const auto limiter = node["limiter"]) {
    limit.limiter = enum_value(limiter, "rate_limit.limiter", probes::parse_rate_limiter,
                               "software, hardware or auto");
  }
  return limit;
}

// The values of one swept variable: whole numbers, except a rate limit's.
std::vector<double> sweep_values(const YAML::Node& node, const std::string& field,
                                 probes::SweepVariable variable) {
  if (!node.IsSequence()) fail(node, field + " must be a list of values");
  std::vector<double> values;
  for (const auto& item : node) {
    values.push_back(variable == probes::SweepVariable::kRateLimit
                         ? positive_number(item, field, 1e12)
                         : static_cast<double>(unsigned_value(item, field)));
  }
  return values;
}

// `sweep: {VARIABLE: [values], knee_threshold: 0.05}`, and `message_size: [values]` as the
// short form of a sweep over message sizes. Two variables are refused: the change between two
// steps could not be attributed to either.
std::optional<probes::SweepSpec> parse_sweep(const YAML::Node& module, const std::string& what) {
  std::vector<std::pair<probes::SweepVariable, std::vector<double>>> variables;
  const YAML::Node* where_node = nullptr;
  if (const auto sizes = module["message_size"]; sizes && sizes.IsSequence()) {
    variables.emplace_back(
        probes::SweepVariable::kMessageSize,
        sweep_values(sizes, "message_size", probes::SweepVariable::kMessageSize));
  }
  probes::SweepSpec sweep;
  const auto node = module["sweep"];
  if (node) {
    where_node = &node;
    require_map(node, what + " sweep");
    for (const auto& entry : node) {
      const auto key = entry.first.as<std::string>();
      if (key == "knee_threshold") continue;
      const auto variable = probes::parse_sweep_variable(key);
      if (!variable) {
        fail(entry.first, "sweep variable '" + key + "' in " + what + " is not one of " +
                              probes::sweep_variable_names());
      }
      variables.emplace_back(*variable, sweep_values(entry.second, "sweep." + key, *variable));
    }
    std::set<std::string, std::less<>> known = {"knee_threshold"};
    for (const auto& [variable, values] : variables) known.emplace(probes::to_string(variable));
    reject_unknown_keys(node, what + " sweep", known);
    if (node["knee_threshold"]) {
      sweep.knee_threshold = positive_number(node["knee_threshold"], "sweep.knee_threshold", 10);
    }
  }
  if (variables.empty()) {
    if (node)
      fail(node, what + " sweep names no variable: one of " + probes::sweep_variable_names());
    return std::nullopt;
  }
  if (variables.size() > 1) {
    std::string names;
    for (const auto& [variable, values] : variables) {
      names += (names.empty() ? "" : " and ") + std::string(probes::to_string(variable));
    }
    fail(where_node ? *where_node : module,
         what + " sweeps " + names +
             ": a sweep varies exactly one variable, or a change in its results cannot be "
             "attributed to it");
  }
  sweep.variable = variables.front().first;
  sweep.values = variables.front().second;
  return sweep;
}

void parse_rc(const YAML::Node& node, probes::RcKnobs& rc) {
  require_map(node, "rc");
  reject_unknown_keys(node, "rc", {"timeout", "retry_count", "rnr_retry", "min_rnr_timer"});
  if (node["timeout"]) rc.timeout = u32(node["timeout"], "rc.timeout");
  if (node["retry_count"]) rc.retry_cnt = u32(node["retry_count"], "rc.retry_count");
  if (node["rnr_retry"]) rc.rnr_retry = u32(node["rnr_retry"], "rc.rnr_retry");
  if (node["min_rnr_timer"]) rc.min_rnr_timer = u32(node["min_rnr_timer"], "rc.min_rnr_timer");
}

void parse_numa(const YAML::Node& node, const char* key, probes::NumaPolicy& policy,
                std::optional<std::uint32_t>& number) {
  const auto text = scalar(node, key);
  const auto choice = probes::parse_numa_choice(text);
  if (!choice)
    fail(node, std::string(key) + " must be auto, none or a node number, not '" + text + "'");
  policy = choice->policy;
  number = choice->node;
}

// kind: verify, the verification suite (ibprobe/verify_plan.h) for the probe API.
ProbeModule parse_verify_module(const std::string& what, const YAML::Node& node,
                                const probes::Limits& limits) {
  reject_unknown_keys(
      node, what,
      {"kind", "cases", "messages", "recv_delay", "seed", "fixed_sizes", "max_size",
       "rebuild_after", "inline_size", "soak_duration", "soak_interval", "soak_size", "timeout"});
  ProbeModule module;
  module.spec = probes::default_spec(probes::Operation::kSend, probes::TestKind::kBandwidth);
  auto& o = module.verify_options;
  std::vector<std::string> names;
  if (const auto cases = node["cases"]) {
    if (!cases.IsSequence()) fail(cases, "cases must be a list of verify case names");
    for (const auto& c : cases) names.push_back(scalar(c, "cases"));
  }
  try {
    module.verify_cases = probes::verify::select_cases(names);
  } catch (const std::invalid_argument& e) {
    fail(node["cases"], e.what());
  }
  if (node["messages"]) o.messages = u32(node["messages"], "messages");
  if (const auto delay = node["recv_delay"]) {
    const auto text = scalar(delay, "recv_delay");
    std::uint32_t ms = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), ms);
    if (ec != std::errc{} || std::string_view(end) != "ms") {
      fail(delay, "recv_delay must be milliseconds, as 20ms, not '" + text + "'");
    }
    o.recv_delay_ms = ms;
  }
  if (node["seed"]) o.seed = unsigned_value(node["seed"], "seed");
  if (node["fixed_sizes"]) o.fixed_sizes = boolean(node["fixed_sizes"], "fixed_sizes");
  if (node["max_size"]) o.max_message_size = unsigned_value(node["max_size"], "max_size");
  if (node["rebuild_after"]) o.rebuild_after = u32(node["rebuild_after"], "rebuild_after");
  if (node["inline_size"]) o.inline_size = u32(node["inline_size"], "inline_size");
  if (node["soak_duration"]) o.soak_seconds = seconds(node["soak_duration"], "soak_duration");
  if (node["soak_interval"]) {
    o.soak_interval_seconds = seconds(node["soak_interval"], "soak_interval");
  }
  if (node["soak_size"]) o.soak_message_size = unsigned_value(node["soak_size"], "soak_size");
  if (node["timeout"]) o.case_timeout_seconds = seconds(node["timeout"], "timeout");
  module.spec.timeout_seconds = o.case_timeout_seconds;
  const auto plan = probes::verify::validate(o, module.verify_cases);
  const auto fits =
      plan ? probes::verify::check_limits(*plan, limits) : std::unexpected(plan.error());
  if (!fits) fail(node, what + " is not a valid verify module: " + fits.error().message());
  return module;
}

ProbeModule parse_module(const std::string& name, const YAML::Node& node,
                         const probes::Limits& limits) {
  const std::string what = "module " + name;
  require_map(node, what);
  if (node["kind"] && node["kind"].IsScalar() && node["kind"].Scalar() == "verify") {
    return parse_verify_module(what, node, limits);
  }
  reject_unknown_keys(node, what,
                      {"kind",
                       "message_size",
                       "iterations",
                       "duration",
                       "margin",
                       "qps",
                       "tx_depth",
                       "rx_depth",
                       "cq_moderation",
                       "post_list",
                       "inline_size",
                       "mtu",
                       "gid_index",
                       "use_srq",
                       "cq_events",
                       "numa",
                       "timeout",
                       "rc",
                       "fabric_ports",
                       "validation",
                       "posted_receives",
                       "receive_sges",
                       "peer_gid_index",
                       "peer_numa",
                       "bidirectional",
                       "rate_limit",
                       "sl",
                       "traffic_class",
                       "pkey_index",
                       "sweep",
                       "atomic_type",
                       "connection",
                       "no_peak",
                       "rdma_cm",
                       "dlid"});
  if (!node["kind"]) fail(node, what + " has no kind (write_bw, write_lat, read_bw, ...)");
  const auto kind_text = scalar(node["kind"], "kind");
  const Kind* kind = nullptr;
  for (const auto& candidate : kKinds) {
    if (kind_text == candidate.name) kind = &candidate;
  }
  if (!kind) {
    fail(node["kind"], "kind '" + kind_text +
                           "' is not one of write_bw, write_lat, read_bw, read_lat, send_bw, "
                           "send_lat, atomic_bw, atomic_lat, verify");
  }
  ProbeModule module;
  auto& spec = module.spec;
  spec = probes::default_spec(kind->operation, kind->test);
  if (node["message_size"] && !node["message_size"].IsSequence())
    spec.message_size = unsigned_value(node["message_size"], "message_size");
  if (node["duration"]) {
    spec.duration_seconds = seconds(node["duration"], "duration");
    spec.iterations.reset();
  }
  if (node["iterations"]) spec.iterations = unsigned_value(node["iterations"], "iterations");
  if (node["margin"]) spec.margin_seconds = seconds(node["margin"], "margin");
  if (node["qps"]) spec.qps = u32(node["qps"], "qps");
  if (node["tx_depth"]) spec.tx_depth = u32(node["tx_depth"], "tx_depth");
  if (node["rx_depth"]) spec.rx_depth = u32(node["rx_depth"], "rx_depth");
  if (node["cq_moderation"]) spec.cq_moderation = u32(node["cq_moderation"], "cq_moderation");
  if (node["post_list"]) spec.post_list = u32(node["post_list"], "post_list");
  if (node["inline_size"]) spec.inline_size = u32(node["inline_size"], "inline_size");
  if (node["mtu"]) spec.mtu = u32(node["mtu"], "mtu");
  if (node["gid_index"]) spec.gid_index = u32(node["gid_index"], "gid_index");
  if (node["peer_gid_index"]) spec.peer_gid_index = u32(node["peer_gid_index"], "peer_gid_index");
  if (node["use_srq"]) spec.use_srq = boolean(node["use_srq"], "use_srq");
  if (node["cq_events"]) spec.cq_events = boolean(node["cq_events"], "cq_events");
  if (node["no_peak"]) spec.no_peak = boolean(node["no_peak"], "no_peak");
  if (node["rdma_cm"]) spec.rdma_cm = boolean(node["rdma_cm"], "rdma_cm");
  if (const auto type = node["atomic_type"]) {
    spec.atomic_type =
        enum_value(type, "atomic_type", probes::parse_atomic_type, "FETCH_AND_ADD or CMP_AND_SWAP");
  }
  if (const auto connection = node["connection"]) {
    spec.connection =
        enum_value(connection, "connection", probes::parse_connection, "RC, UC or UD");
  }
  if (node["sl"]) spec.sl = u32(node["sl"], "sl");
  if (node["traffic_class"]) spec.traffic_class = u32(node["traffic_class"], "traffic_class");
  if (node["pkey_index"]) spec.pkey_index = u32(node["pkey_index"], "pkey_index");
  if (node["dlid"]) spec.dlid = u32(node["dlid"], "dlid");
  if (const auto v = node["validation"]) {
    const auto text = scalar(v, "validation");
    if (text != "on" && text != "off") fail(v, "validation must be on or off, not '" + text + "'");
    spec.validation = text == "on";
  }
  if (node["posted_receives"]) {
    spec.posted_receives = u32(node["posted_receives"], "posted_receives");
    // The receive queue must hold the fixed number of receives a back-pressure module asks for.
    if (!node["rx_depth"]) spec.rx_depth = std::max(spec.rx_depth, spec.posted_receives);
  }
  if (node["receive_sges"]) spec.receive_sges = u32(node["receive_sges"], "receive_sges");
  if (node["numa"]) parse_numa(node["numa"], "numa", spec.numa, spec.numa_node);
  if (node["peer_numa"]) {
    parse_numa(node["peer_numa"], "peer_numa", spec.peer_numa, spec.peer_numa_node);
  }
  if (node["timeout"]) spec.timeout_seconds = seconds(node["timeout"], "timeout");
  if (node["rc"]) parse_rc(node["rc"], spec.rc);
  if (node["bidirectional"]) spec.bidirectional = boolean(node["bidirectional"], "bidirectional");
  if (node["rate_limit"]) spec.rate_limit = parse_rate_limit(node["rate_limit"]);
  if (!node["rx_depth"] && !node["posted_receives"]) {
    spec.rx_depth = probes::perftest_unreliable_rx_depth(spec, limits.max_depth);
  }
  if (const auto ports = node["fabric_ports"]) {
    if (!ports.IsSequence()) fail(ports, "fabric_ports must be a list of LID:PORT");
    for (const auto& port : ports) {
      const auto text = scalar(port, "fabric_ports");
      // A run would refuse it only after the peer has set up its side.
      const auto parsed = fabric::parse_remote_port(text);
      if (!parsed || !parsed->port) fail(port, "fabric port '" + text + "' is not LID:PORT");
      module.fabric_ports.push_back(text);
    }
  }
  module.sweep = parse_sweep(node, what);
  const auto invalid_probe = [&](const probes::SpecViolations& violations) {
    fail(node, what + " is not a valid probe: " + violations.message());
  };
  if (!module.sweep) {
    if (const auto valid = probes::validate_within(spec, limits); !valid) {
      invalid_probe(valid.error());
    }
    return module;
  }
  module.sweep->base = spec;
  const auto sweep = probes::validate(*module.sweep);
  if (!sweep) {
    fail(node["sweep"] ? node["sweep"] : node["message_size"],
         what + " is not a valid sweep: " + sweep.error().message());
  }
  for (const auto& step : sweep->steps()) {
    if (const auto fits = probes::check_limits(step.spec(), limits); !fits) {
      invalid_probe(fits.error());
    }
  }
  return module;
}

probes::Limits parse_limits(const YAML::Node& node) {
  require_map(node, "limits");
  reject_unknown_keys(node, "limits",
                      {"max_message_size", "max_depth", "max_qps", "max_duration", "max_iterations",
                       "max_total_buffer_bytes", "max_soak_duration"});
  // The built-in limits are the ceiling: a file may tighten them, never widen them, since they
  // are what keeps one request from taking the host's memory.
  const probes::Limits ceiling;
  probes::Limits limits;
  if (node["max_message_size"]) {
    limits.max_message_size =
        unsigned_value(node["max_message_size"], "max_message_size", ceiling.max_message_size);
  }
  if (node["max_depth"]) {
    limits.max_depth = static_cast<std::uint32_t>(
        unsigned_value(node["max_depth"], "max_depth", ceiling.max_depth));
  }
  if (node["max_qps"]) {
    limits.max_qps =
        static_cast<std::uint32_t>(unsigned_value(node["max_qps"], "max_qps", ceiling.max_qps));
  }
  if (node["max_duration"]) {
    limits.max_duration_seconds = seconds(node["max_duration"], "max_duration");
    if (limits.max_duration_seconds > ceiling.max_duration_seconds) {
      fail(node["max_duration"], "max_duration is above its maximum " +
                                     std::to_string(ceiling.max_duration_seconds) + "s");
    }
  }
  // The verification suite's soak is the one run that may last longer than max_duration, and
  // only when this file says so.
  if (node["max_soak_duration"]) {
    constexpr std::uint32_t kLongestSoakSeconds = 24 * 3600;
    limits.max_soak_seconds = seconds(node["max_soak_duration"], "max_soak_duration");
    if (limits.max_soak_seconds > kLongestSoakSeconds) {
      fail(node["max_soak_duration"],
           "max_soak_duration is above its maximum " + std::to_string(kLongestSoakSeconds) + "s");
    }
  }
  if (node["max_iterations"]) {
    limits.max_iterations =
        unsigned_value(node["max_iterations"], "max_iterations", ceiling.max_iterations);
  }
  if (node["max_total_buffer_bytes"]) {
    limits.max_total_buffer_bytes = unsigned_value(
        node["max_total_buffer_bytes"], "max_total_buffer_bytes", ceiling.max_total_buffer_bytes);
  }
  return limits;
}

void parse_scheduler(const YAML::Node& node, ProbeConfig& config) {
  require_map(node, "scheduler");
  reject_unknown_keys(node, "scheduler", {"queue_length", "history_length"});
  if (node["queue_length"]) {
    config.queue_length = unsigned_value(node["queue_length"], "queue_length", 64);
  }
  if (node["history_length"]) {
    config.history_length = unsigned_value(node["history_length"], "history_length", 4096);
    if (config.history_length == 0) fail(node["history_length"], "history_length must be >= 1");
  }
}

std::string base64(const std::string& bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const unsigned n = (static_cast<unsigned char>(bytes[i]) << 16) |
                       (static_cast<unsigned char>(bytes[i + 1]) << 8) |
                       static_cast<unsigned char>(bytes[i + 2]);
    for (const int shift : {18, 12, 6, 0}) out += kAlphabet[(n >> shift) & 63];
  }
  if (const std::size_t rest = bytes.size() - i; rest > 0) {
    unsigned n = static_cast<unsigned char>(bytes[i]) << 16;
    if (rest == 2) n |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += rest == 2 ? kAlphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

AlertRule parse_alert_rule(const YAML::Node& node, const ProbeConfig& config) {
  require_map(node, "alerts.rules[]");
  reject_unknown_keys(node, "an alert rule",
                      {"alertname", "match", "module", "module_label", "peer", "peer_label",
                       "peer_choice", "run_from_label"});
  AlertRule rule;
  if (!node["alertname"]) fail(node, "an alert rule needs an alertname");
  rule.alertname = scalar(node["alertname"], "alertname");
  if (const auto match = node["match"]) {
    require_map(match, "match");
    for (const auto& entry : match) {
      rule.match.emplace(entry.first.as<std::string>(), scalar(entry.second, "match"));
    }
  }
  const std::string what = "alert rule " + rule.alertname;
  if (node["module"]) rule.module = scalar(node["module"], "module");
  if (node["module_label"]) rule.module_label = scalar(node["module_label"], "module_label");
  if (rule.module.empty() == rule.module_label.empty()) {
    fail(node, what + " needs one of module and module_label");
  }
  if (!rule.module.empty() && !config.modules.contains(rule.module)) {
    fail(node["module"], what + ": no module named " + rule.module);
  }
  if (node["peer"]) rule.peer = scalar(node["peer"], "peer");
  if (node["peer_label"]) rule.peer_label = scalar(node["peer_label"], "peer_label");
  if (const auto choice = node["peer_choice"]) {
    const auto text = scalar(choice, "peer_choice");
    if (text == to_string(PeerChoice::kSameLeaf)) {
      rule.peer_choice = PeerChoice::kSameLeaf;
    } else if (text == to_string(PeerChoice::kOtherLeaf)) {
      rule.peer_choice = PeerChoice::kOtherLeaf;
    } else {
      fail(choice, what + ": peer_choice '" + text + "' is none of same_leaf and other_leaf");
    }
  }
  if ((rule.peer.empty() ? 0 : 1) + (rule.peer_label.empty() ? 0 : 1) +
          (rule.peer_choice == PeerChoice::kNone ? 0 : 1) !=
      1) {
    fail(node, what + " needs one of peer, peer_label and peer_choice");
  }
  if (node["run_from_label"]) {
    rule.run_from_label = scalar(node["run_from_label"], "run_from_label");
  }
  return rule;
}

void parse_alerts(const YAML::Node& node, ProbeConfig& config) {
  require_map(node, "alerts");
  reject_unknown_keys(
      node, "alerts",
      {"rules", "repeat", "max_in_flight", "instance", "dispatch_port", "dispatch_to_instance_port",
       "dispatch_basic_auth", "dispatch_tls", "peers_file"});
  if (const auto tls = node["dispatch_tls"]) {
    require_map(tls, "dispatch_tls");
    reject_unknown_keys(tls, "dispatch_tls", {"ca_file", "insecure_skip_verify"});
    auto& options = config.alerts.dispatch_tls.emplace();
    if (tls["ca_file"]) {
      options.ca_file = scalar(tls["ca_file"], "ca_file");
      if (!std::ifstream(options.ca_file)) {
        fail(tls["ca_file"], "dispatch_tls: cannot read the authorities of " + options.ca_file);
      }
    }
    if (tls["insecure_skip_verify"]) {
      options.insecure_skip_verify =
          boolean(tls["insecure_skip_verify"], "dispatch_tls.insecure_skip_verify");
    }
  }
  if (node["peers_file"]) config.alerts.peers_file = scalar(node["peers_file"], "peers_file");
  if (node["dispatch_port"]) {
    config.alerts.dispatch_port =
        static_cast<std::uint16_t>(unsigned_value(node["dispatch_port"], "dispatch_port", 65535));
  }
  if (node["dispatch_to_instance_port"]) {
    config.alerts.dispatch_to_instance_port =
        boolean(node["dispatch_to_instance_port"], "dispatch_to_instance_port");
  }
  if (const auto auth = node["dispatch_basic_auth"]) {
    require_map(auth, "dispatch_basic_auth");
    reject_unknown_keys(auth, "dispatch_basic_auth", {"username", "password_file"});
    if (!auth["username"] || !auth["password_file"]) {
      fail(auth, "dispatch_basic_auth needs username and password_file");
    }
    const auto username = scalar(auth["username"], "username");
    const auto file = scalar(auth["password_file"], "password_file");
    std::ifstream in(file);
    std::string password;
    if (!in || !std::getline(in, password)) {
      fail(auth["password_file"], "dispatch_basic_auth: cannot read the password from " + file);
    }
    config.alerts.dispatch_authorization = "Basic " + base64(username + ":" + password);
  }
  if (node["repeat"])
    config.alerts.repeat = std::chrono::seconds(seconds(node["repeat"], "repeat"));
  if (node["max_in_flight"]) {
    config.alerts.max_in_flight = unsigned_value(node["max_in_flight"], "max_in_flight", 64);
    if (config.alerts.max_in_flight == 0) {
      fail(node["max_in_flight"], "max_in_flight must be >= 1 (leave out rules to answer none)");
    }
  }
  if (node["instance"]) {
    config.alerts.instance = scalar(node["instance"], "instance");
    if (!parse_instance(config.alerts.instance)) {
      fail(node["instance"], "alerts.instance '" + config.alerts.instance +
                                 "' is neither HOST nor HOST:PORT (IPv6 as [ADDRESS]:PORT)");
    }
  }
  if (const auto rules = node["rules"]) {
    if (!rules.IsSequence()) fail(rules, "alerts.rules must be a list");
    config.alerts.rules.clear();
    for (const auto& rule : rules) config.alerts.rules.push_back(parse_alert_rule(rule, config));
  }
}

void parse_mesh(const YAML::Node& node, mesh::MeshConfig& mesh) {
  require_map(node, "mesh");
  reject_unknown_keys(
      node, "mesh",
      {"enabled", "peers_file", "peers_dns", "peers_fabric", "self", "peer_rate", "host_budget",
       "epoch", "host_pairs_per_tor_pair", "min_watchers", "per_peer_rtt"});
  if (node["enabled"]) mesh.enabled = boolean(node["enabled"], "enabled");
  if (node["per_peer_rtt"]) mesh.per_peer_rtt = boolean(node["per_peer_rtt"], "per_peer_rtt");
  if (node["peers_file"]) mesh.peers_file = scalar(node["peers_file"], "peers_file");
  if (node["peers_dns"]) mesh.peers_dns = scalar(node["peers_dns"], "peers_dns");
  if (const auto fabric = node["peers_fabric"]) {
    require_map(fabric, "peers_fabric");
    reject_unknown_keys(fabric, "peers_fabric", {"exporter_port", "ca", "ca_port"});
    auto& source = mesh.peers_fabric.emplace();
    if (fabric["exporter_port"]) {
      source.exporter_port = std::to_string(
          unsigned_value(fabric["exporter_port"], "peers_fabric.exporter_port", 65535));
      if (source.exporter_port == "0") {
        fail(fabric["exporter_port"], "peers_fabric.exporter_port must be a port, 1 to 65535");
      }
    }
    if (fabric["ca"]) source.ca = scalar(fabric["ca"], "peers_fabric.ca");
    if (fabric["ca_port"]) {
      source.ca_port =
          static_cast<int>(unsigned_value(fabric["ca_port"], "peers_fabric.ca_port", 255));
    }
  }
  if ((node["peers_file"] ? 1 : 0) + (node["peers_dns"] ? 1 : 0) + (node["peers_fabric"] ? 1 : 0) >
      1) {
    fail(node, "give one of peers_file, peers_dns and peers_fabric, not several");
  }
  if (node["self"]) mesh.self = scalar(node["self"], "self");
  auto& policy = mesh.policy;
  // Ceilings that keep a typo from flooding the fabric; the budget caps the sum anyway.
  if (node["peer_rate"]) {
    policy.peer_rate_hz = positive_number(node["peer_rate"], "peer_rate", 1000);
  }
  if (node["host_budget"]) {
    policy.host_budget_hz = positive_number(node["host_budget"], "host_budget", 100000);
  }
  if (node["epoch"]) {
    policy.epoch = std::chrono::seconds(seconds(node["epoch"], "epoch"));
    if (policy.epoch.count() == 0) fail(node["epoch"], "epoch must be at least 1s");
  }
  if (node["host_pairs_per_tor_pair"]) {
    policy.host_pairs_per_tor_pair = static_cast<int>(
        unsigned_value(node["host_pairs_per_tor_pair"], "host_pairs_per_tor_pair", 64));
    if (policy.host_pairs_per_tor_pair == 0) {
      fail(node["host_pairs_per_tor_pair"], "host_pairs_per_tor_pair must be >= 1");
    }
  }
  if (node["min_watchers"]) {
    policy.min_watchers =
        static_cast<int>(unsigned_value(node["min_watchers"], "min_watchers", 64));
  }
}

void set_allowlist(ProbeConfig& config, const YAML::Node* node) {
  auto parsed = TargetAllowlist::parse(config.allowed_targets);
  if (!parsed) {
    if (node) fail(*node, "allowed_targets: " + parsed.error());
    throw yaml::Error("allowed_targets: " + parsed.error());
  }
  if (!config.allowed_targets.empty()) {
    config.allowlist = std::make_shared<const TargetAllowlist>(*std::move(parsed));
  }
}

}  // namespace

std::string_view to_string(PeerChoice choice) {
  switch (choice) {
    case PeerChoice::kNone:
      return "none";
    case PeerChoice::kSameLeaf:
      return "same_leaf";
    case PeerChoice::kOtherLeaf:
      return "other_leaf";
  }
  return "none";
}

// As the runbooks of dashboards/prometheus/*.rules.yml say. None for IbprobeExporterDown (the
// exporter that would run it is the one down) and IbprobeMeshTorPairLoss (it names two leaves, no
// host): their runbooks stay for a person.
std::vector<AlertRule> default_alert_rules() {
  std::vector<AlertRule> rules;
  for (const char* alert : {"IbprobeProbeFailing", "IbprobeProbeBandwidthRegressed",
                            "IbprobeProbeLatencyRegressed", "IbprobeProbeErrorsDuringRun"}) {
    rules.push_back({.alertname = alert, .module_label = "module", .peer_label = "target"});
  }
  rules.push_back(
      {.alertname = "IbprobeMeshPathLoss", .module = "send_lat", .peer_label = "peer_instance"});
  rules.push_back({.alertname = "IbprobeMeshHostUnreachable",
                   .module = "send_lat",
                   .peer_label = "peer_instance"});
  // A host's alerts: traffic over its cable to a host behind the same leaf, which crosses that
  // cable and the peer's and nothing else.
  for (const char* alert :
       {"IbprobeSymbolErrorsRising", "IbprobeLinkErrorRecovery", "IbprobeBufferOverruns",
        "IbprobePortErrorsRising", "IbprobeRateBelowExpected", "IbprobeCounterSaturated",
        "IbprobeRetransmissions", "IbprobeSequenceErrors", "IbprobePauseStorm",
        "IbprobeCongestionNotificationsHigh", "IbprobePreFecBerHigh", "IbprobePostFecErrors",
        "IbprobeModuleRxPowerLow", "IbprobeModuleTemperatureHigh"}) {
    rules.push_back(
        {.alertname = alert, .module = "write_bw", .peer_choice = PeerChoice::kSameLeaf});
  }
  for (const char* alert : {"IbprobeLinkDowned", "IbprobePortNotActive", "IbprobePortFlapping",
                            "IbprobeCollectorFailing", "IbprobeScrapeErrors",
                            "IbprobeFabricDiscoveryFailing", "IbprobeFabricNoMasterSm",
                            "IbprobeFabricMasterSmChanged", "IbprobeFabricSmActivityStalled"}) {
    rules.push_back(
        {.alertname = alert, .module = "write_lat", .peer_choice = PeerChoice::kSameLeaf});
  }
  // A switch port's: from the host at the cable's far end to a host behind another leaf.
  for (const auto& [alert, module] : {std::pair{"IbprobeSwitchPortSymbolErrors", "write_bw"},
                                      std::pair{"IbprobeSwitchPortErrors", "write_bw"},
                                      std::pair{"IbprobeSwitchLinkBelowCapability", "write_bw"},
                                      std::pair{"IbprobeSwitchCableMissing", "write_lat"},
                                      std::pair{"IbprobeFabricPortFlapping", "write_lat"},
                                      std::pair{"IbprobeFabricCableMiswired", "write_bw"},
                                      std::pair{"IbprobeFabricCableMissing", "write_lat"},
                                      std::pair{"IbprobeFabricCableUnexpected", "write_bw"}}) {
    rules.push_back({.alertname = alert,
                     .module = module,
                     .peer_choice = PeerChoice::kOtherLeaf,
                     .run_from_label = "remote_description"});
  }
  return rules;
}

ProbeConfig default_probe_config() {
  ProbeConfig config;
  for (const auto& kind : kKinds) {
    config.modules.emplace(
        kind.name, ProbeModule{probes::default_spec(kind.operation, kind.test), {}, std::nullopt});
  }
  return config;
}

std::expected<ProbeConfig, std::string> parse_probe_config(std::string_view text) {
  try {
    const YAML::Node root = yaml::load(text);
    // Nothing written changes nothing: every section keeps its defaults.
    if (root.IsNull()) return default_probe_config();
    require_map(root, "the file");
    reject_unknown_keys(root, "the file",
                        {"modules", "allowed_targets", "scheduler", "limits", "mesh", "alerts"});
    ProbeConfig config;
    if (root["limits"]) config.limits = parse_limits(root["limits"]);
    if (root["scheduler"]) parse_scheduler(root["scheduler"], config);
    if (root["mesh"]) parse_mesh(root["mesh"], config.mesh);
    // A file without a modules section keeps the built-in modules (a file of one concern, the
    // mesh or the alerts, need not copy them), held to the file's limits as its own would be;
    // `modules: {}` written out means none.
    const auto modules = root["modules"];
    if (!modules) {
      auto built_in = default_probe_config().modules;
      for (auto& [name, module] : built_in) {
        if (const auto fits = probes::validate_within(module.spec, config.limits); !fits) {
          fail(root["limits"] ? root["limits"] : root,
               "the built-in module " + name + " does not fit the limits: " +
                   fits.error().message() + " (define the modules, or raise the limits)");
        }
        config.modules.emplace(name, std::move(module));
      }
    } else {
      require_map(modules, "modules");
      for (const auto& entry : modules) {
        const auto name = entry.first.as<std::string>();
        if (config.modules.contains(name)) {
          fail(entry.first, "module " + name + " is defined twice");
        }
        if (entry.second.IsNull()) fail(entry.first, "module " + name + " has no fields");
        config.modules.emplace(name, parse_module(name, entry.second, config.limits));
      }
    }
    // After the modules: a rule's module must be one of them.
    if (root["alerts"]) parse_alerts(root["alerts"], config);
    if (const auto targets = root["allowed_targets"]) {
      if (!targets.IsSequence()) fail(targets, "allowed_targets must be a list");
      for (const auto& target : targets) {
        config.allowed_targets.push_back(scalar(target, "allowed_targets"));
        // Checked one by one so the error names the entry's own line.
        const auto parsed = TargetAllowlist::parse({config.allowed_targets.back()});
        if (!parsed) {
          fail(target, "allowed_targets: " + parsed.error());
        }
      }
      set_allowlist(config, &targets);
    }
    return config;
  } catch (const yaml::Error& e) {
    return std::unexpected(std::string(e.what()));
  } catch (const YAML::Exception& e) {
    // A conversion yaml-cpp refused while the document was walked; its text says where.
    return std::unexpected(std::string(e.what()));
  }
}

std::expected<ProbeConfig, std::string> load_probe_config(const std::string& path) {
  std::ifstream file(path);
  if (!file) return std::unexpected("cannot read " + path);
  std::ostringstream text;
  text << file.rdbuf();
  auto parsed = parse_probe_config(text.str());
  if (!parsed) return std::unexpected(path + ": " + parsed.error());
  return parsed;
}

}  // namespace ibprobe::exporter
