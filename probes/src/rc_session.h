// The perftest-style data loops for each side of each probe kind, run over one side's RC
// resources (rc_resources.h) once they are connected to the peer's QPs.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "ibprobe/probes.h"
#include "rate_pacer.h"
#include "rc_resources.h"

namespace ibprobe::probes {

// Bounds every wait on the peer during a run: a deadline, and a check that throws when the peer
// is known to be gone (its control connection closed), so a dead peer fails the run at once.
struct RunGuard {
  std::chrono::steady_clock::time_point deadline;
  std::function<void()> check_peer;
  // True once the initiator has said the run is over (duration mode, where the responder cannot
  // count the messages to expect).
  std::function<bool()> peer_finished;
  // What the deadline stands for, for the message when it passes.
  std::chrono::seconds timeout{0};
};

// A receiving side that counts until the initiator says the run is over: the initiator's
// end-of-run message can overtake the receive completions of its last messages, so the side
// reaps on until its CQ has been quiet this long.
inline constexpr auto kDrainQuiet = std::chrono::milliseconds(50);

// perftest's duration-mode measurement: post for the whole duration, count what completes
// between the end of the warm-up margin and the start of the cool-down margin.
class DurationWindow {
 public:
  // The run starts now; spec.duration_seconds is set.
  explicit DurationWindow(const ProbeSpec& spec);
  // Called on every pass of a loop with the completions so far: notes the window's edges as they
  // pass, and says whether the run is still in its posting time.
  bool posting(std::uint64_t total_done);
  // Whether the posting time has not ended yet, asked before each post: a pass of the loop that
  // began in it may end after it (a descheduled thread, a slow post), and what it posts then
  // would go past the duration and a rate limit's count for it.
  bool before_stop() const { return std::chrono::steady_clock::now() < stop_; }
  BandwidthStats stats(std::uint64_t message_size) const;

 private:
  std::chrono::steady_clock::time_point sample_from_, stop_, sample_to_;
  TimestampNs from_ns_ = 0, to_ns_ = 0;
  std::uint64_t done_at_from_ = 0, done_at_to_ = 0;
};

class RcSession : public RcResources {
 public:
  using RcResources::RcResources;

  // Initiator loops.
  BandwidthStats run_bandwidth(const RunGuard& guard);
  LatencyStats run_latency(const RunGuard& guard);
  // Duration mode: perftest keeps only the average and the round trips per second there.
  DurationLatencyStats run_latency_duration(const RunGuard& guard);
  // Responder loops: the write and send ping-pong answer every message; send bandwidth keeps
  // receives posted. RDMA write and read bandwidth need nothing from the responder's CPU.
  void serve_latency(const RunGuard& guard);
  // Returns the receive completions it reaped.
  std::uint64_t serve_send_bandwidth(const RunGuard& guard);
  // Bidirectional send after this side's own sends have drained: the peer may still be posting
  // (its duration started at another instant), so its messages keep finding receives until
  // guard.peer_finished says it is done.
  void receive_until_peer_finished(const RunGuard& guard);

  // Correctness probes (validation_loops.cpp). The receiving side of a validating write run
  // verifies what lands in its slots until the initiator says the run is over.
  void serve_write_validation(const RunGuard& guard);
  // This side's share of a validating run's findings.
  const ValidationReport& validation() const { return validation_; }
  // Test-only fault switch: flip one payload byte of every n-th message after its checksum was
  // computed; an atomic adds (or swaps in) one too many (0: off). Only the command-line tool
  // sets it.
  void corrupt_every(std::uint64_t n) { corrupt_every_ = n; }

 private:
  // The software limiter of the posting loops: pacing when this side's rate limit is software's,
  // none otherwise (no limit, or the hardware enforces it).
  RatePacer software_pacer() const;
  BandwidthStats run_bandwidth_iterations(const RunGuard& guard);
  void exchange(std::uint64_t iteration, TimestampNs sent_at, const RunGuard& guard);
  BandwidthStats run_bandwidth_duration(const RunGuard& guard);
  // Whether both sides send (perftest's send_bw -b): the peer's messages then complete on this
  // side's CQ among its own send completions.
  bool receives_while_sending() const;
  // A receive completion among the send completions: counted, and its receive posted again at
  // once so the peer's next message finds one. False for a send completion.
  bool took_receive(const ibv_wc& wc);

  BandwidthStats run_bandwidth_validated(const RunGuard& guard);
  void serve_send_validated(const RunGuard& guard);
  void post_validated(std::size_t qp, std::uint64_t sequence, bool signaled);
  void record_error(const std::string& what);

  // Atomic bandwidth with validation: every target read back must hold what this side's atomics
  // made of it.
  void check_atomic_targets(const RunGuard& guard);

  ValidationReport validation_;
  // The peer's messages received by a bidirectional send run.
  std::uint64_t received_ = 0;
};

}  // namespace ibprobe::probes
