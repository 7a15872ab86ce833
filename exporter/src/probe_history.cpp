#include "probe_history.h"

namespace ibprobe::exporter {
namespace {

// Distinct (target, module) pairs kept for /metrics; past this the oldest pair is dropped, so a
// stream of made-up targets cannot grow the process (the allowlist bounds them in production).
constexpr std::size_t kMaxLastResults = 1024;

}  // namespace

void ProbeHistory::add(const ProbeRun& run) {
  const auto history_length = config_.current()->history_length;
  auto kept = std::make_shared<const ProbeRun>(run);
  std::lock_guard lock(mutex_);
  ++totals_[{run.module, run.succeeded() ? "success" : "failure"}];
  runs_.emplace(run.id, kept);
  // Successes and failures each keep history_length places: a stream of healthy runs does not
  // push out the failure someone is about to look at.
  auto& order = run.succeeded() ? succeeded_order_ : failed_order_;
  order.push_back(run.id);
  while (order.size() > history_length) {
    runs_.erase(order.front());
    order.pop_front();
  }
  const Key key{run.target, run.module};
  if (last_.insert_or_assign(key, std::move(kept)).second) {
    last_order_.push_back(key);
    if (last_order_.size() > kMaxLastResults) {
      last_.erase(last_order_.front());
      last_order_.pop_front();
    }
  }
}

std::optional<ProbeRun> ProbeHistory::find(std::uint64_t id) const {
  std::lock_guard lock(mutex_);
  const auto found = runs_.find(id);
  if (found == runs_.end()) return std::nullopt;
  return *found->second;
}

std::vector<ProbeRun> ProbeHistory::recent(std::size_t limit) const {
  std::lock_guard lock(mutex_);
  std::vector<ProbeRun> out;
  for (auto it = runs_.rbegin(); it != runs_.rend() && out.size() < limit; ++it) {
    out.push_back(*it->second);
  }
  return out;
}

std::vector<ProbeRun> ProbeHistory::last_results() const {
  std::lock_guard lock(mutex_);
  std::vector<ProbeRun> out;
  for (const auto& key : last_order_) out.push_back(*last_.at(key));
  return out;
}

std::map<std::pair<std::string, std::string>, std::uint64_t> ProbeHistory::totals() const {
  std::lock_guard lock(mutex_);
  return totals_;
}

}  // namespace ibprobe::exporter
