// Finished probe runs, kept apart from the runs still queued or running (as blackbox_exporter's
// prober/history.go keeps recent results apart from its probers): the newest runs by id for the
// API, the last run of each (target, module) for /metrics, and the finished-run counts.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config_store.h"
#include "probe_run.h"

namespace ibprobe::exporter {

class ProbeHistory {
 public:
  // Keeps the configuration's history_length successful runs and as many failed ones, as it is
  // when each run is added.
  explicit ProbeHistory(const ConfigStore& config) : config_(config) {}

  // Files a finished run.
  void add(const ProbeRun& run);
  std::optional<ProbeRun> find(std::uint64_t id) const;
  // Newest first, at most `limit`.
  std::vector<ProbeRun> recent(std::size_t limit) const;
  // The last run per (target, module), oldest first.
  std::vector<ProbeRun> last_results() const;
  // Finished runs per (module, result).
  std::map<std::pair<std::string, std::string>, std::uint64_t> totals() const;

 private:
  using Key = std::pair<std::string, std::string>;

  const ConfigStore& config_;
  mutable std::mutex mutex_;
  std::map<std::uint64_t, std::shared_ptr<const ProbeRun>> runs_;  // by id, oldest first
  // Finished runs by outcome, the first to leave when its half of the history is full.
  std::deque<std::uint64_t> succeeded_order_;
  std::deque<std::uint64_t> failed_order_;
  std::map<Key, std::shared_ptr<const ProbeRun>> last_;  // by (target, module)
  std::deque<Key> last_order_;
  std::map<Key, std::uint64_t> totals_;  // by (module, result)
};

}  // namespace ibprobe::exporter
