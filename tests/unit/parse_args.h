// Runs the exporter's flag parser on a command line written as a list, as main() would see it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ibprobe/exporter.h"

namespace ibprobe::testing {

inline std::optional<int> parse_args(std::vector<std::string> args, exporter::Config& config) {
  args.insert(args.begin(), "ibprobe_exporter");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  return exporter::parse_flags(static_cast<int>(argv.size()), argv.data(), config);
}

}  // namespace ibprobe::testing
