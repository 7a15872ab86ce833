#include "devices.h"

#include <algorithm>
#include <charconv>
#include <system_error>

#include "sysfs.h"

namespace ibprobe::collectors {
namespace {

class BufferedErrors final : public ErrorSink {
 public:
  void record(ReadError reason, const std::filesystem::path& path) override {
    entries_.emplace_back(reason, path);
  }
  void forward_to(ErrorSink& sink) const {
    for (const auto& [reason, path] : entries_) sink.record(reason, path);
  }

 private:
  std::vector<std::pair<ReadError, std::filesystem::path>> entries_;
};

bool is_port_number(const std::string& name) {
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), value);
  return ec == std::errc() && end == name.data() + name.size();
}

}  // namespace

std::vector<Device> list_devices(const Options& options) {
  const auto class_dir = options.sysfs_root / "class" / "infiniband";
  std::vector<Device> devices;
  for (auto& name : list_entries(class_dir)) {
    if (!options.devices.accepts(name)) continue;
    devices.push_back(Device{name, class_dir / name});
  }
  return devices;
}

std::vector<std::string> list_ports(const Device& device) {
  auto ports = list_entries(device.dir / "ports");
  std::erase_if(ports, [](const std::string& p) { return !is_port_number(p); });
  std::sort(ports.begin(), ports.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  return ports;
}

void for_each_device(const Options& options, MetricSet& out, ErrorSink& errors,
                     const DeviceCollectFn& collect_device) {
  for (const auto& device : list_devices(options)) {
    MetricSet device_metrics;
    BufferedErrors device_errors;
    collect_device(device, device_metrics, device_errors);
    std::error_code ec;
    if (!std::filesystem::exists(device.dir, ec)) {
      errors.record(ReadError::kNotFound, device.dir);
      continue;
    }
    device_errors.forward_to(errors);
    out.merge(std::move(device_metrics));
  }
}

}  // namespace ibprobe::collectors
