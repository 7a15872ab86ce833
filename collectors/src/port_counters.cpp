// PortCounters from ports/N/counters/ (and legacy counters_ext/): data counters scaled into
// bytes, error-class counters in one family, and a saturation flag for fixed-width counters.
#include "collectors_internal.h"
#include "counter_table.h"
#include "devices.h"
#include "sysfs.h"

namespace ibprobe::collectors {
namespace {

using prometheus::MetricType;

void emit_port(const Port& port, MetricSet& out, ErrorSink& errors) {
  const auto samples = read_port_counters(port.counters, port.counters_ext, errors);
  const auto identity = out.rendered_label_set(port.identity_labels);
  for (const auto& [counter, sample] : samples) {
    if (!sample.spec) {
      out.add(kUnknownCounterFamily,
              "PortCounters files this exporter has no specific family for, by file name.",
              MetricType::Counter, identity, {{"counter", counter}},
              static_cast<double>(sample.raw));
      continue;
    }
    add_counter_sample(out, *sample.spec, identity, sample.raw);
  }
  for (const auto& [counter, sample] : samples) {
    if (!sample.spec || sample.width >= 64) continue;
    add_saturation_sample(out, *sample.spec, identity,
                          sample.raw == saturation_value(sample.width));
  }
}

class PortCountersCollector final : public Collector {
 public:
  std::string_view name() const override { return "port_counters"; }

  void collect(const Device& device, MetricSet& out, ErrorSink& errors) const override {
    for (const auto& port : device.ports) emit_port(port, out, errors);
  }
};

}  // namespace

std::unique_ptr<Collector> make_port_counters_collector() {
  return std::make_unique<PortCountersCollector>();
}

}  // namespace ibprobe::collectors
