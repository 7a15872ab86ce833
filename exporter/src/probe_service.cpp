#include "probe_service.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>

namespace ibprobe::exporter {
namespace {

// The longest a run of the module may take: its timeout for each step of a sweep and for each
// case of a verification suite, one timeout otherwise.
std::uint64_t budget_seconds(const ProbeModule& module) {
  std::size_t runs = 1;
  if (module.sweep) runs = module.sweep->values.size();
  if (!module.verify_cases.empty()) runs = module.verify_cases.size();
  return module.spec.timeout_seconds * std::max<std::size_t>(runs, 1);
}

constexpr const char* kDefaultResponderPort = "9471";
// Distinct (target, module) pairs kept for /metrics; past this the oldest pair is dropped, so a
// stream of made-up targets cannot grow the process (the allowlist bounds them in production).
constexpr std::size_t kMaxLastResults = 1024;
// DNS names are at most 253 characters.
constexpr std::size_t kMaxHostLength = 253;

bool valid_host(const std::string& host) {
  if (host.empty() || host.size() > kMaxHostLength) return false;
  return std::all_of(host.begin(), host.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ||
           c == ':';
  });
}

bool valid_port(const std::string& port) {
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  return ec == std::errc() && end == port.data() + port.size() && value >= 1 && value <= 65535;
}

}  // namespace

std::string_view to_string(RunState state) {
  switch (state) {
    case RunState::kQueued:
      return "queued";
    case RunState::kRunning:
      return "running";
    case RunState::kSucceeded:
      return "succeeded";
    case RunState::kFailed:
      break;
  }
  return "failed";
}

std::variant<std::pair<std::string, std::string>, std::string> parse_target(
    const std::string& target) {
  std::string host = target, port = kDefaultResponderPort;
  if (target.starts_with("[")) {
    const auto close = target.find(']');
    if (close == std::string::npos) return "target '" + target + "': unterminated IPv6 bracket";
    host = target.substr(1, close - 1);
    const auto rest = target.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return "target '" + target + "': expected :PORT after ]";
      port = rest.substr(1);
    }
  } else if (const auto colon = target.rfind(':'); colon != std::string::npos) {
    if (target.find(':') != colon) {
      return "target '" + target + "': write IPv6 addresses in brackets, e.g. [fd00::1]:9471";
    }
    host = target.substr(0, colon);
    port = target.substr(colon + 1);
  }
  if (!valid_host(host)) {
    return "target '" + target + "': host must be a name or address of at most " +
           std::to_string(kMaxHostLength) + " characters";
  }
  if (!valid_port(port)) return "target '" + target + "': port must be 1-65535";
  return std::pair{host, port};
}

ProbeService::ProbeService(Options options, Runner runner)
    : options_(std::move(options)), runner_(std::move(runner)) {
  if (options_.config_file.empty()) {
    config_ = std::make_shared<const ProbeConfig>(default_probe_config());
  } else {
    auto loaded = load_probe_config(options_.config_file);
    if (auto* error = std::get_if<std::string>(&loaded)) throw std::runtime_error(*error);
    config_ = std::make_shared<const ProbeConfig>(std::get<ProbeConfig>(std::move(loaded)));
  }
  worker_ = std::thread([this] { work(); });
}

ProbeService::~ProbeService() {
  shutdown();
}

std::shared_ptr<const ProbeConfig> ProbeService::config() const {
  std::lock_guard lock(mutex_);
  return config_;
}

std::optional<std::string> ProbeService::reload() {
  if (options_.config_file.empty()) {
    return std::string(
        "no configuration file was given (--config.file); the built-in modules "
        "stay in force");
  }
  auto loaded = load_probe_config(options_.config_file);
  if (auto* error = std::get_if<std::string>(&loaded)) return *error;
  auto config = std::make_shared<const ProbeConfig>(std::get<ProbeConfig>(std::move(loaded)));
  std::lock_guard lock(mutex_);
  config_ = std::move(config);
  return std::nullopt;
}

std::variant<std::uint64_t, Refusal> ProbeService::submit(const std::string& target,
                                                          const std::string& module_name,
                                                          std::optional<double> timeout_seconds) {
  auto queued = queue(target, module_name, timeout_seconds, false);
  if (auto* refusal = std::get_if<Refusal>(&queued)) return std::move(*refusal);
  return std::get<std::shared_ptr<Entry>>(queued)->run.id;
}

std::variant<std::shared_ptr<ProbeService::Entry>, Refusal> ProbeService::queue(
    const std::string& target, const std::string& module_name,
    std::optional<double> timeout_seconds, bool deadline_from_now) {
  const auto submitted = std::chrono::steady_clock::now();
  const auto config = this->config();
  if (module_name.empty()) return Refusal{400, "missing_module", "module parameter is missing", {}};
  const auto module = config->modules.find(module_name);
  if (module == config->modules.end()) {
    std::vector<std::string> names;
    for (const auto& [name, _] : config->modules) names.push_back(name);
    return Refusal{400,
                   "unknown_module",
                   "unknown module '" + module_name +
                       "' (configured: " + fmt::to_string(fmt::join(names, "; ")) + ")",
                   {}};
  }
  if (target.empty()) return Refusal{400, "missing_target", "target parameter is missing", {}};
  const auto parsed = parse_target(target);
  if (const auto* error = std::get_if<std::string>(&parsed)) {
    return Refusal{400, "bad_target", *error, {}};
  }
  // Resolved once: the addresses the allowlist judges are the ones the run connects to.
  std::optional<std::variant<std::vector<probes::IpAddress>, std::string>> addresses;
  if (config->allowlist) {
    if (const auto refused =
            config->allowlist->refuse(std::get<0>(parsed).first, [&](const std::string& name) {
              addresses = options_.resolve(name);
              return *addresses;
            })) {
      return Refusal{403, "target_not_allowed", *refused, {}};
    }
  }
  ProbeModule resolved = module->second;
  if (timeout_seconds) {
    if (!std::isfinite(*timeout_seconds) || *timeout_seconds < 1) {
      return Refusal{400, "bad_timeout", "timeout must be at least 1 second", {}};
    }
    const auto whole = static_cast<std::uint32_t>(
        std::min<double>(std::floor(*timeout_seconds), resolved.spec.timeout_seconds));
    resolved.spec.timeout_seconds = whole;
    // A sweep's steps each get at most the whole; the waiter's deadline ends the sweep.
    if (resolved.sweep) resolved.sweep->base.timeout_seconds = whole;
    if (const auto problems = probes::validate(resolved.spec); !problems.empty()) {
      return Refusal{400,
                     "timeout_too_short",
                     "a timeout of " + std::to_string(whole) + " s does not fit module '" +
                         module_name + "': " + fmt::to_string(fmt::join(problems, "; ")),
                     {}};
    }
  }

  std::lock_guard lock(mutex_);
  if (stopping_) {
    return Refusal{503, "shutting_down", "the exporter is shutting down", 5};
  }
  if (!options_.local) {
    return Refusal{503,
                   "no_probe_port",
                   "this host has no ACTIVE RDMA port to probe from (see --probe.device)",
                   {}};
  }
  // queue_ also holds, for a moment, the run the worker is about to start: with nothing running
  // its head is not waiting, so queue_length 0 still lets one run through.
  if (queue_.size() + (running_ ? 1 : 0) > config->queue_length) {
    // The queue drains at one run per module timeout at worst.
    const int retry = static_cast<int>(resolved.spec.timeout_seconds);
    return Refusal{429, "queue_full",
                   std::to_string(queue_.size()) + " probes are already waiting (queue_length " +
                       std::to_string(config->queue_length) + ")",
                   retry};
  }
  auto entry = std::make_shared<Entry>();
  entry->resolved = std::move(addresses);
  if (deadline_from_now) {
    entry->deadline =
        submitted +
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::duration<double>(
                timeout_seconds ? std::min<double>(*timeout_seconds, budget_seconds(module->second))
                                : budget_seconds(module->second)));
  }
  entry->run.id = next_id_++;
  entry->run.target = target;
  entry->run.module = module_name;
  entry->run.resolved = std::move(resolved);
  entry->run.submitted = std::chrono::system_clock::now();
  runs_.emplace(entry->run.id, entry);
  queue_.push_back(entry);
  changed_.notify_all();
  return entry;
}

std::variant<ProbeRun, Refusal> ProbeService::run(const std::string& target,
                                                  const std::string& module,
                                                  std::optional<double> timeout_seconds,
                                                  std::stop_token stop) {
  // Beyond the deadline, a run that was told to stop has this long to say it has.
  constexpr auto kStopGrace = std::chrono::seconds(15);
  auto queued = queue(target, module, timeout_seconds, true);
  if (auto* refusal = std::get_if<Refusal>(&queued)) return std::move(*refusal);
  const auto entry = std::get<std::shared_ptr<Entry>>(std::move(queued));
  const auto finished = [&entry] {
    return entry->run.state == RunState::kSucceeded || entry->run.state == RunState::kFailed;
  };
  std::unique_lock lock(mutex_);
  if (!changed_.wait_until(lock, stop, *entry->deadline, finished)) {
    if (stop.stop_requested()) {
      stop_run(entry, "cancelled", "the client went away before the probe finished", lock);
    } else {
      stop_run(entry, "timeout", "the probe did not finish within its timeout", lock);
    }
    changed_.wait_until(lock, std::chrono::steady_clock::now() + kStopGrace, finished);
  }
  ProbeRun run = entry->run;
  if (!finished()) {
    // Still going after the stop and its grace: answer for it now; it ends on its own.
    run.outcome.reset();
    run.sweep.reset();
    run.failure_reason = "timeout";
    run.failure = "the probe did not stop within 15 s of its deadline";
  }
  return run;
}

std::optional<ProbeRun> ProbeService::get(std::uint64_t id, std::chrono::milliseconds wait,
                                          std::stop_token stop) const {
  std::unique_lock lock(mutex_);
  const auto found = runs_.find(id);
  if (found == runs_.end()) return std::nullopt;
  // Held here, so the run stays readable should it leave the history meanwhile.
  const auto entry = found->second;
  changed_.wait_until(lock, stop, std::chrono::steady_clock::now() + wait, [&entry] {
    return entry->run.state == RunState::kSucceeded || entry->run.state == RunState::kFailed;
  });
  return entry->run;
}

void ProbeService::abandon(std::uint64_t id, const std::string& reason) {
  std::unique_lock lock(mutex_);
  const auto found = runs_.find(id);
  if (found == runs_.end()) return;
  stop_run(found->second, "timeout", reason, lock);
}

void ProbeService::stop_run(const std::shared_ptr<Entry>& entry, std::string reason,
                            std::string text, std::unique_lock<std::mutex>& lock) {
  if (entry->run.state == RunState::kQueued) {
    std::erase(queue_, entry);
    entry->run.failure_reason = std::move(reason);
    entry->run.failure = std::move(text);
    finish(*entry, lock);
    remember(entry);
  } else if (entry->run.state == RunState::kRunning && !entry->stop.stop_requested()) {
    entry->stop_reason = std::move(reason);
    entry->stop_text = std::move(text);
    entry->stop.request_stop();
  }
}

std::vector<ProbeRun> ProbeService::recent(std::size_t limit) const {
  std::lock_guard lock(mutex_);
  std::vector<ProbeRun> out;
  for (auto it = runs_.rbegin(); it != runs_.rend() && out.size() < limit; ++it) {
    out.push_back(it->second->run);
  }
  return out;
}

std::vector<ProbeRun> ProbeService::last_results() const {
  std::lock_guard lock(mutex_);
  std::vector<ProbeRun> out;
  for (const auto& key : last_order_) out.push_back(last_.at(key)->run);
  return out;
}

std::map<std::pair<std::string, std::string>, std::uint64_t> ProbeService::totals() const {
  std::lock_guard lock(mutex_);
  return totals_;
}

void ProbeService::shutdown() {
  {
    std::unique_lock lock(mutex_);
    if (stopping_ && !worker_.joinable()) return;
    stopping_ = true;
    if (running_) {
      stop_run(running_, "cancelled", "the probe was cancelled: this exporter is shutting down",
               lock);
    }
    while (!queue_.empty()) {
      auto entry = queue_.front();
      queue_.pop_front();
      entry->run.failure_reason = "cancelled";
      entry->run.failure = "the exporter is shutting down; the probe never started";
      finish(*entry, lock);
      remember(entry);
    }
    changed_.notify_all();
  }
  if (worker_.joinable()) worker_.join();
}

// Called with the lock held: the run has its failure or outcome; it is done.
void ProbeService::finish(Entry& entry, std::unique_lock<std::mutex>&) {
  auto& run = entry.run;
  run.finished = std::chrono::system_clock::now();
  run.state = run.succeeded() ? RunState::kSucceeded : RunState::kFailed;
  ++totals_[{run.module, run.succeeded() ? "success" : "failure"}];
  changed_.notify_all();
}

// Called with the lock held: files a finished run in the history and the last results.
void ProbeService::remember(const std::shared_ptr<Entry>& entry) {
  const auto config = config_;
  history_.push_back(entry->run.id);
  while (history_.size() > config->history_length) {
    runs_.erase(history_.front());
    history_.pop_front();
  }
  const std::pair key{entry->run.target, entry->run.module};
  if (last_.insert_or_assign(key, entry).second) {
    last_order_.push_back(key);
    if (last_order_.size() > kMaxLastResults) {
      last_.erase(last_order_.front());
      last_order_.pop_front();
    }
  }
}

void ProbeService::work() {
  std::unique_lock lock(mutex_);
  while (true) {
    changed_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    auto entry = queue_.front();
    queue_.pop_front();
    running_ = entry;
    auto& run = entry->run;
    run.state = RunState::kRunning;
    run.started = std::chrono::system_clock::now();
    changed_.notify_all();
    const auto target = std::get<0>(parse_target(run.target));
    const auto local = *options_.local;
    const auto module = run.resolved;
    lock.unlock();

    // The run itself goes without the lock: /metrics and the API keep answering meanwhile.
    std::optional<probes::ProbeOutcome> outcome;
    std::optional<probes::SweepOutcome> sweep;
    std::string reason, failure;
    const auto deadline = entry->deadline.value_or(std::chrono::steady_clock::now() +
                                                   std::chrono::seconds(budget_seconds(module)));
    const auto start = std::chrono::steady_clock::now();
    try {
      // A peer's run on our responder holds the port; ours waits for it rather than failing.
      const auto held = options_.gate->enter(entry->stop.get_token(), deadline);
      if (!held) {
        if (entry->stop.stop_requested()) {
          throw probes::ProbeFailure("cancelled while a peer's probe held the port",
                                     probes::FailureKind::kCancelled);
        }
        throw probes::ProbeFailure("timed out: a peer's probe held the port until the deadline",
                                   probes::FailureKind::kTimeout);
      }
      probes::RunOptions run_options;
      run_options.fabric_ports = module.fabric_ports;
      run_options.shared_secret = options_.shared_secret;
      run_options.deadline = deadline;
      run_options.stop = entry->stop.get_token();
      run_options.resolved = entry->resolved;
      run_options.verify_cases = module.verify_cases;
      run_options.verify_options = module.verify_options;
      if (module.sweep) {
        // The gate stays held from the first step to the last: no other run comes between
        // two steps that should differ in one variable only.
        sweep = probes::run_sweep(*module.sweep, [&](const probes::ProbeSpec& spec) {
          // Each step within its own timeout, and all of them within the sweep's deadline.
          auto step_options = run_options;
          step_options.deadline =
              std::min(deadline, std::chrono::steady_clock::now() +
                                     std::chrono::seconds(spec.timeout_seconds));
          return runner_(local, target.first, target.second, spec, step_options);
        });
        if (!sweep->complete()) {
          const auto& last = sweep->steps.back();
          reason = to_string(last.failure);
          failure = fmt::format("step {} ({}={}): {}", sweep->steps.size() - 1,
                                probes::to_string(sweep->sweep.variable), last.value, last.error);
        }
      } else {
        outcome = runner_(local, target.first, target.second, module.spec, run_options);
      }
    } catch (const probes::ProbeFailure& e) {
      reason = to_string(e.kind());
      failure = e.what();
    } catch (const std::invalid_argument& e) {
      reason = "rejected";
      failure = e.what();
    } catch (const std::exception& e) {
      reason = "internal";
      failure = e.what();
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    lock.lock();
    run.duration_seconds = seconds;
    run.outcome = std::move(outcome);
    run.sweep = std::move(sweep);
    if (!run.succeeded()) {
      // A stop asked for by this service (a waiter's deadline passed, its client went away,
      // shutdown) says why in its own words.
      const bool stopped = !entry->stop_reason.empty() && reason == "cancelled";
      run.failure_reason = stopped ? entry->stop_reason : reason;
      run.failure = stopped ? entry->stop_text : failure;
      spdlog::info("probe id={} target={} module={} failed reason={}: {}", run.id, run.target,
                   run.module, run.failure_reason, run.failure);
    } else {
      spdlog::debug("probe id={} target={} module={} succeeded in {:.3f} s", run.id, run.target,
                    run.module, seconds);
    }
    running_.reset();
    finish(*entry, lock);
    remember(entry);
  }
}

}  // namespace ibprobe::exporter
