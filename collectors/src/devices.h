// Enumeration of RDMA devices and their ports under <sysfs>/class/infiniband.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ibprobe/collectors.h"
#include "sysfs.h"

namespace ibprobe::collectors {

// A port and the subdirectories collectors read on every scrape, opened once: looking a
// subdirectory up again for each collector and port cost more than the reads in it.
struct Port {
  Port(std::string_view device_name, std::string number, SysfsDir dir);
  std::string number;
  // device="...",port="..." as every per-port series carries it, rendered once.
  std::string identity_labels;
  SysfsDir dir;  // ports/<number>
  SysfsDir counters;
  SysfsDir counters_ext;
  SysfsDir hw_counters;
  SysfsDir gids;
  SysfsDir gid_types;  // gid_attrs/types
  SysfsDir gid_ndevs;  // gid_attrs/ndevs
  // What port_info reads on every scrape.
  SysfsDir::Attribute state;
  SysfsDir::Attribute phys_state;
  SysfsDir::Attribute lid;
  SysfsDir::Attribute sm_lid;
  SysfsDir::Attribute rate;
  SysfsDir::Attribute gid0_ndev;  // gid_attrs/ndevs/0
};

struct Device {
  // Lists the device's ports: a registered device's ports do not change, and every collector
  // walks them on every scrape.
  Device(std::string name, SysfsDir dir);
  std::string name;
  std::string identity_labels;  // device="...", rendered once
  SysfsDir dir;
  SysfsDir hw_counters;     // the device-wide ones
  SysfsDir net;             // device/net, whose entries change: list with current_entries()
  std::vector<Port> ports;  // in numeric order
  // What port_info reads on every scrape.
  SysfsDir::Attribute hca_type;
  SysfsDir::Attribute fw_ver;
  SysfsDir::Attribute board_id;
  SysfsDir::Attribute node_guid;
  SysfsDir::Attribute numa_node;  // device/numa_node
};

// The netdev behind a RoCE port's GID 0; empty for an InfiniBand port (the kernel answers EINVAL)
// and for a port whose entry cannot be read.
std::string roce_netdev(const Port& port);

// The selected devices, kept open from one scrape to the next. refresh() lists the class
// directory again (hot-plug), reuses every device still there, and opens anew a device that is
// new, that replaced one of the same name, or whose tree went stale.
//
// A device is known again by its class entry's inode, from the listing itself: the kernel makes
// the entry (a symlink) anew each time it registers a device, with an inode number it does not
// hand out again, so no path is looked up on a scrape. A directory that was removed while open
// (nlink 0, as fixture trees on ordinary file systems show it, where an inode number can come
// back) or an entry that is new leads to the target's own identity, looked up through the entry.
class DeviceTable {
 public:
  // The directory a class entry leads to; all zero when it leads nowhere.
  struct Identity {
    dev_t device = 0;
    ino_t inode = 0;
    bool operator==(const Identity&) const = default;
  };
  struct Entry {
    std::shared_ptr<const Device> device;
    Identity identity;
    ino_t entry_inode = 0;  // of the class entry, as listed
  };

  explicit DeviceTable(const Options& options);
  // In name order.
  std::vector<Entry> refresh();
  // For each of `entries`, whether its class entry is still the one it was opened through:
  // false once the device was unplugged. One listing for all of them.
  std::vector<bool> present(const std::vector<Entry>& entries) const;

 private:
  Identity identity_of(const std::string& name) const;

  const std::filesystem::path class_path_;
  const DeviceFilter filter_;
  mutable std::mutex mutex_;
  UniqueFd class_fd_;
  std::map<std::string, Entry> devices_;
};

}  // namespace ibprobe::collectors
