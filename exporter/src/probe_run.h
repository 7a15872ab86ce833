// A probe run as the exporter keeps it, from its submission to its place in the history, and the
// answer to a request that could not be queued.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ibprobe/sweep_run.h"
#include "ibprobe/verbs_probe.h"
#include "probe_config.h"
#include "probe_request.h"

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
  std::optional<AlertTrigger> trigger = std::nullopt;  // the alert this run answers

  bool succeeded() const { return sweep ? sweep->complete() : outcome.has_value(); }
  bool done() const { return state == RunState::kSucceeded || state == RunState::kFailed; }
};

// Why a request was not queued, as the HTTP layer should answer it: the one error of the probe
// scheduler's boundary.
struct Refusal {
  int status = 400;  // 400 bad request, 403 target not allowed, 429 queue full, 503 unavailable
  std::string code;  // stable, machine-readable: bad_target, unknown_module, ...
  std::string message;
  std::optional<int> retry_after_seconds;
};

}  // namespace ibprobe::exporter
