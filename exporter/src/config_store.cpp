#include "config_store.h"

#include <stdexcept>

namespace ibprobe::exporter {

ConfigStore::ConfigStore(std::string file) : file_(std::move(file)) {
  if (file_.empty()) {
    current_ = std::make_shared<const ProbeConfig>(default_probe_config());
    return;
  }
  auto loaded = load_probe_config(file_);
  if (!loaded) throw std::runtime_error(loaded.error());
  current_ = std::make_shared<const ProbeConfig>(*std::move(loaded));
}

std::shared_ptr<const ProbeConfig> ConfigStore::current() const {
  std::lock_guard lock(mutex_);
  return current_;
}

std::expected<void, std::string> ConfigStore::reload() {
  if (file_.empty()) {
    return std::unexpected(std::string(
        "no configuration file was given (--config.file); the built-in modules stay in force"));
  }
  auto loaded = load_probe_config(file_);
  if (!loaded) return std::unexpected(std::move(loaded).error());
  auto config = std::make_shared<const ProbeConfig>(*std::move(loaded));
  std::lock_guard lock(mutex_);
  current_ = std::move(config);
  return {};
}

}  // namespace ibprobe::exporter
