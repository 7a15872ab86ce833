#include "devices.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <charconv>
#include <fstream>

#include "ibprobe/active_port.h"

namespace ibprobe::collectors {
namespace {

bool is_port_number(const std::string& name) {
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), value);
  return ec == std::errc() && end == name.data() + name.size();
}

// False once the directory open as `fd` was removed: its link count drops to 0 on ordinary file
// systems (sysfs makes a new class entry instead, which the listing shows).
bool still_linked(int fd) {
  struct stat st {};
  return fd >= 0 && ::fstat(fd, &st) == 0 && st.st_nlink > 0;
}

}  // namespace

DeviceTable::DeviceTable(const Options& options)
    : class_path_(options.sysfs_root / "class" / "infiniband"), filter_(options.devices) {}

DeviceTable::Identity DeviceTable::identity_of(const std::string& name) const {
  struct stat st {};
  if (!class_fd_ || ::fstatat(class_fd_.get(), name.c_str(), &st, 0) != 0) return {};
  return Identity{st.st_dev, st.st_ino};
}

std::vector<DeviceTable::Entry> DeviceTable::refresh() {
  std::lock_guard lock(mutex_);
  auto listed = read_directory(class_fd_.get());
  // No entries at all: the directory may be one the kernel removed (ib_core unloaded and loaded
  // again) or one that did not exist yet; look it up again by its path.
  if (listed.empty()) {
    class_fd_.reset(::open(class_path_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    listed = read_directory(class_fd_.get());
  }
  std::sort(listed.begin(), listed.end(),
            [](const DirectoryEntry& a, const DirectoryEntry& b) { return a.name < b.name; });

  std::map<std::string, Entry> current;
  std::vector<Entry> devices;
  for (auto& entry : listed) {
    if (!filter_.accepts(entry.name)) continue;
    auto known = devices_.find(entry.name);
    const bool same_entry = known != devices_.end() && known->second.entry_inode == entry.inode &&
                            !known->second.device->dir.stale() &&
                            still_linked(known->second.device->dir.fd());
    if (!same_entry) {
      const auto identity = identity_of(entry.name);
      // Opened anew when its directory could not be opened last time (no descriptor was left).
      if (known == devices_.end() || known->second.identity != identity ||
          known->second.device->dir.stale() || !known->second.device->dir.is_open()) {
        auto device =
            std::make_shared<const Device>(entry.name, SysfsDir(class_path_ / entry.name));
        known = devices_.insert_or_assign(entry.name, Entry{std::move(device), identity, 0}).first;
      }
      known->second.entry_inode = entry.inode;
    }
    devices.push_back(known->second);
    current.insert(devices_.extract(known));
  }
  // What is left was unplugged; its descriptors close once no scrape holds it.
  devices_ = std::move(current);
  return devices;
}

std::vector<bool> DeviceTable::present(const std::vector<Entry>& entries) const {
  std::lock_guard lock(mutex_);
  const auto listed = read_directory(class_fd_.get());
  std::vector<bool> result;
  result.reserve(entries.size());
  for (const auto& entry : entries) {
    result.push_back(entry.identity != Identity{} &&
                     std::any_of(listed.begin(), listed.end(), [&](const DirectoryEntry& e) {
                       return e.inode == entry.entry_inode && e.name == entry.device->name;
                     }));
  }
  return result;
}

Port::Port(std::string_view device_name, std::string port_number, SysfsDir port_dir)
    : number(std::move(port_number)),
      identity_labels(MetricSet::render_text({{"device", device_name}, {"port", number}})),
      dir(std::move(port_dir)),
      counters(dir, "counters"),
      counters_ext(dir, "counters_ext"),
      hw_counters(dir, "hw_counters"),
      gids(dir, "gids"),
      gid_types(dir, "gid_attrs/types"),
      gid_ndevs(dir, "gid_attrs/ndevs"),
      state(dir.attribute("state")),
      phys_state(dir.attribute("phys_state")),
      lid(dir.attribute("lid")),
      sm_lid(dir.attribute("sm_lid")),
      rate(dir.attribute("rate")),
      gid0_ndev(gid_ndevs.attribute("0")) {}

Device::Device(std::string device_name, SysfsDir device_dir)
    : name(std::move(device_name)),
      identity_labels(MetricSet::render_text({{"device", name}})),
      dir(std::move(device_dir)),
      hw_counters(dir, "hw_counters"),
      net(dir, "device/net"),
      hca_type(dir.attribute("hca_type")),
      fw_ver(dir.attribute("fw_ver")),
      board_id(dir.attribute("board_id")),
      node_guid(dir.attribute("node_guid")),
      numa_node(SysfsDir(dir, "device").attribute("numa_node")) {
  const SysfsDir ports_dir(dir, "ports");
  auto numbers = ports_dir.entries();
  std::erase_if(numbers, [](const std::string& p) { return !is_port_number(p); });
  std::sort(numbers.begin(), numbers.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  ports.reserve(numbers.size());
  for (auto& number : numbers) {
    SysfsDir port_dir(ports_dir, number);
    ports.emplace_back(name, std::move(number), std::move(port_dir));
  }
}

std::string roce_netdev(const Port& port) {
  auto netdev = port.gid0_ndev.read_text();
  return netdev ? std::move(*netdev) : std::string();
}

std::optional<ActivePort> first_active_port(const std::filesystem::path& sysfs_root) {
  const auto class_dir = sysfs_root / "class" / "infiniband";
  std::error_code ec;
  std::vector<std::filesystem::path> devices;
  for (std::filesystem::directory_iterator it(class_dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    devices.push_back(it->path());
  }
  std::sort(devices.begin(), devices.end());
  for (const auto& device : devices) {
    for (unsigned port = 1; port <= 255; ++port) {
      std::ifstream state(device / "ports" / std::to_string(port) / "state");
      if (!state) break;
      std::string text;
      std::getline(state, text);
      if (text.find("ACTIVE") != std::string::npos && text.find("DEFER") == std::string::npos) {
        return ActivePort{device.filename().string(), static_cast<std::uint8_t>(port), sysfs_root};
      }
    }
  }
  return std::nullopt;
}

}  // namespace ibprobe::collectors
