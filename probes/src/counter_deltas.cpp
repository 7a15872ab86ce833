#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>
#include <string>

#include "ibprobe/enum_names.h"
#include "ibprobe/probes.h"

namespace ibprobe::probes {
namespace {

constexpr std::string_view kXmitData = "port_xmit_data";
constexpr std::string_view kXmitWait = "port_xmit_wait";

// All-ones value of a counter of `width` bits, where fixed-width IB counters stop. Widths outside
// 1..63 are taken as 64 bits (the protocol decoder refuses them from a peer).
std::uint64_t saturation_value(std::uint32_t width) {
  return width >= 64 || width == 0 ? ~std::uint64_t{0} : (std::uint64_t{1} << width) - 1;
}

bool saturated(const CounterSample& sample) {
  return sample.value >= saturation_value(sample.width_bits);
}

CounterDelta delta_of(std::string name, const CounterSample* before, const CounterSample* after) {
  CounterDelta delta;
  delta.counter = std::move(name);
  delta.error_class = (before && before->error_class) || (after && after->error_class);
  delta.counter_class = after ? after->counter_class : before ? before->counter_class : "";
  delta.priority = after ? after->priority : before ? before->priority : std::nullopt;
  if (!before || !after) {
    delta.status = DeltaStatus::kMissing;
  } else if (after->value < before->value) {
    // Also the usual fate of a saturated counter: an operator resets it to get it moving again.
    delta.status = DeltaStatus::kReset;
  } else if (saturated(*before) || saturated(*after)) {
    delta.status = DeltaStatus::kSaturated;
  } else {
    delta.delta = static_cast<double>(after->value - before->value) * after->scale;
  }
  return delta;
}

bool is_go_back_n_class(std::string_view counter_class) {
  return counter_class == "retransmission" || counter_class == "sequence_error";
}

const CounterDelta* find(const std::vector<CounterDelta>& deltas, std::string_view counter) {
  const auto it = std::ranges::find(deltas, counter, &CounterDelta::counter);
  return it == deltas.end() ? nullptr : &*it;
}

std::string percent(double ratio) {
  return std::to_string(static_cast<long long>(ratio * 100 + 0.5)) + "%";
}

constexpr EnumNames<DeltaStatus, 4> kDeltaStatusNames{{{DeltaStatus::kValid, "valid"},
                                                       {DeltaStatus::kReset, "reset"},
                                                       {DeltaStatus::kSaturated, "saturated"},
                                                       {DeltaStatus::kMissing, "missing"}}};

constexpr EnumNames<Diagnosis, 6> kDiagnosisNames{
    {{Diagnosis::kInconclusive, "inconclusive"},
     {Diagnosis::kLinkSaturated, "link_saturated"},
     {Diagnosis::kHostSideBottleneck, "host_side_bottleneck"},
     {Diagnosis::kCreditsOrArbitration, "credits_or_arbitration"},
     {Diagnosis::kAggregatedPath, "aggregated_path"},
     {Diagnosis::kExtraLinkTraffic, "extra_link_traffic"}}};

}  // namespace

std::string_view to_string(DeltaStatus status) {
  return name_of(kDeltaStatusNames, status);
}

std::string_view to_string(Diagnosis diagnosis) {
  return name_of(kDiagnosisNames, diagnosis);
}

std::vector<CounterDelta> counter_deltas(const CounterSnapshot& before,
                                         const CounterSnapshot& after) {
  std::set<std::string, std::less<>> names;
  for (const auto& [name, sample] : before) names.insert(name);
  for (const auto& [name, sample] : after) names.insert(name);
  std::vector<CounterDelta> deltas;
  deltas.reserve(names.size());
  for (const auto& name : names) {
    const auto b = before.find(name);
    const auto a = after.find(name);
    deltas.push_back(delta_of(name, b == before.end() ? nullptr : &b->second,
                              a == after.end() ? nullptr : &a->second));
  }
  return deltas;
}

LinkReading read_link(double window_seconds, double probe_bytes_per_second,
                      double line_rate_bytes_per_second, const std::vector<CounterDelta>& sender,
                      const std::vector<CounterDelta>& all_sides,
                      const DiagnosisThresholds& thresholds,
                      const std::optional<std::string>& own_backpressure) {
  LinkReading reading;
  // An error counter whose delta is unknown may have moved: a finding to look at, not to hide.
  auto moved = [](const CounterDelta& delta) {
    return delta.error_class && (!delta.delta || *delta.delta > 0);
  };
  // RNR NAKs the probe drew on purpose restart the sender go-back-N from the refused message:
  // the packets already behind it arrive out of sequence and are sent again (rxe counts
  // out_of_seq_request, completer_retry_err, duplicate_request in such a run over a clean
  // link). In that run those classes are the probe's doing too; a loss on the link cannot be
  // told apart from them, which is what a plain probe is for.
  const bool starved =
      own_backpressure && std::ranges::any_of(all_sides, [&](const CounterDelta& delta) {
        return moved(delta) && is_rnr_class(delta.counter_class);
      });
  for (const auto& delta : all_sides) {
    if (!moved(delta)) continue;
    if (starved && (is_rnr_class(delta.counter_class) || is_go_back_n_class(delta.counter_class))) {
      reading.probe_backpressure_counters.push_back(delta.counter);
    } else {
      reading.moved_error_counters.push_back(delta.counter);
    }
  }
  const CounterDelta* data = find(sender, kXmitData);
  if (data && data->delta && window_seconds > 0) {
    reading.link_bytes_per_second = *data->delta / window_seconds;
  }
  if (line_rate_bytes_per_second > 0 && probe_bytes_per_second > 0) {
    reading.line_rate_ratio = probe_bytes_per_second / line_rate_bytes_per_second;
  }
  const CounterDelta* wait = find(sender, kXmitWait);

  auto conclude = [&](Diagnosis diagnosis, std::string explanation) {
    reading.diagnosis = diagnosis;
    reading.explanation = std::move(explanation);
    if (!reading.moved_error_counters.empty()) {
      reading.explanation += "; error counters moved during the probe: " +
                             fmt::format("{}", fmt::join(reading.moved_error_counters, ", ")) +
                             " (rule out an over-aggressive probe before calling them findings)";
    }
    if (!reading.probe_backpressure_counters.empty()) {
      reading.explanation +=
          "; " + fmt::format("{}", fmt::join(reading.probe_backpressure_counters, ", ")) +
          " rose from the probe's own receiver back-pressure (" + *own_backpressure +
          "), not a fabric error";
    }
    return reading;
  };

  if (!reading.line_rate_ratio) {
    return conclude(Diagnosis::kInconclusive, "no probe bandwidth or line rate to compare");
  }
  const double ratio = *reading.line_rate_ratio;
  if (ratio > thresholds.aggregated_ratio) {
    return conclude(Diagnosis::kAggregatedPath,
                    "probe bandwidth is " + percent(ratio) +
                        " of the port rate: an aggregated path (bidirectional or dual port), "
                        "the port rate is not the reference");
  }
  if (reading.link_bytes_per_second &&
      *reading.link_bytes_per_second > probe_bytes_per_second * thresholds.extra_traffic_ratio) {
    return conclude(Diagnosis::kExtraLinkTraffic,
                    "the port sent " +
                        percent(*reading.link_bytes_per_second / probe_bytes_per_second) +
                        " of the probe's bytes: retransmission or other traffic on the port, "
                        "so the counter deltas are not the probe's alone");
  }
  if (!wait || !wait->delta) {
    return conclude(Diagnosis::kInconclusive,
                    "probe bandwidth is " + percent(ratio) +
                        " of the port rate but port_xmit_wait has no valid delta");
  }
  const bool waiting = *wait->delta >= thresholds.wait_ticks;
  if (ratio >= thresholds.saturated_ratio) {
    return conclude(Diagnosis::kLinkSaturated,
                    "probe bandwidth is " + percent(ratio) +
                        " of the port rate: the link is the ceiling, as expected" +
                        (waiting ? " (port_xmit_wait rising)" : ""));
  }
  if (waiting) {
    return conclude(Diagnosis::kCreditsOrArbitration,
                    "probe bandwidth is " + percent(ratio) +
                        " of the port rate while port_xmit_wait rose: credits or arbitration "
                        "(switch buffers, VL arbitration, credit loops)");
  }
  return conclude(Diagnosis::kHostSideBottleneck,
                  "probe bandwidth is " + percent(ratio) +
                      " of the port rate with no transmit wait: the bottleneck is on a host "
                      "(posting rate, receiver)");
}

bool is_rnr_class(std::string_view counter_class) {
  return counter_class == "rnr_nak" || counter_class == "rnr_retry_exceeded";
}

std::optional<std::string> own_backpressure(const ProbeSpec& spec) {
  // One shared receive queue serves the messages in flight of every QP.
  const std::uint64_t in_flight =
      static_cast<std::uint64_t>(spec.tx_depth) * (spec.use_srq ? spec.qps : 1);
  if (spec.operation != Operation::kSend || spec.posted_receives == 0 ||
      spec.posted_receives >= in_flight) {
    return std::nullopt;
  }
  return "posted_receives " + std::to_string(spec.posted_receives) + " below " +
         std::to_string(in_flight) + " messages in flight (tx_depth " +
         std::to_string(spec.tx_depth) + (spec.use_srq ? " x qps, shared receive queue" : "") + ")";
}

}  // namespace ibprobe::probes
