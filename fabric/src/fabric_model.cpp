#include "ibprobe/fabric_model.h"

#include <algorithm>
#include <array>
#include <cstdio>

#include "ibprobe/enum_names.h"

namespace ibprobe::fabric {
namespace {

// LinkWidth bits (14.2.5.6): 1x, 4x, 8x, 12x, and 2x since IBA 1.3.
constexpr std::array<std::pair<unsigned, int>, 5> kWidths{
    {{1, 1}, {2, 4}, {4, 8}, {8, 12}, {16, 2}}};
// LinkSpeed bits: SDR, DDR, QDR lanes; LinkSpeedExt bits: FDR, EDR, HDR, NDR lanes.
constexpr std::array<std::pair<unsigned, double>, 3> kSpeeds{{{1, 2.5}, {2, 5.0}, {4, 10.0}}};
constexpr std::array<std::pair<unsigned, double>, 4> kExtendedSpeeds{
    {{1, 14.0625}, {2, 25.78125}, {4, 53.125}, {8, 106.25}}};

std::string describe_link(int lanes, double gigabits) {
  char text[48];
  std::snprintf(text, sizeof text, "%dx %g Gb/s per lane", lanes, gigabits);
  return text;
}

constexpr EnumNames<FabricNodeType, 3> kNodeTypeNames{{{FabricNodeType::kSwitch, "switch"},
                                                       {FabricNodeType::kRouter, "router"},
                                                       {FabricNodeType::kCa, "ca"}}};

constexpr EnumNames<SmState, 4> kSmStateNames{{{SmState::kNotActive, "not_active"},
                                               {SmState::kDiscovering, "discovering"},
                                               {SmState::kStandby, "standby"},
                                               {SmState::kMaster, "master"}}};

}  // namespace

std::string_view to_string(FabricNodeType type) {
  return name_of(kNodeTypeNames, type, "ca");
}

std::string_view to_string(SmState state) {
  return name_of(kSmStateNames, state, "not_active");
}

const SubnetManager* FabricModel::master() const {
  const auto it =
      std::find_if(subnet_managers.begin(), subnet_managers.end(), [&](const SubnetManager& sm) {
        return sm_lid != 0 && sm.lid == sm_lid && sm.state == SmState::kMaster;
      });
  return it == subnet_managers.end() ? nullptr : &*it;
}

const FabricNode* FabricModel::find(std::uint64_t guid) const {
  const auto it = std::find_if(nodes.begin(), nodes.end(),
                               [&](const FabricNode& node) { return node.guid == guid; });
  return it == nodes.end() ? nullptr : &*it;
}

std::size_t FabricModel::count(FabricNodeType type) const {
  return static_cast<std::size_t>(std::count_if(
      nodes.begin(), nodes.end(), [&](const FabricNode& node) { return node.type == type; }));
}

std::size_t FabricModel::links() const {
  std::size_t ends = 0;
  for (const auto& node : nodes) {
    for (const auto& port : node.ports) ends += port.remote ? 1 : 0;
  }
  return ends / 2;
}

int width_lanes(unsigned link_width) {
  for (const auto& [bit, lanes] : kWidths) {
    if (link_width == bit) return lanes;
  }
  return 0;
}

int operational_vls(unsigned oper_vls) {
  // IBA vol. 1 14.2.5.6 OperationalVLs: 1 VL0, 2 VL0-1, 3 VL0-3, 4 VL0-7, 5 VL0-14.
  constexpr int kCounts[] = {0, 1, 2, 4, 8, 15};
  return oper_vls < std::size(kCounts) ? kCounts[oper_vls] : 0;
}

int widest_lanes(unsigned link_width_mask) {
  int widest = 0;
  for (const auto& [bit, lanes] : kWidths) {
    if (link_width_mask & bit) widest = std::max(widest, lanes);
  }
  return widest;
}

double lane_gigabits(unsigned speed, unsigned extended_speed) {
  for (const auto& [bit, gigabits] : kExtendedSpeeds) {
    if (extended_speed == bit) return gigabits;
  }
  for (const auto& [bit, gigabits] : kSpeeds) {
    if (speed == bit) return gigabits;
  }
  return 0;
}

double fastest_lane_gigabits(unsigned speed_mask, unsigned extended_speed_mask) {
  double fastest = 0;
  for (const auto& [bit, gigabits] : kSpeeds) {
    if (speed_mask & bit) fastest = std::max(fastest, gigabits);
  }
  for (const auto& [bit, gigabits] : kExtendedSpeeds) {
    if (extended_speed_mask & bit) fastest = std::max(fastest, gigabits);
  }
  return fastest;
}

std::vector<LinkHistory::Change> LinkHistory::update(const FabricModel& model) {
  std::vector<Change> changes;
  std::map<std::pair<std::uint64_t, int>, const FabricPort*> seen;
  for (const auto& node : model.nodes) {
    for (const auto& port : node.ports) {
      if (port.remote) seen[{node.guid, port.number}] = &port;
    }
  }
  for (auto& [key, link] : links_) {
    const auto it = seen.find(key);
    if (it == seen.end()) {
      if (link.present) {
        changes.push_back({Change::Kind::kVanished, key.first, key.second, link.remote,
                           "cable gone from the fabric"});
      }
      link.present = false;
      continue;
    }
    const FabricPort& port = *it->second;
    if (!link.present) {
      changes.push_back({Change::Kind::kReturned, key.first, key.second, *port.remote,
                         "cable back, " + describe_link(port.width_lanes, port.lane_gigabits)});
    }
    const bool was_below =
        link.width_lanes < link.best_width_lanes || link.lane_gigabits < link.best_lane_gigabits;
    const bool is_below =
        port.width_lanes < link.best_width_lanes || port.lane_gigabits < link.best_lane_gigabits;
    if (is_below && (!was_below || !link.present)) {
      changes.push_back({Change::Kind::kDowngraded, key.first, key.second, *port.remote,
                         "runs at " + describe_link(port.width_lanes, port.lane_gigabits) +
                             ", was " +
                             describe_link(link.best_width_lanes, link.best_lane_gigabits)});
    }
    link.best_width_lanes = std::max(link.best_width_lanes, port.width_lanes);
    link.best_lane_gigabits = std::max(link.best_lane_gigabits, port.lane_gigabits);
    link.remote = *port.remote;
    link.present = true;
    link.width_lanes = port.width_lanes;
    link.lane_gigabits = port.lane_gigabits;
    seen.erase(it);
  }
  for (const auto& [key, port] : seen) {
    links_[key] = Link{*port->remote, port->width_lanes, port->lane_gigabits,
                       true,          port->width_lanes, port->lane_gigabits};
  }
  return changes;
}

}  // namespace ibprobe::fabric
