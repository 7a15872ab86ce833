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
// PortInfo CapabilityMask IsSM: an SM runs behind the port (master, standby or not active).
constexpr std::uint32_t kCapIsSm = 1u << 1;

struct MadPortDeleter {
  void operator()(ibmad_port* port) const { mad_rpc_close_port(port); }
};

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
  result.operational_vls = operational_vls(field(port.info, IB_PORT_OPER_VLS_F));
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

// The local port's SM LID, as the local port's own PortInfo (read by discovery) holds it: where
// infiniband-diags' sminfo sends its query.
std::uint16_t local_sm_lid(const ibnd_fabric_t& fabric) {
  const ibnd_node_t* node = fabric.from_node;
  if (!node || !node->ports || fabric.from_portnum > node->numports) return 0;
  const ibnd_port_t* port = node->ports[fabric.from_portnum];
  return port ? static_cast<std::uint16_t>(field(port->info, IB_PORT_SMLID_F)) : 0;
}

// LIDs of the ports whose CapabilityMask says IsSM: a CA's ports, a switch's port 0.
std::vector<std::uint16_t> sm_port_lids(const ibnd_fabric_t& fabric) {
  std::vector<std::uint16_t> lids;
  for (const ibnd_node_t* node = fabric.nodes; node; node = node->next) {
    if (!node->ports) continue;
    const int first = node->type == IB_NODE_SWITCH ? 0 : 1;
    const int last = node->type == IB_NODE_SWITCH ? 0 : node->numports;
    for (int p = first; p <= last; ++p) {
      const ibnd_port_t* port = node->ports[p];
      if (port && port->base_lid != 0 && (field(port->info, IB_PORT_CAPMASK_F) & kCapIsSm)) {
        lids.push_back(port->base_lid);
      }
    }
  }
  std::sort(lids.begin(), lids.end());
  lids.erase(std::unique(lids.begin(), lids.end()), lids.end());
  return lids;
}

}  // namespace

std::expected<std::vector<SubnetManager>, Error> query_subnet_managers(
    const DiscoveryOptions& options, std::uint16_t sm_lid,
    const std::vector<std::uint16_t>& sm_ports) {
  std::vector<SubnetManager> managers;
  std::vector<std::uint16_t> lids;
  if (sm_lid != 0) lids.push_back(sm_lid);
  for (const auto lid : sm_ports) {
    if (lid != sm_lid) lids.push_back(lid);
  }
  if (lids.empty()) return managers;
  int classes[] = {IB_SMI_CLASS, IB_SMI_DIRECT_CLASS};
  std::vector<char> ca(options.ca.begin(), options.ca.end());
  ca.push_back('\0');
  const std::unique_ptr<ibmad_port, MadPortDeleter> port(mad_rpc_open_port(
      options.ca.empty() ? nullptr : ca.data(), options.ca_port, classes, std::size(classes)));
  if (!port) {
    return std::unexpected(
        Error{ErrorKind::kLocalPort,
              "cannot open " +
                  (options.ca.empty() ? std::string("the default port")
                                      : options.ca + " port " + std::to_string(options.ca_port)) +
                  " for SMInfo"});
  }
  // An SM that does not answer is the expected case here, not one for libibmad's stderr line.
  madrpc_show_errors(0);
  mad_rpc_set_timeout(port.get(), static_cast<int>(options.timeout.count()));
  mad_rpc_set_retries(port.get(), options.retries);
  for (const auto lid : lids) {
    ib_portid_t target{};
    ib_portid_set(&target, lid, 0, 0);
    std::uint8_t buffer[IB_SMP_DATA_SIZE] = {};
    if (!smp_query_via(buffer, &target, IB_ATTR_SMINFO, 0, 0, port.get())) continue;
    std::uint64_t guid = 0;
    std::uint32_t activity = 0, priority = 0, state = 0;
    mad_decode_field(buffer, IB_SMINFO_GUID_F, &guid);
    mad_decode_field(buffer, IB_SMINFO_ACT_F, &activity);
    mad_decode_field(buffer, IB_SMINFO_PRIO_F, &priority);
    mad_decode_field(buffer, IB_SMINFO_STATE_F, &state);
    if (state > static_cast<std::uint32_t>(SmState::kMaster)) continue;  // reserved values
    managers.push_back(
        {lid, guid, static_cast<int>(priority), static_cast<SmState>(state), activity});
  }
  return managers;
}

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
  result.model.sm_lid = local_sm_lid(*fabric);
  result.model.sm_ports = sm_port_lids(*fabric);
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
