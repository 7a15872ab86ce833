// The initiator: drives one run against a peer's responder, from the handshake to the outcome
// with both sides' counters and what they say together.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <expected>
#include <stdexcept>
#include <thread>

#include "control_channel.h"
#include "ibprobe/counter_snapshot.h"
#include "ibprobe/hw_counter_classes.h"
#include "ibprobe/remote_pma.h"
#include "ibprobe/verbs_probe.h"
#include "ibprobe/verify.h"
#include "peer_auth.h"
#include "rc_session.h"
#include "run_common.h"

namespace ibprobe::probes {
namespace {

using Clock = std::chrono::steady_clock;

// A peer's snapshot, classified with this side's tables: both sides' hw_counters are then read
// by one table, whatever software version the peer runs.
CounterSnapshot classified(CounterSnapshot snapshot) {
  constexpr std::string_view kHwPrefix = "hw_counters/";
  for (auto& [name, sample] : snapshot) {
    sample.counter_class = std::string(collectors::counter_class_of(name));
    sample.priority = collectors::priority_of(name);
    if (sample.priority) sample.error_class = sample.counter_class == "error";
    if (name.starts_with(kHwPrefix)) {
      sample.error_class = collectors::is_error_class(
          collectors::classify_hw_counter(std::string_view(name).substr(kHwPrefix.size())));
    }
  }
  return snapshot;
}

// Deltas of every side in one list, each name qualified by its side ("local:symbol_error",
// "peer:hw_counters/completer_retry_err") so a moved counter says where it moved.
void append_side(std::vector<CounterDelta>& all, std::string_view side,
                 const std::vector<CounterDelta>& deltas) {
  for (auto delta : deltas) {
    delta.counter = std::string(side) + ":" + delta.counter;
    all.push_back(std::move(delta));
  }
}

// A stalled run's evidence from the driver: the hw_counters of this port that moved during it
// (rxe's completer_retry_err counts retransmissions, duplicate_request and out_of_seq_request
// what the peer saw of them), so a timeout tells a lossy path from a silent peer.
std::string driver_evidence(const CounterSnapshot& before, const CounterSnapshot& after) {
  std::string moved;
  for (const auto& delta : counter_deltas(before, after)) {
    if (!delta.counter.starts_with("hw_counters/") || !delta.delta || *delta.delta <= 0) continue;
    moved +=
        fmt::format("{}{} +{:.0f}", moved.empty() ? "" : ", ",
                    delta.counter.substr(std::string_view("hw_counters/").size()), *delta.delta);
  }
  return moved.empty() ? "; no hw_counter of this port moved during the run"
                       : "; this port's hw_counters during the run: " + moved;
}

class IgnoredErrors final : public collectors::ErrorSink {
 public:
  void record(collectors::ReadError, const std::filesystem::path&) override {}
};

// Counters of the fabric ports, one snapshot per port in the order asked.
std::expected<std::vector<CounterSnapshot>, fabric::Error> snapshot_fabric(
    const fabric::RemotePmaOptions& options) {
  IgnoredErrors errors;
  const auto remotes = fabric::snapshot_remote_ports(options, errors);
  if (!remotes) return std::unexpected(remotes.error());
  std::vector<CounterSnapshot> snapshots;
  for (const auto& remote : *remotes) {
    CounterSnapshot snapshot;
    for (const auto& [name, counter] : remote.counters) {
      snapshot.emplace(name, collectors::describe_port_counter(
                                 name, counter.value, static_cast<std::uint32_t>(counter.width)));
    }
    snapshots.push_back(std::move(snapshot));
  }
  return snapshots;
}

void add_checks(ProbeOutcome& outcome, const std::vector<protocol::PreflightCheck>& local,
                const std::vector<protocol::PreflightCheck>& peer,
                const std::string& peer_version) {
  auto rate_of = [](const std::vector<protocol::PreflightCheck>& checks) -> std::string {
    for (const auto& c : checks) {
      if (c.name == "link_rate") return c.detail;
    }
    return "";
  };
  for (const auto& c : local) {
    outcome.checks.push_back({"local", c.name, c.passed, c.detail, c.applicable});
  }
  for (const auto& c : peer) {
    outcome.checks.push_back({"peer", c.name, c.passed, c.detail, c.applicable});
  }
  const auto local_rate = rate_of(local), peer_rate = rate_of(peer);
  outcome.checks.push_back({"both", "rate_match", !local_rate.empty() && local_rate == peer_rate,
                            "local " + local_rate + " Gb/s, peer " + peer_rate + " Gb/s"});
  outcome.checks.push_back({"both", "version_match", peer_version == kSoftwareVersion,
                            std::string("local ") + kSoftwareVersion + ", peer " + peer_version});
}

// The initiator's figures (what it sent, the order of its completions) with the receiver's
// verdict, and the one check only both together allow: one receive completion per send.
ValidationReport merge_validation(const ProbeSpec& spec, const ValidationReport& local,
                                  const protocol::Result& result) {
  // An atomic run is checked where the atomics came from: the initiator reads its targets back.
  if (spec.operation == Operation::kAtomic) return local;
  ValidationReport merged = result.validation.value_or(ValidationReport{});
  merged.messages_sent = local.messages_sent;
  merged.stale_completions += local.stale_completions;
  if (local.errors > 0) {
    merged.errors += local.errors;
    if (merged.first_error.empty()) merged.first_error = "initiator: " + local.first_error;
  }
  if (!result.validation) {
    merged.errors += 1;
    if (merged.first_error.empty()) {
      merged.first_error = "the responder returned no validation figures (older software?)";
    }
  } else if (spec.operation == Operation::kSend &&
             merged.messages_received != merged.messages_sent) {
    merged.errors += 1;
    if (merged.first_error.empty()) {
      merged.first_error = std::to_string(merged.messages_received) + " receive completions for " +
                           std::to_string(merged.messages_sent) + " sends";
    }
  }
  return merged;
}

// The run itself: failures are thrown, so that unwinding releases every verbs resource.
ProbeOutcome run_probe_or_throw(const LocalPort& local, const std::string& host,
                                const std::string& port, const ValidSpec& valid,
                                const RunOptions& options) {
  const ProbeSpec& spec = valid.spec();
  if (!options.verify_cases.empty()) {
    ProbeOutcome outcome;
    outcome.spec = spec;
    outcome.peer = host + ":" + port;
    // The module's options with this run's timeout: a new plan, checked before anything runs.
    auto verify_options = options.verify_options;
    verify_options.case_timeout_seconds = spec.timeout_seconds;
    const auto plan = verify::validate(verify_options, options.verify_cases);
    if (!plan) throw std::invalid_argument("invalid verify options: " + plan.error().message());
    const auto start = Clock::now();
    outcome.verify_results = verify::run_verify(local, host, port, *plan, options);
    outcome.window_seconds = std::chrono::duration<double>(Clock::now() - start).count();
    int passed = 0, failed = 0, skipped = 0;
    for (const auto& r : outcome.verify_results) {
      (r.verdict == verify::Verdict::kPass   ? passed
       : r.verdict == verify::Verdict::kFail ? failed
                                             : skipped) += 1;
    }
    outcome.checks.push_back({"both", "verify", failed == 0,
                              fmt::format("{} cases: {} passed, {} failed, {} skipped",
                                          outcome.verify_results.size(), passed, failed, skipped)});
    return outcome;
  }
  const auto& fabric_ports = options.fabric_ports;
  // Before the handshake: a bad port must not cost the peer its setup.
  fabric::RemotePmaOptions fabric;
  for (const auto& text : fabric_ports) {
    const auto parsed = fabric::parse_remote_port(text);
    if (!parsed || !parsed->port) {
      throw std::invalid_argument("fabric port '" + text + "' is not LID:PORT");
    }
    fabric.targets.push_back(*parsed);
  }
  const auto start = Clock::now();
  // One deadline for the handshake, the run and its result.
  const auto deadline =
      options.deadline.value_or(start + std::chrono::seconds(spec.timeout_seconds));
  const StopSignal stop(options.stop);
  throw_if_cancelled(stop);
  const auto addresses = addresses_to_connect(host, port, options);
  const peer_auth::InitiatorAuth auth(options.shared_secret);
  auto greeting = greet(host, port, addresses, deadline, auth, stop, options.gate);
  // References, not a structured binding: lambdas below capture the channel.
  auto& channel = greeting.channel;
  const auto& hello = greeting.hello;
  channel.send(protocol::ProbeRequest{spec, auth.authenticator(hello, spec)}, deadline);
  channel.expect<protocol::ProbeAccept>(deadline, "the responder's answer to the request");
  // Nothing is allocated here until the peer has accepted and offered endpoints that fit the spec.
  const auto remote = channel.expect<protocol::QpInfo>(deadline, "the responder's QPs");
  if (remote.qps.size() != spec.qps) {
    throw ProbeFailure(channel.peer() + " offered " + std::to_string(remote.qps.size()) +
                           " QPs for a probe with " + std::to_string(spec.qps),
                       FailureKind::kProtocol);
  }

  RcSession session(local, spec, Side::kInitiator);
  session.corrupt_every(options.test_corrupt_every);
  channel.send(session.local_endpoints(), deadline);
  if (spec.rdma_cm) {
    // The responder's failure to accept comes as its Error on the control channel.
    session.connect_through_cm(remote, channel.peer_address(),
                               cm::Wait{deadline, [&channel, &stop] {
                                          throw_if_cancelled(stop);
                                          channel.fail_if_peer_spoke();
                                        }});
  } else {
    session.connect(remote);
  }
  channel.expect<protocol::Ready>(deadline, "the responder to be ready");

  ProbeOutcome outcome;
  outcome.spec = spec;
  outcome.spec.message_size = session.message_size();
  outcome.peer = channel.peer();
  outcome.gid_index = session.port().gid_index;
  outcome.numa_node = session.numa_node();
  outcome.mtu = session.path_mtu();
  outcome.lane = session.lane();
  outcome.cq_moderation = session.cq_moderation();
  outcome.inline_size = session.inline_size();
  outcome.relaxed_ordering = session.relaxed_ordering();
  outcome.outstanding_reads = session.outstanding_reads();
  outcome.setup_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<CounterSnapshot> fabric_before;
  std::string fabric_problem;
  if (!fabric.targets.empty()) {
    if (auto snapshots = snapshot_fabric(fabric)) {
      fabric_before = std::move(*snapshots);
    } else {
      fabric_problem = snapshots.error().message;
    }
  }
  const auto before = snapshot_after_lifespan(local);
  const auto run_start = Clock::now();
  const RunGuard guard{deadline,
                       [&channel, &stop] {
                         throw_if_cancelled(stop);
                         channel.fail_if_peer_spoke();
                       },
                       nullptr, std::chrono::seconds(spec.timeout_seconds)};
  try {
    if (spec.test == TestKind::kBandwidth) {
      outcome.bandwidth = session.run_bandwidth(guard);
    } else if (spec.duration_seconds) {
      outcome.latency_duration = session.run_latency_duration(guard);
    } else {
      outcome.latency = session.run_latency(guard);
    }
  } catch (const ProbeFailure& failure) {
    if (failure.kind() != FailureKind::kTimeout && failure.kind() != FailureKind::kPeerLost &&
        failure.kind() != FailureKind::kVerbs) {
      throw;
    }
    // The evidence goes with the failure's own class: a peer that stopped answering is not a
    // deadline that passed, and a failed completion says what the driver saw before it.
    throw ProbeFailure(failure.what() + driver_evidence(before, snapshot_after_lifespan(local)),
                       failure.kind());
  }
  outcome.window_seconds = std::chrono::duration<double>(Clock::now() - run_start).count();
  outcome.post_calls = session.post_calls();
  outcome.completions = session.completions();
  outcome.cq_events = session.cq_events();
  const auto after = snapshot_after_lifespan(local);
  if (!fabric.targets.empty() && fabric_problem.empty()) {
    if (const auto fabric_after = snapshot_fabric(fabric)) {
      for (std::size_t i = 0; i < fabric_ports.size(); ++i) {
        outcome.fabric_deltas.push_back(
            {fabric_ports[i],
             counter_deltas(i < fabric_before.size() ? fabric_before[i] : CounterSnapshot{},
                            i < fabric_after->size() ? (*fabric_after)[i] : CounterSnapshot{})});
      }
    } else {
      fabric_problem = fabric_after.error().message;
    }
  }
  channel.send(protocol::Ready{}, deadline);
  if (spec.bidirectional && spec.operation == Operation::kSend && spec.duration_seconds) {
    // The responder's duration started at another instant: its last sends may still be coming,
    // and each needs a receive here until its result says it is done.
    session.receive_until_peer_finished(
        RunGuard{deadline,
                 [&channel, &stop] {
                   throw_if_cancelled(stop);
                   channel.check_open_or_message_waiting();
                 },
                 [&channel] { return channel.has_pending_message(); },
                 std::chrono::seconds(spec.timeout_seconds)});
  }
  const auto result = channel.expect<protocol::Result>(deadline, "the responder's result");
  add_checks(outcome, session.preflight_checks(), result.checks, hello.software_version);
  if (const auto& facts = result.facts) {
    outcome.peer_gid_index = static_cast<int>(facts->gid_index);
    outcome.peer_numa_node = facts->numa_node ? static_cast<int>(*facts->numa_node) : -1;
    outcome.peer_inline_size = facts->inline_size;
    outcome.peer_relaxed_ordering = facts->relaxed_ordering;
    outcome.peer_rate_limiter = facts->rate_limiter;
  }
  // A peer that predates lanes read the spec without them and answered in the default lane.
  const bool default_lane = spec.sl == 0 && spec.traffic_class == 0 && spec.pkey_index == 0;
  if (!default_lane && !(result.facts && result.facts->lane)) {
    throw ProbeFailure(channel.peer() +
                           " did not apply the lane (sl, traffic_class, pkey_index) to its QPs "
                           "(older software?): its packets went in the default lane",
                       FailureKind::kProtocol);
  }
  outcome.rate_limiter = session.rate_limiter();
  if (spec.connection != Connection::kRc && spec.operation == Operation::kSend &&
      spec.test == TestKind::kBandwidth && !spec.bidirectional) {
    if (!result.messages_received) {
      throw ProbeFailure(channel.peer() + " did not say how many of the " +
                             std::string(to_string(spec.connection)) + " sends it received",
                         FailureKind::kProtocol);
    }
    outcome.delivery = ProbeOutcome::Delivery{session.messages_posted(), *result.messages_received};
  }
  if (spec.bidirectional) {
    if (!result.bandwidth) {
      throw ProbeFailure(channel.peer() +
                             " returned no figures for its direction of the "
                             "bidirectional run (older software?)",
                         FailureKind::kProtocol);
    }
    outcome.initiator_direction = outcome.bandwidth;
    outcome.responder_direction = result.bandwidth;
    outcome.bandwidth = combine_directions(*outcome.bandwidth, *result.bandwidth);
  }
  if (spec.validation) {
    outcome.validation = merge_validation(spec, session.validation(), result);
    const auto& v = *outcome.validation;
    outcome.checks.push_back(
        {"both", "validation", v.errors == 0,
         std::to_string(v.checked) + " of " + std::to_string(v.messages_sent) +
             " messages checked, " + std::to_string(v.errors) + " errors" +
             (v.first_error.empty() ? std::string() : "; first: " + v.first_error)});
  }

  outcome.local_deltas = counter_deltas(before, after);
  outcome.peer_deltas = counter_deltas(classified(result.before), classified(result.after));
  if (!fabric.targets.empty()) {
    outcome.checks.push_back({"local", "fabric_ports", fabric_problem.empty(),
                              fabric_problem.empty()
                                  ? std::to_string(fabric.targets.size()) + " fabric ports read"
                                  : fabric_problem});
  }
  std::vector<CounterDelta> all;
  append_side(all, "local", outcome.local_deltas);
  append_side(all, "peer", outcome.peer_deltas);
  for (const auto& fabric_port : outcome.fabric_deltas) {
    append_side(all, "fabric:" + fabric_port.port, fabric_port.deltas);
  }
  // The port that transmitted the probe's data: ours for write and send, the peer's for read.
  const auto& sender =
      spec.operation == Operation::kRead ? outcome.peer_deltas : outcome.local_deltas;
  // The sending port's counters see one direction: the initiator's posting (for read, the data
  // the peer's port sent in answer), not the sum of a bidirectional run.
  const auto& one_direction = spec.bidirectional ? outcome.initiator_direction : outcome.bandwidth;
  outcome.link =
      read_link(outcome.window_seconds, one_direction ? one_direction->bytes_per_second : 0,
                verbs::port_rate_gbps(session.port().attr) * 1e9 / 8, sender, all, {},
                own_backpressure(spec));
  return outcome;
}

}  // namespace

std::expected<ProbeOutcome, Error> run_probe(const LocalPort& local, const std::string& host,
                                             const std::string& port, const ValidSpec& spec,
                                             const RunOptions& options) {
  try {
    return run_probe_or_throw(local, host, port, spec, options);
  } catch (...) {
    return std::unexpected(current_exception_as_error());
  }
}

}  // namespace ibprobe::probes
