// Running verbs probes for real: the initiator that drives a run against a peer's responder,
// and the responder every exporter runs on its own TCP port.
#pragma once

#include <chrono>
#include <cstdint>
#include <expected>
#include <filesystem>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

#include "ibprobe/mesh_endpoint.h"
#include "ibprobe/peer_address.h"
#include "ibprobe/probe_failure.h"
#include "ibprobe/probes.h"
#include "ibprobe/stop_signal.h"
#include "ibprobe/verify_plan.h"

namespace ibprobe::probes {

struct LocalPort {
  std::string device;
  std::uint8_t port = 1;
  std::filesystem::path sysfs_root = "/sys";  // where the port's counters are read
};

struct ProbeOutcome {
  ProbeSpec spec;
  std::string peer;
  int gid_index = 0;
  int numa_node = -1;  // the node CPU and buffers were bound to; -1: not bound
  std::uint32_t mtu = 0;
  Lane lane;  // the lane this side's QPs sent in
  // What was really used where perftest derives a value from its rules or the device: this
  // side's, and the responder's as it reported them (-1 / unset from peers that predate it).
  std::uint32_t cq_moderation = 0;
  std::uint32_t inline_size = 0;
  bool relaxed_ordering = false;        // buffers registered with IBV_ACCESS_RELAXED_ORDERING
  std::uint32_t outstanding_reads = 0;  // RDMA reads in flight at most, within both sides' limits
  int peer_gid_index = -1;
  int peer_numa_node = -1;
  std::optional<std::uint32_t> peer_inline_size;
  std::optional<bool> peer_relaxed_ordering;
  // This side's data loop: ibv_post_send calls (one per post list) and work completions reaped
  // (one per cq_moderation messages).
  std::uint64_t post_calls = 0;
  std::uint64_t completions = 0;
  // How this side waited for completions: "events" (spec.cq_events: slept on the completion
  // channel, cq_events times) or "polling".
  std::uint64_t cq_events = 0;
  // A bidirectional run reports the sum of both directions here, as perftest prints it, and each
  // direction below: this side's posting, and the responder's as it measured it.
  std::optional<BandwidthStats> bandwidth;
  std::optional<BandwidthStats> initiator_direction;
  std::optional<BandwidthStats> responder_direction;
  // Send bandwidth over UC or UD: messages this side posted and the responder's receive
  // completions. An unreliable transport does not retransmit, so what the path lost (or found
  // no receive posted for) is the difference.
  struct Delivery {
    std::uint64_t sent = 0;
    std::uint64_t received = 0;
    std::uint64_t lost() const { return sent > received ? sent - received : 0; }
  };
  std::optional<Delivery> delivery;
  // With a rate limit: who enforced it on each side (software or hardware).
  std::optional<RateLimiter> rate_limiter;
  std::optional<RateLimiter> peer_rate_limiter;
  std::optional<LatencyStats> latency;
  std::optional<DurationLatencyStats> latency_duration;  // a latency probe in duration mode
  // From the start of the request to the first posted work request: connection, handshake,
  // resource creation and QP transitions on both sides.
  double setup_seconds = 0;
  // Pre-flight facts of both sides ("local"/"peer"), and what they say together: rate_match
  // (both ports at the same rate) and version_match (same software on both sides).
  struct Check {
    std::string side;  // local, peer, or both
    std::string name;
    bool passed = false;
    std::string detail;
    // False where the side has nothing to check (cpu_frequency in a VM); detail says why.
    bool applicable = true;
  };
  std::vector<Check> checks;

  // Counters of both ports around the run (PortCounters x 4 for data, hw_counters as
  // "hw_counters/<name>"), read after the driver's hw_counters cache lifespan, and what they say
  // with the probe's own figure (docs/reading-probes.md).
  double window_seconds = 0;
  std::vector<CounterDelta> local_deltas;
  std::vector<CounterDelta> peer_deltas;
  // Fabric ports on the path (switch ports), read over PerfMgt MADs around the run.
  struct FabricDeltas {
    std::string port;  // LID:PORT as asked
    std::vector<CounterDelta> deltas;
  };
  std::vector<FabricDeltas> fabric_deltas;
  LinkReading link;
  // Validating probes: the initiator's sent and completion-order figures merged with what the
  // receiving side verified. A run with errors still returns its outcome: the errors are the
  // finding.
  std::optional<ValidationReport> validation;
  // A verification run's table, one result per case in the order run.
  std::vector<verify::CaseResult> verify_results;
};

// One probe at a time on a port, whichever side started it: an exporter's own probes and the runs
// its responder serves share one gate, since concurrent runs disturb each other's figures. A
// semaphore of one: enter() waits for it without polling, and what it returns holds the gate.
class ProbeGate {
 public:
  // Holds the gate for as long as it lives.
  class Held {
   public:
    explicit Held(ProbeGate& gate) : gate_(&gate) {}
    Held(Held&& other) noexcept : gate_(std::exchange(other.gate_, nullptr)) {}
    Held& operator=(Held&&) = delete;
    ~Held() {
      if (gate_) gate_->leave();
    }
    // Lets the gate go for `pause`, then waits for it again until `deadline`, for an initiator
    // told "busy" by a peer that may be waiting for this side's responder: both ends of a link
    // probing each other at once (both alerting) would otherwise each wait for the other until
    // a timeout. False: not held again (stopped, or past the deadline); this holds nothing then.
    bool step_aside(std::chrono::milliseconds pause, const StopSignal& stop,
                    std::chrono::steady_clock::time_point deadline);

   private:
    ProbeGate* gate_;
  };

  ProbeGate();
  ~ProbeGate();
  ProbeGate(const ProbeGate&) = delete;
  ProbeGate& operator=(const ProbeGate&) = delete;

  // Waits until the gate is free, `deadline` passes or `stop` is requested; holds it in the
  // first case only.
  std::optional<Held> enter(std::stop_token stop, std::chrono::steady_clock::time_point deadline);
  // Takes the gate when it is free at once.
  bool try_enter();
  void leave();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

struct RunOptions {
  // "LID:PORT" fabric ports (e.g. the switch ports on the path), read over PerfMgt MADs before
  // and after the run; when they cannot be (no InfiniBand port with a umad device here), the run
  // goes on and the fabric_ports check says why.
  std::vector<std::string> fabric_ports;
  // Shared secret both sides prove they hold (HMAC challenge); empty: no peer authentication.
  std::string shared_secret;
  // When the run must be over: every wait of the handshake, the run and its result ends by
  // then. Unset: spec.timeout_seconds after the call starts.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  // Asked to stop (the client went away, shutdown, the run was abandoned): the run fails with
  // kCancelled at once, wherever it waits, with every resource released.
  std::stop_token stop;
  // The responder's host as the caller resolved it once (its allowlist checked exactly these
  // addresses): the run connects to them and to nothing else, or fails as unreachable with the
  // reason it did not resolve. Unset: the host is resolved here.
  std::optional<Resolution> resolved;
  // TEST-ONLY fault switch, for proving that validation really checks: flip one payload byte of
  // every n-th message after its checksum was computed (0: off). Set by the ibprobe_probe tool
  // only; the exporter's configuration and HTTP API have no way to reach it.
  std::uint64_t test_corrupt_every = 0;
  // Non-empty: a verification run (ibprobe/verify.h), these cases instead of the spec's probe,
  // each case bounded by the spec's timeout.
  std::vector<verify::Case> verify_cases = {};
  verify::Options verify_options = {};
  // The port's gate as the caller holds it for the run: while the responder answers "busy", the
  // handshake lets it go between its tries (Held::step_aside). Null: held by nobody here.
  ProbeGate::Held* gate = nullptr;
};

struct ResponderOptions {
  Limits limits;
  std::string shared_secret;  // empty: any initiator may probe
  // Shared with the exporter's own probes on the same port; null: the responder's own gate.
  std::shared_ptr<ProbeGate> gate;
  // Where this host's mesh pinger answers, told to peers that ask; unset: the mesh is off here.
  std::optional<MeshEndpoint> mesh_endpoint = std::nullopt;
};

// Runs `spec` from `local` against the responder at HOST:PORT. The error says why the run could
// not complete (kRejected for a fabric port that is not LID:PORT or verify options that do not
// validate); every verbs resource is released on every path.
std::expected<ProbeOutcome, Error> run_probe(const LocalPort& local, const std::string& host,
                                             const std::string& port, const ValidSpec& spec,
                                             const RunOptions& options = {});

// Serves probe requests on a TCP address, one run at a time, on its own thread. Every number a
// peer sends is checked against `limits` before anything is allocated.
class Responder {
 public:
  // Binds at once (port "0": any free port); throws std::runtime_error when it cannot.
  Responder(const std::string& host, const std::string& port, LocalPort local,
            ResponderOptions options);
  // Ends a run in progress at once: its control connection is shut down, so the initiator learns
  // why, and the run's verbs resources are released before this returns.
  ~Responder();
  Responder(const Responder&) = delete;
  Responder& operator=(const Responder&) = delete;

  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ibprobe::probes
