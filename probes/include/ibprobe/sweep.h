// A sweep: one probe run per step, the steps differing in exactly one variable, so that what
// changes between two results can be attributed to that variable. Hardware-free: the plan of
// the steps and the knee of their figures.
#pragma once

#include <cstdint>
#include <expected>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ibprobe/probes.h"

namespace ibprobe::probes {

enum class SweepVariable {
  kMessageSize,
  kTxDepth,
  kQps,
  kPostList,
  kMtu,
  kInlineSize,
  kRateLimit,  // the value of the base spec's rate limit, in its unit and by its limiter
};
// The spelling of each variable in modules, the API and the `variable` label: the ProbeSpec
// field's own name.
std::string_view to_string(SweepVariable variable);
std::optional<SweepVariable> parse_sweep_variable(std::string_view text);
// Every variable's name, for error messages.
std::string sweep_variable_names();

struct SweepSpec {
  ProbeSpec base;  // everything the steps share
  SweepVariable variable = SweepVariable::kMessageSize;
  // One step per value, in the order given. Whole numbers except for a rate limit.
  std::vector<double> values;
  // The knee is the first step after which BW average rises by less than this fraction.
  double knee_threshold = 0.05;

  bool operator==(const SweepSpec&) const = default;
};

// perftest's -a: message sizes 2^1 .. 2^23 bytes.
std::vector<double> perftest_all_sizes();

// A sweep validate() accepted, with the spec of each step: the base with the variable set to
// that step's value, each step validated.
class ValidSweep {
 public:
  const SweepSpec& sweep() const { return sweep_; }
  const std::vector<ValidSpec>& steps() const { return steps_; }

 private:
  ValidSweep(SweepSpec sweep, std::vector<ValidSpec> steps)
      : sweep_(std::move(sweep)), steps_(std::move(steps)) {}
  friend std::expected<ValidSweep, SpecViolations> validate(SweepSpec sweep);
  SweepSpec sweep_;
  std::vector<ValidSpec> steps_;
};

// The sweep when it can run, else every rule it breaks (its own and those of each step's spec,
// the step named).
std::expected<ValidSweep, SpecViolations> validate(SweepSpec sweep);

// The index of the first step after which the next step's BW average rises by less than
// `threshold` (a fraction of the step's own); unset when every step rises by more, or with
// fewer than two steps.
std::optional<std::size_t> find_knee(std::span<const double> bandwidth_averages, double threshold);

}  // namespace ibprobe::probes
