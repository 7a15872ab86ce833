#include "ibprobe/sweep_run.h"

#include <algorithm>

namespace ibprobe::probes {

bool SweepOutcome::complete() const {
  return steps.size() == sweep.values.size() &&
         std::ranges::all_of(steps, [](const auto& step) { return step.outcome.has_value(); });
}

SweepOutcome run_sweep(const LocalPort& local, const std::string& host, const std::string& port,
                       const ValidSweep& sweep, const RunOptions& options) {
  return run_sweep(sweep, options, [&](const ValidSpec& spec, const RunOptions& step_options) {
    return run_probe(local, host, port, spec, step_options);
  });
}

SweepOutcome run_sweep(const ValidSweep& sweep, const RunOptions& options,
                       const StepRunner& run_step) {
  const auto& specs = sweep.steps();
  SweepOutcome result;
  result.sweep = sweep.sweep();
  std::vector<double> averages;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    SweepStepOutcome step;
    step.value = sweep.sweep().values[i];
    auto step_options = options;
    step_options.deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(specs[i]->timeout_seconds);
    if (options.deadline) {
      step_options.deadline = std::min(*step_options.deadline, *options.deadline);
    }
    if (auto ran = run_step(specs[i], step_options)) {
      step.outcome = std::move(*ran);
      if (const auto& bw = step.outcome->bandwidth) averages.push_back(bw->bytes_per_second);
    } else {
      step.error = std::move(ran.error().message);
      step.failure = ran.error().kind;
    }
    const bool failed = !step.outcome;
    result.steps.push_back(std::move(step));
    // A later step would no longer differ from the others in one variable only: the cause of
    // the failure may still be there.
    if (failed) break;
  }
  // Over the steps that succeeded: they all came before any failure.
  if (sweep.sweep().base.test == TestKind::kBandwidth) {
    result.knee = find_knee(averages, sweep.sweep().knee_threshold);
  }
  return result;
}

}  // namespace ibprobe::probes
