#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>

#include "devices.h"
#include "worker_pool.h"

namespace ibprobe::collectors {
namespace {

using prometheus::MetricType;

constexpr std::size_t kReasonCount = static_cast<std::size_t>(ReadError::kBudgetExceeded) + 1;

class BufferedErrors final : public ErrorSink {
 public:
  void record(ReadError reason, const std::filesystem::path& path) override {
    entries.emplace_back(reason, path);
  }
  std::vector<std::pair<ReadError, std::filesystem::path>> entries;
};

// One collector over one device, or one fabric collector over the whole scrape.
struct Task {
  std::function<void(MetricSet&, ErrorSink&)> work;
  MetricSet metrics;
  BufferedErrors errors;
  bool failed = false;
  std::chrono::steady_clock::duration elapsed{};

  void run() {
    const auto start = std::chrono::steady_clock::now();
    try {
      work(metrics, errors);
    } catch (const std::exception&) {
      // A collector failing costs its own series (for that device), never the scrape.
      failed = true;
    }
    elapsed = std::chrono::steady_clock::now() - start;
  }
};

void add_collector_metrics(MetricSet& self, std::string_view collector,
                           std::chrono::steady_clock::duration elapsed, bool success) {
  const MetricSet::Labels labels{{"collector", std::string(collector)}};
  self.add("ibprobe_scrape_collector_duration_seconds",
           "Time the collector spent during this scrape, summed over devices.", MetricType::Gauge,
           labels, std::chrono::duration<double>(elapsed).count());
  self.add("ibprobe_scrape_collector_success",
           "1 if the collector ran to completion on every device during this scrape.",
           MetricType::Gauge, labels, success ? 1 : 0);
}

}  // namespace

// What one scrape collects into. It is kept for the next: a scrape adds much the same series as
// the one before, into storage that is already there.
struct Scraper::Workspace {
  std::vector<Task> fabric_tasks;
  std::vector<Task> tasks;
  MetricSet self;
  // What the scrape yields, in page order: the sets of the tasks that succeeded, then `self`.
  std::vector<const MetricSet*> parts;
};

// The devices kept open between scrapes, and the threads that collect them.
struct Scraper::State {
  State(const Options& options, std::size_t fabric_collectors)
      : devices(options),
        // The caller's thread is one of the `parallelism` device workers; fabric collectors wait
        // on the network, not on sysfs, so each gets a thread of its own and their time budget
        // overlaps the device collectors instead of adding to it.
        pool(static_cast<std::size_t>(std::max(options.parallelism, 1) - 1) + fabric_collectors) {}
  DeviceTable devices;
  WorkerPool pool;
  // The devices' collection time summed over devices in the last scrape; the first scrape
  // collects in parallel.
  std::atomic<std::chrono::steady_clock::rep> last_device_time =
      std::chrono::steady_clock::duration::max().count();
  // One workspace per scrape in progress; scrapes overlap when Prometheus servers do.
  std::mutex idle_mutex;
  std::vector<std::unique_ptr<Workspace>> idle;
  // Inputs dropped since start, by collector and reason.
  struct ErrorCount {
    std::string collector;
    ReadError reason;
    double count;
  };
  std::mutex error_counts_mutex;
  std::vector<ErrorCount> error_counts;

  std::unique_ptr<Workspace> take_workspace() {
    std::lock_guard lock(idle_mutex);
    if (idle.empty()) return std::make_unique<Workspace>();
    auto workspace = std::move(idle.back());
    idle.pop_back();
    return workspace;
  }
  void give_back(std::unique_ptr<Workspace> workspace) {
    std::lock_guard lock(idle_mutex);
    idle.push_back(std::move(workspace));
  }
};

Scraper::Scraper(Options options, std::vector<std::unique_ptr<Collector>> collectors,
                 ErrorObserver observer,
                 std::vector<std::unique_ptr<FabricCollector>> fabric_collectors)
    : options_(std::move(options)),
      collectors_(std::move(collectors)),
      fabric_collectors_(std::move(fabric_collectors)),
      observer_(std::move(observer)),
      state_(std::make_unique<State>(options_, fabric_collectors_.size())) {}

Scraper::~Scraper() = default;

std::vector<prometheus::MetricFamily> Scraper::scrape() {
  return scrape_set().take();
}

MetricSet Scraper::scrape_set() {
  auto workspace = state_->take_workspace();
  collect(*workspace);
  MetricSet result;
  for (const MetricSet* part : workspace->parts) result.merge(*part);
  state_->give_back(std::move(workspace));
  return result;
}

void Scraper::append_text(std::string& out) {
  auto workspace = state_->take_workspace();
  collect(*workspace);
  MetricSet::append_text(workspace->parts, out);
  state_->give_back(std::move(workspace));
}

void Scraper::collect(Workspace& workspace) {
  const auto devices = state_->devices.refresh();
  auto prepare = [](Task& task, std::function<void(MetricSet&, ErrorSink&)> work) {
    task.work = std::move(work);
    task.metrics.clear();
    task.errors.entries.clear();
    task.failed = false;
    task.elapsed = {};
  };
  // Fabric tasks first: they are the first to start, each on a thread of its own.
  auto& fabric_tasks = workspace.fabric_tasks;
  fabric_tasks.resize(fabric_collectors_.size());
  for (std::size_t f = 0; f < fabric_collectors_.size(); ++f) {
    prepare(fabric_tasks[f],
            [&collector = *fabric_collectors_[f]](MetricSet& out, ErrorSink& errors) {
              collector.collect(out, errors);
            });
  }
  auto& tasks = workspace.tasks;
  if (tasks.size() < collectors_.size() * devices.size()) {
    tasks.resize(collectors_.size() * devices.size());
  }
  auto next_task = tasks.begin();
  for (const auto& collector : collectors_) {
    for (const auto& entry : devices) {
      prepare(*next_task++,
              [&collector = *collector, &device = *entry.device](
                  MetricSet& out, ErrorSink& errors) { collector.collect(device, out, errors); });
    }
  }
  const std::size_t device_tasks = collectors_.size() * devices.size();
  // Collecting devices on several threads pays only when their reads wait, as PortCounters reads
  // on real HCAs do (a MAD each): when the last scrape's devices took little time in all, the
  // hand-offs between threads would cost more CPU than the scrape's wall time is worth.
  const auto last_device_time =
      std::chrono::steady_clock::duration(state_->last_device_time.load());
  if (!fabric_tasks.empty() || last_device_time >= options_.parallel_collection_from) {
    state_->pool.run(fabric_tasks.size() + device_tasks, [&](std::size_t i) {
      if (i < fabric_tasks.size()) {
        fabric_tasks[i].run();
      } else {
        tasks[i - fabric_tasks.size()].run();
      }
    });
  } else {
    for (std::size_t i = 0; i < device_tasks; ++i) tasks[i].run();
  }
  std::chrono::steady_clock::duration device_time{};
  for (std::size_t i = 0; i < device_tasks; ++i) device_time += tasks[i].elapsed;
  state_->last_device_time.store(device_time.count());

  const auto present = state_->devices.present(devices);

  auto& parts = workspace.parts;
  MetricSet& self = workspace.self;
  parts.clear();
  self.clear();
  auto task = tasks.begin();
  for (const auto& collector : collectors_) {
    std::vector<double> error_counts(kReasonCount);
    std::chrono::steady_clock::duration elapsed{};
    bool success = true;
    auto record = [&](ReadError reason, const std::filesystem::path& path) {
      ++error_counts[static_cast<std::size_t>(reason)];
      if (observer_) observer_(collector->name(), reason, path);
    };
    for (std::size_t d = 0; d < devices.size(); ++d, ++task) {
      elapsed += task->elapsed;
      if (!present[d]) {
        record(ReadError::kNotFound, devices[d].device->dir.path());
        continue;
      }
      for (const auto& [reason, path] : task->errors.entries) record(reason, path);
      if (task->failed) {
        success = false;
        continue;
      }
      parts.push_back(&task->metrics);
    }
    add_collector_metrics(self, collector->name(), elapsed, success);
    count_errors(collector->name(), error_counts);
  }
  for (std::size_t f = 0; f < fabric_tasks.size(); ++f) {
    auto& fabric_task = fabric_tasks[f];
    const auto name = fabric_collectors_[f]->name();
    std::vector<double> error_counts(kReasonCount);
    for (const auto& [reason, path] : fabric_task.errors.entries) {
      ++error_counts[static_cast<std::size_t>(reason)];
      if (observer_) observer_(name, reason, path);
    }
    if (!fabric_task.failed) parts.push_back(&fabric_task.metrics);
    add_collector_metrics(self, name, fabric_task.elapsed, !fabric_task.failed);
    count_errors(name, error_counts);
  }

  std::lock_guard lock(state_->error_counts_mutex);
  for (const auto& e : state_->error_counts) {
    self.add("ibprobe_scrape_errors_total",
             "Inputs dropped since start (unreadable, vanished or malformed sysfs files, remote "
             "queries that failed), by collector and reason; each costs its series, never the "
             "scrape.",
             MetricType::Counter,
             {{"collector", e.collector}, {"reason", std::string(to_string(e.reason))}}, e.count);
  }
  parts.push_back(&self);
}

void Scraper::count_errors(std::string_view collector, const std::vector<double>& counts) {
  auto& error_counts = state_->error_counts;
  std::lock_guard lock(state_->error_counts_mutex);
  for (std::size_t r = 0; r < counts.size(); ++r) {
    if (counts[r] == 0) continue;
    const auto reason = static_cast<ReadError>(r);
    auto it = std::find_if(error_counts.begin(), error_counts.end(), [&](const auto& e) {
      return e.collector == collector && e.reason == reason;
    });
    if (it == error_counts.end()) {
      it = error_counts.insert(error_counts.end(),
                               State::ErrorCount{std::string(collector), reason, 0});
    }
    it->count += counts[r];
  }
}

}  // namespace ibprobe::collectors
