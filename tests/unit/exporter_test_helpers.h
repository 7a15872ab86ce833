// Pieces the exporter's tests share: routes over a fake one-port tree, and the probe
// configuration parsed with a failure that shows the YAML.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>

#include "collect_helpers.h"
#include "ibprobe/exporter.h"
#include "probe_config.h"
#include "sysfs_fixture.h"

namespace ibprobe::testing {

// The exporter's configuration and scraper over a tree with one mlx5 port, for tests that build
// exporter::Routes on them.
class OnePortExporterTest : public ::testing::Test {
 protected:
  OnePortExporterTest() {
    tree_.add(mlx5_ib_device("mlx5_0", 1, 0));
    config_.telemetry_path = "/metrics";
    scraper_ = scraper_over(tree_.root(), "port_counters");
  }

  SysfsTree tree_;
  exporter::Config config_;
  std::unique_ptr<collectors::Scraper> scraper_;
};

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
