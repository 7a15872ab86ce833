// The probe configuration in force: modules, allowlist and scheduler bounds, built in or read from
// --config.file, and replaced whole by a reload, so a run keeps the configuration it was queued
// under.
#pragma once

#include <expected>
#include <memory>
#include <mutex>
#include <string>

#include "probe_config.h"

namespace ibprobe::exporter {

class ConfigStore {
 public:
  // The built-in modules when `file` is empty. Throws std::runtime_error when the file cannot be
  // loaded: there is no configuration to start with.
  explicit ConfigStore(std::string file);

  std::shared_ptr<const ProbeConfig> current() const;
  // Re-reads the file; on error, the text says why and the configuration in force stays.
  std::expected<void, std::string> reload();

 private:
  const std::string file_;
  mutable std::mutex mutex_;
  std::shared_ptr<const ProbeConfig> current_;
};

}  // namespace ibprobe::exporter
