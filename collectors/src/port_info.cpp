// Device identity and port state: what every dashboard joins on, and the pre-flight facts a
// probe checks (state, physical state, rate, LIDs).
#include <cerrno>
#include <charconv>
#include <cmath>

#include "collectors_internal.h"
#include "devices.h"
#include "sysfs.h"

namespace ibprobe::collectors {
namespace {

using prometheus::MetricType;

// Attributes that some drivers simply do not have (rxe has no hca_type or board_id): absence is
// not an error, anything else is.
std::string read_optional(const SysfsDir::Attribute& attribute, ErrorSink& errors) {
  auto text = attribute.read_text();
  if (text) return std::move(*text);
  if (text.error() != ReadError::kNotFound) errors.record(text.error(), attribute.path());
  return {};
}

// The same for an attribute the kernel sets when it registers the device and never changes, read
// once per registration: ib_core's node_type (the device's node type) and link_layer (mlx4, the
// one driver that changes a port's link layer, registers the device anew to do it). hca_type,
// board_id, fw_ver and numa_node are not fixed: ionic's hca_type is the writable node_desc, mlx5
// reports the running firmware after a live firmware update, numa_node is writable.
std::string read_fixed_optional(const SysfsDir& dir, std::string_view name, ErrorSink& errors) {
  auto text = dir.read_static_text(name);
  if (text) return std::move(*text);
  if (text.error() != ReadError::kNotFound) errors.record(text.error(), dir.path() / name);
  return {};
}

// A RoCE port's netdev: the one behind GID 0, else the PCI function's only netdev.
std::string port_netdev(const Device& device, const Port& port, ErrorSink& errors) {
  auto ndev = port.gid0_ndev.read_text();
  if (ndev) return std::move(*ndev);
  // EINVAL means "GID 0 has no netdev" (InfiniBand ports); ENOENT, no GID attributes at all.
  if (ndev.error() != ReadError::kInvalid && ndev.error() != ReadError::kNotFound) {
    errors.record(ndev.error(), port.gid0_ndev.path());
  }
  // Listed on every scrape: netdevs come, go and get renamed while the device stays.
  const auto netdevs = device.net.current_entries();
  return netdevs.size() == 1 ? netdevs.front() : std::string();
}

void emit_device(const Device& device, MetricSet& out, ErrorSink& errors) {
  const auto hca_type = read_optional(device.hca_type, errors);
  const auto fw_ver = read_optional(device.fw_ver, errors);
  const auto board_id = read_optional(device.board_id, errors);
  const auto node_guid = read_optional(device.node_guid, errors);
  const auto node_type = read_fixed_optional(device.dir, "node_type", errors);
  const auto numa_node = read_optional(device.numa_node, errors);
  out.add("rdma_device_info",
          "RDMA device identity; value is always 1. numa_node is the HCA's NUMA node (-1: none).",
          MetricType::Gauge,
          out.label_set({{"device", device.name},
                         {"hca_type", hca_type},
                         {"fw_ver", fw_ver},
                         {"board_id", board_id},
                         {"node_guid", node_guid},
                         {"node_type", node_type},
                         {"numa_node", numa_node}}),
          1);
}

void emit_port(const Device& device, const Port& port, MetricSet& out, ErrorSink& errors) {
  const auto labels = out.rendered_label_set(port.identity_labels);

  auto enum_gauge = [&](const SysfsDir::Attribute& file, std::string_view family,
                        std::string_view help) {
    const auto text = file.read_text(errors);
    if (!text) return;
    const auto value = parse_enum_prefix(*text);
    if (!value) {
      errors.record(ReadError::kMalformed, file.path());
      return;
    }
    out.add(family, help, MetricType::Gauge, labels, *value);
  };
  enum_gauge(port.state, "rdma_port_state",
             "Logical port state: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER.");
  enum_gauge(port.phys_state, "rdma_port_physical_state",
             "Physical port state: 1 Sleep, 2 Polling, 3 Disabled, 4 PortConfigurationTraining, "
             "5 LinkUp, 6 LinkErrorRecovery, 7 PhyTest.");

  auto hex_gauge = [&](const SysfsDir::Attribute& file, std::string_view family,
                       std::string_view help) {
    const auto text = file.read_text(errors);
    if (!text) return;
    const auto value = parse_hex(*text);
    if (!value) {
      errors.record(ReadError::kMalformed, file.path());
      return;
    }
    out.add(family, help, MetricType::Gauge, labels, *value);
  };
  hex_gauge(port.lid, "rdma_port_lid", "Port LID (0 on RoCE, and on IB until the SM assigns one).");
  hex_gauge(port.sm_lid, "rdma_port_sm_lid",
            "LID of the subnet manager the port reports (0: none).");

  PortRate rate;
  if (const auto text = port.rate.read_text(errors)) {
    if (const auto parsed = parse_rate(*text)) {
      rate = *parsed;
      out.add("rdma_port_rate_bytes_per_second",
              "Port rate from sysfs (active width x active speed, signalling rate) in bytes/s.",
              MetricType::Gauge, labels, rate.gigabits_per_second * 1e9 / 8);
      if (rate.lanes > 0) {
        out.add("rdma_port_link_width_lanes", "Active link width in lanes (1X, 2X, 4X, 8X, 12X).",
                MetricType::Gauge, labels, rate.lanes);
      }
    } else {
      errors.record(ReadError::kMalformed, port.rate.path());
    }
  }

  const auto link_layer = read_fixed_optional(port.dir, "link_layer", errors);
  const auto netdev = port_netdev(device, port, errors);
  out.add("rdma_port_info",
          "Port identity; value is always 1. netdev is set on RoCE ports, speed is the IB speed "
          "name from the rate file.",
          MetricType::Gauge, labels,
          {{"link_layer", link_layer}, {"netdev", netdev}, {"speed", rate.speed}}, 1);
}

class PortInfoCollector final : public Collector {
 public:
  std::string_view name() const override { return "port_info"; }

  void collect(const Device& device, MetricSet& out, ErrorSink& errors) const override {
    emit_device(device, out, errors);
    for (const auto& port : device.ports) emit_port(device, port, out, errors);
  }
};

bool parse_double(std::string_view text, double& value) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && end == text.data() + text.size();
}

}  // namespace

std::optional<PortRate> parse_rate(std::string_view text) {
  constexpr std::string_view kUnit = " Gb/sec";
  const auto unit = text.find(kUnit);
  if (unit == std::string_view::npos || unit == 0) return std::nullopt;
  PortRate rate;
  // from_chars also reads "inf" and "nan", which no kernel prints as a rate.
  if (!parse_double(text.substr(0, unit), rate.gigabits_per_second) ||
      !std::isfinite(rate.gigabits_per_second) || rate.gigabits_per_second < 0) {
    return std::nullopt;
  }
  auto rest = text.substr(unit + kUnit.size());
  if (rest.empty()) return rate;
  // " (4X HDR)" or " (4X)"
  if (!rest.starts_with(" (") || !rest.ends_with(")")) return std::nullopt;
  rest = rest.substr(2, rest.size() - 3);
  const auto x = rest.find('X');
  if (x == std::string_view::npos) return std::nullopt;
  const auto [end, ec] = std::from_chars(rest.data(), rest.data() + x, rate.lanes);
  if (ec != std::errc() || end != rest.data() + x || rate.lanes <= 0) return std::nullopt;
  rest = rest.substr(x + 1);
  if (rest.starts_with(" ")) rest.remove_prefix(1);
  rate.speed = std::string(rest);
  return rate;
}

std::optional<int> parse_enum_prefix(std::string_view text) {
  const auto colon = text.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + colon, value);
  if (ec != std::errc() || end != text.data() + colon) return std::nullopt;
  return value;
}

std::optional<unsigned> parse_hex(std::string_view text) {
  if (text.starts_with("0x") || text.starts_with("0X")) text.remove_prefix(2);
  if (text.empty()) return std::nullopt;
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, 16);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::unique_ptr<Collector> make_port_info_collector() {
  return std::make_unique<PortInfoCollector>();
}

}  // namespace ibprobe::collectors
