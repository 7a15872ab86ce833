#include "devices.h"

#include <algorithm>
#include <charconv>

namespace ibprobe::collectors {
namespace {

bool is_port_number(const std::string& name) {
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), value);
  return ec == std::errc() && end == name.data() + name.size();
}

}  // namespace

std::vector<Device> list_devices(const Options& options) {
  const SysfsDir class_dir(options.sysfs_root / "class" / "infiniband");
  std::vector<Device> devices;
  for (auto& name : class_dir.entries()) {
    if (!options.devices.accepts(name)) continue;
    SysfsDir dir(class_dir, name);
    devices.push_back(Device{std::move(name), std::move(dir)});
  }
  return devices;
}

std::vector<std::string> list_ports(const Device& device) {
  auto ports = SysfsDir(device.dir, "ports").entries();
  std::erase_if(ports, [](const std::string& p) { return !is_port_number(p); });
  std::sort(ports.begin(), ports.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  return ports;
}

}  // namespace ibprobe::collectors
