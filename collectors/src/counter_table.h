// What the kernel's PortCounters files mean: family, class, width and unit of each
// (IBA PortCounters / PortCountersExtended as exposed in ports/N/counters and counters_ext).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ibprobe/collectors.h"
#include "sysfs.h"

namespace ibprobe::collectors {

enum class CounterClass { kInformative, kError };

// Width of data/packet counters depends on which PMA table the kernel picked for the port.
inline constexpr int kTableWidth = 0;

struct CounterSpec {
  std::string_view counter;  // canonical sysfs name, used as the `counter` label
  std::string_view family;   // metric family; kErrorFamily for every error-class counter
  std::string_view help;
  CounterClass counter_class;
  int width;     // bits, or kTableWidth
  double scale;  // multiplier into the family's unit (4 for the data counters: 32-bit words)
};

inline constexpr std::string_view kErrorFamily = "rdma_port_errors_total";
inline constexpr std::string_view kUnknownCounterFamily = "rdma_port_pma_other_total";
inline constexpr std::string_view kSaturatedFamily = "rdma_port_pma_saturated";

// Looks up a file of ports/N/counters/ (legacy == false) or ports/N/counters_ext/ (legacy).
const CounterSpec* find_port_counter(std::string_view file, bool legacy_ext_dir);

// All-ones value of a counter of `width` bits: where IB counters stop (they saturate, not wrap).
constexpr std::uint64_t saturation_value(int width) {
  return width >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << width) - 1;
}

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

// Adds one PortCounters value to its family, scaled into the family's unit, with a `counter`
// label in the error family. `identity` names the port: {device, port} or {lid, port, ...}.
void add_counter_sample(MetricSet& out, const CounterSpec& spec, MetricSet::LabelSet identity,
                        std::uint64_t raw);
// Adds the saturation flag of a counter narrower than 64 bits.
void add_saturation_sample(MetricSet& out, std::string_view counter, MetricSet::LabelSet identity,
                           bool saturated);
void add_saturation_sample(MetricSet& out, const CounterSpec& spec, MetricSet::LabelSet identity,
                           bool saturated);

}  // namespace ibprobe::collectors
