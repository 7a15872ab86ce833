#include "rc_session.h"

#include <algorithm>
#include <cstdio>
#include <deque>

namespace ibprobe::probes {
namespace {

using Clock = std::chrono::steady_clock;

using verbs::kPollBatch;
// A ping-pong's waits make no system call while answers come on time: the guard's checks (the
// peer's control socket, the deadline) run between iterations every kIterationsPerGuardCheck,
// and inside a wait only once its answer is late, when that sample is an outlier anyway.
constexpr std::uint64_t kIterationsPerGuardCheck = 1000;
constexpr TimestampNs kLateAnswerNs = 10'000'000;

bool late(TimestampNs since) {
  return steady_now_ns() - since > kLateAnswerNs;
}

// A wait that gave up also tells whether this side's own port is still up: a port gone down
// explains the silence here, an ACTIVE one points at the path or the peer.
void check(const RunGuard& guard, const std::string& waiting_for, ibv_context* context,
           std::uint8_t port) {
  if (guard.check_peer) guard.check_peer();
  if (Clock::now() <= guard.deadline) return;
  std::string local = std::string("local port ") + ibv_get_device_name(context->device) + "/" +
                      std::to_string(port);
  ibv_port_attr attr{};
  if (ibv_query_port(context, port, &attr) == 0) {
    local += std::string(" is ") + ibv_port_state_str(attr.state);
  }
  const std::string bound =
      guard.timeout.count() > 0
          ? "the run's deadline (timeout " + std::to_string(guard.timeout.count()) + " s) passed"
          : "the run's deadline passed";
  throw ProbeFailure("timed out: " + bound + " waiting for " + waiting_for + "; " + local,
                     FailureKind::kTimeout);
}

std::string seconds_since(TimestampNs since) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", static_cast<double>(steady_now_ns() - since) / 1e9);
  return text;
}

// Whether a run that hit its deadline was still moving or had stalled: a slow link that needs
// more time and a lost message are different findings.
std::string progress_since(TimestampNs last_progress) {
  constexpr double kStalledAfterSeconds = 1.0;
  const double idle = static_cast<double>(steady_now_ns() - last_progress) / 1e9;
  return idle < kStalledAfterSeconds
             ? "still progressing: last completion " + seconds_since(last_progress) + " ago"
             : "stalled: no completion for " + seconds_since(last_progress);
}

}  // namespace

// perftest's run_iter_bw: keep up to tx_depth messages in flight per QP, posted post_list at a
// time with one call, ask for a completion every cq_moderation messages (and for the last),
// timestamp every list head and every reaped completion batch.
BandwidthStats RcSession::run_bandwidth(const RunGuard& guard) {
  if (spec_.validation && spec_.operation != Operation::kAtomic) {
    return run_bandwidth_validated(guard);
  }
  const auto stats =
      spec_.iterations ? run_bandwidth_iterations(guard) : run_bandwidth_duration(guard);
  if (spec_.validation) check_atomic_targets(guard);
  return stats;
}

RatePacer RcSession::software_pacer() const {
  if (rate_limiter_ != RateLimiter::kSoftware) return RatePacer(0, spec_.message_size);
  return RatePacer(rate_limit_bytes_per_second(*spec_.rate_limit, spec_.message_size),
                   spec_.message_size);
}

BandwidthStats RcSession::run_bandwidth_iterations(const RunGuard& guard) {
  const std::uint64_t per_qp = *spec_.iterations;
  const std::uint64_t total = per_qp * qps_.size();
  std::vector<TimestampNs> posted(total), completed(total);
  std::vector<std::uint64_t> sent(qps_.size()), done(qps_.size());
  std::uint64_t total_sent = 0, total_done = 0;
  TimestampNs last_progress = steady_now_ns();
  unsigned spins = 0;
  ibv_wc wcs[kPollBatch];
  RatePacer pacer = software_pacer();
  // Bidirectional send: the peer sends as many, and each of its messages needs a receive here
  // until the last one has arrived.
  const std::uint64_t expected_receives = receives_while_sending() ? total : 0;
  while (total_done < total || received_ < expected_receives) {
    for (std::size_t q = 0; q < qps_.size(); ++q) {
      // validate() makes the iterations a multiple of the post list: every list is whole.
      while (sent[q] < per_qp && sent[q] - done[q] + spec_.post_list <= spec_.tx_depth &&
             (!pacer.limited() || pacer.may_post(steady_now_ns()))) {
        const TimestampNs now = steady_now_ns();
        posted[total_sent] = now;
        post(q, spec_.post_list, sent[q], per_qp);
        pacer.posted(spec_.post_list, now);
        sent[q] += spec_.post_list;
        total_sent += spec_.post_list;
      }
    }
    const int n = poll(wcs, kPollBatch);
    if (n == 0) {
      if (clock_check_due(++spins)) {
        check(guard,
              "completions (" + std::to_string(total_done) + " of " + std::to_string(total) +
                  " messages done, " + std::to_string(total_sent - total_done) + " in flight" +
                  (expected_receives ? ", " + std::to_string(received_) + " of " +
                                           std::to_string(expected_receives) + " received"
                                     : std::string()) +
                  "; " + progress_since(last_progress) + ")",
              context_.get(), port_number_);
      }
      continue;
    }
    const TimestampNs now = steady_now_ns();
    last_progress = now;
    for (int i = 0; i < n; ++i) {
      if (took_receive(wcs[i])) continue;
      const auto q = static_cast<std::size_t>(wcs[i].wr_id);
      // Each completion closes the batch up to its signaled message: cq_moderation messages,
      // or what is left of the QP's share at the end.
      const std::uint64_t batch = std::min<std::uint64_t>(cq_moderation_, per_qp - done[q]);
      done[q] += batch;
      total_done += batch;
      completed[total_done - 1] = now;
    }
  }
  return bandwidth_stats(posted, completed, spec_);
}

DurationWindow::DurationWindow(const ProbeSpec& spec) {
  const auto start = Clock::now();
  sample_from_ = start + std::chrono::seconds(spec.margin_seconds);
  stop_ = start + std::chrono::seconds(*spec.duration_seconds);
  sample_to_ = stop_ - std::chrono::seconds(spec.margin_seconds);
}

bool DurationWindow::posting(std::uint64_t total_done) {
  const auto now = Clock::now();
  if (!from_ns_ && now >= sample_from_) {
    from_ns_ = steady_now_ns();
    done_at_from_ = total_done;
  }
  if (!to_ns_ && now >= sample_to_) {
    to_ns_ = steady_now_ns();
    done_at_to_ = total_done;
  }
  return now < stop_;
}

BandwidthStats DurationWindow::stats(std::uint64_t message_size) const {
  return bandwidth_stats_duration(from_ns_, to_ns_, done_at_to_ - done_at_from_, message_size);
}

// Duration mode: post for the whole duration, then let the queues drain.
BandwidthStats RcSession::run_bandwidth_duration(const RunGuard& guard) {
  DurationWindow window(spec_);
  struct QpState {
    std::uint64_t in_flight = 0;
    std::uint64_t unsignaled = 0;       // posted since the last signaled message
    std::deque<std::uint64_t> batches;  // messages each outstanding completion stands for
  };
  std::vector<QpState> state(qps_.size());
  std::uint64_t total_done = 0;
  TimestampNs last_progress = steady_now_ns();
  ibv_wc wcs[kPollBatch];
  RatePacer pacer = software_pacer();
  for (unsigned spins = 1;; ++spins) {
    const bool posting = window.posting(total_done);
    bool outstanding = false;
    for (std::size_t q = 0; q < qps_.size(); ++q) {
      auto& s = state[q];
      // Whole post lists while posting; after the stop, one signaled message closes the
      // unsignaled tail so it completes too.
      while (true) {
        std::uint32_t count = 0;
        std::uint64_t last = 0;
        if (posting && s.in_flight + spec_.post_list <= spec_.tx_depth &&
            (!pacer.limited() || pacer.may_post(steady_now_ns())) && window.before_stop()) {
          count = spec_.post_list;
        } else if (!posting && s.unsignaled > 0 && s.in_flight < spec_.tx_depth) {
          count = 1;
          last = s.unsignaled + 1;
        } else {
          break;
        }
        post(q, count, s.unsignaled, last);
        pacer.posted(count, steady_now_ns());
        for (std::uint32_t i = 0; i < count; ++i) {
          ++s.in_flight;
          ++s.unsignaled;
          if (s.unsignaled == cq_moderation_ || s.unsignaled == last) {
            s.batches.push_back(s.unsignaled);
            s.unsignaled = 0;
          }
        }
      }
      outstanding = outstanding || !s.batches.empty() || s.unsignaled > 0;
    }
    if (!posting && !outstanding) break;
    const int n = poll(wcs, kPollBatch);
    if (n > 0) last_progress = steady_now_ns();
    for (int i = 0; i < n; ++i) {
      if (took_receive(wcs[i])) continue;
      auto& s = state[static_cast<std::size_t>(wcs[i].wr_id)];
      const std::uint64_t batch = s.batches.front();
      s.batches.pop_front();
      s.in_flight -= batch;
      total_done += batch;
    }
    if (clock_check_due(spins)) {
      std::uint64_t in_flight = 0;
      for (const auto& s : state) in_flight += s.in_flight;
      check(guard,
            "completions of the duration run (" + std::to_string(in_flight) +
                " messages in flight; " + progress_since(last_progress) + ")",
            context_.get(), port_number_);
    }
  }
  // The responder knows when the initiator is done (its end-of-run message); the initiator
  // serves the responder's tail once it has said so itself (initiator.cpp).
  if (receives_while_sending() && guard.peer_finished) receive_until_peer_finished(guard);
  return window.stats(spec_.message_size);
}

bool RcSession::receives_while_sending() const {
  return spec_.bidirectional && spec_.operation == Operation::kSend;
}

bool RcSession::took_receive(const ibv_wc& wc) {
  if (!(wc.opcode & IBV_WC_RECV)) return false;
  ++received_;
  post_receive(srq_ ? 0 : static_cast<std::size_t>(wc.wr_id));
  return true;
}

void RcSession::receive_until_peer_finished(const RunGuard& guard) {
  ibv_wc wcs[kPollBatch];
  for (unsigned spins = 1;; ++spins) {
    const int n = poll(wcs, kPollBatch);
    for (int i = 0; i < n; ++i) took_receive(wcs[i]);
    if (clock_check_due(spins)) {
      if (guard.peer_finished()) return;
      check(guard,
            "the end of the peer's sends (" + std::to_string(received_) + " messages received)",
            context_.get(), port_number_);
    }
  }
}

// Ping-pong (perftest's run_iter_lat*): post one message, wait for the answer. For write the
// answer is the peer's write landing in our buffer, for send a receive completion, for read the
// read's own completion. A sample is the time between successive posts.
LatencyStats RcSession::run_latency(const RunGuard& guard) {
  const std::uint64_t iterations = *spec_.iterations;
  std::vector<TimestampNs> post_times(iterations);
  for (std::uint64_t i = 0; i < iterations; ++i) {
    if (i > 0 && i % kIterationsPerGuardCheck == 0) {
      check(guard, "iteration " + std::to_string(i + 1), context_.get(), port_number_);
    }
    post_times[i] = steady_now_ns();
    exchange(i, post_times[i], guard);
  }
  return latency_stats(post_times, spec_.operation);
}

// perftest's duration-mode latency: ping-pong for the whole duration and count the round trips
// between the end of the warm-up margin and the start of the cool-down margin.
DurationLatencyStats RcSession::run_latency_duration(const RunGuard& guard) {
  const auto start = Clock::now();
  const auto sample_from = start + std::chrono::seconds(spec_.margin_seconds);
  const auto stop = start + std::chrono::seconds(*spec_.duration_seconds);
  const auto sample_to = stop - std::chrono::seconds(spec_.margin_seconds);
  TimestampNs from_ns = 0, to_ns = 0;
  std::uint64_t done_at_from = 0, done_at_to = 0;
  for (std::uint64_t i = 0;; ++i) {
    if (i > 0 && i % kIterationsPerGuardCheck == 0) {
      check(guard, "iteration " + std::to_string(i + 1), context_.get(), port_number_);
    }
    const TimestampNs now_ns = steady_now_ns();
    const auto now = Clock::now();
    if (!from_ns && now >= sample_from) {
      from_ns = now_ns;
      done_at_from = i;
    }
    if (!to_ns && now >= sample_to) {
      to_ns = now_ns;
      done_at_to = i;
    }
    if (now >= stop) break;
    exchange(i, now_ns, guard);
  }
  return duration_latency_stats(from_ns, to_ns, done_at_to - done_at_from, spec_.operation);
}

// One round trip of the ping-pong (perftest's run_iter_lat*): post one message, wait for the
// answer. For write the answer is the peer's write landing in our buffer, for send a receive
// completion, for read the read's own completion.
void RcSession::exchange(std::uint64_t i, TimestampNs sent_at, const RunGuard& guard) {
  volatile std::uint8_t* arrival = receive_area(0) + spec_.message_size - 1;
  std::uint8_t* outgoing = send_area(0) + spec_.message_size - 1;
  ibv_wc wcs[kPollBatch];
  const auto mark = static_cast<std::uint8_t>(i + 1);
  *outgoing = mark;
  post(0, 1, 0, 1);
  // A read or an atomic is answered by its own completion.
  bool answered = spec_.operation == Operation::kRead || spec_.operation == Operation::kAtomic,
       completed = false;
  for (unsigned spins = 1; !(answered && completed); ++spins) {
    const int n = poll(wcs, kPollBatch);
    for (int c = 0; c < n; ++c) {
      if (wcs[c].opcode == IBV_WC_RECV) {
        answered = true;
        post_receive(0);
      } else {
        completed = true;
      }
    }
    if (spec_.operation == Operation::kWrite && !answered && *arrival == mark) answered = true;
    if (clock_check_due(spins) && late(sent_at)) {
      check(guard,
            "the peer's answer to iteration " + std::to_string(i + 1) +
                (spec_.iterations ? " of " + std::to_string(*spec_.iterations) : std::string()) +
                " (sent " + seconds_since(sent_at) + " ago, " +
                (completed ? "acknowledged" : "not acknowledged") + " by the peer's HCA)",
            context_.get(), port_number_);
    }
  }
}

// The answering half of the write and send ping-pong.
void RcSession::serve_latency(const RunGuard& guard) {
  if (spec_.operation == Operation::kRead || spec_.operation == Operation::kAtomic) return;
  // Iteration mode: the count is known. Duration mode: until the initiator says it is over.
  const bool counted = spec_.iterations.has_value();
  const std::uint64_t iterations = spec_.iterations.value_or(0);
  volatile std::uint8_t* arrival = receive_area(0) + spec_.message_size - 1;
  std::uint8_t* outgoing = send_area(0) + spec_.message_size - 1;
  ibv_wc wcs[kPollBatch];
  // The initiator's next send can arrive before our answer's completion is reported (it only
  // waits for the answer itself), so receives are counted wherever they show up.
  std::uint64_t received = 0;
  auto reap = [&] {
    bool sent = false;
    const int n = poll(wcs, kPollBatch);
    for (int c = 0; c < n; ++c) {
      if (wcs[c].opcode == IBV_WC_RECV) {
        ++received;
        post_receive(0);
      } else {
        sent = true;
      }
    }
    return sent;
  };
  for (std::uint64_t i = 0; !counted || i < iterations; ++i) {
    if (i > 0 && i % kIterationsPerGuardCheck == 0) {
      check(guard, "iteration " + std::to_string(i + 1), context_.get(), port_number_);
    }
    const auto mark = static_cast<std::uint8_t>(i + 1);
    const TimestampNs waiting_since = steady_now_ns();
    for (unsigned spins = 1;; ++spins) {
      if (spec_.operation == Operation::kWrite ? *arrival == mark : (reap(), received > i)) break;
      if (clock_check_due(spins) && late(waiting_since)) {
        if (!counted && guard.peer_finished && guard.peer_finished()) return;
        check(guard,
              "the initiator's message " + std::to_string(i + 1) +
                  (counted ? " of " + std::to_string(iterations) : std::string()),
              context_.get(), port_number_);
      }
    }
    *outgoing = mark;
    post(0, 1, 0, 1);
    const TimestampNs answered_at = steady_now_ns();
    for (unsigned spins = 1; !reap(); ++spins) {
      if (clock_check_due(spins) && late(answered_at)) {
        check(guard, "our answer's completion", context_.get(), port_number_);
      }
    }
  }
}

// Keeps receives posted for the initiator's sends and counts them: every message needs a
// receive, and a missing one is an RNR NAK the sender has to retry.
std::uint64_t RcSession::serve_send_bandwidth(const RunGuard& guard) {
  if (spec_.validation) {
    serve_send_validated(guard);
    return validation_.messages_received;
  }
  // Iteration mode over RC: the count is known. Duration mode, and UC and UD, which lose what
  // the path drops: until the initiator says it is over.
  const bool counted = spec_.iterations.has_value() && spec_.connection == Connection::kRc;
  const std::uint64_t expected = counted ? *spec_.iterations * qps_.size() : 0;
  std::uint64_t received = 0;
  ibv_wc wcs[kPollBatch];
  auto reap = [&] {
    const int n = poll(wcs, kPollBatch);
    for (int c = 0; c < n; ++c) {
      ++received;
      post_receive(srq_ ? 0 : static_cast<std::size_t>(wcs[c].wr_id));
    }
    return n;
  };
  for (unsigned spins = 1; !counted || received < expected; ++spins) {
    reap();
    if (clock_check_due(spins)) {
      if (!counted && guard.peer_finished && guard.peer_finished()) break;
      check(guard, "message " + std::to_string(received + 1) + " from the initiator",
            context_.get(), port_number_);
    }
  }
  if (!counted) {
    auto quiet_since = Clock::now();
    while (Clock::now() - quiet_since < kDrainQuiet) {
      if (reap() > 0) quiet_since = Clock::now();
    }
  }
  return received;
}

}  // namespace ibprobe::probes
