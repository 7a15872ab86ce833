// Enumeration of RDMA devices and their ports under <sysfs>/class/infiniband.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "ibprobe/collectors.h"

namespace ibprobe::collectors {

struct Device {
  std::string name;
  std::filesystem::path dir;
};

std::vector<Device> list_devices(const Options& options);

// Port numbers of a device in numeric order.
std::vector<std::string> list_ports(const Device& device);

using DeviceCollectFn = std::function<void(const Device&, MetricSet&, ErrorSink&)>;

// Runs `collect_device` once per device with its own metric set and error buffer. A device whose
// directory is gone after its collection (hot-unplug, driver unbind mid-scrape) loses its partial
// series and costs a single not_found error; every other device is unaffected.
void for_each_device(const Options& options, MetricSet& out, ErrorSink& errors,
                     const DeviceCollectFn& collect_device);

}  // namespace ibprobe::collectors
