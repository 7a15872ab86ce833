// Public interface of the collectors library: everything that turns the kernel's RDMA sysfs tree
// into Prometheus metric families. Knows nothing about HTTP.
#pragma once

#include <prometheus/metric_family.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ibprobe::collectors {

// Why one input could not be turned into a series. Each maps to one `reason` label value.
enum class ReadError {
  kNotFound,          // ENOENT: file or device vanished
  kPermission,        // EPERM / EACCES
  kInvalid,           // EINVAL: the driver refused the read (common on unsupported counters)
  kNotSupported,      // EOPNOTSUPP
  kNotImplemented,    // ENOSYS
  kNoPma,             // old kernels print "N/A (no PMA)"
  kMalformed,         // text that is not a number of the expected form
  kIo,                // any other errno (EIO, EISDIR, ...)
  kTooManyOpenFiles,  // EMFILE / ENFILE: the process or the system has no descriptor left
  // Remote inputs (MADs to other ports of the fabric):
  kTimeout,         // no answer within the timeout, retries included
  kMadStatus,       // the answer carried a non-zero MAD status
  kBudgetExceeded,  // not asked, or not answered, before the scrape's time budget ran out
};
std::string_view to_string(ReadError error);
// The reason an errno of a failed read stands for (ENOENT: kNotFound, EACCES: kPermission, ...).
ReadError classify_errno(int err);

// Selects devices by name. An empty include pattern accepts every device.
class DeviceFilter {
 public:
  DeviceFilter() = default;
  // Throws std::regex_error on an invalid pattern.
  DeviceFilter(const std::string& include, const std::string& exclude);
  bool accepts(std::string_view device) const;

 private:
  // Compiled once and shared by the copies (Options are copied), kept out of this header.
  struct Patterns;
  std::shared_ptr<const Patterns> patterns_;
};

struct Options {
  std::filesystem::path sysfs_root = "/sys";
  DeviceFilter devices;
  // Devices are collected concurrently by up to this many threads (1: one after the other). On
  // real HCAs every PortCounters read is a MAD round trip to the port, so ports in parallel pay
  // off. A scrape whose devices took less than `parallel_collection_from` in all the last time
  // collects them on the calling thread alone: there the hand-offs between threads cost more CPU
  // than they save wall time.
  int parallelism = 2;
  std::chrono::steady_clock::duration parallel_collection_from = std::chrono::milliseconds(10);
};

// One RDMA device under <sysfs>/class/infiniband, as handed to collectors.
struct Device;

// Receives every input a collector had to drop, so the scrape can count it.
class ErrorSink {
 public:
  virtual ~ErrorSink() = default;
  // `path` is the file, or for a remote input what was asked and what went wrong
  // ("lid 12 port 3 PortCounters: MAD status 0x000c (...)").
  virtual void record(ReadError reason, const std::filesystem::path& path) = 0;
};

// Families under construction, kept in first-seen order with their samples grouped. Every sample
// is one value (counters, gauges, untyped). Labels are kept as exposition text: a scrape adds
// tens of thousands of samples that share a few label sets (one switch port's labels go on every
// one of its series), and a sample then costs no allocation of its own.
class MetricSet {
  struct Span {
    std::uint32_t offset = 0;
    std::uint32_t size = 0;
  };

 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;
  using ExtraLabel = std::pair<std::string_view, std::string_view>;

  // Labels rendered into this set once, for the many samples that carry them (a port's device
  // and port go on each of its series); valid until clear().
  class LabelSet {
   private:
    friend class MetricSet;
    explicit LabelSet(Span span) : span_(span) {}
    Span span_;
  };
  LabelSet label_set(const Labels& labels);
  LabelSet label_set(std::initializer_list<ExtraLabel> labels);
  // The same for labels render_text() rendered (a port's identity, rendered when it was opened).
  LabelSet rendered_label_set(std::string_view rendered);

  // A family looked up once, for a collector that adds many samples to it in a row (a
  // directory's counters); valid for as long as this set.
  class FamilyHandle {
   private:
    friend class MetricSet;
    explicit FamilyHandle(std::size_t index) : index_(index) {}
    std::size_t index_;
  };
  FamilyHandle family_handle(std::string_view name, std::string_view help,
                             prometheus::MetricType type);

  void add(std::string_view family, std::string_view help, prometheus::MetricType type,
           const Labels& labels, double value);
  void add(std::string_view family, std::string_view help, prometheus::MetricType type,
           LabelSet labels, double value);
  // The same with more labels after `labels` (`counter="symbol_error"` after a port's own),
  // without a copy of `labels` per sample.
  void add(std::string_view family, std::string_view help, prometheus::MetricType type,
           const Labels& labels, std::initializer_list<ExtraLabel> extra, double value);
  void add(std::string_view family, std::string_view help, prometheus::MetricType type,
           LabelSet labels, std::initializer_list<ExtraLabel> extra, double value);
  // The text add() renders for `extra` (name="escaped value",...), for labels that stay the
  // same from one scrape to the next: rendered once, then added with add_rendered().
  static std::string render_text(std::initializer_list<ExtraLabel> extra);
  // add() with labels after `labels` given as render_text() rendered them.
  void add_rendered(std::string_view family, std::string_view help, prometheus::MetricType type,
                    const Labels& labels, std::string_view rendered_extra, double value);
  void add_rendered(std::string_view family, std::string_view help, prometheus::MetricType type,
                    LabelSet labels, std::string_view rendered_extra, double value);
  void add_rendered(FamilyHandle family, LabelSet labels, std::string_view rendered_extra,
                    double value);
  // A histogram's series: _count, _sum, and one _bucket per upper bound (labelled le, with the
  // cumulative count at that bound) and +Inf (with `count`), as prometheus-cpp writes them.
  void add_histogram(std::string_view family, std::string_view help, const Labels& labels,
                     std::span<const double> upper_bounds,
                     std::span<const std::uint64_t> cumulative_counts, std::uint64_t count,
                     double sum);
  // A family written (HELP and TYPE) even while it has no sample, until clear().
  void declare(std::string_view family, std::string_view help, prometheus::MetricType type);
  // Appends every family of `other`, merging samples into families of the same name.
  void merge(const MetricSet& other);
  std::vector<prometheus::MetricFamily> take() &&;
  // Appends the text exposition format (0.0.4) of every family to `out`, byte for byte what
  // prometheus-cpp's TextSerializer writes for take()'s families.
  void append_text(std::string& out) const;
  // The text of a set that merged `sets` in turn, written without merging them: families in
  // order of first appearance, each with the samples of every set in turn.
  static void append_text(std::span<const MetricSet* const> sets, std::string& out);
  // No sample at all.
  bool empty() const;
  // Removes every sample and keeps the storage: the next scrape adds much the same series, and
  // then allocates nothing. A family left without samples is not written (nor taken).
  void clear();

 private:
  struct Sample {
    Span labels;  // name="value",... of the Labels given
    Span extra;   // name="value",... of the labels after them, if any
    double value;
  };
  // The series of a histogram's sample, after the family's name.
  enum class Suffix : std::uint8_t { kCount, kSum, kBucket };
  struct Family {
    std::string name;
    std::string help;
    prometheus::MetricType type;
    std::vector<Sample> samples;
    std::vector<Suffix> suffixes;  // a histogram's: one per sample
    bool declared = false;

    bool written() const { return declared || !samples.empty(); }
  };

  Family& family(std::string_view name, std::string_view help, prometheus::MetricType type);
  Span render(const Labels& labels);
  Span render(std::initializer_list<ExtraLabel> extra);
  std::string_view text(Span span) const { return {label_text_.data() + span.offset, span.size}; }

  std::vector<Family> families_;
  std::size_t last_family_ = 0;
  std::string label_text_;
  // The labels rendered last: collectors add a port's series one after another.
  Labels last_labels_;
  Span last_span_;
  bool rendered_any_ = false;
};

// One source of metrics, like a node_exporter collector. Called once per device per scrape,
// possibly from several threads at once for different devices.
class Collector {
 public:
  virtual ~Collector() = default;
  virtual std::string_view name() const = 0;
  virtual void collect(const Device& device, MetricSet& out, ErrorSink& errors) const = 0;
};

// A source of metrics whose inputs are not one local device, such as remote ports reached over
// the fabric. Called once per scrape; calls overlap when scrapes do.
class FabricCollector {
 public:
  virtual ~FabricCollector() = default;
  virtual std::string_view name() const = 0;
  virtual void collect(MetricSet& out, ErrorSink& errors) const = 0;
};

// Names of every per-device collector the library provides, and whether each is on by default.
struct CollectorInfo {
  std::string_view name;
  std::string_view description;
  bool enabled_by_default;
};
const std::vector<CollectorInfo>& available_collectors();

// Returns nullptr for an unknown name.
std::unique_ptr<Collector> make_collector(std::string_view name);

// Runs a set of collectors over every selected device, and the fabric collectors once, for one
// scrape and adds the exporter's own scrape metrics: per-collector success and duration, and a
// running count of dropped inputs by reason. Devices are isolated: one that vanishes mid-scrape
// (hot-unplug, driver unbind) loses its partial series and costs one not_found per collector;
// the rest is served. Fabric collectors run alongside the device collectors.
//
// Devices and the files read from them stay open from one scrape to the next (a scrape lists
// the device directory once, for hot-plug), and the threads are started once, with the scraper.
class Scraper {
 public:
  // Told of every dropped input, for logging which file failed and why.
  using ErrorObserver =
      std::function<void(std::string_view collector, ReadError, const std::filesystem::path&)>;

  Scraper(Options options, std::vector<std::unique_ptr<Collector>> collectors,
          ErrorObserver observer = nullptr,
          std::vector<std::unique_ptr<FabricCollector>> fabric_collectors = {});
  ~Scraper();
  Scraper(const Scraper&) = delete;
  Scraper& operator=(const Scraper&) = delete;
  std::vector<prometheus::MetricFamily> scrape();
  // The same scrape as a metric set.
  MetricSet scrape_set();
  // The same scrape written in the text exposition format (0.0.4), appended to `out`.
  void append_text(std::string& out);

 private:
  struct State;
  struct Workspace;
  void collect(Workspace& workspace);
  void count_errors(std::string_view collector, const std::vector<double>& counts);

  Options options_;
  std::vector<std::unique_ptr<Collector>> collectors_;
  std::vector<std::unique_ptr<FabricCollector>> fabric_collectors_;
  ErrorObserver observer_;
  std::unique_ptr<State> state_;  // last: its threads stop before the collectors go
};

}  // namespace ibprobe::collectors
