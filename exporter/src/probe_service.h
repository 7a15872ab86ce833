// The probe scheduler behind /probe and the async API: one probe at a time on the exporter's
// probe port (probes disturb each other's figures), a bounded queue behind it, a bounded history
// of finished runs, and the last result per (target, module) for /metrics.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "ibprobe/sweep_run.h"
#include "ibprobe/verbs_probe.h"
#include "probe_config.h"
#include "target_allowlist.h"

namespace ibprobe::exporter {

enum class RunState { kQueued, kRunning, kSucceeded, kFailed };
std::string_view to_string(RunState state);

struct ProbeRun {
  std::uint64_t id = 0;
  std::string target;  // HOST:PORT as asked
  std::string module;
  ProbeModule resolved;  // the module with this run's timeout applied
  RunState state = RunState::kQueued;
  std::chrono::system_clock::time_point submitted;
  std::chrono::system_clock::time_point started;
  std::chrono::system_clock::time_point finished;
  double duration_seconds = 0;  // start of the run to its end, queueing excluded
  std::optional<probes::ProbeOutcome> outcome;
  // A sweep module's run: every step that ran, and the knee. A sweep succeeds when every step
  // did; `outcome` stays unset.
  std::optional<probes::SweepOutcome> sweep;
  std::string failure_reason;  // a FailureKind name, "queue_timeout" or "bad_target"
  std::string failure;         // what went wrong, in words

  bool succeeded() const { return sweep ? sweep->complete() : outcome.has_value(); }
};

// Why a request was not queued, as the HTTP layer should answer it.
struct Refusal {
  int status = 400;  // 400 bad request, 403 target not allowed, 429 queue full, 503 unavailable
  std::string code;  // stable, machine-readable: bad_target, unknown_module, ...
  std::string message;
  std::optional<int> retry_after_seconds;
};

// Splits "HOST:PORT", "[V6]:PORT" or a bare "HOST" (the responder's default port 9471). Returns
// {host, port} or the reason the text is not a target.
std::variant<std::pair<std::string, std::string>, std::string> parse_target(
    const std::string& target);

class ProbeService {
 public:
  using Runner = std::function<probes::ProbeOutcome(
      const probes::LocalPort&, const std::string& host, const std::string& port,
      const probes::ProbeSpec&, const probes::RunOptions&)>;

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
  ~ProbeService();
  ProbeService(const ProbeService&) = delete;
  ProbeService& operator=(const ProbeService&) = delete;

  // Queues a run of `module` against `target`. `timeout_seconds` (a scrape's timeout, or the
  // API's) shortens the module's own timeout, never lengthens it.
  std::variant<std::uint64_t, Refusal> submit(const std::string& target, const std::string& module,
                                              std::optional<double> timeout_seconds);
  // The one call behind /probe: queues a run whose deadline is counted from now (queueing
  // included), and answers with it once it has finished. When `stop` is requested first (the
  // client went away, shutdown) the run is cancelled; when the deadline passes first, it is
  // abandoned as a timeout.
  std::variant<ProbeRun, Refusal> run(const std::string& target, const std::string& module,
                                      std::optional<double> timeout_seconds, std::stop_token stop);
  // The run as it is, or once it has finished when that happens within `wait` and before `stop`
  // is requested; unset for an id that is unknown or has left the history.
  std::optional<ProbeRun> get(std::uint64_t id, std::chrono::milliseconds wait,
                              std::stop_token stop = {}) const;
  // Ends a queued or running run early on behalf of its waiter (its deadline passed): it fails
  // with `reason` as its text and kind timeout.
  void abandon(std::uint64_t id, const std::string& reason);
  // Newest first, at most `limit`.
  std::vector<ProbeRun> recent(std::size_t limit) const;
  // The last finished run per (target, module), oldest first, and the finished-run counts.
  std::vector<ProbeRun> last_results() const;
  std::map<std::pair<std::string, std::string>, std::uint64_t> totals() const;  // (module,result)

  std::shared_ptr<const ProbeConfig> config() const;
  // Re-reads the config file; on error, the text says why and the old configuration stays.
  std::optional<std::string> reload();
  // Cancels the running probe, fails every queued one and refuses new ones. Returns once the
  // worker has stopped and every verbs resource is released.
  void shutdown();

 private:
  struct Entry {
    ProbeRun run;
    // The host's addresses as the allowlist resolved them at submission, or why it did not
    // resolve; unset when the allowlist needed no addresses, and the run resolves it.
    std::optional<std::variant<std::vector<probes::IpAddress>, std::string>> resolved;
    // Set at submission for a run its client waits on; else the module's timeout from its start.
    std::optional<std::chrono::steady_clock::time_point> deadline;
    std::stop_source stop;
    // Why stop was requested, as the run's failure shows it: reason (timeout, cancelled), text.
    std::string stop_reason;
    std::string stop_text;
  };

  std::variant<std::shared_ptr<Entry>, Refusal> queue(const std::string& target,
                                                      const std::string& module,
                                                      std::optional<double> timeout_seconds,
                                                      bool deadline_from_now);
  // Called with the lock held: ends a queued run now, asks a running one to stop.
  void stop_run(const std::shared_ptr<Entry>& entry, std::string reason, std::string text,
                std::unique_lock<std::mutex>& lock);
  void work();
  void finish(Entry& entry, std::unique_lock<std::mutex>& lock);
  void remember(const std::shared_ptr<Entry>& entry);

  Options options_;
  Runner runner_;
  mutable std::mutex mutex_;
  mutable std::condition_variable_any changed_;
  std::shared_ptr<const ProbeConfig> config_;
  std::uint64_t next_id_ = 1;
  bool stopping_ = false;
  std::deque<std::shared_ptr<Entry>> queue_;
  std::shared_ptr<Entry> running_;
  std::map<std::uint64_t, std::shared_ptr<Entry>> runs_;  // queued, running and history
  std::deque<std::uint64_t> history_;                     // finished ids, oldest first
  std::map<std::pair<std::string, std::string>, std::shared_ptr<const Entry>> last_;
  std::deque<std::pair<std::string, std::string>> last_order_;
  std::map<std::pair<std::string, std::string>, std::uint64_t> totals_;
  std::thread worker_;
};

}  // namespace ibprobe::exporter
