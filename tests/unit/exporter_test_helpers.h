// Pieces the exporter's tests share: the probe configuration parsed with a failure that shows
// the YAML.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "probe_config.h"

namespace ibprobe::testing {

// A configuration the test expects to be accepted; a refusal fails the test and yields an empty
// configuration.
inline exporter::ProbeConfig probe_config_ok(const std::string& yaml) {
  auto parsed = exporter::parse_probe_config(yaml);
  if (!parsed) {
    ADD_FAILURE() << "refused: " << parsed.error() << "\n" << yaml;
    return {};
  }
  return *std::move(parsed);
}

// Why a configuration the test expects to be refused is refused; accepting it fails the test.
inline std::string probe_config_error(const std::string& yaml) {
  auto parsed = exporter::parse_probe_config(yaml);
  if (parsed.has_value()) {
    ADD_FAILURE() << "accepted:\n" << yaml;
    return "";
  }
  return parsed.error();
}

}  // namespace ibprobe::testing
