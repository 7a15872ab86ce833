#include "ibprobe/counter_snapshot.h"

#include "counter_table.h"
#include "sysfs.h"

namespace ibprobe::collectors {
namespace {

class IgnoredErrors final : public ErrorSink {
 public:
  void record(ReadError, const std::filesystem::path&) override {}
};

}  // namespace

CounterReading describe_port_counter(std::string_view name, std::uint64_t value,
                                     std::uint32_t width_bits) {
  CounterReading reading{value, width_bits, 1, false};
  if (const CounterSpec* spec = find_port_counter(name, false)) {
    reading.scale = spec->scale;
    reading.error_class = spec->counter_class == CounterClass::kError;
  }
  return reading;
}

PortSnapshot snapshot_port(const std::filesystem::path& sysfs_root, const std::string& device,
                           unsigned port) {
  PortSnapshot snapshot;
  IgnoredErrors ignored;
  const SysfsDir port_dir(sysfs_root / "class" / "infiniband" / device / "ports" /
                          std::to_string(port));
  for (const auto& [name, value] : read_port_counters(port_dir, ignored)) {
    CounterReading reading;
    reading.value = value.raw;
    reading.width_bits = static_cast<std::uint32_t>(value.width);
    if (value.spec) {
      reading.scale = value.spec->scale;
      reading.error_class = value.spec->counter_class == CounterClass::kError;
    }
    snapshot.counters.emplace(name, reading);
  }
  const SysfsDir hw_dir(port_dir, "hw_counters");
  for (const auto& name : hw_dir.entries()) {
    const auto value = hw_dir.read_counter(name);
    if (!value) continue;
    if (name == "lifespan") {
      snapshot.hw_counters_lifespan = std::chrono::milliseconds(*value.value);
      continue;
    }
    snapshot.counters.emplace("hw_counters/" + name, CounterReading{*value.value, 64, 1, false});
  }
  return snapshot;
}

}  // namespace ibprobe::collectors
