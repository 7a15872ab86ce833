// The probes waiting for the exporter's probe port and the one running on it: one run at a time
// (probes disturb each other's figures), a bounded queue behind it, one worker thread. However a
// run ends, it is filed in the history.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <expected>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "ibprobe/sweep.h"
#include "ibprobe/verbs_probe.h"
#include "probe_history.h"
#include "probe_request.h"
#include "probe_run.h"

namespace ibprobe::exporter {

class RunQueue {
 public:
  using Runner = std::function<std::expected<probes::ProbeOutcome, probes::Error>(
      const probes::LocalPort&, const std::string& host, const std::string& port,
      const probes::ValidSpec&, const probes::RunOptions&)>;

  struct Options {
    std::optional<probes::LocalPort> local;  // unset: this host has no port to probe from
    std::string shared_secret;
    // Shared with the responder of the same port, so a peer's run and ours never overlap.
    std::shared_ptr<probes::ProbeGate> gate;
  };

  // A run as it was asked for and checked, fixed when it is queued.
  struct Job {
    std::string target;  // HOST:PORT as asked
    std::string host;
    std::string port;
    std::string module;
    ProbeModule resolved;  // the module with this run's timeout applied
    // What runs, validated when the job was made: the resolved module's spec, and for a sweep
    // module its sweep with every step. A violation is the run's failure ("rejected").
    std::expected<probes::ValidSpec, probes::SpecViolations> spec;
    std::optional<std::expected<probes::ValidSweep, probes::SpecViolations>> sweep;
    // The host's addresses as the allowlist resolved them, or why they did not resolve; unset
    // when the allowlist needed none, and the run resolves the host.
    std::optional<probes::Resolution> addresses;
    // The longest the whole run may take: the client's timeout or the module's budget (its
    // timeout for each sweep step or suite case), whichever is shorter.
    std::chrono::steady_clock::duration allowance{};
    // When the client that waits on the run (/probe) asked for it: its allowance counts from
    // then, queueing included. Unset for the asynchronous API: it counts from the run's start.
    std::optional<std::chrono::steady_clock::time_point> waited_from;
    std::size_t queue_length = 0;  // runs that may wait behind the running one
    std::optional<AlertTrigger> trigger = std::nullopt;

    // The run's deadline, for a run that starts at `start`: every wait of the run, of the port
    // gate before it and of its waiting client ends by then. The one place it is computed.
    std::chrono::steady_clock::time_point deadline(
        std::chrono::steady_clock::time_point start) const {
      return waited_from.value_or(start) + allowance;
    }
  };

  RunQueue(Options options, Runner runner, ProbeHistory& history);
  ~RunQueue();
  RunQueue(const RunQueue&) = delete;
  RunQueue& operator=(const RunQueue&) = delete;

  // Queues the job, or says why not (shutting down, no port to probe from, the queue is full).
  std::expected<std::uint64_t, Refusal> submit(Job job);
  // Queues the job and answers with its run once it has finished. When `stop` is requested first
  // (the client went away, shutdown) the run is cancelled; when the job's deadline passes first,
  // it is abandoned as a timeout.
  std::expected<ProbeRun, Refusal> run(Job job, std::stop_token stop);
  // A queued or running run as it is, or once it has finished when that happens within `wait`
  // and before `stop` is requested; unset for an id that is neither queued nor running.
  std::optional<ProbeRun> get(std::uint64_t id, std::chrono::milliseconds wait,
                              std::stop_token stop) const;
  // Ends a queued or running run early on behalf of its waiter (its deadline passed): it fails
  // with `reason` as its text and kind timeout.
  void abandon(std::uint64_t id, const std::string& reason);
  // The runs queued or running, by id.
  std::vector<ProbeRun> active() const;
  // Cancels the running probe, fails every queued one and refuses new ones. Returns once the
  // worker has stopped and every verbs resource is released.
  void shutdown();

 private:
  struct Entry {
    ProbeRun run;
    Job job;
    std::stop_source stop;
    // Why stop was requested, as the run's failure shows it (timeout or cancelled, and the
    // words); unset: it was not.
    std::optional<probes::Error> stopped_by;
  };
  // What a run came to: its outcome or sweep (a sweep may be incomplete), else its error.
  struct Result {
    std::optional<probes::ProbeOutcome> outcome;
    std::optional<probes::SweepOutcome> sweep;
    std::optional<probes::Error> error;
  };

  std::expected<std::shared_ptr<Entry>, Refusal> queue(Job job);
  // Called with the lock held: ends a queued run now, asks a running one to stop.
  void stop_run(const std::shared_ptr<Entry>& entry, probes::Error why,
                std::unique_lock<std::mutex>& lock);
  // Called with the lock held: the run has its failure or outcome; it moves to the history.
  void finish(const std::shared_ptr<Entry>& entry, std::unique_lock<std::mutex>& lock);
  void work();
  // The run itself, without the lock.
  Result execute(Entry& entry);

  Options options_;
  Runner runner_;
  ProbeHistory& history_;
  mutable std::mutex mutex_;
  mutable std::condition_variable_any changed_;
  std::uint64_t next_id_ = 1;
  bool stopping_ = false;
  std::deque<std::shared_ptr<Entry>> waiting_;
  std::shared_ptr<Entry> running_;
  std::map<std::uint64_t, std::shared_ptr<Entry>> active_;  // waiting and running
  std::thread worker_;
};

}  // namespace ibprobe::exporter
