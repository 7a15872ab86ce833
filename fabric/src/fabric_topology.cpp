// The cabling plan in two formats and its comparison with the discovered model. Both parsers
// walk one line at a time with a cursor: the files come from operators and scripts, so every
// refusal names its line and what was wanted there.
#include "ibprobe/fabric_topology.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>

#include "ibprobe/enum_names.h"
#include "ibprobe/fabric.h"
#include "text_lines.h"

namespace ibprobe::fabric {
namespace {

constexpr EnumNames<CableStatus, 5> kCableStatusNames{{{CableStatus::kOk, "ok"},
                                                       {CableStatus::kMissing, "missing"},
                                                       {CableStatus::kMiswired, "miswired"},
                                                       {CableStatus::kDowngraded, "downgraded"},
                                                       {CableStatus::kUnexpected, "unexpected"}}};

// ibnetdiscover's speed names (infiniband-diags' dump_linkspeed_compat and ext variants) as the
// lane rates fabric_model.cpp decodes PortInfo into.
constexpr std::array<std::pair<std::string_view, double>, 9> kPlanSpeeds{{{"SDR", 2.5},
                                                                          {"DDR", 5.0},
                                                                          {"QDR", 10.0},
                                                                          {"FDR10", 10.3125},
                                                                          {"FDR", 14.0625},
                                                                          {"EDR", 25.78125},
                                                                          {"HDR", 53.125},
                                                                          {"NDR", 106.25},
                                                                          {"XDR", 212.5}}};
constexpr std::array kPlanWidths{1, 2, 4, 8, 12};
constexpr int kMaxPort = 254;  // PortInfo numbers physical ports 1-254

std::unexpected<Error> bad_line(int line, const std::string& why) {
  return std::unexpected(
      Error{ErrorKind::kTopologyFile, "line " + std::to_string(line) + ": " + why});
}

// A quotable piece of a bad line, short enough for a log line.
std::string excerpt(std::string_view text) {
  constexpr std::size_t kLongest = 60;
  std::string shown;
  for (const char c : text.substr(0, kLongest)) {
    shown += c == '\t' ? ' ' : std::isprint(static_cast<unsigned char>(c)) ? c : '?';
  }
  return "'" + shown + (text.size() > kLongest ? "...'" : "'");
}

struct PlanRate {
  int width_lanes = 0;
  double lane_gigabits = 0;
};

// "4xHDR", "12xQDR": ibnetdiscover's width and speed of a port.
std::optional<PlanRate> parse_plan_rate(std::string_view text) {
  const auto x = text.find('x');
  if (x == std::string_view::npos) return std::nullopt;
  int lanes = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + x, lanes);
  if (ec != std::errc() || end != text.data() + x ||
      std::find(kPlanWidths.begin(), kPlanWidths.end(), lanes) == kPlanWidths.end()) {
    return std::nullopt;
  }
  const auto speed = text.substr(x + 1);
  for (const auto& [name, gigabits] : kPlanSpeeds) {
    if (speed == name) return PlanRate{lanes, gigabits};
  }
  return std::nullopt;
}

// Reads one line left to right.
class LineCursor {
 public:
  explicit LineCursor(std::string_view line) : rest_(line) {}

  std::string_view rest() const { return rest_; }
  bool at_end() const { return rest_.empty(); }
  bool skip_blanks() {
    const auto before = rest_.size();
    rest_.remove_prefix(std::min(rest_.find_first_not_of(" \t"), rest_.size()));
    return rest_.size() != before;
  }
  bool take(char c) {
    if (rest_.empty() || rest_.front() != c) return false;
    rest_.remove_prefix(1);
    return true;
  }
  bool take(std::string_view word) {
    if (!rest_.starts_with(word)) return false;
    rest_.remove_prefix(word.size());
    return true;
  }
  std::optional<int> decimal() {
    int value = 0;
    const auto [end, ec] = std::from_chars(rest_.data(), rest_.data() + rest_.size(), value);
    if (ec != std::errc() || end == rest_.data()) return std::nullopt;
    rest_.remove_prefix(static_cast<std::size_t>(end - rest_.data()));
    return value;
  }
  // "text" without escapes, as ibnetdiscover writes identifiers and descriptions.
  std::optional<std::string_view> quoted() {
    if (!take('"')) return std::nullopt;
    const auto close = rest_.find('"');
    if (close == std::string_view::npos) return std::nullopt;
    const auto text = rest_.substr(0, close);
    rest_.remove_prefix(close + 1);
    return text;
  }
  // A port GUID ibnetdiscover adds after a CA's port number: "(100005)".
  bool skip_port_guid() {
    if (!take('(')) return true;
    const auto close = rest_.find(')');
    if (close == std::string_view::npos || close == 0 || close > 16) return false;
    std::uint64_t guid = 0;
    const auto [end, ec] = std::from_chars(rest_.data(), rest_.data() + close, guid, 16);
    if (ec != std::errc() || end != rest_.data() + close) return false;
    rest_.remove_prefix(close + 1);
    return true;
  }
  // A port number "[N]", and an extended port number "[ext N]" after it, which is ignored.
  std::optional<int> port() {
    if (!take('[')) return std::nullopt;
    const auto number = decimal();
    if (!number || !take(']')) return std::nullopt;
    if (take("[ext ")) {
      if (!decimal() || !take(']')) return std::nullopt;
    }
    return number;
  }

 private:
  std::string_view rest_;
};

bool is_meaningless(std::string_view line) {
  const auto first = line.find_first_not_of(" \t");
  return first == std::string_view::npos || line[first] == '#';
}

// --- ibnetdiscover's topology output ---------------------------------------------------------

struct DiscoveredNodeLine {
  std::string description;
  FabricNodeType type = FabricNodeType::kCa;
  int ports = 0;
};

struct PortLine {
  std::string node_id;
  int port = 0;
  std::string remote_id;
  int remote_port = 0;
  std::string remote_description;  // from the comment, for nodes without a header of their own
  PlanRate rate;
  int line = 0;
};

constexpr std::array<std::pair<std::string_view, FabricNodeType>, 3> kNodeKeywords{
    {{"Switch", FabricNodeType::kSwitch},
     {"Ca", FabricNodeType::kCa},
     {"Rt", FabricNodeType::kRouter}}};
constexpr std::array<std::string_view, 6> kAttributeKeywords{
    "vendid=", "devid=", "sysimgguid=", "switchguid=", "caguid=", "rtguid="};

bool starts_ibnetdiscover(std::string_view line) {
  line.remove_prefix(std::min(line.find_first_not_of(" \t"), line.size()));
  if (line.starts_with('[')) return true;
  for (const auto& [keyword, type] : kNodeKeywords) {
    if (line.starts_with(keyword) && line.size() > keyword.size() &&
        (line[keyword.size()] == ' ' || line[keyword.size()] == '\t')) {
      return true;
    }
  }
  return std::any_of(kAttributeKeywords.begin(), kAttributeKeywords.end(),
                     [&](std::string_view keyword) { return line.starts_with(keyword); });
}

// "S-0002c90300100001" (switch), "H-..." (CA), "R-..." (router): the node GUID.
std::optional<std::uint64_t> guid_of_id(std::string_view id) {
  if (id.size() != 18 || id[1] != '-' || (id[0] != 'S' && id[0] != 'H' && id[0] != 'R')) {
    return std::nullopt;
  }
  return parse_guid(id.substr(2));
}

constexpr std::string_view kWantId =
    "want \"S-\", \"H-\" or \"R-\" and a 16-digit GUID as node identifier, got ";

// The first quoted text of a comment and, when `rate` is given, its last word when that is a
// width and speed.
void read_comment(std::string_view comment, std::string* description, PlanRate* rate) {
  LineCursor cursor(comment.substr(std::min(comment.find('"'), comment.size())));
  if (const auto text = cursor.quoted()) *description = std::string(*text);
  if (!rate) return;
  while (!comment.empty() && (comment.back() == ' ' || comment.back() == '\t')) {
    comment.remove_suffix(1);
  }
  const auto space = comment.find_last_of(" \t");
  const auto last = space == std::string_view::npos ? comment : comment.substr(space + 1);
  if (const auto parsed = parse_plan_rate(last)) *rate = *parsed;
}

// One end of a cable: a node's identifier in the file and a port.
using EndKey = std::pair<std::string, int>;

std::expected<TopologyPlan, Error> parse_ibnetdiscover(std::string_view text) {
  std::map<std::string, DiscoveredNodeLine, std::less<>> nodes;
  std::vector<PortLine> ports;
  std::string current;               // the node whose port lines follow
  std::map<EndKey, int> ports_seen;  // a node's port, to the line that lists it
  auto parsed =
      for_each_line(text, [&](int number, std::string_view line) -> std::expected<void, Error> {
        if (is_meaningless(line)) return {};
        LineCursor cursor(line);
        cursor.skip_blanks();
        for (const auto keyword : kAttributeKeywords) {
          if (cursor.take(keyword)) return {};
        }
        for (const auto& [keyword, type] : kNodeKeywords) {
          if (!cursor.take(keyword)) continue;
          cursor.skip_blanks();
          const auto count = cursor.decimal();
          cursor.skip_blanks();
          const auto id = cursor.quoted();
          if (!count || *count < 1 || *count > kMaxPort || !id || id->empty()) {
            return bad_line(number, "want " + std::string(keyword) +
                                        " PORTS \"ID\" with 1-254 ports, got " + excerpt(line));
          }
          if (!guid_of_id(*id)) return bad_line(number, std::string(kWantId) + excerpt(*id));
          cursor.skip_blanks();
          std::string description;
          if (cursor.take('#')) {
            read_comment(cursor.rest(), &description, nullptr);
          } else if (!cursor.at_end()) {
            return bad_line(number, "text after the node's identifier: " + excerpt(cursor.rest()));
          }
          if (nodes.contains(*id)) {
            return bad_line(number, "node \"" + std::string(*id) + "\" listed twice");
          }
          nodes[std::string(*id)] = DiscoveredNodeLine{std::move(description), type, *count};
          current = std::string(*id);
          return {};
        }
        PortLine port;
        port.line = number;
        const auto local = cursor.port();
        if (!local) {
          return bad_line(number,
                          "not a node header, port line or node attribute: " + excerpt(line));
        }
        if (current.empty()) {
          return bad_line(number, "port line before any node header");
        }
        const auto& node = nodes.find(current)->second;
        if (*local < 1 || *local > node.ports) {
          return bad_line(number, "port " + std::to_string(*local) + " of a node with " +
                                      std::to_string(node.ports) + " ports");
        }
        cursor.skip_blanks();
        const auto remote =
            cursor.skip_port_guid() ? (cursor.skip_blanks(), cursor.quoted()) : std::nullopt;
        const auto remote_port = remote ? cursor.port() : std::nullopt;
        if (!remote || remote->empty() || !remote_port || *remote_port < 1 ||
            *remote_port > kMaxPort || !cursor.skip_port_guid()) {
          return bad_line(number,
                          "want [PORT] \"ID\"[PORT] with ports 1-254, got " + excerpt(line));
        }
        if (!guid_of_id(*remote)) return bad_line(number, std::string(kWantId) + excerpt(*remote));
        cursor.skip_blanks();
        if (cursor.take('#')) {
          read_comment(cursor.rest(), &port.remote_description, &port.rate);
        } else if (!cursor.at_end()) {
          return bad_line(number, "text after the far end's port: " + excerpt(cursor.rest()));
        }
        if (const auto [it, fresh] = ports_seen.try_emplace({current, *local}, number); !fresh) {
          return bad_line(number, "port " + std::to_string(*local) +
                                      " listed twice (first on line " + std::to_string(it->second) +
                                      ")");
        }
        port.node_id = current;
        port.port = *local;
        port.remote_id = std::string(*remote);
        port.remote_port = *remote_port;
        ports.push_back(std::move(port));
        return {};
      });
  if (!parsed) return std::unexpected(std::move(parsed.error()));

  // Every cable is listed from both ends when both are in the file: once in the plan, and both
  // listings must agree.
  std::map<EndKey, const PortLine*> by_end;
  for (const auto& port : ports) by_end[{port.node_id, port.port}] = &port;
  auto end_of = [&](const std::string& id, int number, const std::string& fallback_description) {
    PlannedEnd end;
    end.guid = guid_of_id(id);
    const auto node = nodes.find(id);
    end.name = node != nodes.end() && !node->second.description.empty() ? node->second.description
                                                                        : fallback_description;
    end.port = number;
    return end;
  };
  auto is_switch = [&](const std::string& id) {
    const auto node = nodes.find(id);
    return node != nodes.end() ? node->second.type == FabricNodeType::kSwitch
                               : id.starts_with("S-");
  };
  TopologyPlan plan;
  std::set<std::pair<EndKey, EndKey>> planned;
  std::map<EndKey, const PortLine*> far_ends;  // a far end, to the line that names it
  std::map<std::uint64_t, std::string> ids_by_guid;
  for (const auto& port : ports) {
    EndKey here{port.node_id, port.port};
    EndKey there{port.remote_id, port.remote_port};
    if (here == there) return bad_line(port.line, "a cable from a port to itself");
    for (const auto* id : {&port.node_id, &port.remote_id}) {
      const auto guid = guid_of_id(*id);
      if (const auto [it, fresh] = ids_by_guid.try_emplace(*guid, *id);
          !fresh && it->second != *id) {
        return bad_line(port.line, "\"" + *id + "\" has the GUID of \"" + it->second + "\"");
      }
    }
    if (const auto [it, fresh] = far_ends.try_emplace(there, &port); !fresh) {
      return bad_line(port.line, "\"" + port.remote_id + "\" port " +
                                     std::to_string(port.remote_port) + " is the far end of line " +
                                     std::to_string(it->second->line) + " already");
    }
    if (const auto other = by_end.find(there); other != by_end.end()) {
      const PortLine& back = *other->second;
      if (back.remote_id != port.node_id || back.remote_port != port.port) {
        return bad_line(port.line, "\"" + port.remote_id + "\" port " +
                                       std::to_string(port.remote_port) + " goes to \"" +
                                       back.remote_id + "\" port " +
                                       std::to_string(back.remote_port) + " on line " +
                                       std::to_string(back.line) + ", not here");
      }
    }
    if (!planned.insert(std::minmax(here, there)).second) continue;
    PlannedCable cable;
    cable.node = end_of(port.node_id, port.port, "");
    cable.remote = end_of(port.remote_id, port.remote_port, port.remote_description);
    cable.width_lanes = port.rate.width_lanes;
    cable.lane_gigabits = port.rate.lane_gigabits;
    cable.line = port.line;
    if (!is_switch(port.node_id) && is_switch(port.remote_id)) std::swap(cable.node, cable.remote);
    plan.cables.push_back(std::move(cable));
  }
  return plan;
}

// --- the plain cable list ----------------------------------------------------------------------

struct ListToken {
  std::string_view text;
  bool quoted = false;
};

std::optional<int> port_number(const ListToken& token) {
  if (token.quoted || token.text.empty() ||
      !std::all_of(token.text.begin(), token.text.end(),
                   [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  int value = 0;
  const auto [end, ec] =
      std::from_chars(token.text.data(), token.text.data() + token.text.size(), value);
  if (ec != std::errc()) return kMaxPort + 1;
  return value;
}

// A name that is a GUID in one of its explicit spellings, "0x..." or "0002:c903:0010:0001".
std::optional<std::uint64_t> guid_name(std::string_view name) {
  if (!name.starts_with("0x") && !(name.size() == 19 && name[4] == ':')) return std::nullopt;
  return parse_guid(name);
}

std::expected<TopologyPlan, Error> parse_cable_list(std::string_view text) {
  TopologyPlan plan;
  std::map<std::pair<std::string, int>, int> ends_seen;  // node and port, to its line
  constexpr std::string_view kWant =
      "want NODE PORT NODE PORT [WIDTHxSPEED], as leaf-01 12 node-0113 mlx5_0 1";
  auto parsed =
      for_each_line(text, [&](int number, std::string_view line) -> std::expected<void, Error> {
        if (is_meaningless(line)) return {};
        std::vector<ListToken> tokens;
        LineCursor cursor(line);
        while (true) {
          cursor.skip_blanks();
          if (cursor.at_end() || cursor.rest().starts_with('#')) break;
          if (cursor.rest().starts_with('"')) {
            const auto text = cursor.quoted();
            if (!text) return bad_line(number, "unterminated quoted name");
            tokens.push_back({*text, true});
            continue;
          }
          const auto rest = cursor.rest();
          const auto word = rest.substr(0, std::min(rest.find_first_of(" \t"), rest.size()));
          tokens.push_back({word, false});
          cursor = LineCursor(rest.substr(word.size()));
        }
        std::size_t at = 0;
        auto end = [&]() -> std::optional<PlannedEnd> {
          std::string name;
          while (at < tokens.size() && !port_number(tokens[at])) {
            if (!name.empty()) name += ' ';
            name += tokens[at++].text;
          }
          if (name.empty() || at == tokens.size()) return std::nullopt;
          const int port = *port_number(tokens[at++]);
          PlannedEnd planned;
          planned.guid = guid_name(name);
          if (!planned.guid) planned.name = std::move(name);
          planned.port = port;
          return planned;
        };
        auto node = end();
        auto remote = node ? end() : std::nullopt;
        if (!node || !remote)
          return bad_line(number, std::string(kWant) + "; got " + excerpt(line));
        PlannedCable cable{std::move(*node), std::move(*remote), 0, 0, number};
        for (const auto* planned : {&cable.node, &cable.remote}) {
          if (planned->port < 1 || planned->port > kMaxPort) {
            return bad_line(number, "port " + std::to_string(planned->port) + " is not 1-254");
          }
        }
        if (at < tokens.size()) {
          const auto rate = tokens[at].quoted ? std::nullopt : parse_plan_rate(tokens[at].text);
          if (!rate || at + 1 < tokens.size()) {
            return bad_line(number,
                            "after the ports, want at most a width and "
                            "speed as 4xHDR; got " +
                                excerpt(tokens[at].text));
          }
          cable.width_lanes = rate->width_lanes;
          cable.lane_gigabits = rate->lane_gigabits;
        }
        if (cable.node.name == cable.remote.name && cable.node.guid == cable.remote.guid &&
            cable.node.port == cable.remote.port) {
          return bad_line(number, "a cable from a port to itself");
        }
        for (const auto* planned : {&cable.node, &cable.remote}) {
          const std::string key = planned->guid ? format_guid(*planned->guid) : planned->name;
          if (const auto [it, fresh] = ends_seen.try_emplace({key, planned->port}, number);
              !fresh) {
            return bad_line(number, key + " port " + std::to_string(planned->port) +
                                        " is planned on line " + std::to_string(it->second) +
                                        " already");
          }
        }
        plan.cables.push_back(std::move(cable));
        return {};
      });
  if (!parsed) return std::unexpected(std::move(parsed.error()));
  return plan;
}

// --- comparison --------------------------------------------------------------------------------

// The discovered node each planned node is: by a name unique in both, else by GUID.
class PlanMatcher {
 public:
  PlanMatcher(const TopologyPlan& plan, const FabricModel& model) {
    std::map<std::string, std::set<std::string>> identities;  // plan name -> node identities
    for (const auto& cable : plan.cables) {
      for (const auto* end : {&cable.node, &cable.remote}) {
        if (end->name.empty()) continue;
        identities[end->name].insert(end->guid ? format_guid(*end->guid) : end->name);
      }
    }
    for (const auto& [name, ids] : identities) {
      if (ids.size() == 1) unique_plan_names_.insert(name);
    }
    for (const auto& node : model.nodes) {
      by_guid_.emplace(node.guid, &node);
      const auto [it, fresh] = by_name_.try_emplace(node.description, &node);
      if (!fresh) it->second = nullptr;  // two nodes of one name: match by GUID instead
    }
  }

  const FabricNode* find(const PlannedEnd& end) const {
    if (!end.name.empty() && unique_plan_names_.contains(end.name)) {
      const auto it = by_name_.find(end.name);
      if (it != by_name_.end() && it->second) return it->second;
    }
    return end.guid ? by_guid(*end.guid) : nullptr;
  }

  // FabricModel::find walks every node; a fabric of 10,000 nodes is compared on every scrape.
  const FabricNode* by_guid(std::uint64_t guid) const {
    const auto it = by_guid_.find(guid);
    return it == by_guid_.end() ? nullptr : it->second;
  }

 private:
  std::unordered_map<std::uint64_t, const FabricNode*> by_guid_;
  std::set<std::string> unique_plan_names_;
  std::map<std::string, const FabricNode*> by_name_;
};

const FabricPort* port_of(const FabricNode* node, int number) {
  if (!node) return nullptr;
  const auto it = std::find_if(node->ports.begin(), node->ports.end(),
                               [&](const FabricPort& port) { return port.number == number; });
  return it == node->ports.end() ? nullptr : &*it;
}

std::optional<FabricRemote> far_end_of(const FabricPort* port) {
  return port ? port->remote : std::nullopt;
}

CableEnd reported_end(const PlannedEnd& planned, const FabricNode* found) {
  CableEnd end;
  end.guid = found ? std::optional(found->guid) : planned.guid;
  end.description = !planned.name.empty() ? planned.name : found ? found->description : "";
  end.port = planned.port;
  return end;
}

CableEnd discovered_end(const FabricNode& node, int port) {
  return CableEnd{node.guid, node.description, port};
}

}  // namespace

std::string_view to_string(CableStatus status) {
  return name_of(kCableStatusNames, status, "unknown");
}

std::expected<TopologyPlan, Error> parse_topology(std::string_view text) {
  std::string_view first;
  for_each_line(text, [&](int, std::string_view line) -> std::expected<void, Error> {
    if (first.empty() && !is_meaningless(line)) first = line;
    return {};
  });
  return starts_ibnetdiscover(first) ? parse_ibnetdiscover(text) : parse_cable_list(text);
}

std::vector<CableReport> compare_topology(const TopologyPlan& plan, const FabricModel& model) {
  const PlanMatcher matcher(plan, model);
  std::vector<CableReport> reports;
  std::set<std::pair<std::uint64_t, int>> planned_ends;
  for (const auto& cable : plan.cables) {
    const FabricNode* node = matcher.find(cable.node);
    const FabricNode* remote = matcher.find(cable.remote);
    if (node) planned_ends.insert({node->guid, cable.node.port});
    if (remote) planned_ends.insert({remote->guid, cable.remote.port});
    const FabricPort* node_port = port_of(node, cable.node.port);
    const auto node_found = far_end_of(node_port);
    const auto remote_found = far_end_of(port_of(remote, cable.remote.port));
    CableReport report;
    report.node = reported_end(cable.node, node);
    report.remote = reported_end(cable.remote, remote);
    if (node_found && remote && node_found->guid == remote->guid &&
        node_found->port == cable.remote.port) {
      const bool narrower = node_port->width_lanes < cable.width_lanes;
      // Speeds compare with a margin: the plan's names and PortInfo's codes map to one value
      // each, but a float compared for equality is a trap for the next reader.
      const bool slower = node_port->lane_gigabits + 0.01 < cable.lane_gigabits;
      report.status = narrower || slower ? CableStatus::kDowngraded : CableStatus::kOk;
    } else if (!node_found && !remote_found) {
      report.status = CableStatus::kMissing;
    } else {
      report.status = CableStatus::kMiswired;
      report.node_found = node_found;
      report.remote_found = remote_found;
    }
    reports.push_back(std::move(report));
  }
  for (const auto& node : model.nodes) {
    for (const auto& port : node.ports) {
      if (!port.remote) continue;
      const FabricNode* far = matcher.by_guid(port.remote->guid);
      const bool far_is_switch = far && far->type == FabricNodeType::kSwitch;
      const bool here_is_switch = node.type == FabricNodeType::kSwitch;
      // Each cable once, from its switch end (the lower GUID and port between two alike).
      const bool listed_from_here =
          here_is_switch != far_is_switch
              ? here_is_switch
              : std::pair(node.guid, port.number) < std::pair(port.remote->guid, port.remote->port);
      if (!listed_from_here || planned_ends.contains({node.guid, port.number}) ||
          planned_ends.contains({port.remote->guid, port.remote->port})) {
        continue;
      }
      CableReport report;
      report.status = CableStatus::kUnexpected;
      report.node = discovered_end(node, port.number);
      report.remote =
          far ? discovered_end(*far, port.remote->port)
              : CableEnd{port.remote->guid, port.remote->description, port.remote->port};
      reports.push_back(std::move(report));
    }
  }
  return reports;
}

}  // namespace ibprobe::fabric
