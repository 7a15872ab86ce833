#include "ibprobe/counter_snapshot.h"

#include "counter_table.h"
#include "ibprobe/hw_counter_classes.h"
#include "sysfs.h"

namespace ibprobe::collectors {
namespace {

class IgnoredErrors final : public ErrorSink {
 public:
  void record(ReadError, const std::filesystem::path&) override {}
};

constexpr std::string_view kHwPrefix = "hw_counters/";
constexpr std::string_view kEthtoolPrefix = "ethtool/";

std::string_view port_counter_class(const CounterSpec* spec) {
  return spec && spec->counter_class == CounterClass::kError ? "error" : "informative";
}

}  // namespace

std::optional<std::uint32_t> priority_of(std::string_view snapshot_name) {
  if (!snapshot_name.starts_with(kEthtoolPrefix)) return std::nullopt;
  return ethtool_priority(snapshot_name.substr(kEthtoolPrefix.size()));
}

std::string_view counter_class_of(std::string_view snapshot_name) {
  if (snapshot_name.starts_with(kHwPrefix)) {
    return to_string(classify_hw_counter(snapshot_name.substr(kHwPrefix.size())));
  }
  if (snapshot_name.starts_with(kEthtoolPrefix)) {
    return ethtool_priority_class(snapshot_name.substr(kEthtoolPrefix.size()));
  }
  return port_counter_class(find_port_counter(snapshot_name, false));
}

CounterSample describe_port_counter(std::string_view name, std::uint64_t value,
                                    std::uint32_t width_bits) {
  CounterSample reading{value, width_bits, 1, false, {}};
  const CounterSpec* spec = find_port_counter(name, false);
  if (spec) {
    reading.scale = spec->scale;
    reading.error_class = spec->counter_class == CounterClass::kError;
  }
  reading.counter_class = port_counter_class(spec);
  return reading;
}

PortSnapshot snapshot_port(const std::filesystem::path& sysfs_root, const std::string& device,
                           unsigned port, const std::shared_ptr<const EthtoolSource>& ethtool) {
  PortSnapshot snapshot;
  IgnoredErrors ignored;
  const SysfsDir port_dir(sysfs_root / "class" / "infiniband" / device / "ports" /
                          std::to_string(port));
  for (const auto& [name, value] : read_port_counters(
           SysfsDir(port_dir, "counters"), SysfsDir(port_dir, "counters_ext"), ignored)) {
    CounterSample reading;
    reading.value = value.raw;
    reading.width_bits = static_cast<std::uint32_t>(value.width);
    if (value.spec) {
      reading.scale = value.spec->scale;
      reading.error_class = value.spec->counter_class == CounterClass::kError;
    }
    reading.counter_class = port_counter_class(value.spec);
    snapshot.counters.emplace(name, reading);
  }
  const SysfsDir hw_dir(port_dir, "hw_counters");
  for (const auto& name : hw_dir.entries()) {
    const auto value = hw_dir.read_counter(name);
    if (!value) continue;
    if (name == "lifespan") {
      snapshot.hw_counters_lifespan = std::chrono::milliseconds(*value);
      continue;
    }
    const HwCounterClass hw_class = classify_hw_counter(name);
    snapshot.counters.emplace(
        std::string(kHwPrefix) + name,
        CounterSample{*value, 64, 1, is_error_class(hw_class), std::string(to_string(hw_class))});
  }
  // The netdev behind GID 0; InfiniBand ports have none.
  const auto netdev = SysfsDir(port_dir, "gid_attrs/ndevs").read_text("0");
  if (!netdev || netdev->empty() || !ethtool) return snapshot;
  const auto statistics = ethtool->statistics(*netdev);
  if (!statistics) return snapshot;
  for (const auto& [name, value] : *statistics) {
    const auto priority = ethtool_priority(name);
    if (!priority) continue;
    const auto counter_class = ethtool_priority_class(name);
    snapshot.counters.emplace(std::string(kEthtoolPrefix) + name,
                              CounterSample{value, 64, 1, counter_class == "error",
                                            std::string(counter_class), priority});
  }
  return snapshot;
}

}  // namespace ibprobe::collectors
