#include "probe_metrics.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <utility>

namespace ibprobe::exporter {
namespace {

using collectors::MetricSet;
using prometheus::MetricType;
using Labels = MetricSet::Labels;

void gauge(MetricSet& out, std::string_view name, std::string_view help, const Labels& labels,
           double value) {
  out.add(name, help, MetricType::Gauge, labels, value);
}

Labels with(const Labels& base, Labels more) {
  Labels out = base;
  out.insert(out.end(), more.begin(), more.end());
  return out;
}

// Every delta carries its counter's class (error/informative for PortCounters, the driver
// table's class for hw_counters), so `{class!~"informative|congestion"}` selects the findings.
void add_deltas(MetricSet& out, const Labels& base, const std::string& side,
                const std::vector<probes::CounterDelta>& deltas) {
  for (const auto& delta : deltas) {
    const std::string counter_class =
        delta.counter_class.empty() ? "informative" : delta.counter_class;
    if (delta.delta) {
      Labels labels{{"side", side}, {"counter", delta.counter}, {"class", counter_class}};
      if (delta.priority) labels.emplace_back("priority", std::to_string(*delta.priority));
      gauge(out, "rdma_probe_counter_delta",
            "Increase of a port counter during the probe (bytes for the data counters), with "
            "the counter's class, and for a netdev's per-priority statistic its priority.",
            with(base, labels), *delta.delta);
    } else {
      gauge(out, "rdma_probe_counter_delta_unknown",
            "1 for a counter whose increase during the probe is unknown (reset, saturated, "
            "or read on one side of the run only).",
            with(base, {{"side", side},
                        {"counter", delta.counter},
                        {"class", counter_class},
                        {"status", std::string(probes::to_string(delta.status))}}),
            1);
    }
  }
}

// Verdict and coverage side by side: errors = 0 over a fraction of the messages is visible as
// such.
void add_validation(MetricSet& out, const Labels& base, const probes::ValidationReport& v) {
  auto n = [](std::uint64_t value) { return static_cast<double>(value); };
  gauge(out, "rdma_probe_validation_messages_sent", "Messages the validating probe sent.", base,
        n(v.messages_sent));
  gauge(out, "rdma_probe_validation_messages_checked",
        "Messages the receiving side verified end to end (header, payload checksum, "
        "sequence).",
        base, n(v.checked));
  gauge(out, "rdma_probe_validation_errors",
        "Corrupted messages and broken send/receive semantics the probe found.", base, n(v.errors));
  gauge(out, "rdma_probe_validation_skipped",
        "Messages not verified, by reason: overwritten (a later message landed in the slot "
        "before the receiver could check it).",
        with(base, {{"reason", "overwritten"}}), n(v.skipped_overwritten));
  const std::string transient_help =
      "Informational validation events: race (check abandoned, a newer message was landing), "
      "recheck (passed on a second look), tail (verified after the run), stale_completion "
      "(of an earlier connection, dropped).";
  for (const auto& [kind, value] :
       {std::pair{"race", v.races}, std::pair{"recheck", v.rechecks},
        std::pair{"tail", v.tail_checks}, std::pair{"stale_completion", v.stale_completions}}) {
    gauge(out, "rdma_probe_validation_transient", transient_help, with(base, {{"kind", kind}}),
          n(value));
  }
}

// A rate-limited run: who enforced the cap on each posting side, the cap in bytes per second
// (a pps cap times the message size) and what that side's posting achieved under it, so
// achieved / configured says whether the limiter held (<= 1) and how close it came.
void add_rate_limit(MetricSet& out, const Labels& base, const probes::ProbeOutcome& outcome,
                    const probes::RateLimit& limit) {
  const double configured = probes::rate_limit_bytes_per_second(limit, outcome.spec.message_size);
  auto side = [&](const char* name, const std::optional<probes::RateLimiter>& limiter,
                  const std::optional<probes::BandwidthStats>& achieved) {
    const Labels at_side = with(base, {{"side", name}});
    if (limiter) {
      gauge(out, "rdma_probe_rate_limiter",
            "1 with the limiter that enforced the rate limit on a posting side: software "
            "(the posting loop's pacer) or hardware (ibv_modify_qp_rate_limit).",
            with(at_side, {{"limiter", std::string(probes::to_string(*limiter))}}), 1);
    }
    gauge(out, "rdma_probe_rate_limit_configured_bytes_per_second",
          "The rate limit of a posting side, in bytes per second (pps times the message "
          "size).",
          at_side, configured);
    if (achieved) {
      gauge(out, "rdma_probe_rate_limit_achieved_bytes_per_second",
            "BW average of a rate-limited posting side's own direction.", at_side,
            achieved->bytes_per_second);
    }
  };
  if (outcome.spec.bidirectional) {
    side("local", outcome.rate_limiter, outcome.initiator_direction);
    side("peer", outcome.peer_rate_limiter, outcome.responder_direction);
  } else {
    side("local", outcome.rate_limiter, outcome.bandwidth);
  }
}

void add_outcome(MetricSet& out, const Labels& base, const probes::ProbeOutcome& outcome) {
  for (const auto& r : outcome.verify_results) {
    const std::string name(probes::verify::info(r.id).name);
    for (const auto verdict : {probes::verify::Verdict::kPass, probes::verify::Verdict::kFail,
                               probes::verify::Verdict::kSkipped}) {
      std::string result(probes::verify::to_string(verdict));
      std::transform(result.begin(), result.end(), result.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      gauge(out, "rdma_probe_verify_case",
            "1 for the result (pass, fail, skipped) of a verification suite's case.",
            with(base, {{"case", name}, {"result", result}}), r.verdict == verdict ? 1 : 0);
    }
    gauge(out, "rdma_probe_verify_case_seconds", "Wall time of a verification suite's case.",
          with(base, {{"case", name}}), r.seconds);
  }
  if (const auto& bw = outcome.bandwidth) {
    gauge(out, "rdma_probe_bandwidth_bytes_per_second",
          "BW average of the probe, as perftest reports it.", base, bw->bytes_per_second);
    if (bw->peak_bytes_per_second) {
      gauge(out, "rdma_probe_bandwidth_peak_bytes_per_second", "BW peak of the probe (perftest).",
            base, *bw->peak_bytes_per_second);
    }
    gauge(out, "rdma_probe_message_rate_per_second", "Messages per second of the probe.", base,
          bw->messages_per_second);
  }
  if (const auto& lat = outcome.latency) {
    const std::string help = "Latency of the probe: quantile 0.5 is perftest's t_typical (median).";
    gauge(out, "rdma_probe_latency_seconds", help, with(base, {{"quantile", "0.5"}}),
          lat->typical_ns * 1e-9);
    gauge(out, "rdma_probe_latency_seconds", help, with(base, {{"quantile", "0.99"}}),
          lat->p99_ns * 1e-9);
    gauge(out, "rdma_probe_latency_seconds", help, with(base, {{"quantile", "0.999"}}),
          lat->p99_9_ns * 1e-9);
    gauge(out, "rdma_probe_latency_min_seconds", "t_min of the probe.", base, lat->min_ns * 1e-9);
    gauge(out, "rdma_probe_latency_max_seconds",
          "t_max of the probe (perftest's: the second largest sample).", base, lat->max_ns * 1e-9);
    gauge(out, "rdma_probe_latency_average_seconds", "t_avg of the probe.", base,
          lat->average_ns * 1e-9);
    gauge(out, "rdma_probe_latency_stdev_seconds", "t_stdev of the probe.", base,
          lat->stdev_ns * 1e-9);
    std::array<double, probes::kLatencyHistogramBoundsNs.size()> bounds_seconds{};
    // Divided, not multiplied by 1e-9: 1000 * 1e-9 is 1.0000000000000002e-06, an `le` no one
    // would write.
    std::ranges::transform(probes::kLatencyHistogramBoundsNs, bounds_seconds.begin(),
                           [](double ns) { return ns / 1e9; });
    out.add_histogram("rdma_probe_latency_samples_seconds",
                      "The probe's latency samples (those t_typical and the percentiles are "
                      "taken from), as perftest's -H histogram.",
                      base, bounds_seconds, lat->histogram_counts, lat->samples, lat->sum_ns / 1e9);
    if (lat->average_ns > 0) {
      gauge(out, "rdma_probe_message_rate_per_second", "Messages per second of the probe.", base,
            1e9 / lat->average_ns);
    }
  }
  // Duration-mode latency: perftest reports only the average and the round trips per second.
  if (const auto& lat = outcome.latency_duration) {
    gauge(out, "rdma_probe_latency_average_seconds", "t_avg of the probe.", base,
          lat->average_ns * 1e-9);
    gauge(out, "rdma_probe_message_rate_per_second", "Messages per second of the probe.", base,
          lat->transactions_per_second);
  }
  if (const auto& limit = outcome.spec.rate_limit; limit && outcome.bandwidth) {
    add_rate_limit(out, base, outcome, *limit);
  }
  gauge(out, "rdma_probe_setup_seconds",
        "Time from the request to the first posted work request (connection, handshake, "
        "resources, QP transitions on both sides).",
        base, outcome.setup_seconds);
  gauge(out, "rdma_probe_lane_info",
        "1 with the lane both sides' QPs used: service level, traffic class (on RoCE v2 the IP "
        "TOS byte) and P_Key index.",
        with(base, {{"sl", std::to_string(outcome.lane.sl)},
                    {"traffic_class", std::to_string(outcome.lane.traffic_class)},
                    {"pkey_index", std::to_string(outcome.lane.pkey_index)}}),
        1);
  if (outcome.link.link_bytes_per_second) {
    gauge(out, "rdma_probe_link_bytes_per_second",
          "Data counter increase of the sending port divided by the probe's window.", base,
          *outcome.link.link_bytes_per_second);
  }
  if (outcome.link.line_rate_ratio) {
    gauge(out, "rdma_probe_line_rate_ratio", "Probe BW divided by the port's line rate.", base,
          *outcome.link.line_rate_ratio);
  }
  const std::string check_help =
      "1 when a pre-flight or post-run check passed, 0 when not; absent where it does not apply.";
  for (const auto& check : outcome.checks) {
    if (!check.applicable) continue;
    gauge(out, "rdma_probe_check", check_help,
          with(base, {{"side", check.side}, {"check", check.name}}), check.passed ? 1 : 0);
  }
  gauge(out, "rdma_probe_check", check_help,
        with(base, {{"side", "both"}, {"check", "errors_clean"}}),
        outcome.link.moved_error_counters.empty() ? 1 : 0);
  gauge(out, "rdma_probe_diagnosis",
        "1 for what the probe figure and the sending port's counters say together.",
        with(base, {{"diagnosis", std::string(probes::to_string(outcome.link.diagnosis))}}), 1);
  if (const auto& v = outcome.validation) add_validation(out, base, *v);
  if (const auto& d = outcome.delivery) {
    gauge(out, "rdma_probe_messages_lost",
          "Messages of a UC or UD send probe that never completed a receive at the peer: an "
          "unreliable transport does not retransmit what the path drops.",
          base, static_cast<double>(d->lost()));
  }
  add_deltas(out, base, "local", outcome.local_deltas);
  add_deltas(out, base, "peer", outcome.peer_deltas);
  for (const auto& fabric : outcome.fabric_deltas) {
    add_deltas(out, base, "fabric:" + fabric.port, fabric.deltas);
  }
}

// Each step's families with its `step` label (the step's index, in sweep order), the value
// the swept variable had there, and the knee.
void add_sweep(MetricSet& out, const Labels& base, const probes::SweepOutcome& sweep) {
  const std::string variable(probes::to_string(sweep.sweep.variable));
  for (std::size_t i = 0; i < sweep.steps.size(); ++i) {
    const auto& step = sweep.steps[i];
    const Labels at_step = with(base, {{"step", std::to_string(i)}});
    gauge(out, "rdma_probe_sweep_step_value", "The value of the swept variable at this step.",
          with(at_step, {{"variable", variable}}), step.value);
    gauge(out, "rdma_probe_sweep_step_success", "1 when the sweep's step succeeded.", at_step,
          step.outcome ? 1 : 0);
    if (step.outcome) add_outcome(out, at_step, *step.outcome);
  }
  if (sweep.knee) {
    const std::string help =
        "The sweep's knee: the first step after which BW average rises by less than the "
        "module's knee threshold; its index and the swept variable's value there.";
    gauge(out, "rdma_probe_sweep_knee_step", help, with(base, {{"variable", variable}}),
          static_cast<double>(*sweep.knee));
    gauge(out, "rdma_probe_sweep_knee_value", help, with(base, {{"variable", variable}}),
          sweep.steps[*sweep.knee].value);
  }
}

void add_run(MetricSet& out, const ProbeRun& run, bool with_target_labels) {
  const Labels base =
      with_target_labels ? Labels{{"target", run.target}, {"module", run.module}} : Labels{};
  gauge(out, "probe_success", "1 when the probe succeeded.", base, run.succeeded() ? 1 : 0);
  gauge(out, "probe_duration_seconds", "How long the probe took, queueing excluded.", base,
        run.duration_seconds);
  if (run.sweep) add_sweep(out, base, *run.sweep);
  if (run.outcome) {
    add_outcome(out, base, *run.outcome);
  } else if (!run.succeeded()) {
    gauge(out, "rdma_probe_failure", "1 with the class of the reason the probe failed.",
          with(base, {{"reason", run.failure_reason}}), 1);
  }
}

}  // namespace

collectors::MetricSet probe_run_metrics(const ProbeRun& run, bool with_target_labels) {
  MetricSet out;
  add_run(out, run, with_target_labels);
  return out;
}

collectors::MetricSet last_result_metrics(
    const std::vector<ProbeRun>& runs,
    const std::map<std::pair<std::string, std::string>, std::uint64_t>& totals) {
  MetricSet out;
  for (const auto& [key, count] : totals) {
    out.add("ibprobe_probes_total", "Probe runs finished, by module and result.",
            MetricType::Counter, {{"module", key.first}, {"result", key.second}},
            static_cast<double>(count));
  }
  for (const auto& run : runs) {
    gauge(out, "rdma_probe_last_run_timestamp_seconds",
          "When the last run of this target and module finished (Unix time).",
          {{"target", run.target}, {"module", run.module}},
          std::chrono::duration<double>(run.finished.time_since_epoch()).count());
    add_run(out, run, true);
  }
  return out;
}

}  // namespace ibprobe::exporter
