// Command-line front end of the verbs probes: `serve` runs a responder, `run` drives one probe
// against a responder and prints its figures the way perftest does, `verify` runs the two-sided
// verification suite against a responder and prints its table.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <iostream>

#include "ibprobe/active_port.h"
#include "ibprobe/crypto.h"
#include "ibprobe/host_port.h"
#include "ibprobe/shared_secret.h"
#include "ibprobe/sweep_run.h"
#include "ibprobe/verbs_probe.h"
#include "ibprobe/verify.h"

namespace {

using namespace ibprobe::probes;

constexpr std::uint32_t kDefaultBandwidthSeconds = 5;

std::pair<std::string, std::string> split_address(const std::string& address, bool listening) {
  const auto parsed =
      parse_host_port(address, listening ? HostPortRules::listen() : HostPortRules::peer());
  if (!parsed) throw CLI::ValidationError("address", "'" + address + "': " + parsed.error());
  return {parsed->host, std::to_string(parsed->port)};
}

// What a run prints besides its figures.
struct PrintOptions {
  bool histogram = false;     // -H: the latency samples' histogram
  bool report_gbits = false;  // --report_gbits: bandwidth in decimal Gbit/s, not MiB/s
};

void print(const ProbeOutcome& outcome, const PrintOptions& options) {
  const auto& spec = outcome.spec;
  std::printf(
      "probe %s_%s peer=%s size=%llu qps=%u mtu=%u gid_index=%d numa_node=%d "
      "setup_seconds=%.6f connection=%s%s%s connected_by=%s\n"
      "lane sl=%u traffic_class=%u pkey_index=%u%s\n",
      std::string(to_string(spec.operation)).c_str(), std::string(to_string(spec.test)).c_str(),
      outcome.peer.c_str(), static_cast<unsigned long long>(spec.message_size), spec.qps,
      outcome.mtu, outcome.gid_index, outcome.numa_node, outcome.setup_seconds,
      std::string(to_string(spec.connection)).c_str(),
      spec.operation == Operation::kAtomic ? " atomic_type=" : "",
      spec.operation == Operation::kAtomic ? std::string(to_string(spec.atomic_type)).c_str() : "",
      std::string(connected_by(spec)).c_str(), outcome.lane.sl, outcome.lane.traffic_class,
      outcome.lane.pkey_index, spec.dlid ? (" dlid=" + std::to_string(*spec.dlid)).c_str() : "");
  auto unless_unset = [](const auto& value) {
    return value ? std::to_string(static_cast<long long>(*value)) : std::string("unknown");
  };
  std::printf(
      "used tx_depth=%u rx_depth=%u cq_moderation=%u post_list=%u inline_size=%u "
      "relaxed_ordering=%d "
      "outstanding_reads=%u peer_gid_index=%d peer_numa_node=%d peer_inline_size=%s "
      "peer_relaxed_ordering=%s post_calls=%llu completions=%llu completion_mode=%s "
      "cq_events=%llu\n",
      spec.tx_depth, spec.rx_depth, outcome.cq_moderation, spec.post_list, outcome.inline_size,
      outcome.relaxed_ordering ? 1 : 0, outcome.outstanding_reads, outcome.peer_gid_index,
      outcome.peer_numa_node, unless_unset(outcome.peer_inline_size).c_str(),
      unless_unset(outcome.peer_relaxed_ordering).c_str(),
      static_cast<unsigned long long>(outcome.post_calls),
      static_cast<unsigned long long>(outcome.completions),
      outcome.spec.cq_events ? "events" : "polling",
      static_cast<unsigned long long>(outcome.cq_events));
  for (const auto& check : outcome.checks) {
    std::printf("check side=%s name=%s passed=%s detail=\"%s\"\n", check.side.c_str(),
                check.name.c_str(),
                !check.applicable ? "na"
                : check.passed    ? "1"
                                  : "0",
                check.detail.c_str());
  }
  for (const auto* side : {"local", "peer"}) {
    const auto& deltas = std::string(side) == "local" ? outcome.local_deltas : outcome.peer_deltas;
    for (const auto& d : deltas) {
      if (d.status == DeltaStatus::kValid && d.delta.value_or(0) == 0) continue;
      std::printf("delta side=%s counter=%s status=%s value=%.0f class=%s%s\n", side,
                  d.counter.c_str(), std::string(to_string(d.status)).c_str(), d.delta.value_or(0),
                  d.counter_class.c_str(),
                  d.priority ? (" priority=" + std::to_string(*d.priority)).c_str() : "");
    }
  }
  // Said even when none: 0 is a netdev that counts nothing by priority (virtio_net, rxe's) or an
  // InfiniBand port, so a lane's priority cannot be read from this run's deltas.
  auto by_priority = [](const std::vector<CounterDelta>& deltas) {
    return std::ranges::count_if(deltas,
                                 [](const CounterDelta& d) { return d.priority.has_value(); });
  };
  std::printf("priority_counters local=%td peer=%td\n", by_priority(outcome.local_deltas),
              by_priority(outcome.peer_deltas));
  for (const auto& fabric_port : outcome.fabric_deltas) {
    for (const auto& d : fabric_port.deltas) {
      if (d.status == DeltaStatus::kValid && d.delta.value_or(0) == 0) continue;
      std::printf("delta side=fabric:%s counter=%s status=%s value=%.0f\n",
                  fabric_port.port.c_str(), d.counter.c_str(),
                  std::string(to_string(d.status)).c_str(), d.delta.value_or(0));
    }
  }
  const auto& link = outcome.link;
  std::string moved;
  for (const auto& c : link.moved_error_counters) moved += (moved.empty() ? "" : ",") + c;
  std::string own;
  for (const auto& c : link.probe_backpressure_counters) own += (own.empty() ? "" : ",") + c;
  auto figure = [](const std::optional<double>& value, const char* format) {
    if (!value) return std::string("unknown");
    char text[32];
    std::snprintf(text, sizeof(text), format, *value);
    return std::string(text);
  };
  std::printf(
      "link window_seconds=%.3f link_bytes_per_second=%s line_rate_ratio=%s "
      "errors_clean=%d errors_moved=%s probe_backpressure=%s diagnosis=%s explanation=\"%s\"\n",
      outcome.window_seconds, figure(link.link_bytes_per_second, "%.0f").c_str(),
      figure(link.line_rate_ratio, "%.4f").c_str(), moved.empty() ? 1 : 0,
      moved.empty() ? "none" : moved.c_str(), own.empty() ? "none" : own.c_str(),
      std::string(to_string(link.diagnosis)).c_str(), link.explanation.c_str());
  if (outcome.rate_limiter || outcome.peer_rate_limiter) {
    const auto& limit = *spec.rate_limit;
    std::printf(
        "rate_limit value=%.15g unit=%s asked=%s limiter=%s peer_limiter=%s\n", limit.value,
        std::string(to_string(limit.unit)).c_str(), std::string(to_string(limit.limiter)).c_str(),
        outcome.rate_limiter ? std::string(to_string(*outcome.rate_limiter)).c_str() : "none",
        outcome.peer_rate_limiter ? std::string(to_string(*outcome.peer_rate_limiter)).c_str()
                                  : "none");
  }
  const auto unit = options.report_gbits ? gigabits_per_second : mebibytes_per_second;
  const char* unit_name = options.report_gbits ? "Gbps" : "MiBps";
  for (const auto& [direction, stats] : {std::pair{"initiator", &outcome.initiator_direction},
                                         std::pair{"responder", &outcome.responder_direction}}) {
    if (!*stats) continue;
    std::printf("direction %s bw_average_%s=%.2f msg_rate_Mpps=%.6f messages=%llu\n", direction,
                unit_name, unit((*stats)->bytes_per_second), (*stats)->messages_per_second / 1e6,
                static_cast<unsigned long long>((*stats)->messages));
  }
  if (const auto& bw = outcome.bandwidth) {
    // perftest prints a peak of 0 where it computes none (-N, duration mode, many iterations).
    std::printf(
        "bw_average_%s=%.2f bw_peak_%s=%.2f msg_rate_Mpps=%.6f messages=%llu seconds=%.6f\n",
        unit_name, unit(bw->bytes_per_second), unit_name,
        bw->peak_bytes_per_second ? unit(*bw->peak_bytes_per_second) : 0,
        bw->messages_per_second / 1e6, static_cast<unsigned long long>(bw->messages), bw->seconds);
  }
  if (const auto& d = outcome.delivery) {
    std::printf(
        "delivery sent=%llu received=%llu lost=%llu\n", static_cast<unsigned long long>(d->sent),
        static_cast<unsigned long long>(d->received), static_cast<unsigned long long>(d->lost()));
  }
  if (const auto& v = outcome.validation) {
    const double coverage =
        v->messages_sent > 0 ? 100.0 * static_cast<double>(v->checked) / v->messages_sent : 0;
    std::printf(
        "validation sent=%llu received=%llu checked=%llu errors=%llu coverage_percent=%.1f "
        "skipped_overwritten=%llu races=%llu rechecks=%llu tail_checks=%llu "
        "stale_completions=%llu first_error=\"%s\"\n",
        static_cast<unsigned long long>(v->messages_sent),
        static_cast<unsigned long long>(v->messages_received),
        static_cast<unsigned long long>(v->checked), static_cast<unsigned long long>(v->errors),
        coverage, static_cast<unsigned long long>(v->skipped_overwritten),
        static_cast<unsigned long long>(v->races), static_cast<unsigned long long>(v->rechecks),
        static_cast<unsigned long long>(v->tail_checks),
        static_cast<unsigned long long>(v->stale_completions), v->first_error.c_str());
  }
  if (const auto& lat = outcome.latency_duration) {
    std::printf("t_avg_usec=%.3f transactions_per_second=%.1f iterations=%llu\n",
                lat->average_ns / 1e3, lat->transactions_per_second,
                static_cast<unsigned long long>(lat->iterations));
  }
  if (const auto& lat = outcome.latency) {
    std::printf(
        "t_min_usec=%.3f t_max_usec=%.3f t_typical_usec=%.3f t_avg_usec=%.3f "
        "t_stdev_usec=%.3f p99_usec=%.3f p99.9_usec=%.3f samples=%zu\n",
        lat->min_ns / 1e3, lat->max_ns / 1e3, lat->typical_ns / 1e3, lat->average_ns / 1e3,
        lat->stdev_ns / 1e3, lat->p99_ns / 1e3, lat->p99_9_ns / 1e3, lat->samples);
    if (options.histogram) {
      for (std::size_t b = 0; b < kLatencyHistogramBoundsNs.size(); ++b) {
        std::printf("histogram le_usec=%g samples=%llu\n", kLatencyHistogramBoundsNs[b] / 1e3,
                    static_cast<unsigned long long>(lat->histogram_counts[b]));
      }
      std::printf("histogram le_usec=+Inf samples=%zu\n", lat->samples);
    }
  }
}

std::vector<double> parse_values(const std::string& text) {
  std::vector<double> values;
  std::size_t from = 0;
  while (from <= text.size()) {
    const auto comma = text.find(',', from);
    const auto item =
        text.substr(from, comma == std::string::npos ? std::string::npos : comma - from);
    std::size_t used = 0;
    double value = 0;
    try {
      value = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size()) {
      throw CLI::ValidationError("values", "'" + item + "' is not a number in '" + text + "'");
    }
    values.push_back(value);
    if (comma == std::string::npos) break;
    from = comma + 1;
  }
  return values;
}

void print(const SweepOutcome& sweep, const PrintOptions& options) {
  const auto variable = std::string(to_string(sweep.sweep.variable));
  for (std::size_t i = 0; i < sweep.steps.size(); ++i) {
    const auto& step = sweep.steps[i];
    std::printf("step %zu variable=%s value=%.15g result=%s\n", i, variable.c_str(), step.value,
                step.outcome ? "ok" : std::string(to_string(step.failure)).c_str());
    if (step.outcome) {
      print(*step.outcome, options);
    } else {
      std::printf("error=\"%s\"\n", step.error.c_str());
    }
  }
  std::printf("sweep variable=%s steps=%zu of %zu knee_threshold=%g", variable.c_str(),
              sweep.steps.size(), sweep.sweep.values.size(), sweep.sweep.knee_threshold);
  if (sweep.knee) {
    std::printf(" knee_step=%zu knee_value=%.15g\n", *sweep.knee, sweep.steps[*sweep.knee].value);
  } else {
    std::printf(" knee_step=none\n");
  }
}

// Every subcommand talks to one local device port, optionally proving a shared secret.
void add_local_port_options(CLI::App& command, LocalPort& local, int& port_number,
                            std::string& secret_file) {
  auto* device = command.add_option(
      "-d,--device", local.device,
      "RDMA device (default: the device of the first ACTIVE port, and that port)");
  command.add_option("-i,--ib-port", port_number, "Device port (with -d)")
      ->capture_default_str()
      ->needs(device);
  command
      .add_option("--path.sysfs", local.sysfs_root,
                  "Where sysfs is mounted: ports, P_Key tables, CPU frequency policies")
      ->capture_default_str();
  command.add_option("--secret-file", secret_file,
                     "File holding the shared secret both sides must prove they hold (16 bytes "
                     "at least)");
}

// An option whose help shows the value it keeps when not given.
template <typename T>
CLI::Option* add_with_default(CLI::App& command, const std::string& name, T& value,
                              const std::string& help) {
  return command.add_option(name, value, help)->capture_default_str();
}

// `run`'s flags as given; spec_of() turns them into the probe.
struct RunFlags {
  std::string peer, kind = "write_bw";
  std::uint64_t size = 0, iterations = 0;
  std::uint32_t qps = 0, duration = 0, timeout = 0, post_list = 1;
  bool use_srq = false, cq_events = false, histogram = false, validate_payload = false,
       bidirectional = false, all_sizes = false;
  std::vector<std::string> fabric_ports;
  std::string numa = "auto", peer_numa = "auto";
  std::optional<std::uint32_t> cq_mod, inline_size, mtu, gid_index, peer_gid_index;
  std::optional<std::uint32_t> sl, traffic_class, pkey_index, dlid;
  std::uint32_t posted_receives = 0, receive_sges = 0, rnr_retry = 0, tx_depth = 0, rx_depth = 0,
                min_rnr_timer = 0;
  std::uint64_t corrupt_every = 0;
  std::optional<std::uint32_t> qp_timeout, retry_count, margin;
  std::string sizes, sweep_text;
  double knee_threshold = 0.05;
  std::optional<double> rate_limit;
  std::string rate_units = "Gbps", rate_limiter = "software";
  std::string atomic_type, connection;
  bool no_peak = false, report_gbits = false, rdma_cm = false;
};

void add_run_options(CLI::App& run, RunFlags& f) {
  run.add_option("peer", f.peer, "Responder HOST:PORT")->required();
  run.add_option("-t,--test", f.kind,
                 "write_bw, write_lat, read_bw, read_lat, send_bw, send_lat, atomic_bw, "
                 "atomic_lat")
      ->capture_default_str()
      ->check(CLI::IsMember({"write_bw", "write_lat", "read_bw", "read_lat", "send_bw", "send_lat",
                             "atomic_bw", "atomic_lat"}));
  run.add_option("-A,--atomic_type", f.atomic_type,
                 "Atomic tests: FETCH_AND_ADD (default) or CMP_AND_SWAP")
      ->check(CLI::IsMember({"FETCH_AND_ADD", "CMP_AND_SWAP"}));
  run.add_option("-c,--connection", f.connection,
                 "Transport of both sides' QPs: RC (default), UC (write and send: no ACKs, no "
                 "retransmission) or UD (send: datagrams of at most the path MTU)")
      ->check(CLI::IsMember({"RC", "UC", "UD"}));
  run.add_flag("-R,--rdma_cm", f.rdma_cm,
               "Connect the QPs through the RDMA connection manager (librdmacm), as perftest's -R: "
               "the peer is then named by an address of its RDMA interface (RoCE netdev or IPoIB)");
  run.add_flag("-N,--noPeak", f.no_peak,
               "Bandwidth: do not compute or print the peak (perftest's -N)");
  run.add_flag("--report_gbits", f.report_gbits,
               "Bandwidth in decimal Gbit/s instead of MiB/s (perftest's --report_gbits)");
  run.add_option(
      "-D,--duration", f.duration,
      "Run for this many seconds instead of a number of iterations (bandwidth; the default "
      "without -n: 5)");
  run.add_flag("--use-srq", f.use_srq, "Receive through a shared receive queue (send)");
  run.add_flag("-H,--histogram", f.histogram,
               "Latency: print the histogram of the samples (cumulative, per upper bound)");
  run.add_flag("-e,--events", f.cq_events,
               "Sleep on completion events instead of polling the CQ (both sides)");
  run.add_option("--fabric-port", f.fabric_ports,
                 "LID:PORT of a switch port on the path, read over PerfMgt MADs around the run");
  run.add_option("--timeout", f.timeout, "Seconds the whole run may take (default: the spec's)");
  const CLI::Validator numa_choice_text(
      [](const std::string& text) {
        return parse_numa_choice(text) ? std::string()
                                       : "auto, none or a node number, not '" + text + "'";
      },
      "auto|none|NODE");
  add_with_default(run, "--numa", f.numa,
                   "auto (the HCA's node), none, or a node number for CPU and buffers")
      ->check(numa_choice_text);
  add_with_default(run, "--peer-numa", f.peer_numa,
                   "The responder's NUMA choice: auto (its HCA's node), none, or a node number")
      ->check(numa_choice_text);
  run.add_option("-Q,--cq-mod", f.cq_mod,
                 "A completion every N messages (default: perftest's rule, 1 above 8 KiB)");
  run.add_option("-I,--inline", f.inline_size,
                 "Largest message sent inline (default: perftest's for the device)");
  run.add_option("-m,--mtu", f.mtu, "Path MTU in bytes: 256..4096 (default: the port's)");
  run.add_option("-x,--gid-index", f.gid_index, "This side's GID index (default: RoCE v2 IPv4)");
  run.add_option("--peer-gid-index", f.peer_gid_index, "The responder's GID index");
  run.add_option("-S,--sl", f.sl, "Service level 0-15 of both sides' QPs (default 0)");
  run.add_option("--tclass", f.traffic_class,
                 "Traffic class 0-255 of both sides' QPs: on RoCE v2 the IP TOS byte (default 0)");
  run.add_option("--pkey_index", f.pkey_index,
                 "P_Key table index of both sides' QPs; must hold a P_Key on each port "
                 "(default 0)");
  run.add_option("--dlid", f.dlid,
                 "InfiniBand: the LID to send to instead of the one the responder announces "
                 "(1..0xBFFF; refused on RoCE)");
  add_with_default(run, "-l,--post-list", f.post_list,
                   "Chain this many work requests into one ibv_post_send (bandwidth)");
  run.add_option("-s,--size", f.size, "Message size (default: perftest's)");
  run.add_option("-n,--iterations", f.iterations, "Iterations (default: perftest's)");
  run.add_option("-q,--qps", f.qps, "QPs (bandwidth only)");
  run.add_flag("--validate", f.validate_payload,
               "Check every message: header, pseudo-random payload, checksum (write_bw, send_bw)");
  run.add_option("--posted-receives", f.posted_receives,
                 "send_bw: keep exactly this many receives posted (back-pressure probe)");
  run.add_option("--receive-sges", f.receive_sges,
                 "Validating send_bw: scatter each receive over this many pieces");
  run.add_option("--tx-depth", f.tx_depth, "Messages in flight per QP (default: perftest's)");
  run.add_option("--rx-depth", f.rx_depth, "Receive queue depth (default: perftest's)");
  run.add_option("--rnr-retry", f.rnr_retry, "RNR NAK retries before failing, 0-7 (7: forever)");
  run.add_option("--min-rnr-timer", f.min_rnr_timer, "RNR NAK timer code the receiver asks for");
  run.add_option("-u,--qp-timeout", f.qp_timeout,
                 "Local ACK timeout exponent: 4.096 us x 2^N before a retransmission (default 14)");
  run.add_option("--retry-count", f.retry_count, "Retransmissions before failing, 0-7 (default 7)");
  run.add_option("--test-fault-corrupt-every", f.corrupt_every,
                 "TEST ONLY: flip a payload byte of every N-th message after its checksum, to "
                 "prove that --validate catches it")
      ->group("Test faults");
  run.add_flag("-b,--bidirectional", f.bidirectional,
               "Both sides post at once (bandwidth: write, read and send, each side keeping "
               "receives posted for the other's sends); the sum of both directions is reported, "
               "as perftest's -b");
  run.add_flag("-a,--all", f.all_sizes,
               "One run per message size 2 .. 8 MiB, doubling (perftest's -a), each reported");
  run.add_option("--sizes", f.sizes, "One run per message size of this comma-separated list");
  run.add_option("--sweep", f.sweep_text,
                 "VARIABLE=V1,V2,...: one run per value of exactly one of " +
                     sweep_variable_names() + ", everything else fixed; reports the knee");
  add_with_default(run, "--knee-threshold", f.knee_threshold,
                   "Sweep knee: the first step after which BW average rises by less than this "
                   "fraction");
  run.add_option("--rate-limit", f.rate_limit, "Cap each side's posting rate (bandwidth)");
  run.add_option("--rate-units", f.rate_units, "Unit of --rate-limit: Gbps, MiBps or pps")
      ->capture_default_str()
      ->check(CLI::IsMember({"Gbps", "MiBps", "pps"}));
  run.add_option("--rate-limiter", f.rate_limiter,
                 "Who enforces --rate-limit: software (perftest's default), hardware "
                 "(ibv_modify_qp_rate_limit; the run fails where the device refuses it), auto")
      ->capture_default_str()
      ->check(CLI::IsMember({"software", "hardware", "auto"}));
  run.add_option("--margin", f.margin,
                 "Duration mode: seconds left out of the measurement at each end (default 2)");
}

// The probe the flags ask for: perftest's defaults for the test, each given flag applied.
ProbeSpec spec_of(RunFlags f, const CLI::App& run) {
  const auto separator = f.kind.find('_');
  auto spec = default_spec(
      *parse_operation(f.kind.substr(0, separator)),
      f.kind.substr(separator + 1) == "bw" ? TestKind::kBandwidth : TestKind::kLatency);
  if (f.size > 0) spec.message_size = f.size;
  if (f.iterations > 0) spec.iterations = f.iterations;
  if (f.qps > 0) spec.qps = f.qps;
  // Without -n or -D a bandwidth probe runs for a fixed time, perftest's -D habit: 5000
  // iterations of 64 KiB take longer than the timeout on a slow link (rxe under emulation).
  if (f.duration == 0 && f.iterations == 0 && spec.test == TestKind::kBandwidth) {
    f.duration = kDefaultBandwidthSeconds;
  }
  if (f.duration > 0) {
    spec.iterations.reset();
    spec.duration_seconds = f.duration;
    spec.timeout_seconds = std::max(spec.timeout_seconds, f.duration + 10);
  }
  spec.use_srq = f.use_srq;
  spec.cq_events = f.cq_events;
  spec.no_peak = f.no_peak;
  spec.rdma_cm = f.rdma_cm;
  spec.validation = f.validate_payload;
  spec.posted_receives = f.posted_receives;
  if (f.receive_sges > 0) spec.receive_sges = f.receive_sges;
  if (f.tx_depth > 0) spec.tx_depth = f.tx_depth;
  if (f.rx_depth > 0) spec.rx_depth = f.rx_depth;
  // A fixed number of posted receives above the default depth needs the queue to hold them.
  spec.rx_depth = std::max(spec.rx_depth, f.posted_receives);
  if (run.count("--rnr-retry") > 0) spec.rc.rnr_retry = f.rnr_retry;
  if (run.count("--min-rnr-timer") > 0) spec.rc.min_rnr_timer = f.min_rnr_timer;
  if (f.qp_timeout) spec.rc.timeout = *f.qp_timeout;
  if (f.retry_count) spec.rc.retry_cnt = *f.retry_count;
  if (f.timeout > 0) spec.timeout_seconds = f.timeout;
  // The options' checks accepted both.
  const auto numa = *parse_numa_choice(f.numa), peer_numa = *parse_numa_choice(f.peer_numa);
  spec.numa = numa.policy;
  spec.numa_node = numa.node;
  spec.peer_numa = peer_numa.policy;
  spec.peer_numa_node = peer_numa.node;
  spec.cq_moderation = f.cq_mod;
  spec.inline_size = f.inline_size;
  spec.mtu = f.mtu;
  spec.gid_index = f.gid_index;
  spec.peer_gid_index = f.peer_gid_index;
  spec.sl = f.sl.value_or(0);
  spec.traffic_class = f.traffic_class.value_or(0);
  spec.pkey_index = f.pkey_index.value_or(0);
  spec.dlid = f.dlid;
  spec.post_list = f.post_list;
  spec.bidirectional = f.bidirectional;
  if (!f.atomic_type.empty()) spec.atomic_type = *parse_atomic_type(f.atomic_type);
  if (!f.connection.empty()) spec.connection = *parse_connection(f.connection);
  if (f.rx_depth == 0 && f.posted_receives == 0) {
    spec.rx_depth = perftest_unreliable_rx_depth(spec, Limits{}.max_depth);
  }
  if (f.margin) spec.margin_seconds = *f.margin;
  if (f.rate_limit) {
    spec.rate_limit = RateLimit{*f.rate_limit, *parse_rate_unit(f.rate_units),
                                *parse_rate_limiter(f.rate_limiter)};
  }
  return spec;
}

// `run`: one probe, or one per step of a sweep. Exit status 0 when it passed, 1 when it failed,
// 2 for flags that cannot run, 3 when validation found errors.
int run_command(const RunFlags& f, const CLI::App& run, const LocalPort& local,
                const std::string& secret) {
  const auto spec = spec_of(f, run);
  // The lane before anything else: a value out of range, a P_Key index this port lacks or a
  // destination LID on a port that does not route by LID, is a flag that cannot run.
  auto lane = lane_problems(spec);
  if (const auto fits = check_lane_on_port(local.sysfs_root, local.device, local.port, spec);
      lane.empty() && !fits) {
    lane.push_back(fits.error());
  }
  if (!lane.empty()) {
    for (const auto& problem : lane) std::cerr << "ibprobe_probe: " << problem << "\n";
    return 2;
  }
  std::printf("local device=%s port=%u\n", local.device.c_str(), unsigned{local.port});
  const auto [host, port] = split_address(f.peer, false);
  RunOptions options;
  options.fabric_ports = f.fabric_ports;
  options.shared_secret = secret;
  options.test_corrupt_every = f.corrupt_every;
  // Sweeps: each of -a, --sizes and --sweep names a variable; more than one is refused by
  // the sweep's own rule, with its reason.
  std::vector<std::pair<SweepVariable, std::vector<double>>> sweeps;
  if (f.all_sizes) sweeps.emplace_back(SweepVariable::kMessageSize, perftest_all_sizes());
  if (!f.sizes.empty()) sweeps.emplace_back(SweepVariable::kMessageSize, parse_values(f.sizes));
  if (!f.sweep_text.empty()) {
    const auto equals = f.sweep_text.find('=');
    const auto variable = parse_sweep_variable(f.sweep_text.substr(0, equals));
    if (equals == std::string::npos || !variable) {
      std::cerr << "ibprobe_probe: --sweep: expected VARIABLE=V1,V2,... with VARIABLE one of "
                << sweep_variable_names() << "\n";
      return 2;
    }
    sweeps.emplace_back(*variable, parse_values(f.sweep_text.substr(equals + 1)));
  }
  if (sweeps.size() > 1) {
    std::cerr << "ibprobe_probe: a sweep varies exactly one variable, or a change in its "
                 "results cannot be attributed; asked for "
              << sweeps.size() << " (-a, --sizes, --sweep)\n";
    return 2;
  }
  if (!sweeps.empty()) {
    const auto sweep =
        validate(SweepSpec{spec, sweeps.front().first, sweeps.front().second, f.knee_threshold});
    if (!sweep) {
      for (const auto& problem : sweep.error().problems) {
        std::cerr << "ibprobe_probe: " << problem << "\n";
      }
      return 2;
    }
    const auto outcome = run_sweep(local, host, port, *sweep, options);
    print(outcome, PrintOptions{.histogram = f.histogram, .report_gbits = f.report_gbits});
    return outcome.complete() ? 0 : 1;
  }
  const auto valid = validate(spec);
  if (!valid) {
    std::cerr << "ibprobe_probe: invalid probe: " << valid.error().message() << "\n";
    return 2;
  }
  const auto outcome = run_probe(local, host, port, *valid, options);
  if (!outcome) {
    std::cerr << "ibprobe_probe: " << outcome.error().message << "\n";
    return 1;
  }
  print(*outcome, PrintOptions{.histogram = f.histogram, .report_gbits = f.report_gbits});
  // A validating run that found errors is a failed check, whatever its throughput.
  if (outcome->validation && outcome->validation->errors > 0) return 3;
  return 0;
}

struct VerifyFlags {
  std::string peer;
  std::vector<std::string> case_names;
  verify::Options options;
};

void add_verify_options(CLI::App& command, VerifyFlags& f) {
  command.add_option("peer", f.peer, "Responder HOST:PORT")->required();
  std::string case_help = "Run only this case (repeatable; default: all):";
  for (const auto& c : verify::catalogue()) case_help += " " + std::string(c.name);
  command.add_option("--case", f.case_names, case_help);
  auto& v = f.options;
  add_with_default(command, "--messages", v.messages, "Messages per case");
  add_with_default(command, "--recv-delay-ms", v.recv_delay_ms,
                   "delayed_recv: how long the receiver holds back each re-post");
  add_with_default(command, "--seed", v.seed,
                   "random_sizes: seed of the size sequence (printed in the table)");
  command.add_flag("--fixed-sizes", v.fixed_sizes,
                   "random_sizes: the fixed boundary-size sequence instead of the seeded");
  add_with_default(command, "--max-size", v.max_message_size,
                   "random_sizes: largest message, the receive buffer's size");
  add_with_default(command, "--rebuild-after", v.rebuild_after,
                   "qp_rebuild: messages before the responder destroys its QP");
  add_with_default(command, "--inline", v.inline_size, "inline_reuse: inline size asked of the QP");
  add_with_default(command, "--soak-seconds", v.soak_seconds,
                   "soak: length (past 120 s only if the responder allows it)");
  add_with_default(command, "--soak-size", v.soak_message_size, "soak: message size in bytes");
  add_with_default(command, "--soak-interval", v.soak_interval_seconds,
                   "soak: seconds per reported interval");
  add_with_default(command, "--case-timeout", v.case_timeout_seconds,
                   "Seconds a case may take (the soak: on top of its length)");
}

// `verify`: the suite's table; exit status 3 when a case failed, 2 for options that cannot run.
int verify_command(const VerifyFlags& f, const LocalPort& local, const std::string& secret) {
  const auto plan = verify::validate(f.options, verify::select_cases(f.case_names));
  if (!plan) {
    for (const auto& p : plan.error().problems) {
      std::cerr << "ibprobe_probe: verify: " << p << "\n";
    }
    return 2;
  }
  const auto [host, port] = split_address(f.peer, false);
  RunOptions run_options;
  run_options.shared_secret = secret;
  const auto results = verify::run_verify(local, host, port, *plan, run_options);
  std::fputs(verify::format_table(results).c_str(), stdout);
  // A failed case fails the suite; a skipped one does not pass it either, but says why.
  for (const auto& r : results) {
    if (r.verdict == verify::Verdict::kFail) return 3;
  }
  return 0;
}

// `serve`: a responder until SIGINT or SIGTERM.
int serve_command(const std::string& listen, const LocalPort& local, const Limits& limits,
                  const std::string& secret) {
  const auto [host, port] = split_address(listen, true);
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  Responder responder(host, port, local, ResponderOptions{limits, secret, nullptr});
  std::printf("responder listening on port %d\n", responder.port());
  std::fflush(stdout);
  int signal = 0;
  sigwait(&stop, &signal);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ibprobe_probe: perftest-style verbs probes between ibprobe hosts", "ibprobe_probe"};
  app.require_subcommand(1);
  LocalPort local{"", 1};
  int port_number = 1;
  std::string secret_file;

  auto* serve = app.add_subcommand("serve", "Answer probe requests on a TCP address");
  std::string listen = ":18515";
  add_with_default(*serve, "--listen", listen, "HOST:PORT to accept probes on");
  add_local_port_options(*serve, local, port_number, secret_file);
  Limits serve_limits;
  add_with_default(*serve, "--max-soak-seconds", serve_limits.max_soak_seconds,
                   "Longest verify soak this responder serves (past the 120 s cap of other runs)");

  auto* run = app.add_subcommand("run", "Run one probe against a responder");
  RunFlags run_flags;
  add_run_options(*run, run_flags);
  add_local_port_options(*run, local, port_number, secret_file);

  auto* verify = app.add_subcommand(
      "verify", "Run the two-sided verification suite against a responder and print its table");
  VerifyFlags verify_flags;
  add_verify_options(*verify, verify_flags);
  add_local_port_options(*verify, local, port_number, secret_file);

  CLI11_PARSE(app, argc, argv);
  local.port = static_cast<std::uint8_t>(port_number);
  // As perftest takes the first device when -d is not given; here the first whose port is
  // ACTIVE, since a run on a port that is down can only fail.
  if (local.device.empty()) {
    const auto active = ibprobe::collectors::first_active_port(local.sysfs_root);
    if (!active) {
      std::cerr << "ibprobe_probe: no -d given, and no ACTIVE port under "
                << (local.sysfs_root / "class" / "infiniband").string() << "\n";
      return 2;
    }
    local.device = active->device;
    local.port = active->port;
  }
  std::string secret;
  try {
    if (!secret_file.empty()) {
      secret = load_shared_secret(secret_file);
      ibprobe::crypto::require();
    }
  } catch (const std::exception& e) {
    std::cerr << "ibprobe_probe: --secret-file: " << e.what() << "\n";
    return 2;
  }
  try {
    if (*serve) return serve_command(listen, local, serve_limits, secret);
    if (*verify) return verify_command(verify_flags, local, secret);
    return run_command(run_flags, *run, local, secret);
  } catch (const std::exception& e) {
    std::cerr << "ibprobe_probe: " << e.what() << "\n";
    return 1;
  }
}
