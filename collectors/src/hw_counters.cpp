// Driver hardware counters from hw_counters/ (per port and per device). Names differ per driver
// and release, so whatever files exist are exported; nothing is a fixed list. Each carries the
// class the driver table gives its name (informative when unknown).
//
// The class is a label on the one family rather than a family of its own: a counter keeps its
// series name whatever the table says, so queries by `counter` keep working when the table
// learns a name, and `{class!~"informative|congestion"}` is the error view of every driver.
#include <optional>
#include <set>

#include "collectors_internal.h"
#include "devices.h"
#include "ibprobe/hw_counter_classes.h"
#include "sysfs.h"

namespace ibprobe::collectors {
namespace {

using prometheus::MetricType;

constexpr std::string_view kLifespanFile = "lifespan";

// What each hw_counters file is exported as, the labels counter="..." (sanitized, and made unique
// within the directory) and class="..." rendered as a sample carries them: computed once per
// directory listing, since the names and the table's classes do not change while the device is
// registered. In the order of entries().
using HwCounterLabels = std::vector<std::string>;

HwCounterLabels label_hw_counters(const std::vector<std::string>& files) {
  HwCounterLabels labels;
  labels.reserve(files.size());
  std::set<std::string> used_names;
  for (const auto& file : files) {
    if (file == kLifespanFile) {
      labels.emplace_back();
      continue;
    }
    // Unique among every file of the directory, read or not, so that a series keeps its name
    // when another file of the directory fails to read.
    std::string counter = sanitize_counter_name(file);
    for (int suffix = 2; !used_names.insert(counter).second; ++suffix) {
      counter = sanitize_counter_name(file) + "_" + std::to_string(suffix);
    }
    labels.push_back(MetricSet::render_text(
        {{"counter", counter}, {"class", to_string(classify_hw_counter(file))}}));
  }
  return labels;
}

void emit_hw_counters(const SysfsDir& dir, MetricSet::LabelSet owner,
                      std::string_view counter_family, std::string_view lifespan_family,
                      MetricSet& out, ErrorSink& errors) {
  const auto& files = dir.entries();
  const auto& labels = dir.from_entries<HwCounterLabels>(label_hw_counters);
  // Looked up at the first sample, where adding the sample would have created it.
  std::optional<MetricSet::FamilyHandle> counters;
  for (std::size_t i = 0; i < files.size(); ++i) {
    const auto& file = files[i];
    const auto value = dir.read_entry_counter(i, errors);
    if (!value) continue;
    if (file == kLifespanFile) {
      out.add(lifespan_family,
              "How long the driver caches hw_counters values, in seconds (sysfs lifespan).",
              MetricType::Gauge, owner, static_cast<double>(*value) / 1000.0);
      continue;
    }
    if (!counters) {
      counters = out.family_handle(
          counter_family,
          "Driver hardware counter from hw_counters/, named as the driver names it (characters "
          "outside [A-Za-z0-9_] replaced by _), with its class: informative, congestion, or an "
          "error class (retransmission, sequence_error, ack_timeout, rnr_nak, "
          "rnr_retry_exceeded, remote_error, out_of_buffer).",
          MetricType::Counter);
    }
    out.add_rendered(*counters, owner, labels[i], static_cast<double>(*value));
  }
}

class HwCountersCollector final : public Collector {
 public:
  std::string_view name() const override { return "hw_counters"; }

  void collect(const Device& device, MetricSet& out, ErrorSink& errors) const override {
    emit_hw_counters(device.hw_counters, out.rendered_label_set(device.identity_labels),
                     "rdma_device_hw_stat_total", "rdma_device_hw_stats_lifespan_seconds", out,
                     errors);
    for (const auto& port : device.ports) {
      emit_hw_counters(port.hw_counters, out.rendered_label_set(port.identity_labels),
                       "rdma_port_hw_stat_total", "rdma_port_hw_stats_lifespan_seconds", out,
                       errors);
    }
  }
};

}  // namespace

std::string sanitize_counter_name(std::string_view name) {
  std::string out;
  out.reserve(name.size());
  for (char c : name) {
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (keep) {
      out.push_back(c);
    } else if (!out.empty() && out.back() != '_') {
      out.push_back('_');
    }
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out.empty() ? "_" : out;
}

std::unique_ptr<Collector> make_hw_counters_collector() {
  return std::make_unique<HwCountersCollector>();
}

}  // namespace ibprobe::collectors
