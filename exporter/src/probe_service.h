// The probe scheduler behind /probe and the async API: checks what a request asks for against
// the configuration in force (ConfigStore), queues it for the probe port (RunQueue) and keeps
// what has finished (ProbeHistory) for the API and /metrics.
#pragma once

#include <chrono>
#include <cstdint>
#include <expected>
#include <map>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

#include "config_store.h"
#include "ibprobe/verbs_probe.h"
#include "probe_config.h"
#include "probe_history.h"
#include "probe_request.h"
#include "probe_run.h"
#include "run_queue.h"
#include "target_allowlist.h"

namespace ibprobe::exporter {

// Where a responder listens unless --probe.responder-address says otherwise, and so the port of
// a target that names none.
inline constexpr std::uint16_t kDefaultResponderPort = 9471;

// Splits "HOST:PORT", "[V6]:PORT" or a bare "HOST" (the responder's default port 9471). Returns
// {host, port} or the reason the text is not a target.
std::expected<std::pair<std::string, std::string>, std::string> parse_target(
    const std::string& target);

class ProbeService {
 public:
  using Runner = RunQueue::Runner;

  struct Options {
    std::optional<probes::LocalPort> local;  // unset: this host has no port to probe from
    std::string shared_secret;
    std::string config_file;  // empty: the built-in modules, and /-/reload has nothing to read
    // Shared with the responder of the same port, so a peer's run and ours never overlap.
    std::shared_ptr<probes::ProbeGate> gate = std::make_shared<probes::ProbeGate>();
    // Resolves a target's host for the allowlist, once per request; the run then connects to
    // exactly the addresses the allowlist checked.
    TargetAllowlist::Resolver resolve = resolve_host;
  };

  // Throws std::runtime_error when config_file is set and cannot be loaded.
  explicit ProbeService(Options options, Runner runner = &probes::run_probe);
  ProbeService(const ProbeService&) = delete;
  ProbeService& operator=(const ProbeService&) = delete;

  // Queues a run of the request's module against its target. Its timeout_seconds (the API's)
  // shortens the module's own timeout, never lengthens it, and bounds the whole run from its
  // start.
  std::expected<std::uint64_t, Refusal> submit(const ProbeParams& request);
  // The one call behind /probe: queues a run whose deadline is counted from when the request was
  // `received` (queueing included), and answers with it once it has finished. When `stop` is
  // requested first (the client went away, shutdown) the run is cancelled; when the deadline
  // passes first, it is abandoned as a timeout.
  std::expected<ProbeRun, Refusal> run(const ProbeParams& request,
                                       std::chrono::steady_clock::time_point received,
                                       std::stop_token stop);
  // The run as it is, or once it has finished when that happens within `wait` and before `stop`
  // is requested; unset for an id that is unknown or has left the history.
  std::optional<ProbeRun> get(std::uint64_t id, std::chrono::milliseconds wait,
                              std::stop_token stop = {}) const;
  // Ends a queued or running run early on behalf of its waiter (its deadline passed): it fails
  // with `reason` as its text and kind timeout.
  void abandon(std::uint64_t id, const std::string& reason);
  // Newest first, at most `limit`: queued, running and finished runs.
  std::vector<ProbeRun> recent(std::size_t limit) const;
  // The last finished run per (target, module), oldest first, and the finished-run counts.
  std::vector<ProbeRun> last_results() const;
  std::map<std::pair<std::string, std::string>, std::uint64_t> totals() const;  // (module,result)

  std::shared_ptr<const ProbeConfig> config() const;
  // Re-reads the config file; on error, the text says why and the old configuration stays.
  std::expected<void, std::string> reload();
  // Cancels the running probe, fails every queued one and refuses new ones. Returns once the
  // worker has stopped and every verbs resource is released.
  void shutdown();

 private:
  // What the request asks for, checked against the configuration in force.
  // `waited_from`: when the client that waits on the run asked for it.
  std::expected<RunQueue::Job, Refusal> job(
      const ProbeParams& request,
      std::optional<std::chrono::steady_clock::time_point> waited_from) const;

  TargetAllowlist::Resolver resolve_;
  std::optional<probes::LocalPort> local_;  // where a run's P_Key index is checked
  ConfigStore config_;
  ProbeHistory history_;
  // Last: its worker files runs in the history, so it stops before the history goes.
  RunQueue queue_;
};

}  // namespace ibprobe::exporter
