// What a PortCounters value means: family, class, width and unit of each counter (IBA
// PortCounters / PortCountersExtended, named as the kernel's ports/N/counters and counters_ext
// files name them), for a local port's sysfs files and a remote port's PerfMgt answers alike.
#pragma once

#include <cstdint>
#include <string_view>

#include "ibprobe/collectors.h"

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
