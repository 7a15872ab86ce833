// Probe statistics computed exactly as perftest's reports compute them, so a probe result can be
// put next to an ib_*_bw / ib_*_lat run. Source: linux-rdma/perftest src/perftest_parameters.c
// (print_report_lat, print_report_lat_duration, print_report_bw, get_median) and
// src/perftest_resources.c (catch_alarm: the duration-mode sample window). perftest works in CPU
// cycles and divides by MHz to get microseconds; here one tick is one nanosecond.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "ibprobe/probes.h"

namespace ibprobe::probes {
namespace {

// perftest's LAT_MEASURE_TAIL: the largest samples, dropped as warm-up outliers.
constexpr std::size_t kLatencyMeasureTail = 2;
constexpr double kNanosecondsPerSecond = 1e9;

// perftest's rtt_factor: a write or send ping-pong sample is a round trip, reported halved as
// "one-way"; an RDMA read's completion already is its round trip and is not halved.
double rtt_factor(Operation operation) {
  return operation == Operation::kRead || operation == Operation::kAtomic ? 1.0 : 2.0;
}

// get_median(n, delta): `if ((n - 1) % 2)` i.e. n even, the two middle values averaged in
// integer ticks (truncating); n odd, the middle value. Written without a + b so that it cannot
// overflow, with the same result as perftest's (a + b) / 2 wherever that one does not overflow.
std::uint64_t perftest_median(const std::vector<std::uint64_t>& sorted, std::size_t n) {
  if (n % 2 == 0) {
    const std::uint64_t a = sorted[n / 2 - 1];
    const std::uint64_t b = sorted[n / 2];
    return a / 2 + b / 2 + (a % 2 + b % 2) / 2;
  }
  return sorted[n / 2];
}

// print_report_lat: iters_99 = ceil((measure_cnt) * 0.99), an int times a double in double
// precision, then truncated to int. Computing it the same way keeps the same index at every n
// (0.99 and 0.999 are not exact in binary).
std::size_t percentile_index(std::size_t measured, double fraction) {
  return static_cast<std::size_t>(std::ceil(static_cast<double>(measured) * fraction));
}

BandwidthStats from_window(std::uint64_t messages, std::uint64_t message_size,
                           std::uint64_t window_ns) {
  BandwidthStats stats;
  stats.messages = messages;
  stats.seconds = static_cast<double>(window_ns) / kNanosecondsPerSecond;
  // bw_avg = tsize * iters * cycles_to_units / (sum_of_test_cycles * format_factor), here
  // before the unit conversion: bytes per second.
  stats.bytes_per_second =
      static_cast<double>(message_size) * static_cast<double>(messages) / stats.seconds;
  // msgRate_avg = iters * cycles_to_units / (sum_of_test_cycles * 1000000) is in Mpps; kept in
  // messages per second here.
  stats.messages_per_second = static_cast<double>(messages) / stats.seconds;
  return stats;
}

// print_report_bw's peak: the smallest (tcompleted[j] - tposted[i]) / (j - i + 1) over post-list
// heads i and the completions j perftest records (every cq_mod-th one from ROUND_UP(i + 1,
// cq_mod) - 1, plus the last when the count is not a multiple of cq_mod), in integer ticks.
// perftest starts from tcompleted[0] - tposted[0]: with cq_mod 1 that is the (0, 0) pair,
// considered anyway; with cq_mod > 1 it is a slot perftest never fills. Starting from "no time
// yet" keeps the pairs perftest means and never reads an unfilled slot.
std::optional<double> peak_bytes_per_second(std::span<const TimestampNs> posted,
                                            std::span<const TimestampNs> completed,
                                            std::uint64_t message_size, std::uint64_t cq_mod,
                                            std::uint64_t post_list) {
  const std::uint64_t n = posted.size();
  std::uint64_t best = std::numeric_limits<std::uint64_t>::max();
  auto consider = [&](std::uint64_t i, std::uint64_t j) {
    if (completed[j] < posted[i]) return;  // a completion seen before its post: clock glitch
    best = std::min(best, (completed[j] - posted[i]) / (j - i + 1));
  };
  for (std::uint64_t i = 0; i < n; i += post_list) {
    const std::uint64_t first = (i + 1 + cq_mod - 1) / cq_mod * cq_mod - 1;
    for (std::uint64_t j = first; j < n; j += cq_mod) consider(i, j);
    if (n % cq_mod != 0) consider(i, n - 1);
  }
  // bw_peak = tsize * cycles_to_units / (opt_delta * format_factor): bytes per best tick time.
  if (best == 0 || best == std::numeric_limits<std::uint64_t>::max()) return std::nullopt;
  return static_cast<double>(message_size) * kNanosecondsPerSecond / static_cast<double>(best);
}

}  // namespace

TimestampNs steady_now_ns() {
  const auto now = std::chrono::steady_clock::now().time_since_epoch();
  return static_cast<TimestampNs>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(now).count());
}

LatencyStats latency_stats(std::span<const TimestampNs> post_times, Operation operation) {
  // measure_cnt = iters - 1 samples, of which LAT_MEASURE_TAIL are dropped: at least one must
  // remain, or perftest's get_median reads delta[-1].
  if (post_times.size() < kLatencyMeasureTail + 2) {
    throw std::invalid_argument(
        "latency needs at least 4 timestamps (3 round trips, the 2 largest of which are "
        "dropped); got " +
        std::to_string(post_times.size()));
  }
  std::vector<std::uint64_t> delta(post_times.size() - 1);
  for (std::size_t i = 0; i < delta.size(); ++i) {
    if (post_times[i + 1] < post_times[i]) {
      throw std::invalid_argument("latency timestamps go backwards at iteration " +
                                  std::to_string(i + 1) + ": not from a monotonic clock");
    }
    delta[i] = post_times[i + 1] - post_times[i];
  }
  std::sort(delta.begin(), delta.end());
  const std::size_t measured = delta.size() - kLatencyMeasureTail;
  const double factor = rtt_factor(operation);

  LatencyStats stats;
  stats.samples = measured;
  stats.min_ns = static_cast<double>(delta[0]) / factor;
  // perftest prints delta[measure_cnt] as t_max, after measure_cnt was reduced by the tail: the
  // second largest sample of the whole run, one of the two it dropped. Reproduced so that t_max
  // compares with perftest's.
  stats.max_ns = static_cast<double>(delta[measured]) / factor;
  stats.typical_ns = static_cast<double>(perftest_median(delta, measured)) / factor;
  double sum = 0;
  for (std::size_t i = 0; i < measured; ++i) sum += static_cast<double>(delta[i]) / factor;
  stats.average_ns = sum / static_cast<double>(measured);
  stats.sum_ns = sum;
  // The kept samples are sorted: each bound's count is where the first sample above it sits.
  std::size_t at_most = 0;
  for (std::size_t b = 0; b < kLatencyHistogramBoundsNs.size(); ++b) {
    while (at_most < measured &&
           static_cast<double>(delta[at_most]) / factor <= kLatencyHistogramBoundsNs[b]) {
      ++at_most;
    }
    stats.histogram_counts[b] = at_most;
  }
  // perftest accumulates the variance through `int temp_var = average - sample` in
  // microseconds, so every deviation under 1 us counts as 0 and its t_stdev is 0 for any
  // sub-microsecond jitter, exactly the range RDMA latencies live in. Not reproduced: this is the
  // population standard deviation (divided by n, as perftest) of the same kept samples.
  double squares = 0;
  for (std::size_t i = 0; i < measured; ++i) {
    const double deviation = stats.average_ns - static_cast<double>(delta[i]) / factor;
    squares += deviation * deviation;
  }
  stats.stdev_ns = std::sqrt(squares / static_cast<double>(measured));
  // ceil(n * 0.99) <= n for n >= 1, and delta holds n + 2 entries: always in range.
  stats.p99_ns = static_cast<double>(delta[percentile_index(measured, 0.99)]) / factor;
  stats.p99_9_ns = static_cast<double>(delta[percentile_index(measured, 0.999)]) / factor;
  return stats;
}

DurationLatencyStats duration_latency_stats(TimestampNs sample_start, TimestampNs sample_end,
                                            std::uint64_t iterations, Operation operation) {
  if (sample_end <= sample_start) {
    throw std::invalid_argument("duration latency needs a sample window that ends after it starts");
  }
  if (iterations == 0) {
    throw std::invalid_argument("duration latency needs at least one iteration in the window");
  }
  // print_report_lat_duration: latency = test_sample_time / MHz / rtt_factor / iters,
  // tps = iters / (test_sample_time / (MHz * 1e6)).
  const auto window = static_cast<double>(sample_end - sample_start);
  DurationLatencyStats stats;
  stats.iterations = iterations;
  stats.average_ns = window / rtt_factor(operation) / static_cast<double>(iterations);
  stats.transactions_per_second =
      static_cast<double>(iterations) / (window / kNanosecondsPerSecond);
  return stats;
}

double mebibytes_per_second(double bytes_per_second) {
  return bytes_per_second / 0x100000;
}

double gigabits_per_second(double bytes_per_second) {
  return bytes_per_second / 125000000.0;
}

BandwidthStats bandwidth_stats(std::span<const TimestampNs> posted,
                               std::span<const TimestampNs> completed, const ProbeSpec& spec) {
  if (!spec.iterations || spec.cq_moderation == 0u || spec.post_list == 0) {
    throw std::invalid_argument(
        "bandwidth statistics need an iteration-mode spec with CQ moderation and post list of "
        "at least 1");
  }
  std::uint64_t messages = 0;
  if (__builtin_mul_overflow(*spec.iterations, std::uint64_t{spec.qps}, &messages) ||
      messages == 0 || posted.size() != messages || completed.size() != messages) {
    throw std::invalid_argument(
        "bandwidth needs one post and one completion slot per message: iterations x qps = " +
        std::to_string(*spec.iterations) + " x " + std::to_string(spec.qps) + ", got " +
        std::to_string(posted.size()) + " posts and " + std::to_string(completed.size()) +
        " completions");
  }
  // sum_of_test_cycles = tcompleted[iters * qps - 1] - tposted[0]
  if (completed.back() <= posted.front()) {
    throw std::invalid_argument(
        "bandwidth needs the last completion after the first post; the window is empty");
  }
  BandwidthStats stats =
      from_window(messages, spec.message_size, completed.back() - posted.front());
  // force_dependecies: iters > 20000 turns noPeak on, as -N does.
  if (!spec.no_peak && *spec.iterations <= kPeakMaxIterations) {
    stats.peak_bytes_per_second = peak_bytes_per_second(
        posted, completed, spec.message_size, effective_cq_moderation(spec), spec.post_list);
  }
  return stats;
}

BandwidthStats bandwidth_stats_duration(TimestampNs sample_start, TimestampNs sample_end,
                                        std::uint64_t messages, std::uint64_t message_size) {
  // catch_alarm: tposted[0] at the end of the warm-up margin, tcompleted[0] when the
  // duration - 2 * margin sample ends; only completions in between are counted. perftest forces
  // noPeak in duration mode, so there is no peak.
  if (sample_end <= sample_start) {
    throw std::invalid_argument(
        "duration bandwidth needs a sample window that ends after it "
        "starts");
  }
  return from_window(messages, message_size, sample_end - sample_start);
}

BandwidthStats combine_directions(const BandwidthStats& initiator,
                                  const BandwidthStats& responder) {
  BandwidthStats sum = initiator;
  sum.bytes_per_second += responder.bytes_per_second;
  sum.messages_per_second += responder.messages_per_second;
  if (initiator.peak_bytes_per_second && responder.peak_bytes_per_second) {
    sum.peak_bytes_per_second = *initiator.peak_bytes_per_second + *responder.peak_bytes_per_second;
  } else {
    sum.peak_bytes_per_second.reset();
  }
  return sum;
}

}  // namespace ibprobe::probes
