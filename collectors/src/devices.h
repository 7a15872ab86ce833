// Enumeration of RDMA devices and their ports under <sysfs>/class/infiniband.
#pragma once

#include <string>
#include <vector>

#include "ibprobe/collectors.h"
#include "sysfs.h"

namespace ibprobe::collectors {

struct Device {
  std::string name;
  SysfsDir dir;
};

std::vector<Device> list_devices(const Options& options);

// Port numbers of a device in numeric order.
std::vector<std::string> list_ports(const Device& device);

}  // namespace ibprobe::collectors
