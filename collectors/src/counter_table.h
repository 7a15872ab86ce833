// The local port's PortCounters files, read with the table of what they mean.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "ibprobe/collectors.h"
#include "ibprobe/port_counter_table.h"
#include "sysfs.h"

namespace ibprobe::collectors {

// One PortCounters value of a port, its width resolved.
struct PortCounterValue {
  const CounterSpec* spec;  // nullptr for a file the table does not know
  std::uint64_t raw;
  int width;  // bits: 32 or 64 for the data and packet counters, depending on the kernel's table
};

// One counter of a port by its canonical name, or for a file the table does not know its file
// name; the name lives as long as the port's directory.
struct NamedPortCounter {
  std::string_view name;
  PortCounterValue value;
};

// Every counter of a port's counters/ and legacy counters_ext/, sorted by name; a 64-bit
// counters_ext value supersedes the 32-bit counters/ one. Unreadable files go to `errors`.
std::vector<NamedPortCounter> read_port_counters(const SysfsDir& counters,
                                                 const SysfsDir& counters_ext, ErrorSink& errors);

}  // namespace ibprobe::collectors
