#include "ibprobe/fabric_discovery.h"

#include <infiniband/ibnetdisc.h>
#include <infiniband/mad.h>

#include <algorithm>
#include <memory>
#include <vector>

namespace ibprobe::fabric {
namespace {

// PortInfo CapabilityMask IsExtendedSpeedsSupported: LinkSpeedExt* fields are valid.
constexpr std::uint32_t kCapExtendedSpeeds = 1u << 14;

struct FabricDeleter {
  void operator()(ibnd_fabric_t* fabric) const { ibnd_destroy_fabric(fabric); }
};

unsigned field(const std::uint8_t* info, MAD_FIELDS name) {
  return mad_get_field(const_cast<std::uint8_t*>(info), 0, name);
}

std::string description_of(const ibnd_node_t& node) {
  return std::string(node.nodedesc, strnlen(node.nodedesc, sizeof node.nodedesc));
}

FabricNodeType type_of(const ibnd_node_t& node) {
  switch (node.type) {
    case IB_NODE_SWITCH:
      return FabricNodeType::kSwitch;
    case IB_NODE_ROUTER:
      return FabricNodeType::kRouter;
    default:
      return FabricNodeType::kCa;
  }
}

// A switch's ports carry PortInfo without the extended-speeds capability bit (only port 0 has
// a CapabilityMask); a CA port has its own.
bool extended_speeds(const ibnd_port_t& port) {
  const ibnd_port_t* with_mask = &port;
  if (port.node->type == IB_NODE_SWITCH && port.node->ports && port.node->ports[0]) {
    with_mask = port.node->ports[0];
  }
  return field(with_mask->info, IB_PORT_CAPMASK_F) & kCapExtendedSpeeds;
}

unsigned extended_field(const ibnd_port_t& port, MAD_FIELDS name) {
  return extended_speeds(port) ? field(port.info, name) : 0;
}

FabricPort port_of(const ibnd_port_t& port) {
  FabricPort result;
  result.number = port.portnum;
  result.state = static_cast<int>(field(port.info, IB_PORT_STATE_F));
  result.physical_state = static_cast<int>(field(port.info, IB_PORT_PHYS_STATE_F));
  const bool up = result.state > 1;  // Init, Armed or Active: the link trained
  if (up) {
    result.width_lanes = width_lanes(field(port.info, IB_PORT_LINK_WIDTH_ACTIVE_F));
    result.lane_gigabits = lane_gigabits(field(port.info, IB_PORT_LINK_SPEED_ACTIVE_F),
                                         extended_field(port, IB_PORT_LINK_SPEED_EXT_ACTIVE_F));
  }
  if (const ibnd_port_t* far = port.remoteport; far && up) {
    result.remote = FabricRemote{far->node->guid, description_of(*far->node), far->portnum};
    // What both ends could run at: the common widths and speeds (iblinkinfo's "Could be").
    const unsigned widths = field(port.info, IB_PORT_LINK_WIDTH_SUPPORTED_F) &
                            field(far->info, IB_PORT_LINK_WIDTH_SUPPORTED_F);
    const unsigned speeds = field(port.info, IB_PORT_LINK_SPEED_SUPPORTED_F) &
                            field(far->info, IB_PORT_LINK_SPEED_SUPPORTED_F);
    const unsigned extended = extended_field(port, IB_PORT_LINK_SPEED_EXT_SUPPORTED_F) &
                              extended_field(*far, IB_PORT_LINK_SPEED_EXT_SUPPORTED_F);
    result.supported_width_lanes = widest_lanes(widths);
    result.supported_lane_gigabits = fastest_lane_gigabits(speeds, extended);
  }
  return result;
}

}  // namespace

std::expected<DiscoveryResult, Error> discover_fabric(const DiscoveryOptions& options) {
  ibnd_config_t config{};
  config.timeout_ms = static_cast<unsigned>(options.timeout.count());
  config.retries = static_cast<unsigned>(options.retries);
  std::vector<char> ca(options.ca.begin(), options.ca.end());
  ca.push_back('\0');
  const std::unique_ptr<ibnd_fabric_t, FabricDeleter> fabric(ibnd_discover_fabric(
      options.ca.empty() ? nullptr : ca.data(), options.ca_port, nullptr, &config));
  if (!fabric) {
    return std::unexpected(
        Error{ErrorKind::kDiscovery,
              "libibnetdisc could not discover the fabric from " +
                  (options.ca.empty() ? std::string("the default port")
                                      : options.ca + " port " + std::to_string(options.ca_port))});
  }

  DiscoveryResult result;
  result.mads = fabric->total_mads_used;
  result.model.discovered_at = std::chrono::system_clock::now();
  for (ibnd_node_t* node = fabric->nodes; node; node = node->next) {
    FabricNode out;
    out.guid = node->guid;
    out.type = type_of(*node);
    out.description = description_of(*node);
    out.port_count = node->numports;
    if (node->type == IB_NODE_SWITCH) {
      out.lid = node->smalid;
    }
    for (int p = 1; p <= node->numports; ++p) {
      const ibnd_port_t* port = node->ports ? node->ports[p] : nullptr;
      if (!port) continue;
      if (node->type != IB_NODE_SWITCH && out.lid == 0) out.lid = port->base_lid;
      out.ports.push_back(port_of(*port));
    }
    result.model.nodes.push_back(std::move(out));
  }
  apply_node_names(result.model, options.names);
  std::sort(result.model.nodes.begin(), result.model.nodes.end(),
            [](const FabricNode& a, const FabricNode& b) {
              const bool a_switch = a.type == FabricNodeType::kSwitch;
              const bool b_switch = b.type == FabricNodeType::kSwitch;
              return a_switch != b_switch ? a_switch : a.guid < b.guid;
            });
  return result;
}

void apply_node_names(FabricModel& model, const std::map<std::uint64_t, std::string>& names) {
  if (names.empty()) return;
  const auto rename = [&](std::uint64_t guid, std::string& description) {
    if (const auto it = names.find(guid); it != names.end()) description = it->second;
  };
  for (auto& node : model.nodes) {
    rename(node.guid, node.description);
    for (auto& port : node.ports) {
      if (port.remote) rename(port.remote->guid, port.remote->description);
    }
  }
}

}  // namespace ibprobe::fabric
