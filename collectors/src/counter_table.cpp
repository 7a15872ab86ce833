#include "counter_table.h"

#include <algorithm>
#include <array>

namespace ibprobe::collectors {
namespace {

constexpr std::string_view kXmitData = "rdma_port_data_transmitted_bytes_total";
constexpr std::string_view kRcvData = "rdma_port_data_received_bytes_total";
constexpr std::string_view kXmitPackets = "rdma_port_packets_transmitted_total";
constexpr std::string_view kRcvPackets = "rdma_port_packets_received_total";
constexpr std::string_view kUnicastXmit = "rdma_port_unicast_packets_transmitted_total";
constexpr std::string_view kUnicastRcv = "rdma_port_unicast_packets_received_total";
constexpr std::string_view kMulticastXmit = "rdma_port_multicast_packets_transmitted_total";
constexpr std::string_view kMulticastRcv = "rdma_port_multicast_packets_received_total";

constexpr std::string_view kXmitDataHelp =
    "Data octets transmitted on the port (PortXmitData x 4: the counter counts 32-bit words).";
constexpr std::string_view kRcvDataHelp =
    "Data octets received on the port (PortRcvData x 4: the counter counts 32-bit words).";
constexpr std::string_view kXmitPacketsHelp = "Packets transmitted on the port (PortXmitPkts).";
constexpr std::string_view kRcvPacketsHelp = "Packets received on the port (PortRcvPkts).";
constexpr std::string_view kUnicastXmitHelp = "Unicast packets transmitted (PortUnicastXmitPkts).";
constexpr std::string_view kUnicastRcvHelp = "Unicast packets received (PortUnicastRcvPkts).";
constexpr std::string_view kMulticastXmitHelp =
    "Multicast packets transmitted (PortMulticastXmitPkts).";
constexpr std::string_view kMulticastRcvHelp = "Multicast packets received (PortMulticastRcvPkts).";
constexpr std::string_view kErrorHelp =
    "Error-class PortCounters, one series per counter: any increase is a finding.";

using enum CounterClass;

constexpr std::array kCounters = {
    CounterSpec{"port_xmit_data", kXmitData, kXmitDataHelp, kInformative, kTableWidth, 4},
    CounterSpec{"port_rcv_data", kRcvData, kRcvDataHelp, kInformative, kTableWidth, 4},
    CounterSpec{"port_xmit_packets", kXmitPackets, kXmitPacketsHelp, kInformative, kTableWidth, 1},
    CounterSpec{"port_rcv_packets", kRcvPackets, kRcvPacketsHelp, kInformative, kTableWidth, 1},
    CounterSpec{"unicast_xmit_packets", kUnicastXmit, kUnicastXmitHelp, kInformative, 64, 1},
    CounterSpec{"unicast_rcv_packets", kUnicastRcv, kUnicastRcvHelp, kInformative, 64, 1},
    CounterSpec{"multicast_xmit_packets", kMulticastXmit, kMulticastXmitHelp, kInformative, 64, 1},
    CounterSpec{"multicast_rcv_packets", kMulticastRcv, kMulticastRcvHelp, kInformative, 64, 1},
    CounterSpec{"port_xmit_wait", "rdma_port_transmit_wait_ticks_total",
                "Ticks during which the port had data to send but sent none (no credits or no "
                "arbitration: PortXmitWait).",
                kInformative, 32, 1},
    CounterSpec{"symbol_error", kErrorFamily, kErrorHelp, kError, 16, 1},
    CounterSpec{"link_error_recovery", kErrorFamily, kErrorHelp, kError, 8, 1},
    CounterSpec{"link_downed", kErrorFamily, kErrorHelp, kError, 8, 1},
    CounterSpec{"port_rcv_errors", kErrorFamily, kErrorHelp, kError, 16, 1},
    CounterSpec{"port_rcv_remote_physical_errors", kErrorFamily, kErrorHelp, kError, 16, 1},
    CounterSpec{"port_rcv_switch_relay_errors", kErrorFamily, kErrorHelp, kError, 16, 1},
    CounterSpec{"port_xmit_discards", kErrorFamily, kErrorHelp, kError, 16, 1},
    CounterSpec{"port_xmit_constraint_errors", kErrorFamily, kErrorHelp, kError, 8, 1},
    CounterSpec{"port_rcv_constraint_errors", kErrorFamily, kErrorHelp, kError, 8, 1},
    CounterSpec{"local_link_integrity_errors", kErrorFamily, kErrorHelp, kError, 4, 1},
    CounterSpec{"excessive_buffer_overrun_errors", kErrorFamily, kErrorHelp, kError, 4, 1},
    CounterSpec{"VL15_dropped", kErrorFamily, kErrorHelp, kError, 16, 1},
    // PortRcvErrorDetails and PortXmitDiscardDetails: which kind of receive error or transmit
    // discard the two totals above counted. Only remote PMAs answer them (no sysfs files).
    CounterSpec{"port_local_physical_errors", kErrorFamily, kErrorHelp, kError, 16, 1},
    CounterSpec{"port_malformed_packet_errors", kErrorFamily, kErrorHelp, kError, 16, 1},
    CounterSpec{"port_buffer_overrun_errors", kErrorFamily, kErrorHelp, kError, 16, 1},
    CounterSpec{"port_dlid_mapping_errors", kErrorFamily, kErrorHelp, kError, 16, 1},
    CounterSpec{"port_vl_mapping_errors", kErrorFamily, kErrorHelp, kError, 16, 1},
    CounterSpec{"port_looping_errors", kErrorFamily, kErrorHelp, kError, 16, 1},
    CounterSpec{"port_inactive_discards", kErrorFamily, kErrorHelp, kError, 16, 1},
    CounterSpec{"port_neighbor_mtu_discards", kErrorFamily, kErrorHelp, kError, 16, 1},
    CounterSpec{"port_sw_lifetime_limit_discards", kErrorFamily, kErrorHelp, kError, 16, 1},
    CounterSpec{"port_sw_hoq_lifetime_limit_discards", kErrorFamily, kErrorHelp, kError, 16, 1},
};

// Pre-4.5 MLNX_OFED kernels put the 64-bit PortCountersExtended values in counters_ext/.
constexpr std::array kLegacyExtCounters = {
    CounterSpec{"port_xmit_data", kXmitData, kXmitDataHelp, kInformative, 64, 4},
    CounterSpec{"port_rcv_data", kRcvData, kRcvDataHelp, kInformative, 64, 4},
    CounterSpec{"port_xmit_packets", kXmitPackets, kXmitPacketsHelp, kInformative, 64, 1},
    CounterSpec{"port_rcv_packets", kRcvPackets, kRcvPacketsHelp, kInformative, 64, 1},
    CounterSpec{"unicast_xmit_packets", kUnicastXmit, kUnicastXmitHelp, kInformative, 64, 1},
    CounterSpec{"unicast_rcv_packets", kUnicastRcv, kUnicastRcvHelp, kInformative, 64, 1},
    CounterSpec{"multicast_xmit_packets", kMulticastXmit, kMulticastXmitHelp, kInformative, 64, 1},
    CounterSpec{"multicast_rcv_packets", kMulticastRcv, kMulticastRcvHelp, kInformative, 64, 1},
};
constexpr std::array<std::string_view, kLegacyExtCounters.size()> kLegacyExtFiles = {
    "port_xmit_data_64",           "port_rcv_data_64",           "port_xmit_packets_64",
    "port_rcv_packets_64",         "port_unicast_xmit_packets",  "port_unicast_rcv_packets",
    "port_multicast_xmit_packets", "port_multicast_rcv_packets",
};

// The label counter="..." of every table entry, rendered once: a port adds one per error and
// saturation sample on every scrape.
const std::string& counter_label(const CounterSpec& spec) {
  static const auto labels = [] {
    std::vector<std::string> rendered;
    for (const auto& entry : kCounters) {
      rendered.push_back(MetricSet::render_text({{"counter", entry.counter}}));
    }
    for (const auto& entry : kLegacyExtCounters) {
      rendered.push_back(MetricSet::render_text({{"counter", entry.counter}}));
    }
    return rendered;
  }();
  if (&spec >= kCounters.data() && &spec < kCounters.data() + kCounters.size()) {
    return labels[static_cast<std::size_t>(&spec - kCounters.data())];
  }
  return labels[kCounters.size() + static_cast<std::size_t>(&spec - kLegacyExtCounters.data())];
}

}  // namespace

const CounterSpec* find_port_counter(std::string_view file, bool legacy_ext_dir) {
  if (legacy_ext_dir) {
    for (std::size_t i = 0; i < kLegacyExtFiles.size(); ++i) {
      if (kLegacyExtFiles[i] == file) return &kLegacyExtCounters[i];
    }
    return nullptr;
  }
  for (const auto& spec : kCounters) {
    if (spec.counter == file) return &spec;
  }
  return nullptr;
}

void add_counter_sample(MetricSet& out, const CounterSpec& spec, MetricSet::LabelSet identity,
                        std::uint64_t raw) {
  const double value = static_cast<double>(raw) * spec.scale;
  if (spec.family == kErrorFamily) {
    out.add_rendered(spec.family, spec.help, prometheus::MetricType::Counter, identity,
                     counter_label(spec), value);
  } else {
    out.add(spec.family, spec.help, prometheus::MetricType::Counter, identity, value);
  }
}

constexpr std::string_view kSaturatedHelp =
    "1 when a fixed-width PortCounter sits at its all-ones maximum: it no longer counts, so rates "
    "and deltas from it are meaningless until it is reset.";

void add_saturation_sample(MetricSet& out, std::string_view counter, MetricSet::LabelSet identity,
                           bool saturated) {
  out.add(kSaturatedFamily, kSaturatedHelp, prometheus::MetricType::Gauge, identity,
          {{"counter", counter}}, saturated ? 1 : 0);
}

void add_saturation_sample(MetricSet& out, const CounterSpec& spec, MetricSet::LabelSet identity,
                           bool saturated) {
  out.add_rendered(kSaturatedFamily, kSaturatedHelp, prometheus::MetricType::Gauge, identity,
                   counter_label(spec), saturated ? 1 : 0);
}

namespace {

// What each file of a counters directory is, in the order of its listing: looked up once per
// listing, since a registered device's files do not change.
struct CounterFiles {
  std::vector<const CounterSpec*> specs;
};

// The kernel exposes the extended (64-bit) table when the PMA advertises it; that table, and only
// that one, has the unicast/multicast files. A value above 32 bits also proves 64-bit width (the
// "no IETF" extended table has no unicast files).
bool uses_extended_table(const std::vector<NamedPortCounter>& values) {
  for (const auto& [name, value] : values) {
    if (name == "unicast_xmit_packets" || name == "unicast_rcv_packets") return true;
  }
  for (const auto& [name, value] : values) {
    if (value.spec && value.spec->width == kTableWidth && value.raw > saturation_value(32)) {
      return true;
    }
  }
  return false;
}

void read_counter_dir(const SysfsDir& dir, bool legacy_ext_dir,
                      std::vector<NamedPortCounter>& values, ErrorSink& errors) {
  const auto& files = dir.entries();
  const auto& specs = dir.from_entries<CounterFiles>([&](const std::vector<std::string>& names) {
                           CounterFiles kinds;
                           for (const auto& name : names) {
                             kinds.specs.push_back(find_port_counter(name, legacy_ext_dir));
                           }
                           return kinds;
                         })
                          .specs;
  for (std::size_t i = 0; i < files.size(); ++i) {
    const auto raw = dir.read_entry_counter(i, errors);
    if (!raw) continue;
    const CounterSpec* spec = specs[i];
    const std::string_view name = spec ? spec->counter : std::string_view(files[i]);
    const PortCounterValue value{spec, *raw, spec ? spec->width : 64};
    if (legacy_ext_dir) {
      const auto known = std::find_if(values.begin(), values.end(),
                                      [&](const NamedPortCounter& c) { return c.name == name; });
      if (known != values.end()) {
        if (known->value.width < 64) known->value = value;
        continue;
      }
    }
    values.push_back({name, value});
  }
}

}  // namespace

std::vector<NamedPortCounter> read_port_counters(const SysfsDir& counters,
                                                 const SysfsDir& counters_ext, ErrorSink& errors) {
  std::vector<NamedPortCounter> values;
  values.reserve(32);
  read_counter_dir(counters, false, values, errors);
  const int table_width = uses_extended_table(values) ? 64 : 32;
  for (auto& [name, value] : values) {
    if (value.width == kTableWidth) value.width = table_width;
  }
  const auto from_counters_dir = values.size();
  read_counter_dir(counters_ext, true, values, errors);
  // counters/ is listed in name order, and its canonical names are its file names: only the
  // names counters_ext/ added need sorting in.
  if (values.size() != from_counters_dir) {
    std::sort(values.begin(), values.end(),
              [](const NamedPortCounter& a, const NamedPortCounter& b) { return a.name < b.name; });
  }
  return values;
}

}  // namespace ibprobe::collectors
