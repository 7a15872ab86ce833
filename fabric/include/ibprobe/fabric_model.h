// The fabric as discovery left it: nodes, their ports and the cables between them, and the
// memory of every cable seen since the exporter started, which tells a cut or downgraded cable
// from one that never was. Plain data, no I/O: discovery fills it, the collectors read it.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ibprobe::fabric {

enum class FabricNodeType { kCa, kSwitch, kRouter };

// "ca", "switch" or "router": the metric label and the discovery child's JSON spelling.
std::string_view to_string(FabricNodeType type);

struct FabricRemote {
  std::uint64_t guid;  // node GUID of the far end
  std::string description;
  int port;
};

struct FabricPort {
  int number = 0;
  int state = 0;             // PortInfo PortState: 1 Down, 2 Init, 3 Armed, 4 Active
  int physical_state = 0;    // PortInfo PortPhysicalState: 5 LinkUp, 2 Polling, ...
  int width_lanes = 0;       // active link width; 0 when the link is down
  double lane_gigabits = 0;  // active lane speed (Gb/s signalling)
  // The best both ends of the cable support; equal to the active ones on a healthy link.
  int supported_width_lanes = 0;
  double supported_lane_gigabits = 0;
  int operational_vls = 0;  // data VLs in use (OperVLs: 1, 2, 4, 8 or 15); 0 when not known
  std::optional<FabricRemote> remote;
};

struct FabricNode {
  std::uint64_t guid = 0;
  FabricNodeType type = FabricNodeType::kCa;
  std::string description;  // NodeDescription, or the node-name-map's name for it
  std::uint16_t lid = 0;    // a switch's LID (port 0); a CA's first port's LID
  int port_count = 0;
  std::vector<FabricPort> ports;  // by ascending port number, physical ports only
};

// SMInfo's SMState (IBA vol. 1 14.2.5.13).
enum class SmState { kNotActive = 0, kDiscovering = 1, kStandby = 2, kMaster = 3 };

// "not_active", "discovering", "standby" or "master": the metric label and the JSON spelling.
std::string_view to_string(SmState state);

// One subnet manager's SMInfo, as it answered at `lid`.
struct SubnetManager {
  std::uint16_t lid = 0;
  std::uint64_t guid = 0;  // the SM's port GUID
  int priority = 0;
  SmState state = SmState::kNotActive;
  std::uint32_t activity_count = 0;  // ActCount: rises while the SM works
};

struct FabricModel {
  std::vector<FabricNode> nodes;  // switches first, then by GUID
  // The local port's SM LID (0 when no SM ever set it), and the SMs that answered SMInfo: the
  // one at that LID first, then those at ports whose CapabilityMask says IsSM, by LID.
  std::uint16_t sm_lid = 0;
  std::vector<SubnetManager> subnet_managers;
  // LIDs of the ports whose PortInfo CapabilityMask has IsSM (a CA's ports, a switch's port 0):
  // where SMs other than the master answer SMInfo. Used in the discovery child only.
  std::vector<std::uint16_t> sm_ports;
  std::chrono::system_clock::time_point discovered_at;

  const FabricNode* find(std::uint64_t guid) const;
  std::size_t count(FabricNodeType type) const;
  std::size_t links() const;  // cables, each counted once
  // The SM at sm_lid when it answered as master; nullptr when none did.
  const SubnetManager* master() const;
};

// PortInfo encodings (IBA vol. 1 14.2.5.6) into lanes and Gb/s per lane.
int width_lanes(unsigned link_width);        // LinkWidthActive: 1 -> 1x, 2 -> 4x, ...
int widest_lanes(unsigned link_width_mask);  // LinkWidthSupported bits: the widest one
double lane_gigabits(unsigned speed, unsigned extended_speed);  // active values
double fastest_lane_gigabits(unsigned speed_mask, unsigned extended_speed_mask);
int operational_vls(unsigned oper_vls);  // OperVLs 1 -> VL0 ... 5 -> VL0-14: the VL count

// Every cable seen in any discovery so far, keyed by (switch or CA GUID, port), with the best
// width and speed it ever ran at. A cable that is gone from the latest model is "missing"; one
// that runs below its best is "downgraded".
class LinkHistory {
 public:
  struct Change {
    enum class Kind { kVanished, kReturned, kDowngraded } kind;
    std::uint64_t guid;
    int port;
    FabricRemote remote;
    std::string detail;  // for the log
  };
  struct Link {
    FabricRemote remote;
    int best_width_lanes = 0;
    double best_lane_gigabits = 0;
    bool present = false;
    int width_lanes = 0;
    double lane_gigabits = 0;
  };

  using Links = std::map<std::pair<std::uint64_t, int>, Link>;

  LinkHistory() = default;
  // The memory a previous run saved (--fabric.state-file).
  explicit LinkHistory(Links links) : links_(std::move(links)) {}

  // Takes in a new model; returns what changed since the previous one.
  std::vector<Change> update(const FabricModel& model);
  const Links& links() const { return links_; }

 private:
  Links links_;
};

}  // namespace ibprobe::fabric
