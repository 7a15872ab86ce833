// The rule tests' view of a check: the problems it found, none when it passed.
#pragma once

#include <expected>
#include <string>
#include <vector>

#include "ibprobe/probes.h"

namespace ibprobe::probes {

template <class T>
std::vector<std::string> violations_of(const std::expected<T, SpecViolations>& checked) {
  return checked ? std::vector<std::string>{} : checked.error().problems;
}

// A spec the test knows to be consistent, as run_probe takes it.
inline ValidSpec valid(const ProbeSpec& spec) {
  return validate(spec).value();
}

}  // namespace ibprobe::probes
