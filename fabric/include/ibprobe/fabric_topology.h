// The cabling plan (--fabric.topology-file) and how the discovered fabric differs from it. Pure
// functions: text in, plan out; plan and model in, one status per cable out.
#pragma once

#include <cstdint>
#include <expected>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ibprobe/fabric_error.h"
#include "ibprobe/fabric_model.h"

namespace ibprobe::fabric {

// One end of a planned cable: a node known by name (node-name-map name or NodeDescription), by
// GUID, or both, and its port.
struct PlannedEnd {
  std::string name;  // empty when the plan knows the node by GUID only
  std::optional<std::uint64_t> guid;
  int port = 0;
};

struct PlannedCable {
  PlannedEnd node;  // the switch end where the plan tells which end is a switch
  PlannedEnd remote;
  int width_lanes = 0;  // the plan's width and lane speed; 0 where it says none
  double lane_gigabits = 0;
  int line = 0;  // the plan's line that names the cable first
};

struct TopologyPlan {
  std::vector<PlannedCable> cables;
};

// Either ibnetdiscover's topology output (what operators save as their known-good state; node
// names from the `# "..."` comments, GUIDs from the "S-"/"H-"/"R-" identifiers, width and speed
// from the trailing "4xHDR") or a plain cable list, one cable per line:
//   leaf-01 12 node-0113 mlx5_0 1 [4xHDR]
// (names run up to the port number; quote a name with a number in it; `#` starts a comment; a
// name may be a GUID as 0x0002c90300100001). The first line that is neither a comment nor blank
// decides the format. kTopologyFile names the first bad line ("line N: ...").
std::expected<TopologyPlan, Error> parse_topology(std::string_view text);

enum class CableStatus { kOk, kMissing, kMiswired, kDowngraded, kUnexpected };

// "ok", "missing", "miswired", "downgraded", "unexpected": the metric's status label.
std::string_view to_string(CableStatus status);

struct CableEnd {
  std::optional<std::uint64_t> guid;  // the discovered node's, else the plan's, if any
  std::string description;            // the plan's name, else the discovered node's description
  int port = 0;
};

struct CableReport {
  CableStatus status = CableStatus::kOk;
  CableEnd node;
  CableEnd remote;
  // For a miswired cable: where each planned end's port really goes (nullopt: nowhere).
  std::optional<FabricRemote> node_found;
  std::optional<FabricRemote> remote_found;
};

// Every planned cable with its status, then every discovered cable that touches no planned end
// as unexpected (switch end first). A plan node matches the discovered node of its name when
// the name is unique in both, else the node of its GUID: a replaced HCA keeps its cables.
std::vector<CableReport> compare_topology(const TopologyPlan& plan, const FabricModel& model);

}  // namespace ibprobe::fabric
