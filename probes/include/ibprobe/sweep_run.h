// Running a sweep for real: one probe per step against the same responder, in order.
#pragma once

#include <expected>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ibprobe/sweep.h"
#include "ibprobe/verbs_probe.h"

namespace ibprobe::probes {

struct SweepStepOutcome {
  double value = 0;  // the swept variable's value at this step
  std::optional<ProbeOutcome> outcome;
  // A step that failed: why, and its class; the sweep stops there.
  std::string error;
  FailureKind failure = FailureKind::kInternal;
};

struct SweepOutcome {
  SweepSpec sweep;
  std::vector<SweepStepOutcome> steps;  // those run, in order
  // find_knee() over the BW averages of the steps that ran (bandwidth sweeps).
  std::optional<std::size_t> knee;
  bool complete() const;  // every step ran and succeeded
};

// Runs each step's spec with `run_step` in order; a step that fails ends the sweep, reported in
// its step. Each step gets `options` with its own deadline: its timeout from its start, and never
// beyond options.deadline, the sweep's, when there is one.
using StepRunner =
    std::function<std::expected<ProbeOutcome, Error>(const ValidSpec&, const RunOptions&)>;
SweepOutcome run_sweep(const ValidSweep& sweep, const RunOptions& options,
                       const StepRunner& run_step);

// The same with run_probe against one responder, every resource released after each step.
SweepOutcome run_sweep(const LocalPort& local, const std::string& host, const std::string& port,
                       const ValidSweep& sweep, const RunOptions& options = {});

}  // namespace ibprobe::probes
