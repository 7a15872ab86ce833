// Finding a port to run on when none is named: the device enumeration's view of port states.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace ibprobe::collectors {

struct ActivePort {
  std::string device;
  std::uint8_t port = 1;
  std::filesystem::path sysfs_root;  // the tree it was found in
};

// The first port under <sysfs_root>/class/infiniband whose state is ACTIVE, in device order.
std::optional<ActivePort> first_active_port(const std::filesystem::path& sysfs_root);

}  // namespace ibprobe::collectors
