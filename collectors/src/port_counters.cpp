// PortCounters from ports/N/counters/ (and legacy counters_ext/): data counters scaled into
// bytes, error-class counters in one family, and a saturation flag for fixed-width counters.
#include <map>

#include "collectors_internal.h"
#include "counter_table.h"
#include "devices.h"
#include "sysfs.h"

namespace ibprobe::collectors {
namespace {

using prometheus::MetricType;

struct Sample {
  const CounterSpec* spec;  // nullptr for a file the table does not know
  std::string counter;
  std::uint64_t raw;
  int width;
};

// The kernel exposes the extended (64-bit) table when the PMA advertises it; that table, and only
// that one, has the unicast/multicast files. A value above 32 bits also proves 64-bit width (the
// "no IETF" extended table has no unicast files).
bool uses_extended_table(const std::map<std::string, Sample>& samples) {
  if (samples.contains("unicast_xmit_packets") || samples.contains("unicast_rcv_packets")) {
    return true;
  }
  for (const auto& [name, sample] : samples) {
    if (sample.spec && sample.spec->width == kTableWidth && sample.raw > saturation_value(32)) {
      return true;
    }
  }
  return false;
}

void read_counter_dir(const SysfsDir& dir, bool legacy_ext_dir,
                      std::map<std::string, Sample>& samples, ErrorSink& errors) {
  for (const auto& file : dir.entries()) {
    const auto value = dir.read_counter(file, errors);
    if (!value) continue;
    const CounterSpec* spec = find_port_counter(file, legacy_ext_dir);
    std::string counter = spec ? std::string(spec->counter) : file;
    Sample sample{spec, std::string(counter), *value, spec ? spec->width : 64};
    if (!legacy_ext_dir) {
      samples.emplace(std::move(counter), std::move(sample));
      continue;
    }
    // A 64-bit counters_ext value supersedes the 32-bit counters/ one; never export both.
    auto [it, inserted] = samples.try_emplace(counter, sample);
    if (!inserted && it->second.width < 64) it->second = std::move(sample);
  }
}

void emit_port(const Device& device, const std::string& port, MetricSet& out, ErrorSink& errors) {
  const SysfsDir port_dir(device.dir, "ports/" + port);
  std::map<std::string, Sample> samples;
  read_counter_dir(SysfsDir(port_dir, "counters"), false, samples, errors);
  const int table_width = uses_extended_table(samples) ? 64 : 32;
  read_counter_dir(SysfsDir(port_dir, "counters_ext"), true, samples, errors);

  const MetricSet::Labels identity{{"device", device.name}, {"port", port}};
  for (auto& [counter, sample] : samples) {
    if (sample.width == kTableWidth) sample.width = table_width;
    if (!sample.spec) {
      out.add(kUnknownCounterFamily,
              "PortCounters files this exporter has no specific family for, by file name.",
              MetricType::Counter, {{"device", device.name}, {"port", port}, {"counter", counter}},
              static_cast<double>(sample.raw));
      continue;
    }
    add_counter_sample(out, *sample.spec, identity, sample.raw);
  }
  for (const auto& [counter, sample] : samples) {
    if (!sample.spec || sample.width >= 64) continue;
    add_saturation_sample(out, counter, identity, sample.raw == saturation_value(sample.width));
  }
}

class PortCountersCollector final : public Collector {
 public:
  std::string_view name() const override { return "port_counters"; }

  void collect(const Device& device, MetricSet& out, ErrorSink& errors) const override {
    for (const auto& port : list_ports(device)) emit_port(device, port, out, errors);
  }
};

}  // namespace

std::unique_ptr<Collector> make_port_counters_collector() {
  return std::make_unique<PortCountersCollector>();
}

}  // namespace ibprobe::collectors
