#include "run_queue.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <stdexcept>

namespace ibprobe::exporter {

RunQueue::RunQueue(Options options, Runner runner, ProbeHistory& history)
    : options_(std::move(options)), runner_(std::move(runner)), history_(history) {
  worker_ = std::thread([this] { work(); });
}

RunQueue::~RunQueue() {
  shutdown();
}

std::expected<std::uint64_t, Refusal> RunQueue::submit(Job job) {
  auto queued = queue(std::move(job));
  if (!queued) return std::unexpected(std::move(queued).error());
  return (*queued)->run.id;
}

std::expected<std::shared_ptr<RunQueue::Entry>, Refusal> RunQueue::queue(Job job) {
  std::lock_guard lock(mutex_);
  if (stopping_) {
    return std::unexpected(Refusal{503, "shutting_down", "the exporter is shutting down", 5});
  }
  if (!options_.local) {
    return std::unexpected(
        Refusal{503,
                "no_probe_port",
                "this host has no ACTIVE RDMA port to probe from (see --probe.device)",
                {}});
  }
  // waiting_ also holds, for a moment, the run the worker is about to start: with nothing running
  // its head is not waiting, so queue_length 0 still lets one run through.
  if (waiting_.size() + (running_ ? 1 : 0) > job.queue_length) {
    // The queue drains at one run per module timeout at worst.
    const int retry = static_cast<int>(job.resolved.spec.timeout_seconds);
    return std::unexpected(Refusal{429, "queue_full",
                                   std::to_string(waiting_.size()) +
                                       " probes are already waiting (queue_length " +
                                       std::to_string(job.queue_length) + ")",
                                   retry});
  }
  auto entry = std::make_shared<Entry>(ProbeRun{}, std::move(job));
  entry->run.id = next_id_++;
  entry->run.target = entry->job.target;
  entry->run.module = entry->job.module;
  entry->run.trigger = entry->job.trigger;
  entry->run.resolved = entry->job.resolved;
  entry->run.submitted = std::chrono::system_clock::now();
  active_.emplace(entry->run.id, entry);
  waiting_.push_back(entry);
  changed_.notify_all();
  return entry;
}

std::expected<ProbeRun, Refusal> RunQueue::run(Job job, std::stop_token stop) {
  // Beyond the deadline, a run that was told to stop has this long to say it has.
  constexpr auto kStopGrace = std::chrono::seconds(15);
  const auto deadline = job.deadline(std::chrono::steady_clock::now());
  auto queued = queue(std::move(job));
  if (!queued) return std::unexpected(std::move(queued).error());
  const auto entry = *std::move(queued);
  const auto finished = [&entry] { return entry->run.done(); };
  std::unique_lock lock(mutex_);
  if (!changed_.wait_until(lock, stop, deadline, finished)) {
    if (stop.stop_requested()) {
      stop_run(entry,
               {probes::FailureKind::kCancelled, "the client went away before the probe finished"},
               lock);
    } else {
      stop_run(entry,
               {probes::FailureKind::kTimeout, "the probe did not finish within its timeout"},
               lock);
    }
    changed_.wait_until(lock, std::chrono::steady_clock::now() + kStopGrace, finished);
  }
  ProbeRun run = entry->run;
  if (!finished()) {
    // Still going after the stop and its grace: answer for it now; it ends on its own.
    run.outcome.reset();
    run.sweep.reset();
    run.failure_reason = "timeout";
    run.failure =
        fmt::format("the probe did not stop within {} s of its deadline", kStopGrace.count());
  }
  return run;
}

std::optional<ProbeRun> RunQueue::get(std::uint64_t id, std::chrono::milliseconds wait,
                                      std::stop_token stop) const {
  std::unique_lock lock(mutex_);
  const auto found = active_.find(id);
  if (found == active_.end()) return std::nullopt;
  // Held here, so the run stays readable once it has moved to the history.
  const auto entry = found->second;
  changed_.wait_until(lock, stop, std::chrono::steady_clock::now() + wait,
                      [&entry] { return entry->run.done(); });
  return entry->run;
}

void RunQueue::abandon(std::uint64_t id, const std::string& reason) {
  std::unique_lock lock(mutex_);
  const auto found = active_.find(id);
  if (found == active_.end()) return;
  stop_run(found->second, {probes::FailureKind::kTimeout, reason}, lock);
}

std::vector<ProbeRun> RunQueue::active() const {
  std::lock_guard lock(mutex_);
  std::vector<ProbeRun> out;
  for (const auto& [_, entry] : active_) out.push_back(entry->run);
  return out;
}

void RunQueue::stop_run(const std::shared_ptr<Entry>& entry, probes::Error why,
                        std::unique_lock<std::mutex>& lock) {
  if (entry->run.state == RunState::kQueued) {
    std::erase(waiting_, entry);
    entry->run.failure_reason = to_string(why.kind);
    entry->run.failure = std::move(why.message);
    finish(entry, lock);
  } else if (entry->run.state == RunState::kRunning && !entry->stop.stop_requested()) {
    entry->stopped_by = std::move(why);
    entry->stop.request_stop();
  }
}

void RunQueue::shutdown() {
  {
    std::unique_lock lock(mutex_);
    if (stopping_ && !worker_.joinable()) return;
    stopping_ = true;
    if (running_) {
      stop_run(running_,
               {probes::FailureKind::kCancelled,
                "the probe was cancelled: this exporter is shutting down"},
               lock);
    }
    while (!waiting_.empty()) {
      auto entry = waiting_.front();
      waiting_.pop_front();
      entry->run.failure_reason = to_string(probes::FailureKind::kCancelled);
      entry->run.failure = "the exporter is shutting down; the probe never started";
      finish(entry, lock);
    }
    changed_.notify_all();
  }
  if (worker_.joinable()) worker_.join();
}

void RunQueue::finish(const std::shared_ptr<Entry>& entry, std::unique_lock<std::mutex>&) {
  auto& run = entry->run;
  run.finished = std::chrono::system_clock::now();
  run.state = run.succeeded() ? RunState::kSucceeded : RunState::kFailed;
  // In the history before it leaves the queue: a reader finds the run in one or the other.
  history_.add(run);
  active_.erase(run.id);
  changed_.notify_all();
}

void RunQueue::work() {
  std::unique_lock lock(mutex_);
  while (true) {
    changed_.wait(lock, [this] { return stopping_ || !waiting_.empty(); });
    if (stopping_) return;
    auto entry = waiting_.front();
    waiting_.pop_front();
    running_ = entry;
    auto& run = entry->run;
    run.state = RunState::kRunning;
    run.started = std::chrono::system_clock::now();
    changed_.notify_all();
    lock.unlock();

    // The run itself goes without the lock: /metrics and the API keep answering meanwhile.
    Result result;
    const auto start = std::chrono::steady_clock::now();
    try {
      result = execute(*entry);
    } catch (...) {
      // run_probe returns its errors; anything else that escapes a run fails that run, in the
      // same words, rather than ending the worker and with it the exporter.
      result = {std::nullopt, std::nullopt, probes::current_exception_as_error()};
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    lock.lock();
    run.duration_seconds = seconds;
    run.outcome = std::move(result.outcome);
    run.sweep = std::move(result.sweep);
    if (!run.succeeded()) {
      // A stop asked for by this service (a waiter's deadline passed, its client went away,
      // shutdown) says why in its own words.
      const auto& error =
          entry->stopped_by && result.error && result.error->kind == probes::FailureKind::kCancelled
              ? *entry->stopped_by
              : result.error.value_or(probes::Error{});
      run.failure_reason = to_string(error.kind);
      run.failure = error.message;
      spdlog::info("probe id={} target={} module={} failed reason={}: {}", run.id, run.target,
                   run.module, run.failure_reason, run.failure);
    } else {
      spdlog::debug("probe id={} target={} module={} succeeded in {:.3f} s", run.id, run.target,
                    run.module, seconds);
    }
    running_.reset();
    finish(entry, lock);
  }
}

// A run's outcome, or its failure from the queue's own refusals or the run's error.
RunQueue::Result RunQueue::execute(Entry& entry) {
  const auto& job = entry.job;
  const auto& module = job.resolved;
  const auto deadline = job.deadline(std::chrono::steady_clock::now());
  const auto fail = [](probes::FailureKind kind, std::string text) {
    return Result{std::nullopt, std::nullopt, probes::Error{kind, std::move(text)}};
  };
  if (job.sweep ? !*job.sweep : !job.spec) {
    return fail(probes::FailureKind::kRejected,
                job.sweep ? "invalid sweep: " + job.sweep->error().message()
                          : "invalid probe: " + job.spec.error().message());
  }
  // A peer's run on our responder holds the port; ours waits for it rather than failing.
  auto held = options_.gate->enter(entry.stop.get_token(), deadline);
  if (!held) {
    if (entry.stop.stop_requested()) {
      return fail(probes::FailureKind::kCancelled, "cancelled while a peer's probe held the port");
    }
    return fail(probes::FailureKind::kTimeout,
                "timed out: a peer's probe held the port until the deadline");
  }
  probes::RunOptions run_options;
  run_options.fabric_ports = module.fabric_ports;
  run_options.shared_secret = options_.shared_secret;
  run_options.deadline = deadline;
  run_options.gate = &*held;
  run_options.stop = entry.stop.get_token();
  run_options.resolved = job.addresses;
  run_options.verify_cases = module.verify_cases;
  run_options.verify_options = module.verify_options;
  const auto& local = *options_.local;
  if (job.sweep) {
    const auto& valid_sweep = *job.sweep;
    // The gate stays held from the first step to the last: no other run comes between
    // two steps that should differ in one variable only (but a peer's, served while a step's
    // responder answers busy: RunOptions::gate).
    Result result;
    result.sweep = probes::run_sweep(
        *valid_sweep, run_options,
        [&](const probes::ValidSpec& spec, const probes::RunOptions& step_options) {
          return runner_(local, job.host, job.port, spec, step_options);
        });
    if (const auto& sweep = *result.sweep; !sweep.complete()) {
      const auto& last = sweep.steps.back();
      result.error =
          probes::Error{last.failure, fmt::format("step {} ({}={}): {}", sweep.steps.size() - 1,
                                                  probes::to_string(sweep.sweep.variable),
                                                  last.value, last.error)};
    }
    return result;
  }
  auto ran = runner_(local, job.host, job.port, *job.spec, run_options);
  if (!ran) return fail(ran.error().kind, std::move(ran.error().message));
  return Result{std::move(*ran), std::nullopt, std::nullopt};
}

}  // namespace ibprobe::exporter
