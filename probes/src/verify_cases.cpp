#include "verify_cases.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <deque>

#include "payload.h"

namespace ibprobe::probes::verify {
namespace {

using Clock = std::chrono::steady_clock;

using verbs::kPollBatch;
constexpr std::uint32_t kDepth = 16;  // messages in flight, receives posted
constexpr std::uint64_t kMessageBytes = 4096;
constexpr std::uint32_t kDelayedMessagesMax = 100;
constexpr std::uint32_t kDelayedPostedReceives = 2;
constexpr std::uint32_t kInlineMessagesMax = 100;
// atomics: one at a time, each waiting for its completion.
constexpr std::uint32_t kAtomicsMax = 200;
constexpr std::uint32_t kUdDatagramsMax = 1000;
// How long a window of datagrams may be quiet before the receiver counts the rest as lost.
constexpr auto kWindowQuiet = std::chrono::milliseconds(200);
constexpr std::uint32_t kSoakDepth = 32;
constexpr unsigned kSpinsPerCheck = 1024;
// How long a device gets to raise an async event after a failed completion.
constexpr auto kAsyncEventWait = std::chrono::milliseconds(200);
// A zero-copy message the sender scribbles over while it is in flight.
constexpr std::uint8_t kScribble = 0x5a;

std::span<std::uint8_t> bytes_at(std::uint8_t* at, std::uint64_t length) {
  return {at, static_cast<std::size_t>(length)};
}

// What a receiving end found, in the ValidationReport the Result carries.
class InOrderChecker {
 public:
  // Checks one received message of payload::fill format: intact, from `qp`, next in sequence,
  // and of one sender generation at a time (the generation may change only through
  // expect_generation_change()).
  bool check(std::span<const std::uint8_t> message, std::uint32_t byte_len,
             std::uint64_t expected_length, const std::string& where) {
    ++report.messages_received;
    if (byte_len != expected_length || byte_len > message.size()) {
      return error(
          fmt::format("{}: byte_len {}, the sender sent {}", where, byte_len, expected_length));
    }
    const auto finding = payload::verify(message.first(byte_len));
    if (!finding.ok()) return error(where + ": " + finding.describe());
    if (generation_ >= 0 && finding.header.generation != generation_ && !generation_may_change_) {
      return error(fmt::format("{}: sender generation {} where {} was due", where,
                               finding.header.generation, generation_));
    }
    if (finding.header.generation != generation_) {
      generation_ = finding.header.generation;
      generation_may_change_ = false;
    }
    if (finding.header.sequence != next) {
      const auto due = next;
      next = finding.header.sequence + 1;
      return error(
          fmt::format("{}: sequence {} arrived where {} was due (lost, duplicated or "
                      "reordered)",
                      where, finding.header.sequence, due));
    }
    ++next;
    ++report.checked;
    return true;
  }
  void expect_generation_change() { generation_may_change_ = true; }
  bool error(const std::string& what) {
    if (report.errors++ == 0) report.first_error = what;
    return false;
  }

  ValidationReport report;
  std::uint64_t next = 0;

 private:
  int generation_ = -1;
  bool generation_may_change_ = false;
};

std::string rnr_naks(const CounterSnapshot& before, const CounterSnapshot& after,
                     std::uint64_t& total) {
  std::string named;
  total = 0;
  for (const auto& d : counter_deltas(before, after)) {
    if (d.counter_class != "rnr_nak" || !d.delta) continue;
    total += static_cast<std::uint64_t>(*d.delta);
    named += fmt::format("{}{} +{:.0f}", named.empty() ? "" : ", ", d.counter, *d.delta);
  }
  return named.empty() ? "no RNR-class counter on this port" : named;
}

// Waits up to kAsyncEventWait for the device's async events after a failure.
std::vector<std::string> await_async_events(Endpoint& endpoint) {
  std::vector<std::string> events;
  const auto until = Clock::now() + kAsyncEventWait;
  while (events.empty() && Clock::now() < until) {
    events = endpoint.async_events();
    if (events.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return events;
}

std::string joined(const std::vector<std::string>& items, const char* none) {
  if (items.empty()) return none;
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : "; ") + i;
  return out;
}

// The work id of a completion on QP 0 from the QP's current generation. A completion of an
// earlier generation (work flushed from a QP since replaced) is counted in `stale` instead.
std::optional<payload::WorkId> current_generation_id(const Endpoint& ep, const ibv_wc& wc,
                                                     std::uint64_t& stale) {
  const auto id = payload::decode_wr_id(wc.wr_id);
  if (id.generation == ep.generation(0)) return id;
  ++stale;
  return std::nullopt;
}

// ------------------------------------------------------------------------------- sending

struct SendFailure {
  ibv_wc wc{};
  std::string evidence;
};

// The initiator's sender: messages [from, to) on QP q, up to `depth` in flight, each filled by
// `fill(slot, sequence)` (returning its length). Completions of another generation are dropped
// and counted in `stale`. Returns the failed completion, if one arrives.
template <typename Fill>
std::optional<SendFailure> send_all(Endpoint& ep, std::size_t q, std::uint64_t from,
                                    std::uint64_t to, std::uint32_t depth, const Guard& guard,
                                    std::uint64_t& stale, Fill&& fill) {
  std::uint64_t sent = from, done = from;
  ibv_wc wcs[kPollBatch];
  for (unsigned spins = 1; done < to; ++spins) {
    while (sent < to && sent - done < depth) {
      const auto slot = static_cast<std::size_t>(sent % ep.layout().send_slots);
      const std::uint32_t length = fill(ep.send_slot(q, slot), sent);
      ep.send(q, slot, length, ep.wr_id(q, sent));
      ++sent;
    }
    const int n = ep.poll(wcs, kPollBatch);
    for (int i = 0; i < n; ++i) {
      const auto id = payload::decode_wr_id(wcs[i].wr_id);
      if (id.qp != q || id.generation != ep.generation(q)) {
        ++stale;
        continue;
      }
      if (wcs[i].status != IBV_WC_SUCCESS) return SendFailure{wcs[i], ep.evidence(q, &wcs[i])};
      if (id.sequence != static_cast<std::uint32_t>(done)) {
        return SendFailure{wcs[i], fmt::format("completion for sequence {} where {} was due; {}",
                                               id.sequence, done, ep.evidence(q, &wcs[i]))};
      }
      ++done;
    }
    if (n == 0 && spins % kSpinsPerCheck == 0) {
      guard.check(fmt::format("send completions ({} of {} done; {})", done - from, to - from,
                              ep.evidence(q)));
    }
  }
  return std::nullopt;
}

std::uint32_t fill_checked(std::uint8_t* slot, std::uint64_t length, std::size_t q,
                           std::uint16_t generation, std::uint64_t sequence) {
  payload::fill(bytes_at(slot, length), static_cast<std::uint16_t>(q), generation, sequence);
  return static_cast<std::uint32_t>(length);
}

// Message `sequence` of QP q, `length` bytes of checked payload, posted from its slot of the
// `slots` the QP cycles through (a slot is reused only once its previous message completed).
void send_checked(Endpoint& ep, std::size_t q, std::uint64_t sequence, std::size_t slots,
                  std::uint64_t length = kMessageBytes) {
  const auto slot = static_cast<std::size_t>(sequence % slots);
  fill_checked(ep.send_slot(q, slot), length, q, ep.generation(q), sequence);
  ep.send(q, slot, static_cast<std::uint32_t>(length), ep.wr_id(q, sequence));
}

// ------------------------------------------------------------------------------- receiving

// The responder's receiver for the payload::fill cases: `expected` messages over the QPs
// `queues`, each checked in order per QP, each receive re-posted (after `delay`, for
// delayed_recv) once its message is checked.
struct ReceivePlan {
  std::vector<std::size_t> queues;
  std::uint64_t expected = 0;  // per queue; 0: until the initiator's "done" step says
  std::chrono::milliseconds delay{0};
  std::uint64_t length = kMessageBytes;
};

void post_all_receives(Endpoint& ep, std::size_t q, std::uint32_t count) {
  for (std::uint32_t s = 0; s < count; ++s) ep.post_recv(q, s, ep.wr_id(q, s));
}

std::vector<InOrderChecker> receive_checked(Endpoint& ep, const ReceivePlan& plan,
                                            const Guard& guard, std::uint64_t& stale) {
  std::vector<InOrderChecker> checkers(ep.layout().qps);
  ibv_wc wcs[kPollBatch];
  auto received = [&] {
    std::uint64_t least = UINT64_MAX;
    for (auto q : plan.queues) least = std::min(least, checkers[q].report.messages_received);
    return least;
  };
  for (unsigned spins = 1; received() < plan.expected; ++spins) {
    const int n = ep.poll(wcs, kPollBatch);
    for (int i = 0; i < n; ++i) {
      const auto& wc = wcs[i];
      const auto id = payload::decode_wr_id(wc.wr_id);
      if (id.qp >= ep.layout().qps || id.generation != ep.generation(id.qp)) {
        ++stale;
        continue;
      }
      auto& checker = checkers[id.qp];
      const std::string where = fmt::format("receive on QP {}", id.qp);
      if (wc.status != IBV_WC_SUCCESS) {
        checker.error(where + ": " + ep.evidence(id.qp, &wc));
        ++checker.report.messages_received;
        continue;
      }
      checker.check({ep.recv_slot(id.qp, id.sequence), ep.slot_bytes()}, wc.byte_len, plan.length,
                    where);
      if (plan.delay.count() > 0) guard.sleep(plan.delay, "the receiver's delayed re-post");
      ep.post_recv(id.qp, id.sequence, wc.wr_id);
    }
    if (n == 0 && spins % kSpinsPerCheck == 0) {
      guard.check(
          fmt::format("message {} of {} from the initiator", received() + 1, plan.expected));
    }
  }
  return checkers;
}

// ud_datagrams' size: one packet of the path MTU, as both ends compute it from their own port and
// the other's endpoint.
std::uint64_t datagram_bytes(const Endpoint& ep, const protocol::QpEndpoint& other) {
  return std::min<std::uint64_t>(
      {verbs::mtu_bytes(ep.port().attr.active_mtu), other.mtu, ep.slot_bytes() - kUdGrhBytes});
}

// One received datagram: from the sender's QP, whole behind a GRH that names the sender, its
// payload intact and next in order.
void check_datagram(const Endpoint& ep, InOrderChecker& checker, const ibv_wc& wc,
                    const protocol::QpEndpoint& sender, std::uint64_t size) {
  const auto sequence = payload::decode_wr_id(wc.wr_id).sequence;
  const std::uint8_t* slot = ep.recv_slot(0, sequence);
  std::string wrong;
  if (wc.status != IBV_WC_SUCCESS) {
    wrong = ep.evidence(0, &wc);
  } else if (!(wc.wc_flags & IBV_WC_GRH)) {
    wrong = "the completion does not flag the GRH ahead of the payload";
  } else if (wc.src_qp != sender.qpn) {
    wrong = fmt::format("source QP {}, the sender's is {}", wc.src_qp, sender.qpn);
  } else if (wc.byte_len < kUdGrhBytes) {
    wrong = fmt::format("byte_len {} leaves no room for the GRH", wc.byte_len);
  } else if (verbs::grh_source_gid(slot) != sender.gid) {
    wrong = "the GRH does not name the sender's address";
  }
  if (!wrong.empty()) {
    ++checker.report.messages_received;
    checker.error("datagram: " + wrong);
    return;
  }
  checker.check({slot + kUdGrhBytes, ep.slot_bytes() - kUdGrhBytes}, wc.byte_len - kUdGrhBytes,
                size, "datagram");
}

// The receiving end of ud_datagrams. UD has no flow control (a datagram that finds no receive
// posted is dropped), so the initiator sends a window of as many datagrams as there are
// receives here, announces it, and sends the next only once these are checked and their
// receives posted again. A datagram lost on the way shows as the sequence gap it leaves, or as
// the window's shortfall once it has been quiet for kWindowQuiet.
ValidationReport receive_datagrams(Endpoint& ep, ControlChannel& channel,
                                   const protocol::QpEndpoint& sender, const Guard& guard) {
  InOrderChecker checker;
  const std::uint64_t size = datagram_bytes(ep, sender);
  std::uint64_t stale = 0;
  ibv_wc wcs[kPollBatch];
  for (;;) {
    const auto window =
        channel.expect<protocol::VerifyStep>(guard.deadline(), "the initiator's next window");
    auto quiet_since = std::chrono::steady_clock::now();
    for (unsigned spins = 1; checker.report.messages_received < window.value &&
                             std::chrono::steady_clock::now() - quiet_since < kWindowQuiet;
         ++spins) {
      const int n = ep.poll(wcs, kPollBatch);
      if (n > 0) quiet_since = std::chrono::steady_clock::now();
      for (int i = 0; i < n; ++i) {
        const auto id = payload::decode_wr_id(wcs[i].wr_id);
        if (id.generation != ep.generation(0)) {
          ++stale;
          continue;
        }
        check_datagram(ep, checker, wcs[i], sender, size);
        ep.post_recv(0, id.sequence, wcs[i].wr_id);
      }
      if (n == 0 && spins % kSpinsPerCheck == 0) guard.check("datagrams of the window");
    }
    channel.send(
        protocol::VerifyStep{"window_received", checker.report.messages_received, std::nullopt},
        guard.deadline());
    if (window.step == "last_window_sent") break;
  }
  checker.report.stale_completions = stale;
  return checker.report;
}

ValidationReport merged(const std::vector<InOrderChecker>& checkers,
                        const std::vector<std::size_t>& queues, std::uint64_t stale) {
  ValidationReport out;
  for (auto q : queues) {
    const auto& r = checkers[q].report;
    out.messages_received += r.messages_received;
    out.checked += r.checked;
    if (r.errors > 0 && out.errors == 0) out.first_error = r.first_error;
    out.errors += r.errors;
  }
  out.stale_completions = stale;
  return out;
}

// ------------------------------------------------------------------------------- both ends

// The initiator's end of a case after its own loop: tells the responder it is over, reads the
// responder's Result.
protocol::Result finish(ControlChannel& channel, const Guard& guard) {
  channel.send(protocol::Ready{}, guard.deadline());
  return channel.expect<protocol::Result>(guard.deadline(), "the responder's verdict");
}

std::string peer_summary(const ValidationReport& v) {
  return fmt::format("peer received {} checked {} errors {} stale {}{}", v.messages_received,
                     v.checked, v.errors, v.stale_completions,
                     v.first_error.empty() ? "" : "; first error: " + v.first_error);
}

CaseResult verdict(Case id, bool passed, std::vector<std::string> details) {
  return CaseResult{id, passed ? Verdict::kPass : Verdict::kFail, 0, std::move(details)};
}

// The two halves of a duplex exchange on QP 0: `count` messages each way, each end checking
// what it receives; used by both ends of the bidirectional case.
ValidationReport duplex(Endpoint& ep, std::uint64_t count, const Guard& guard,
                        std::optional<SendFailure>& failure) {
  InOrderChecker checker;
  std::uint64_t sent = 0, done = 0, stale = 0;
  ibv_wc wcs[kPollBatch];
  const std::uint32_t depth = ep.layout().send_slots;
  for (unsigned spins = 1; done < count || checker.report.messages_received < count; ++spins) {
    while (sent < count && sent - done < depth) {
      send_checked(ep, 0, sent, depth);
      ++sent;
    }
    const int n = ep.poll(wcs, kPollBatch);
    for (int i = 0; i < n; ++i) {
      const auto& wc = wcs[i];
      const auto id = current_generation_id(ep, wc, stale);
      if (!id) continue;
      if (wc.status != IBV_WC_SUCCESS) {
        failure = SendFailure{wc, ep.evidence(0, &wc)};
        checker.report.stale_completions = stale;
        return checker.report;
      }
      if (wc.opcode == IBV_WC_RECV) {
        checker.check({ep.recv_slot(0, id->sequence), ep.slot_bytes()}, wc.byte_len, kMessageBytes,
                      "receive");
        ep.post_recv(0, id->sequence, wc.wr_id);
      } else {
        ++done;
      }
    }
    if (n == 0 && spins % kSpinsPerCheck == 0) {
      guard.check(fmt::format("the duplex exchange ({} of {} sends done, {} of {} received; {})",
                              done, count, checker.report.messages_received, count,
                              ep.evidence(0)));
    }
  }
  checker.report.messages_sent = sent;
  checker.report.stale_completions = stale;
  return checker.report;
}

// ------------------------------------------------------------------------------- soak figures

class SoakMeter {
 public:
  explicit SoakMeter(std::chrono::seconds interval) : interval_(interval) {}
  // After every poll: `n` CQEs of which `good` were successful completions; `full` when the poll
  // filled its batch (the CQ may hold more, and the drain goes on).
  void polled(int n, int good) {
    histogram_.add(n);
    current_.completions += static_cast<std::uint64_t>(good);
    if (n > 0) drain_ += static_cast<std::uint64_t>(n);
    if (n < kPollBatch && drain_ > 0) {
      current_.max_backlog = std::max(current_.max_backlog, drain_);
      backlog_sum_ += drain_;
      ++drains_;
      drain_ = 0;
    }
    const auto now = Clock::now();
    if (now - started_ >= interval_) close(now);
  }
  // The last interval only when it is a fair sample: a few milliseconds of tail would report a
  // burst rate no interval ever had.
  void finish() {
    const auto now = Clock::now();
    if (now - started_ >= interval_ / 2) close(now);
  }
  const std::vector<SoakInterval>& intervals() const { return intervals_; }
  const BatchHistogram& histogram() const { return histogram_; }
  std::string describe(const char* who) const {
    std::string rates;
    for (const auto& i : intervals_) {
      rates += fmt::format("{}{:.0f}", rates.empty() ? "" : " ",
                           i.seconds > 0 ? static_cast<double>(i.completions) / i.seconds : 0.0);
    }
    std::string backlog;
    for (const auto& i : intervals_) {
      backlog +=
          fmt::format("{}{:.1f}/{}", backlog.empty() ? "" : " ", i.mean_backlog, i.max_backlog);
    }
    return fmt::format(
        "{}: completions/s per {} s interval: {}; CQEs per poll: {}; CQ backlog "
        "per interval (mean/max CQEs per drain): {}; backlog {}",
        who, interval_.count(), rates, histogram_.describe(), backlog,
        backlog_grows(intervals_) ? "GROWING" : "steady");
  }

 private:
  void close(Clock::time_point now) {
    current_.seconds = std::chrono::duration<double>(now - started_).count();
    current_.mean_backlog = drains_ ? static_cast<double>(backlog_sum_) / drains_ : 0;
    if (current_.seconds > 0) intervals_.push_back(current_);
    current_ = {};
    backlog_sum_ = 0;
    drains_ = 0;
    started_ = now;
  }

  std::chrono::seconds interval_;
  Clock::time_point started_ = Clock::now();
  SoakInterval current_;
  std::vector<SoakInterval> intervals_;
  BatchHistogram histogram_;
  std::uint64_t drain_ = 0;
  std::uint64_t backlog_sum_ = 0;
  std::uint64_t drains_ = 0;
};

// The driver's own account of the run (retransmissions, duplicates, sequence errors), for a soak
// that fails as well as one that passes.
std::string moved_hw_counters(const CounterSnapshot& before, const CounterSnapshot& after) {
  std::string moved;
  for (const auto& d : counter_deltas(before, after)) {
    if (!d.counter.starts_with("hw_counters/") || !d.delta || *d.delta <= 0) continue;
    moved += fmt::format("{}{} +{:.0f}", moved.empty() ? "" : ", ",
                         d.counter.substr(std::string_view("hw_counters/").size()), *d.delta);
  }
  return moved.empty() ? "none" : moved;
}

std::string summary_of(const SoakMeter& meter, const char* who) {
  return meter.describe(who);
}

}  // namespace

std::optional<Case> parse_case(std::string_view name) {
  for (const auto& c : catalogue()) {
    if (c.name == name) return c.id;
  }
  return std::nullopt;
}

protocol::VerifyRequest request_for(Case id, const Options& o) {
  protocol::VerifyRequest request;
  request.case_name = std::string(info(id).name);
  auto& spec = request.spec;
  spec = default_spec(Operation::kSend, TestKind::kBandwidth);
  spec.message_size = kMessageBytes;
  spec.iterations = o.messages;
  spec.tx_depth = kDepth;
  spec.rx_depth = kDepth;
  spec.cq_moderation = 1;
  spec.inline_size = 0;
  spec.timeout_seconds = o.case_timeout_seconds;
  switch (id) {
    case Case::kDelayedRecv:
      spec.iterations = std::min(o.messages, kDelayedMessagesMax);
      spec.posted_receives = kDelayedPostedReceives;
      request.recv_delay_ms = o.recv_delay_ms;
      break;
    case Case::kRnrRetryExceeded:
      spec.iterations = 5;
      spec.rc.rnr_retry = 0;
      break;
    case Case::kLocalErrorMrLength:
    case Case::kLocalErrorLkey:
    case Case::kLocalErrorUnmapped:
    case Case::kLocalErrorMaxSge:
      spec.qps = 2;
      break;
    case Case::kQpRebuild:
      // perftest's ACK timeout with 6 retries on both QPs: the loss shows after 7 tries of
      // 67 ms, and the rebuilt QP rides out a slow moment of the path instead of failing on it
      // (with 3 tries of 17 ms, rxe under emulation lost the rebuilt QP now and then). Not 7:
      // rxe, like rnr_retry's 7, retries forever then, and the loss would never show.
      spec.rc.retry_cnt = 6;
      request.rebuild_after = o.rebuild_after;
      break;
    case Case::kInlineReuse:
      spec.iterations = std::min(o.messages, kInlineMessagesMax);
      spec.inline_size = o.inline_size;
      break;
    case Case::kBidirectional:
      break;
    case Case::kAtomics:
      spec.iterations = std::min(o.messages, kAtomicsMax);
      break;
    case Case::kUdDatagrams:
      // Room for the largest path MTU; the datagrams are of the path's.
      spec.connection = Connection::kUd;
      spec.iterations = std::min(o.messages, kUdDatagramsMax);
      break;
    case Case::kRandomSizes:
      spec.message_size = o.max_message_size;
      request.seed = o.seed;
      request.fixed_sizes = o.fixed_sizes;
      break;
    case Case::kSoak:
      spec.message_size = o.soak_message_size;
      spec.iterations.reset();
      spec.duration_seconds = o.soak_seconds;
      spec.margin_seconds = 0;
      spec.tx_depth = kSoakDepth;
      spec.rx_depth = kSoakDepth;
      spec.timeout_seconds = o.soak_seconds + o.case_timeout_seconds;
      request.soak_interval_seconds = o.soak_interval_seconds;
      break;
  }
  return request;
}

Layout layout_for(Case id, const protocol::VerifyRequest& request, bool initiator) {
  const auto& spec = request.spec;
  Layout layout;
  layout.qps = spec.qps;
  layout.send_slots = spec.tx_depth;
  layout.recv_slots = spec.rx_depth;
  layout.slot_bytes = spec.message_size;
  if (id == Case::kDelayedRecv && !initiator) layout.recv_slots = spec.posted_receives;
  if (id == Case::kInlineReuse && initiator) layout.inline_size = spec.inline_size.value_or(0);
  // Room for one more SGE than the QP is given, for the max_sge injection's list.
  if (id == Case::kLocalErrorMaxSge && initiator) layout.max_send_sge = 1;
  layout.remote_atomics = id == Case::kAtomics;
  if (spec.connection == Connection::kUd) layout.slot_bytes += kUdGrhBytes;
  return layout;
}

std::vector<std::string> check_request(const protocol::VerifyRequest& request,
                                       const Limits& limits) {
  std::vector<std::string> problems;
  const auto id = parse_case(request.case_name);
  if (!id) {
    problems.push_back("unknown verify case '" + request.case_name + "'");
    return problems;
  }
  if (auto valid = validate(request.spec); !valid) problems = std::move(valid).error().problems;
  if (request.spec.operation != Operation::kSend || request.spec.test != TestKind::kBandwidth) {
    problems.push_back("a verify case runs send/receive");
  }
  if (request.spec.message_size < payload::kMinMessageBytes) {
    problems.push_back(fmt::format("message_size {}: a verify case needs {} bytes at least",
                                   request.spec.message_size, payload::kMinMessageBytes));
  }
  if (request.recv_delay_ms > 1000) {
    problems.push_back(fmt::format("recv_delay_ms {} above 1000", request.recv_delay_ms));
  }
  if (*id == Case::kQpRebuild && request.spec.iterations &&
      (request.rebuild_after < 1 || request.rebuild_after >= *request.spec.iterations)) {
    problems.push_back("rebuild_after must fall inside the run");
  }
  if (*id == Case::kDelayedRecv && request.spec.posted_receives == 0) {
    problems.push_back("delayed_recv needs posted_receives");
  }
  // Only the soak may run past the duration cap, and only as far as this responder's
  // max_soak_seconds allows; its timeout may exceed the usual bound by as much.
  Limits bound = limits;
  if (*id == Case::kSoak && limits.max_soak_seconds > limits.max_duration_seconds) {
    bound.max_timeout_seconds += limits.max_soak_seconds - limits.max_duration_seconds;
    bound.max_duration_seconds = limits.max_soak_seconds;
  }
  if (*id != Case::kSoak && request.spec.duration_seconds) {
    problems.push_back("only the soak runs for a duration");
  }
  if (const auto fits = check_limits(request.spec, bound); !fits) {
    const auto& over = fits.error().problems;
    problems.insert(problems.end(), over.begin(), over.end());
  }
  return problems;
}

// ------------------------------------------------------------------------------- initiator

namespace {

struct Initiator {
  Case id;
  const LocalPort& local;
  ControlChannel& channel;
  const protocol::VerifyRequest& request;
  Endpoint& ep;
  Guard& guard;
  const protocol::QpInfo& peer;

  std::uint64_t messages() const { return request.spec.iterations.value_or(0); }

  CaseResult delayed_recv() {
    const auto before = ep.counters();
    std::uint64_t stale = 0;
    const auto failure = send_all(
        ep, 0, 0, messages(), kDepth, guard, stale, [&](std::uint8_t* slot, std::uint64_t seq) {
          return fill_checked(slot, kMessageBytes, 0, ep.generation(0), seq);
        });
    const auto after = ep.counters();
    const auto result = finish(channel, guard);
    const auto v = result.validation.value_or(ValidationReport{});
    std::uint64_t naks = 0;
    const auto counters = rnr_naks(before, after, naks);
    std::vector<std::string> details{
        fmt::format("receiver held each re-post {} ms with {} receives posted; RNR NAKs: {}",
                    request.recv_delay_ms, request.spec.posted_receives, counters),
        peer_summary(v)};
    if (failure) details.push_back("send failed: " + failure->evidence);
    const bool passed = !failure && naks > 0 && v.checked == messages() && v.errors == 0;
    return verdict(id, passed, details);
  }

  CaseResult rnr_retry_exceeded() {
    std::uint64_t stale = 0;
    const auto failure = send_all(
        ep, 0, 0, messages(), kDepth, guard, stale, [&](std::uint8_t* slot, std::uint64_t seq) {
          return fill_checked(slot, kMessageBytes, 0, ep.generation(0), seq);
        });
    const std::string state = ep.state(0);
    const auto events = ep.async_events();
    finish(channel, guard);
    if (!failure) {
      return verdict(id, false,
                     {"every send completed although the receiver posted no receive and "
                      "rnr_retry is 0: " +
                      ep.evidence(0)});
    }
    const bool passed = failure->wc.status == IBV_WC_RNR_RETRY_EXC_ERR && state == "ERR";
    return verdict(
        id, passed,
        {"expected error: " + failure->evidence,
         "QP state after it: " + state + "; async events: " + joined(events, "none raised")});
  }

  // Half the healthy QP's messages, the faulty work request on QP 0, the other half: every
  // completion of QP 1 must be a success in order, and QP 0's one a failure.
  CaseResult local_error() {
    const std::uint64_t count = messages();
    std::uint64_t sent = 0, done = 0;
    std::optional<ibv_wc> victim;
    std::string refusal;
    bool injected = false;
    std::vector<std::string> healthy_errors;
    ibv_wc wcs[kPollBatch];
    // The unmapped case's address: a page mapped and unmapped again, so nothing is there.
    void* page = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) throw ProbeFailure("mmap failed", FailureKind::kInternal);
    ::munmap(page, 4096);
    auto inject = [&] {
      std::vector<ibv_sge> sges(1);
      sges[0] = {reinterpret_cast<std::uintptr_t>(ep.send_slot(0, 0)),
                 static_cast<std::uint32_t>(kMessageBytes), ep.mr()->lkey};
      switch (id) {
        case Case::kLocalErrorMrLength:
          // From the MR's first byte to past its last.
          sges[0].addr = reinterpret_cast<std::uintptr_t>(ep.mr()->addr);
          sges[0].length = static_cast<std::uint32_t>(ep.mr()->length + 64);
          break;
        case Case::kLocalErrorLkey:
          sges[0].lkey = ep.mr()->lkey ^ 0x00ffff00u;
          break;
        case Case::kLocalErrorUnmapped:
          sges[0].addr = reinterpret_cast<std::uintptr_t>(page);
          break;
        default:
          sges.resize(ep.send_sge_granted(0) + 1, sges[0]);
          for (auto& s : sges) s.length = 64;
          break;
      }
      fill_checked(ep.send_slot(0, 0), kMessageBytes, 0, ep.generation(0), 0);
      ibv_send_wr wr{};
      wr.wr_id = ep.wr_id(0, 0);
      wr.sg_list = sges.data();
      wr.num_sge = static_cast<int>(sges.size());
      wr.opcode = IBV_WR_SEND;
      wr.send_flags = IBV_SEND_SIGNALED;
      if (const int rc = ep.try_post_send(0, wr); rc != 0) {
        refusal = fmt::format("ibv_post_send refused it: {} ({}), QP state {}", std::strerror(rc),
                              rc, ep.state(0));
      }
      injected = true;
    };
    for (unsigned spins = 1; done < count || (!victim && refusal.empty()); ++spins) {
      if (!injected && sent >= count / 2) inject();
      while (sent < count && sent - done < kDepth && (injected || sent < count / 2)) {
        send_checked(ep, 1, sent, kDepth);
        ++sent;
      }
      const int n = ep.poll(wcs, kPollBatch);
      for (int i = 0; i < n; ++i) {
        const auto wid = payload::decode_wr_id(wcs[i].wr_id);
        if (wid.qp == 0 && wid.generation == ep.generation(0)) {
          if (victim) healthy_errors.push_back("a second completion on the faulty QP");
          victim = wcs[i];
        } else if (wid.qp == 1 && wid.generation == ep.generation(1)) {
          if (wcs[i].status != IBV_WC_SUCCESS || wid.sequence != done) {
            healthy_errors.push_back(
                fmt::format("healthy QP: expected a success for sequence {}, "
                            "got {}",
                            done, describe(wcs[i])));
          }
          ++done;
        }
        // Any other completion is stale, an earlier generation's: not this case's to judge.
      }
      if (n == 0 && spins % kSpinsPerCheck == 0) {
        guard.check(fmt::format("completions of both QPs ({} of {} healthy done; {})", done, count,
                                ep.evidence(0)));
      }
    }
    const std::string state = ep.state(0);
    const auto events = await_async_events(ep);
    const auto result = finish(channel, guard);
    const auto v = result.validation.value_or(ValidationReport{});
    std::vector<std::string> details;
    bool fault_reported;
    if (victim) {
      details.push_back("faulty QP: " + ep.evidence(0, &*victim));
      fault_reported = victim->status != IBV_WC_SUCCESS && state == "ERR";
    } else {
      details.push_back("faulty QP: " + refusal);
      // A work request the provider refuses at post time leaves the QP as it was.
      fault_reported = id == Case::kLocalErrorMaxSge && state == "RTS";
    }
    details.push_back("async events: " + joined(events, "none raised by the device"));
    details.push_back(
        fmt::format("healthy QP on the same CQ: {} of {} sends completed in order; "
                    "{}",
                    done - healthy_errors.size(), count, peer_summary(v)));
    for (const auto& e : healthy_errors) details.push_back(e);
    const bool isolated = healthy_errors.empty() && v.checked == count && v.errors == 0;
    return verdict(id, fault_reported && isolated, details);
  }

  // Sends until the loss shows as a failed completion, replaces the QP on the same CQ (a new
  // generation), drains the old QP's flushed work by generation, exchanges the new endpoints and
  // resumes where the peer's receiver left off.
  CaseResult qp_rebuild() {
    const std::uint64_t count = messages();
    const auto old_generation = ep.generation(0);
    std::uint64_t sent = 0, done = 0, stale = 0, flushed_due = 0;
    std::optional<SendFailure> loss, second;
    std::string state;
    bool resumed = false;
    std::uint64_t resumed_at = 0;
    ibv_wc wcs[kPollBatch];
    for (unsigned spins = 1; done < count && !second; ++spins) {
      while ((!loss || resumed) && sent < count && sent - done < kDepth) {
        send_checked(ep, 0, sent, kDepth);
        ++sent;
      }
      const int n = ep.poll(wcs, kPollBatch);
      for (int i = 0; i < n; ++i) {
        const auto id = current_generation_id(ep, wcs[i], stale);
        if (!id) continue;
        if (wcs[i].status != IBV_WC_SUCCESS) {
          if (loss) {
            second = SendFailure{wcs[i], ep.evidence(0, &wcs[i])};
            break;
          }
          loss = SendFailure{wcs[i], ep.evidence(0, &wcs[i])};
          state = ep.state(0);
          // Everything posted after the failed request is flushed into the CQ under the old
          // generation; from here on only the successor's generation counts.
          flushed_due = sent - done - 1;
          ep.replace(0);
          continue;
        }
        if (id->sequence != static_cast<std::uint32_t>(done)) {
          second = SendFailure{wcs[i], fmt::format("completion for sequence {} where {} was due",
                                                   id->sequence, done)};
          break;
        }
        ++done;
      }
      if (loss && !resumed && stale >= flushed_due) {
        ep.retire_old();
        const auto lost = channel.expect<protocol::VerifyStep>(guard.deadline(), "the peer's loss");
        channel.send(protocol::VerifyStep{"rebuild", lost.value, ep.endpoints()}, guard.deadline());
        const auto rebuilt =
            channel.expect<protocol::VerifyStep>(guard.deadline(), "the peer's new QP");
        if (!rebuilt.endpoints || rebuilt.endpoints->qps.size() != 1) {
          throw ProbeFailure("the peer's rebuilt QP came without its endpoint",
                             FailureKind::kProtocol);
        }
        ep.connect(0, rebuilt.endpoints->qps[0]);
        resumed = true;
        resumed_at = sent = done = rebuilt.value;
      }
      if (n == 0 && spins % kSpinsPerCheck == 0) {
        guard.check(
            fmt::format("qp_rebuild completions ({} of {} done, {} old-generation CQEs "
                        "of {} due; {})",
                        done, count, stale, flushed_due, ep.evidence(0)));
      }
    }
    const auto result = finish(channel, guard);
    const auto v = result.validation.value_or(ValidationReport{});
    if (!loss)
      return verdict(id, false, {"every send completed: the peer's QP loss was never seen"});
    std::vector<std::string> details{
        "loss seen: " + loss->evidence + "; QP state then " + state,
        fmt::format("rebuilt on the same CQ: generation {} -> {}; resumed at sequence {} (the "
                    "peer's next due); old-generation CQEs dropped: {} (flushed work requests "
                    "due: {})",
                    old_generation, ep.generation(0), resumed_at, stale, flushed_due),
        peer_summary(v)};
    if (second) details.push_back("after the loss: " + second->evidence);
    const bool passed = loss->wc.status != IBV_WC_SUCCESS && state == "ERR" && !second &&
                        ep.generation(0) != old_generation && stale > 0 && v.checked == count &&
                        v.errors == 0;
    return verdict(id, passed, details);
  }

  CaseResult inline_reuse() {
    const std::uint32_t granted = ep.inline_granted(0);
    const auto asked = request.spec.inline_size.value_or(0);
    const std::uint32_t inline_length = std::min(granted, asked);
    const std::uint64_t count = messages();
    ibv_wc wcs[kPollBatch];
    // Inline: one slot for every message, scribbled over as soon as the post returns.
    std::uint64_t sent = 0, done = 0;
    std::optional<SendFailure> failure;
    for (unsigned spins = 1; done < count && !failure; ++spins) {
      while (sent < count && sent - done < kDepth) {
        fill_checked(ep.send_slot(0, 0), inline_length, 0, ep.generation(0), sent);
        ep.send(0, 0, inline_length, ep.wr_id(0, sent), true);
        std::memset(ep.send_slot(0, 0), kScribble, inline_length);
        ++sent;
      }
      const int n = ep.poll(wcs, kPollBatch);
      for (int i = 0; i < n; ++i) {
        if (wcs[i].status != IBV_WC_SUCCESS) failure = SendFailure{wcs[i], ep.evidence(0, &wcs[i])};
        ++done;
      }
      if (n == 0 && spins % kSpinsPerCheck == 0) guard.check("inline send completions");
    }
    // Zero-copy: scribbled over right after the post, before the completion; each message in
    // its own slot, reused only after its completion.
    for (std::uint64_t i = 0; i < count && !failure; ++i) {
      const std::uint64_t seq = count + i;
      fill_checked(ep.send_slot(0, 1), kMessageBytes, 0, ep.generation(0), seq);
      ep.send(0, 1, kMessageBytes, ep.wr_id(0, seq));
      std::memset(ep.send_slot(0, 1), kScribble, kMessageBytes);
      for (unsigned spins = 1;; ++spins) {
        const int n = ep.poll(wcs, 1);
        if (n == 1) {
          if (wcs[0].status != IBV_WC_SUCCESS) failure = SendFailure{wcs[0], ep.evidence(0, wcs)};
          break;
        }
        if (spins % kSpinsPerCheck == 0) guard.check("a zero-copy send completion");
      }
    }
    const auto result = finish(channel, guard);
    const auto v = result.validation.value_or(ValidationReport{});
    std::string zero_copy = "no report";
    for (const auto& c : result.checks) {
      if (c.name == "zero_copy_overwritten") zero_copy = c.detail;
    }
    std::vector<std::string> details{
        fmt::format("inline size asked {} granted {}; {} inline messages of {} bytes overwritten "
                    "right after ibv_post_send; {}",
                    asked, granted, count, inline_length, peer_summary(v)),
        fmt::format("{} zero-copy messages of {} bytes overwritten before their completion "
                    "(observation, not a verdict): {}",
                    count, kMessageBytes, zero_copy)};
    if (failure) details.push_back("send failed: " + failure->evidence);
    return verdict(id, !failure && v.checked == count && v.errors == 0, details);
  }

  // One signaled work request on QP 0 and its completion; the evidence when either failed.
  std::optional<std::string> post_and_wait(ibv_send_wr& wr, const std::string& what) {
    if (const int rc = ep.try_post_send(0, wr); rc != 0) {
      return fmt::format("{}: ibv_post_send failed: {}", what, std::strerror(rc));
    }
    ibv_wc wc{};
    for (unsigned spins = 1; ep.poll(&wc, 1) == 0; ++spins) {
      if (spins % kSpinsPerCheck == 0) guard.check(what);
    }
    if (wc.status != IBV_WC_SUCCESS) return what + ": " + ep.evidence(0, &wc);
    return std::nullopt;
  }

  // RC executes a QP's atomics in order, so the i-th fetch-and-add of 1 to a zeroed target
  // fetches i. The fetched value's place is filled with ones before each operation: an atomic
  // that completes without writing it shows.
  // Datagrams in windows of the responder's receives (receive_datagrams says why); the last
  // window is announced as such, also after a failed send, so both ends end together.
  CaseResult ud_datagrams() {
    const std::uint64_t n = messages();
    const std::uint64_t size = datagram_bytes(ep, peer.qps.at(0));
    const std::uint64_t window = request.spec.rx_depth;
    std::uint64_t stale = 0, received = 0;
    std::optional<SendFailure> failure;
    for (std::uint64_t from = 0; from < n; from += window) {
      const auto to = std::min(n, from + window);
      failure = send_all(ep, 0, from, to, request.spec.tx_depth, guard, stale,
                         [&](std::uint8_t* slot, std::uint64_t sequence) {
                           return fill_checked(slot, size, 0, ep.generation(0), sequence);
                         });
      const bool last = to == n || failure;
      channel.send(
          protocol::VerifyStep{last ? "last_window_sent" : "window_sent", to, std::nullopt},
          guard.deadline());
      received =
          channel
              .expect<protocol::VerifyStep>(guard.deadline(), "the responder's check of the window")
              .value;
      if (last) break;
    }
    const auto result = finish(channel, guard);
    const auto v = result.validation.value_or(ValidationReport{});
    std::vector<std::string> details{
        fmt::format("{} datagrams of {} bytes (the path MTU) sent in windows of {}: {} received, "
                    "{} checked whole behind a GRH naming the sender, {} lost",
                    n, size, window, received, v.checked, n > received ? n - received : 0),
        peer_summary(v)};
    if (failure) details.push_back("send failed: " + failure->evidence);
    const bool passed = !failure && result.validation && v.errors == 0 && v.checked == n;
    return verdict(id, passed, details);
  }

  CaseResult atomics() {
    const auto& target = peer.qps.at(0);
    std::uint8_t* fetched_at = ep.send_slot(0, 0);
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(fetched_at), sizeof(std::uint64_t), ep.mr()->lkey};
    std::uint64_t sequence = 0;
    std::optional<std::string> failure;
    auto run = [&](ibv_wr_opcode opcode, std::uint64_t compare_add, std::uint64_t swap,
                   const std::string& what) -> std::uint64_t {
      std::memset(fetched_at, 0xFF, sizeof(std::uint64_t));
      ibv_send_wr wr{};
      wr.wr_id = ep.wr_id(0, sequence++);
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.opcode = opcode;
      wr.send_flags = IBV_SEND_SIGNALED;
      if (opcode == IBV_WR_RDMA_READ) {
        wr.wr.rdma.remote_addr = target.addr;
        wr.wr.rdma.rkey = target.rkey;
      } else {
        wr.wr.atomic.remote_addr = target.addr;
        wr.wr.atomic.rkey = target.rkey;
        wr.wr.atomic.compare_add = compare_add;
        wr.wr.atomic.swap = swap;
      }
      failure = post_and_wait(wr, what);
      std::uint64_t value = 0;
      std::memcpy(&value, fetched_at, sizeof(value));
      return value;
    };
    const std::uint64_t n = messages();
    std::uint64_t in_order = 0;
    std::string first_wrong;
    for (std::uint64_t i = 0; i < n && !failure; ++i) {
      const auto value = run(IBV_WR_ATOMIC_FETCH_AND_ADD, 1, 0, fmt::format("fetch-and-add {}", i));
      if (failure) break;
      if (value == i) {
        ++in_order;
      } else if (first_wrong.empty()) {
        first_wrong = fmt::format("; first out of order: fetch-and-add {} fetched {:#x}", i, value);
      }
    }
    constexpr std::uint64_t kSwapped = 0x1b9b0e5a7c3d2f01;
    std::uint64_t stale = 0, current = 0, read_back = 0;
    if (!failure) {
      stale =
          run(IBV_WR_ATOMIC_CMP_AND_SWP, n + 1, kSwapped, "compare-and-swap with a stale compare");
    }
    if (!failure) {
      current =
          run(IBV_WR_ATOMIC_CMP_AND_SWP, n, kSwapped, "compare-and-swap with the current value");
    }
    if (!failure) read_back = run(IBV_WR_RDMA_READ, 0, 0, "reading the target back");
    finish(channel, guard);
    std::vector<std::string> details{
        fmt::format("{} of {} fetch-and-adds fetched 0, 1, 2, ... in order{}", in_order, n,
                    first_wrong),
        fmt::format("compare-and-swap expecting {} fetched {} (target unchanged); expecting {} "
                    "fetched {}; the target read back {:#x} (the swap wrote {:#x})",
                    n + 1, stale, n, current, read_back, kSwapped)};
    if (failure) details.push_back("failed: " + *failure);
    const bool passed =
        !failure && in_order == n && stale == n && current == n && read_back == kSwapped;
    return verdict(id, passed, details);
  }

  CaseResult bidirectional() {
    std::optional<SendFailure> failure;
    const auto local = duplex(ep, messages(), guard, failure);
    const auto result = finish(channel, guard);
    const auto v = result.validation.value_or(ValidationReport{});
    std::vector<std::string> details{
        fmt::format("initiator sent {} received {} checked {} errors {}{}", local.messages_sent,
                    local.messages_received, local.checked, local.errors,
                    local.first_error.empty() ? "" : "; first error: " + local.first_error),
        peer_summary(v)};
    if (failure) details.push_back("failed: " + failure->evidence);
    const bool passed = !failure && local.checked == messages() && local.errors == 0 &&
                        v.checked == messages() && v.errors == 0;
    return verdict(id, passed, details);
  }

  CaseResult random_sizes() {
    const SizeSequence sizes(request.seed, request.spec.message_size, request.fixed_sizes);
    std::uint64_t stale = 0;
    const auto failure = send_all(ep, 0, 0, messages(), kDepth, guard, stale,
                                  [&](std::uint8_t* slot, std::uint64_t seq) {
                                    const auto length = sizes.size(seq);
                                    for (std::uint64_t b = 0; b < length; ++b) {
                                      slot[b] = pattern_byte(request.seed, seq, b);
                                    }
                                    return static_cast<std::uint32_t>(length);
                                  });
    const auto result = finish(channel, guard);
    const auto v = result.validation.value_or(ValidationReport{});
    std::string first;
    for (std::uint64_t i = 0; i < std::min<std::uint64_t>(8, messages()); ++i) {
      first += fmt::format("{}{}", i ? "," : "", sizes.size(i));
    }
    std::vector<std::string> details{
        fmt::format("{} sizes 1..{} ({}; first: {}...); {}", messages(), request.spec.message_size,
                    request.fixed_sizes
                        ? "fixed boundary sequence"
                        : fmt::format("seed {}, rerun with --seed {}", request.seed, request.seed),
                    first, peer_summary(v))};
    if (failure) details.push_back("send failed: " + failure->evidence);
    return verdict(id, !failure && v.checked == messages() && v.errors == 0, details);
  }

  CaseResult soak() {
    const auto before = ep.counters();
    const auto seconds = std::chrono::seconds(*request.spec.duration_seconds);
    const std::uint64_t length = request.spec.message_size;
    SoakMeter meter(
        std::chrono::seconds(std::max<std::uint32_t>(1, request.soak_interval_seconds)));
    const auto stop = Clock::now() + seconds;
    std::uint64_t sent = 0, done = 0;
    std::optional<SendFailure> failure;
    ibv_wc wcs[kPollBatch];
    const std::uint32_t depth = ep.layout().send_slots;
    for (unsigned spins = 1; !failure; ++spins) {
      const bool posting = Clock::now() < stop;
      while (posting && sent - done < depth) {
        send_checked(ep, 0, sent, depth, length);
        ++sent;
      }
      if (!posting && done == sent) break;
      const int n = ep.poll(wcs, kPollBatch);
      int good = 0;
      for (int i = 0; i < n; ++i) {
        if (wcs[i].status != IBV_WC_SUCCESS) {
          failure = SendFailure{wcs[i], ep.evidence(0, &wcs[i])};
          break;
        }
        ++good;
        ++done;
      }
      meter.polled(n, good);
      if (n == 0 && spins % kSpinsPerCheck == 0) guard.check("soak send completions");
    }
    meter.finish();
    channel.send(protocol::VerifyStep{"done", sent, std::nullopt}, guard.deadline());
    const auto result = finish(channel, guard);
    const auto v = result.validation.value_or(ValidationReport{});
    std::vector<std::string> details{
        fmt::format("{} s, {} messages of {} bytes, {} in flight; {}", seconds.count(), sent,
                    length, depth, peer_summary(v)),
        summary_of(meter, "sender"),
        "sender's hw_counters that moved: " + moved_hw_counters(before, ep.counters())};
    bool receiver_steady = false;
    for (const auto& c : result.checks) {
      if (c.name == "soak_receiver") {
        details.push_back(c.detail);
        receiver_steady = c.passed;
      }
    }
    if (failure) details.push_back("send failed: " + failure->evidence);
    const bool passed = !failure && v.checked == sent && v.errors == 0 &&
                        !backlog_grows(meter.intervals()) && receiver_steady;
    return verdict(id, passed, details);
  }
};

}  // namespace

CaseResult run_case(Case id, const LocalPort& local, ControlChannel& channel,
                    const protocol::VerifyRequest& request, const protocol::QpInfo& peer) {
  Guard guard(channel, std::chrono::seconds(request.spec.timeout_seconds));
  const auto layout = layout_for(id, request, true);
  std::optional<Endpoint> ep;
  try {
    ep.emplace(local, request.spec, true, layout);
  } catch (const verbs::VerbsError& e) {
    if (id != Case::kInlineReuse) throw;
    return CaseResult{id,
                      Verdict::kSkipped,
                      0,
                      {fmt::format("the device cannot create a QP with {} bytes of inline data: "
                                   "{}",
                                   layout.inline_size, e.what())}};
  }
  if (id == Case::kInlineReuse && ep->inline_granted(0) < payload::kMinMessageBytes) {
    return CaseResult{id,
                      Verdict::kSkipped,
                      0,
                      {fmt::format("the device grants {} bytes of inline data, fewer than a "
                                   "checked message's {}",
                                   ep->inline_granted(0), payload::kMinMessageBytes)}};
  }
  // Connected and (bidirectional) receiving before the responder learns the endpoints: its first
  // messages must find a QP in RTR with receives posted, not draw retries.
  ep->connect_all(peer);
  if (id == Case::kBidirectional) post_all_receives(*ep, 0, ep->layout().recv_slots);
  channel.send(ep->endpoints(), guard.deadline());
  channel.expect<protocol::Ready>(guard.deadline(), "the responder to be ready");
  if (id == Case::kAtomics && !ep->atomics_supported()) {
    return CaseResult{
        id, Verdict::kSkipped, 0, {"the device executes no atomic operations (atomic_cap NONE)"}};
  }
  Initiator initiator{id, local, channel, request, *ep, guard, peer};
  switch (id) {
    case Case::kDelayedRecv:
      return initiator.delayed_recv();
    case Case::kRnrRetryExceeded:
      return initiator.rnr_retry_exceeded();
    case Case::kLocalErrorMrLength:
    case Case::kLocalErrorLkey:
    case Case::kLocalErrorUnmapped:
    case Case::kLocalErrorMaxSge:
      return initiator.local_error();
    case Case::kQpRebuild:
      return initiator.qp_rebuild();
    case Case::kInlineReuse:
      return initiator.inline_reuse();
    case Case::kBidirectional:
      return initiator.bidirectional();
    case Case::kAtomics:
      return initiator.atomics();
    case Case::kUdDatagrams:
      return initiator.ud_datagrams();
    case Case::kRandomSizes:
      return initiator.random_sizes();
    case Case::kSoak:
      return initiator.soak();
  }
  throw std::logic_error("verify case without an initiator");
}

// ------------------------------------------------------------------------------- responder

void serve_case(Case id, const LocalPort& local, ControlChannel& channel,
                const protocol::VerifyRequest& request) {
  Guard guard(channel, std::chrono::seconds(request.spec.timeout_seconds));
  const auto& spec = request.spec;
  Endpoint ep(local, spec, false, layout_for(id, request, false));
  channel.send(protocol::ProbeAccept{}, guard.deadline());
  channel.send(ep.endpoints(), guard.deadline());
  const auto initiator_qps =
      channel.expect<protocol::QpInfo>(guard.deadline(), "the initiator's QPs");
  ep.connect_all(initiator_qps);
  protocol::Result result;
  result.before = ep.counters();
  if (id != Case::kRnrRetryExceeded) {
    for (std::size_t q = 0; q < ep.layout().qps; ++q) {
      post_all_receives(ep, q, ep.layout().recv_slots);
    }
  }
  channel.send(protocol::Ready{}, guard.deadline());
  const std::uint64_t count = spec.iterations.value_or(0);
  std::uint64_t stale = 0;
  ibv_wc wcs[kPollBatch];

  switch (id) {
    case Case::kDelayedRecv:
    case Case::kBidirectional:
    case Case::kLocalErrorMrLength:
    case Case::kLocalErrorLkey:
    case Case::kLocalErrorUnmapped:
    case Case::kLocalErrorMaxSge: {
      if (id == Case::kBidirectional) {
        std::optional<SendFailure> failure;
        result.validation = duplex(ep, count, guard, failure);
        if (failure) {
          InOrderChecker note;
          note.error("responder: " + failure->evidence);
          result.validation->errors += 1;
          if (result.validation->first_error.empty()) {
            result.validation->first_error = note.report.first_error;
          }
        }
        break;
      }
      // The local-error cases: only QP 1 carries messages; QP 0's one work request fails on the
      // initiator's side and sends nothing.
      const std::vector<std::size_t> queues =
          spec.qps == 2 ? std::vector<std::size_t>{1} : std::vector<std::size_t>{0};
      ReceivePlan plan{
          queues, count,
          std::chrono::milliseconds(id == Case::kDelayedRecv ? request.recv_delay_ms : 0)};
      result.validation = merged(receive_checked(ep, plan, guard, stale), queues, stale);
      break;
    }
    case Case::kRnrRetryExceeded:
    case Case::kAtomics:
      break;
    case Case::kUdDatagrams:
      result.validation = receive_datagrams(ep, channel, initiator_qps.qps.at(0), guard);
      break;
    case Case::kQpRebuild: {
      ReceivePlan plan{{0}, request.rebuild_after};
      auto checkers = receive_checked(ep, plan, guard, stale);
      // The loss: the QP goes at once, its posted receives with it; messages the HCA already
      // placed are in the CQ with the old generation.
      ep.destroy(0);
      channel.send(protocol::VerifyStep{"qp_destroyed", checkers[0].next, std::nullopt},
                   guard.deadline());
      const auto rebuild =
          channel.expect<protocol::VerifyStep>(guard.deadline(), "the initiator's rebuilt QP");
      if (!rebuild.endpoints || rebuild.endpoints->qps.size() != 1) {
        throw ProbeFailure("the initiator's rebuild came without its endpoint",
                           FailureKind::kProtocol);
      }
      ep.replace(0);
      ep.connect(0, rebuild.endpoints->qps[0]);
      post_all_receives(ep, 0, ep.layout().recv_slots);
      channel.send(protocol::VerifyStep{"rebuilt", checkers[0].next, ep.endpoints()},
                   guard.deadline());
      checkers[0].expect_generation_change();
      // The rest of the run on the new QP, checked by the same checker: the sequence must go on
      // from where the old QP left it, every message once.
      for (unsigned spins = 1; checkers[0].next < count; ++spins) {
        const int n = ep.poll(wcs, kPollBatch);
        for (int i = 0; i < n; ++i) {
          const auto wid = current_generation_id(ep, wcs[i], stale);
          if (!wid) continue;
          if (wcs[i].status != IBV_WC_SUCCESS) {
            checkers[0].error("receive after the rebuild: " + ep.evidence(0, &wcs[i]));
            continue;
          }
          checkers[0].check({ep.recv_slot(0, wid->sequence), ep.slot_bytes()}, wcs[i].byte_len,
                            kMessageBytes, "receive after the rebuild");
          ep.post_recv(0, wid->sequence, wcs[i].wr_id);
        }
        if (n == 0 && spins % kSpinsPerCheck == 0) {
          // An initiator that gave up after the rebuild says so with its Ready: report what
          // arrived rather than wait out the deadline.
          if (channel.has_pending_message()) break;
          guard.check("messages after the rebuild");
        }
      }
      ep.retire_old();
      result.validation = merged(checkers, {0}, stale);
      break;
    }
    case Case::kInlineReuse: {
      InOrderChecker inline_checker;
      std::uint64_t intact = 0, overwritten = 0, other = 0, received = 0;
      for (unsigned spins = 1; received < 2 * count; ++spins) {
        const int n = ep.poll(wcs, kPollBatch);
        for (int i = 0; i < n; ++i) {
          const auto& wc = wcs[i];
          const auto wid = payload::decode_wr_id(wc.wr_id);
          ++received;
          const std::span<const std::uint8_t> slot{ep.recv_slot(0, wid.sequence), ep.slot_bytes()};
          if (wc.status != IBV_WC_SUCCESS) {
            inline_checker.error("receive: " + ep.evidence(0, &wc));
          } else if (wc.byte_len < kMessageBytes) {
            inline_checker.check(slot, wc.byte_len, wc.byte_len, "inline message");
          } else if (payload::verify(slot.first(wc.byte_len)).ok()) {
            ++intact;
          } else if (std::all_of(slot.begin(), slot.begin() + wc.byte_len,
                                 [](std::uint8_t b) { return b == kScribble; })) {
            ++overwritten;
          } else {
            ++other;
          }
          ep.post_recv(0, wid.sequence, wc.wr_id);
        }
        if (n == 0 && spins % kSpinsPerCheck == 0) guard.check("inline_reuse messages");
      }
      result.validation = inline_checker.report;
      result.checks.push_back(
          {"zero_copy_overwritten", true,
           fmt::format("peer saw {} with the pre-overwrite bytes, {} entirely overwritten, {} "
                       "partly overwritten",
                       intact, overwritten, other)});
      break;
    }
    case Case::kRandomSizes: {
      const SizeSequence sizes(request.seed, spec.message_size, request.fixed_sizes);
      InOrderChecker checker;
      for (unsigned spins = 1; checker.next < count; ++spins) {
        const int n = ep.poll(wcs, kPollBatch);
        for (int i = 0; i < n; ++i) {
          const auto& wc = wcs[i];
          const auto wid = payload::decode_wr_id(wc.wr_id);
          const std::uint64_t seq = checker.next++;
          ++checker.report.messages_received;
          const std::uint8_t* slot = ep.recv_slot(0, wid.sequence);
          if (wc.status != IBV_WC_SUCCESS) {
            checker.error("receive: " + ep.evidence(0, &wc));
          } else if (wc.byte_len != sizes.size(seq)) {
            checker.error(fmt::format("message {}: byte_len {}, the sender sent {}", seq,
                                      wc.byte_len, sizes.size(seq)));
          } else {
            std::uint64_t bad = wc.byte_len;
            for (std::uint64_t b = 0; b < wc.byte_len && bad == wc.byte_len; ++b) {
              if (slot[b] != pattern_byte(request.seed, seq, b)) bad = b;
            }
            if (bad == wc.byte_len) {
              ++checker.report.checked;
            } else {
              checker.error(fmt::format("message {} ({} bytes): first bad byte at offset {}", seq,
                                        wc.byte_len, bad));
            }
          }
          ep.post_recv(0, wid.sequence, wc.wr_id);
        }
        if (n == 0 && spins % kSpinsPerCheck == 0) guard.check("random-size messages");
      }
      result.validation = checker.report;
      break;
    }
    case Case::kSoak: {
      InOrderChecker checker;
      SoakMeter meter(
          std::chrono::seconds(std::max<std::uint32_t>(1, request.soak_interval_seconds)));
      std::optional<std::uint64_t> expected;
      for (unsigned spins = 1; !expected || checker.report.messages_received < *expected; ++spins) {
        const int n = ep.poll(wcs, kPollBatch);
        int good = 0;
        for (int i = 0; i < n; ++i) {
          const auto& wc = wcs[i];
          const auto wid = payload::decode_wr_id(wc.wr_id);
          if (wc.status != IBV_WC_SUCCESS) {
            checker.error("receive: " + ep.evidence(0, &wc));
            ++checker.report.messages_received;
            continue;
          }
          ++good;
          checker.check({ep.recv_slot(0, wid.sequence), ep.slot_bytes()}, wc.byte_len,
                        spec.message_size, "soak receive");
          ep.post_recv(0, wid.sequence, wc.wr_id);
        }
        meter.polled(n, good);
        if (n == 0 && spins % kSpinsPerCheck == 0) {
          if (!expected && channel.has_pending_message()) {
            expected =
                channel.expect<protocol::VerifyStep>(guard.deadline(), "the soak's end").value;
          }
          guard.check("soak messages");
        }
      }
      meter.finish();
      result.validation = checker.report;
      result.checks.push_back(
          {"soak_receiver", !backlog_grows(meter.intervals()), summary_of(meter, "receiver")});
      break;
    }
  }
  channel.expect<protocol::Ready>(guard.deadline(), "the end of the case");
  result.after = ep.counters();
  channel.send(result, guard.deadline());
}

}  // namespace ibprobe::probes::verify
