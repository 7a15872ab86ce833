#include "ibprobe/sweep.h"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <limits>

#include "ibprobe/enum_names.h"

namespace ibprobe::probes {
namespace {

constexpr EnumNames<SweepVariable, 7> kSweepVariableNames{
    {{SweepVariable::kMessageSize, "message_size"},
     {SweepVariable::kTxDepth, "tx_depth"},
     {SweepVariable::kQps, "qps"},
     {SweepVariable::kPostList, "post_list"},
     {SweepVariable::kMtu, "mtu"},
     {SweepVariable::kInlineSize, "inline_size"},
     {SweepVariable::kRateLimit, "rate_limit"}}};

// Steps of one sweep at most: each is a whole probe run, and a sweep holds the port throughout.
constexpr std::size_t kMaxSteps = 32;
constexpr std::uint32_t kPerftestLargestSizeExponent = 23;

bool whole(double value, double max) {
  return value >= 0 && value <= max && std::floor(value) == value;
}

// The value as the field's type; validate() has checked that it fits.
void apply(ProbeSpec& spec, SweepVariable variable, double value) {
  const auto u32 = static_cast<std::uint32_t>(value);
  switch (variable) {
    case SweepVariable::kMessageSize:
      spec.message_size = static_cast<std::uint64_t>(value);
      return;
    case SweepVariable::kTxDepth:
      spec.tx_depth = u32;
      return;
    case SweepVariable::kQps:
      spec.qps = u32;
      return;
    case SweepVariable::kPostList:
      spec.post_list = u32;
      return;
    case SweepVariable::kMtu:
      spec.mtu = u32;
      return;
    case SweepVariable::kInlineSize:
      spec.inline_size = u32;
      return;
    case SweepVariable::kRateLimit:
      spec.rate_limit->value = value;
      return;
  }
}

}  // namespace

std::string_view to_string(SweepVariable variable) {
  return name_of(kSweepVariableNames, variable);
}

std::optional<SweepVariable> parse_sweep_variable(std::string_view text) {
  return value_named(kSweepVariableNames, text);
}

std::string sweep_variable_names() {
  return names_listed(kSweepVariableNames);
}

std::vector<double> perftest_all_sizes() {
  std::vector<double> sizes;
  for (std::uint32_t exponent = 1; exponent <= kPerftestLargestSizeExponent; ++exponent) {
    sizes.push_back(static_cast<double>(std::uint64_t{1} << exponent));
  }
  return sizes;
}

std::expected<ValidSweep, SpecViolations> validate(SweepSpec sweep) {
  std::vector<std::string> out;
  const auto name = std::string(to_string(sweep.variable));
  if (sweep.values.size() < 2) {
    out.push_back("a sweep over " + name + " needs at least two values");
  } else if (sweep.values.size() > kMaxSteps) {
    out.push_back(fmt::format("a sweep over {} has {} values, more than the {} allowed", name,
                              sweep.values.size(), kMaxSteps));
  }
  if (!(sweep.knee_threshold > 0) || !std::isfinite(sweep.knee_threshold)) {
    out.push_back("knee_threshold must be a positive fraction");
  }
  if (sweep.variable == SweepVariable::kRateLimit && !sweep.base.rate_limit) {
    out.push_back("a sweep over rate_limit needs the module's rate limit unit and limiter");
  }
  if (!out.empty()) return std::unexpected(SpecViolations{std::move(out)});
  const double max = sweep.variable == SweepVariable::kMessageSize
                         ? static_cast<double>(std::numeric_limits<std::uint64_t>::max())
                         : static_cast<double>(std::numeric_limits<std::uint32_t>::max());
  std::vector<ValidSpec> steps;
  for (std::size_t i = 0; i < sweep.values.size(); ++i) {
    const double value = sweep.values[i];
    const std::string step = fmt::format("step {} ({}={})", i, name, value);
    if (sweep.variable == SweepVariable::kRateLimit ? !(value > 0) || !std::isfinite(value)
                                                    : !whole(value, max)) {
      out.push_back(step + ": not a valid value for " + name);
      continue;
    }
    ProbeSpec spec = sweep.base;
    apply(spec, sweep.variable, value);
    auto valid = probes::validate(std::move(spec));
    if (valid) {
      steps.push_back(*std::move(valid));
      continue;
    }
    for (const auto& problem : valid.error().problems) out.push_back(step + ": " + problem);
  }
  if (!out.empty()) return std::unexpected(SpecViolations{std::move(out)});
  return ValidSweep(std::move(sweep), std::move(steps));
}

std::optional<std::size_t> find_knee(std::span<const double> bandwidth_averages, double threshold) {
  for (std::size_t i = 0; i + 1 < bandwidth_averages.size(); ++i) {
    if (bandwidth_averages[i + 1] < bandwidth_averages[i] * (1 + threshold)) return i;
  }
  return std::nullopt;
}

}  // namespace ibprobe::probes
