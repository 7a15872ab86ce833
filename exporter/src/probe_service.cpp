#include "probe_service.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>

#include "ibprobe/enum_names.h"
#include "ibprobe/host_port.h"

namespace ibprobe::exporter {
namespace {

// The longest a run of the module may take: its timeout for each step of a sweep and for each
// case of a verification suite, one timeout otherwise; a client's timeout shortens it.
std::chrono::steady_clock::duration allowance(const ProbeModule& module,
                                              std::optional<double> timeout_seconds) {
  std::size_t runs = 1;
  if (module.sweep) runs = module.sweep->values.size();
  if (!module.verify_cases.empty()) runs = module.verify_cases.size();
  double seconds = static_cast<double>(module.spec.timeout_seconds) *
                   static_cast<double>(std::max<std::size_t>(runs, 1));
  if (timeout_seconds) seconds = std::min(seconds, *timeout_seconds);
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(seconds));
}

// DNS names are at most 253 characters.
constexpr std::size_t kMaxHostLength = 253;

bool valid_host(const std::string& host) {
  if (host.empty() || host.size() > kMaxHostLength) return false;
  return std::all_of(host.begin(), host.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ||
           c == ':';
  });
}

constexpr EnumNames<RunState, 4> kRunStateNames{{{RunState::kQueued, "queued"},
                                                 {RunState::kRunning, "running"},
                                                 {RunState::kSucceeded, "succeeded"},
                                                 {RunState::kFailed, "failed"}}};

}  // namespace

std::string_view to_string(RunState state) {
  return name_of(kRunStateNames, state, "failed");
}

std::expected<std::pair<std::string, std::string>, std::string> parse_target(
    const std::string& target) {
  const auto address =
      probes::parse_host_port(target, probes::HostPortRules::peer(kDefaultResponderPort));
  if (!address) return std::unexpected("target '" + target + "': " + address.error());
  if (!valid_host(address->host)) {
    return std::unexpected("target '" + target + "': host must be a name or address of at most " +
                           std::to_string(kMaxHostLength) + " characters");
  }
  return std::pair{address->host, std::to_string(address->port)};
}

ProbeService::ProbeService(Options options, Runner runner)
    : resolve_(std::move(options.resolve)),
      local_(options.local),
      config_(std::move(options.config_file)),
      history_(config_),
      queue_({std::move(options.local), std::move(options.shared_secret), std::move(options.gate)},
             std::move(runner), history_) {}

std::shared_ptr<const ProbeConfig> ProbeService::config() const {
  return config_.current();
}

std::expected<void, std::string> ProbeService::reload() {
  return config_.reload();
}

std::expected<RunQueue::Job, Refusal> ProbeService::job(
    const ProbeParams& request,
    std::optional<std::chrono::steady_clock::time_point> waited_from) const {
  const auto& target = request.target;
  const auto& module_name = request.module;
  const auto timeout_seconds = request.timeout_seconds;
  const auto config = config_.current();
  const auto refuse = [](int status, std::string code, std::string message) {
    return std::unexpected(Refusal{status, std::move(code), std::move(message), {}});
  };
  if (module_name.empty()) return refuse(400, "missing_module", "module parameter is missing");
  const auto module = config->modules.find(module_name);
  if (module == config->modules.end()) {
    std::vector<std::string> names;
    for (const auto& [name, _] : config->modules) names.push_back(name);
    return refuse(400, "unknown_module",
                  "unknown module '" + module_name +
                      "' (configured: " + fmt::to_string(fmt::join(names, "; ")) + ")");
  }
  if (target.empty()) return refuse(400, "missing_target", "target parameter is missing");
  const auto parsed = parse_target(target);
  if (!parsed) return refuse(400, "bad_target", parsed.error());
  std::optional<probes::Resolution> addresses;
  // Resolved once: the addresses the allowlist judges are the ones the run connects to.
  if (config->allowlist) {
    if (const auto admitted = config->allowlist->admit(parsed->first,
                                                       [&](const std::string& name) {
                                                         addresses = resolve_(name);
                                                         return *addresses;
                                                       });
        !admitted) {
      return refuse(403, "target_not_allowed", admitted.error());
    }
  }
  ProbeModule resolved = module->second;
  if (timeout_seconds) {
    if (!std::isfinite(*timeout_seconds) || *timeout_seconds < 1) {
      return refuse(400, "bad_timeout", "timeout must be at least 1 second");
    }
    const auto whole = static_cast<std::uint32_t>(
        std::min<double>(std::floor(*timeout_seconds), resolved.spec.timeout_seconds));
    resolved.spec.timeout_seconds = whole;
    // A sweep's steps each get at most the whole; the waiter's deadline ends the sweep.
    if (resolved.sweep) resolved.sweep->base.timeout_seconds = whole;
  }
  if (request.has_lane()) {
    if (!resolved.verify_cases.empty()) {
      return refuse(400, "bad_lane",
                    "module '" + module_name +
                        "' is a verification suite, whose cases run in the default lane: sl, "
                        "traffic_class, pkey_index and dlid apply to probe modules");
    }
    for (auto* spec : {&resolved.spec, resolved.sweep ? &resolved.sweep->base : nullptr}) {
      if (!spec) continue;
      if (request.sl) spec->sl = *request.sl;
      if (request.traffic_class) spec->traffic_class = *request.traffic_class;
      if (request.pkey_index) spec->pkey_index = *request.pkey_index;
      if (request.dlid) spec->dlid = request.dlid;
    }
  }
  // The spec the run gets: the module's as loaded, or with this request's timeout or lane a new
  // one.
  auto spec = probes::validate(resolved.spec);
  if (request.has_lane() && !spec) {
    return refuse(400, "bad_lane",
                  "the lane does not fit module '" + module_name + "': " + spec.error().message());
  }
  // The P_Key index and the destination LID against this host's port before the run is queued
  // (the responder checks its own P_Key index before it allocates).
  if (local_) {
    if (const auto fits = probes::check_lane_on_port(local_->sysfs_root, local_->device,
                                                     local_->port, resolved.spec);
        !fits) {
      return refuse(400, "bad_lane", fits.error());
    }
  }
  if (timeout_seconds && !spec) {
    return refuse(400, "timeout_too_short",
                  "a timeout of " + std::to_string(resolved.spec.timeout_seconds) +
                      " s does not fit module '" + module_name + "': " + spec.error().message());
  }
  auto sweep = resolved.sweep ? std::optional(probes::validate(*resolved.sweep)) : std::nullopt;
  return RunQueue::Job{.target = target,
                       .host = parsed->first,
                       .port = parsed->second,
                       .module = module_name,
                       .resolved = std::move(resolved),
                       .spec = std::move(spec),
                       .sweep = std::move(sweep),
                       .addresses = std::move(addresses),
                       .allowance = allowance(module->second, timeout_seconds),
                       .waited_from = waited_from,
                       .queue_length = config->queue_length,
                       .trigger = request.trigger};
}

std::expected<std::uint64_t, Refusal> ProbeService::submit(const ProbeParams& request) {
  auto checked = job(request, std::nullopt);
  if (!checked) return std::unexpected(std::move(checked).error());
  return queue_.submit(*std::move(checked));
}

std::expected<ProbeRun, Refusal> ProbeService::run(const ProbeParams& request,
                                                   std::chrono::steady_clock::time_point received,
                                                   std::stop_token stop) {
  auto checked = job(request, received);
  if (!checked) return std::unexpected(std::move(checked).error());
  return queue_.run(*std::move(checked), stop);
}

std::optional<ProbeRun> ProbeService::get(std::uint64_t id, std::chrono::milliseconds wait,
                                          std::stop_token stop) const {
  // Asked in this order: a run enters the history before it leaves the queue.
  if (auto run = queue_.get(id, wait, stop)) return run;
  return history_.find(id);
}

void ProbeService::abandon(std::uint64_t id, const std::string& reason) {
  queue_.abandon(id, reason);
}

std::vector<ProbeRun> ProbeService::recent(std::size_t limit) const {
  // The queue is read first: a run that finishes between the two reads is then seen twice, and
  // its finished form kept, rather than missed.
  auto active = queue_.active();
  std::map<std::uint64_t, ProbeRun, std::greater<>> newest_first;
  for (auto& run : history_.recent(limit)) newest_first.emplace(run.id, std::move(run));
  for (auto& run : active) newest_first.emplace(run.id, std::move(run));
  std::vector<ProbeRun> out;
  for (auto& [_, run] : newest_first) {
    if (out.size() == limit) break;
    out.push_back(std::move(run));
  }
  return out;
}

std::vector<ProbeRun> ProbeService::last_results() const {
  return history_.last_results();
}

std::map<std::pair<std::string, std::string>, std::uint64_t> ProbeService::totals() const {
  return history_.totals();
}

void ProbeService::shutdown() {
  queue_.shutdown();
}

}  // namespace ibprobe::exporter
