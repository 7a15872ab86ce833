// The fabric: a discovery thread keeps the model (the last good one when a discovery fails), and
// reads of switch ports go through one umad port: per switch, ClassPortInfo once (cached), then
// PortCounters and PortCountersExtended of every port, two MADs per port per read, and then each
// of the three detail attributes whose base counter moved since it was last read (detail_memory.h),
// of switches whose PMA has not answered "not supported" (what a PMA supports is learned again
// after each discovery).
#include "ibprobe/fabric.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <expected>
#include <mutex>
#include <stop_token>
#include <thread>
#include <unordered_map>

#include "detail_memory.h"
#include "fabric_state.h"
#include "ibprobe/fabric_discovery.h"
#include "ibprobe/fabric_topology.h"
#include "mad_exchange.h"
#include "remote_pma_internal.h"
#include "text_lines.h"

namespace ibprobe::fabric {

using collectors::ErrorSink;
using collectors::FabricCollector;
using collectors::MetricSet;
using collectors::ReadError;
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr auto kGauge = prometheus::MetricType::Gauge;
constexpr auto kCounter = prometheus::MetricType::Counter;

constexpr std::array kReasons = {
    ReadError::kTimeout,        ReadError::kMadStatus,    ReadError::kBudgetExceeded,
    ReadError::kMalformed,      ReadError::kNotSupported, ReadError::kIo,
    ReadError::kPermission,     ReadError::kInvalid,      ReadError::kNotFound,
    ReadError::kNotImplemented, ReadError::kNoPma};

// PortExtendedSpeedsCounters count 64b/66b blocks and FEC codewords: links at FDR and faster.
// SDR, DDR and QDR lanes (8b/10b, no FEC) have nothing to count there.
constexpr double kFirstExtendedLaneGigabits = 14.0;
bool runs_extended_speed(const FabricPort& port) {
  return port.lane_gigabits >= kFirstExtendedLaneGigabits;
}

double seconds_since_epoch(std::chrono::system_clock::time_point when) {
  return std::chrono::duration<double>(when.time_since_epoch()).count();
}

// Counts what a read lost, by reason, and passes every record on for the log.
class CountingErrors final : public ErrorSink {
 public:
  explicit CountingErrors(ErrorSink& next) : next_(next) {}
  void record(ReadError reason, const std::filesystem::path& path) override {
    ++counts_[static_cast<std::size_t>(reason)];
    next_.record(reason, path);
  }
  std::size_t count(ReadError reason) const { return counts_[static_cast<std::size_t>(reason)]; }

 private:
  ErrorSink& next_;
  std::array<std::size_t, 16> counts_{};
};

// The SMs the served model's discovery asked SMInfo of: whether the local port's SM answered as
// master, and each answering SM's identity, state and ActCount.
void add_subnet_managers(const FabricModel& model, MetricSet& out) {
  out.add("rdma_fabric_sm_master_present",
          "1 when the SM at the local port's SM LID answered SMInfo as master at the last good "
          "discovery; 0 when no SM LID is set or no master answered there.",
          kGauge, {}, model.master() ? 1 : 0);
  for (const auto& sm : model.subnet_managers) {
    MetricSet::Labels identity{{"lid", std::to_string(sm.lid)}, {"guid", format_guid(sm.guid)}};
    auto info = identity;
    info.emplace_back("state", std::string(to_string(sm.state)));
    info.emplace_back("priority", std::to_string(sm.priority));
    out.add("rdma_fabric_sm_info",
            "1 for each subnet manager that answered SMInfo: its LID, port GUID, SMState "
            "(not_active, discovering, standby, master) and priority.",
            kGauge, info, 1);
    out.add("rdma_fabric_sm_activity_count",
            "SMInfo ActCount of the subnet manager: rises while it works (a 32-bit count that "
            "wraps and restarts with the SM).",
            kGauge, identity, sm.activity_count);
  }
}

MetricSet::Labels port_identity(const FabricNode& node, int port,
                                const std::optional<FabricRemote>& remote) {
  MetricSet::Labels labels{{"node_guid", format_guid(node.guid)},
                           {"node_description", node.description},
                           {"port", std::to_string(port)}};
  if (remote) {
    labels.emplace_back("remote_guid", format_guid(remote->guid));
    labels.emplace_back("remote_description", remote->description);
    labels.emplace_back("remote_port", std::to_string(remote->port));
  }
  return labels;
}

void add_link_series(MetricSet& out, MetricSet::LabelSet identity, const FabricPort& port) {
  out.add("rdma_fabric_port_state",
          "PortInfo PortState of the switch port: 1 Down, 2 Init, 3 Armed, 4 Active.", kGauge,
          identity, port.state);
  out.add("rdma_fabric_port_physical_state",
          "PortInfo PortPhysicalState: 2 Polling, 3 Disabled, 4 PortConfigurationTraining, 5 "
          "LinkUp, 6 LinkErrorRecovery.",
          kGauge, identity, port.physical_state);
  if (!port.remote) return;
  out.add("rdma_fabric_port_link_width_lanes", "Active link width of the cable, in lanes.", kGauge,
          identity, port.width_lanes);
  out.add("rdma_fabric_port_link_lane_speed_gigabits",
          "Active signalling rate of each lane of the cable (Gb/s: 2.5 SDR ... 106.25 NDR).",
          kGauge, identity, port.lane_gigabits);
  constexpr std::string_view kBelowHelp =
      "1 when the cable runs narrower (kind=width) or slower (kind=speed) than the best both of "
      "its ends support, as iblinkinfo's \"Could be\".";
  out.add("rdma_fabric_port_link_below_capability", kBelowHelp, kGauge, identity,
          {{"kind", "width"}}, port.width_lanes < port.supported_width_lanes ? 1 : 0);
  out.add("rdma_fabric_port_link_below_capability", kBelowHelp, kGauge, identity,
          {{"kind", "speed"}}, port.lane_gigabits < port.supported_lane_gigabits ? 1 : 0);
}

std::expected<std::string, Error> read_whole_file(const std::filesystem::path& path, ErrorKind kind,
                                                  std::string_view what) {
  std::string text;
  auto* file = std::fopen(path.c_str(), "r");
  if (!file) {
    return std::unexpected(Error{kind, "cannot read " + std::string(what) + " " + path.string() +
                                           ": " + std::strerror(errno)});
  }
  char buffer[4096];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, file)) > 0) text.append(buffer, n);
  const bool failed = std::ferror(file) != 0;
  std::fclose(file);
  if (failed) {
    return std::unexpected(Error{kind, "cannot read " + std::string(what) + " " + path.string()});
  }
  return text;
}

std::expected<std::map<std::uint64_t, std::string>, Error> load_node_name_map(
    const std::filesystem::path& path) {
  std::map<std::uint64_t, std::string> names;
  if (path.empty()) return names;
  const auto text = read_whole_file(path, ErrorKind::kNodeNameMap, "node-name-map");
  if (!text) return std::unexpected(text.error());
  auto entries = parse_node_name_map(*text);
  if (!entries) {
    return std::unexpected(
        Error{ErrorKind::kNodeNameMap, path.string() + ": " + entries.error().message});
  }
  for (auto& [guid, name] : *entries) names[guid] = std::move(name);
  return names;
}

std::expected<TopologyPlan, Error> load_topology(const std::filesystem::path& path) {
  const auto text = read_whole_file(path, ErrorKind::kTopologyFile, "topology file");
  if (!text) return std::unexpected(text.error());
  auto plan = parse_topology(*text);
  if (!plan) {
    return std::unexpected(
        Error{ErrorKind::kTopologyFile, path.string() + ": " + plan.error().message});
  }
  return plan;
}

void add_cable_end(MetricSet::Labels& labels, std::string_view prefix, const CableEnd& end) {
  labels.emplace_back(std::string(prefix) + "guid", end.guid ? format_guid(*end.guid) : "");
  labels.emplace_back(std::string(prefix) + "description", end.description);
  labels.emplace_back(prefix == "node_" ? "port" : std::string(prefix) + "port",
                      std::to_string(end.port));
}

// Where a miswired end really goes: empty labels for a port with no cable.
void add_found_end(MetricSet::Labels& labels, std::string_view prefix,
                   const std::optional<FabricRemote>& found) {
  labels.emplace_back(std::string(prefix) + "guid", found ? format_guid(found->guid) : "");
  labels.emplace_back(std::string(prefix) + "description", found ? found->description : "");
  labels.emplace_back(std::string(prefix) + "port", found ? std::to_string(found->port) : "");
}

// Every planned cable's status against the served model, every cable the plan lacks, and the
// count of each status.
void add_cable_statuses(const TopologyPlan& plan, const FabricModel& model, MetricSet& out) {
  constexpr std::array kStatuses = {CableStatus::kOk, CableStatus::kMissing, CableStatus::kMiswired,
                                    CableStatus::kDowngraded, CableStatus::kUnexpected};
  std::array<std::size_t, kStatuses.size()> counts{};
  for (const auto& report : compare_topology(plan, model)) {
    ++counts[static_cast<std::size_t>(report.status)];
    MetricSet::Labels labels{{"status", std::string(to_string(report.status))}};
    add_cable_end(labels, "node_", report.node);
    add_cable_end(labels, "remote_", report.remote);
    if (report.status == CableStatus::kMiswired) {
      add_found_end(labels, "node_found_", report.node_found);
      add_found_end(labels, "remote_found_", report.remote_found);
    }
    out.add("rdma_fabric_cable_status",
            "1 per cable of the topology file by its status against the latest model (ok, "
            "missing, miswired with where each end really goes in node_found_* and "
            "remote_found_*, downgraded below the plan's width or speed), and per discovered "
            "cable the plan lacks (unexpected).",
            kGauge, labels, 1);
  }
  for (const auto status : kStatuses) {
    out.add("rdma_fabric_cables", "Cables of the topology file and unexpected ones, by status.",
            kGauge, {{"status", std::string(to_string(status))}},
            static_cast<double>(counts[static_cast<std::size_t>(status)]));
  }
}

}  // namespace

std::optional<std::uint64_t> parse_guid(std::string_view text) {
  std::string digits;
  if (text.starts_with("0x") || text.starts_with("0X")) text.remove_prefix(2);
  if (text.size() == 19 && text[4] == ':' && text[9] == ':' && text[14] == ':') {
    for (std::size_t i = 0; i < text.size(); ++i) {
      if (i % 5 != 4) digits += text[i];
    }
  } else {
    digits = text;
  }
  if (digits.empty() || digits.size() > 16) return std::nullopt;
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value, 16);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return value;
}

std::expected<std::vector<std::pair<std::uint64_t, std::string>>, Error> parse_node_name_map(
    std::string_view text) {
  std::vector<std::pair<std::uint64_t, std::string>> entries;
  auto read =
      for_each_line(text, [&](int number, std::string_view line) -> std::expected<void, Error> {
        const auto first = line.find_first_not_of(" \t\r");
        if (first == std::string_view::npos || line[first] == '#') return {};
        line.remove_prefix(first);
        const auto space = line.find_first_of(" \t");
        const auto guid = parse_guid(line.substr(0, space));
        auto bad = [&](const std::string& why) {
          return std::unexpected(
              Error{ErrorKind::kNodeNameMap,
                    "line " + std::to_string(number) + ": " + why + " (want GUID \"name\")"});
        };
        if (!guid || space == std::string_view::npos) return bad("no GUID and name");
        auto rest = line.substr(space);
        rest.remove_prefix(std::min(rest.find_first_not_of(" \t"), rest.size()));
        while (!rest.empty() &&
               (rest.back() == '\r' || rest.back() == ' ' || rest.back() == '\t')) {
          rest.remove_suffix(1);
        }
        if (rest.size() >= 2 && rest.front() == '"') {
          const auto close = rest.find('"', 1);
          if (close == std::string_view::npos) return bad("unterminated quoted name");
          rest = rest.substr(1, close - 1);
        }
        if (rest.empty()) return bad("empty name");
        entries.emplace_back(*guid, std::string(rest));
        return {};
      });
  if (!read) return std::unexpected(read.error());
  return entries;
}

struct Fabric::Impl {
  FabricOptions options;
  DiscoveryOptions discovery;
  std::vector<std::string> discovery_command;
  ExchangeLimits limits;
  UmadOpenResult port;

  // The model and what discovery says about itself.
  mutable std::mutex model_mutex;
  std::shared_ptr<const FabricModel> model;
  LinkHistory history;
  bool last_success = false;
  double last_duration = 0;
  unsigned last_mads = 0;
  std::uint64_t successes = 0;
  std::uint64_t failures = 0;
  std::map<LinkHistory::Change::Kind, std::uint64_t> changes;
  // The cabling plan, the last one that parsed; whether the latest load or reload did.
  std::shared_ptr<const TopologyPlan> plan;
  bool plan_loaded = false;
  // The state file: whether the one found at start could be used, and the saves since.
  bool state_load_failed = false;
  std::uint64_t state_saves = 0;
  std::uint64_t state_save_failures = 0;

  // Requests for a discovery now, and its completion.
  std::mutex wake_mutex;
  std::condition_variable_any wake;
  std::uint64_t requested = 0;
  std::uint64_t completed = 0;
  bool last_requested_success = false;
  std::condition_variable_any done;

  // What a switch's PMA has, learned from its answers. A rediscovery may have found replaced
  // switches or new firmware: facts learned under an older model are asked again, and kept
  // until an answer comes.
  struct PmaFacts {
    mad::ClassPortInfo info = {};
    DetailSupports details = {};
    std::uint64_t model_generation = 0;
    FecCountersSupport fec = {};
    std::map<int, mad::FecLayout> fec_layouts = {};  // by port; kBlocks when absent
  };
  std::atomic<std::uint64_t> model_generation{0};  // successful discoveries so far

  // One umad agent answers one read at a time.
  mutable std::mutex exchange_mutex;
  mutable std::unordered_map<std::uint64_t, PmaFacts> pma_facts;  // by node GUID
  // Held with the exchange's lock from deciding which details to ask to keeping their answers,
  // so of two reads of one switch at once (two Prometheus servers, a slow scrape overlapping the
  // next) the second decides from what the first kept.
  mutable DetailMemory kept_details;
  mutable std::array<std::atomic<std::uint64_t>, 16> lost_by_reason{};
  mutable std::atomic<std::uint64_t> mads_sent{0};

  std::jthread thread;

  std::shared_ptr<const FabricModel> current() const {
    std::lock_guard lock(model_mutex);
    return model;
  }

  // Once per change, not per discovery: the master went, came or is another SM.
  static void log_master_change(const FabricModel* before, const FabricModel& after) {
    const SubnetManager* was = before ? before->master() : nullptr;
    const SubnetManager* is = after.master();
    if (!is && (!before || was)) {
      spdlog::warn("fabric: no master SM answers SMInfo at the local port's SM LID {}",
                   after.sm_lid);
    } else if (is && (!was || was->guid != is->guid)) {
      spdlog::info("fabric: master SM at LID {}, port GUID {}, priority {}", is->lid,
                   format_guid(is->guid), is->priority);
    }
  }

  bool discover_once(const std::stop_token& stop) {
    const auto start = Clock::now();
    auto result = discover_in_child(discovery_command, options.discovery_deadline, stop);
    if (result) {
      apply_node_names(result->model, discovery.names);
      result->model.discovered_at = std::chrono::system_clock::now();
      auto fresh = std::make_shared<const FabricModel>(std::move(result->model));
      std::string state;
      {
        std::lock_guard lock(model_mutex);
        log_master_change(model.get(), *fresh);
        for (const auto& change : history.update(*fresh)) ++changes[change.kind];
        model = std::move(fresh);
        ++model_generation;
        last_success = true;
        last_mads = result->mads;
        ++successes;
        if (!options.state_file.empty()) state = fabric_state_to_json(*model, history);
      }
      if (!state.empty()) save_state(state);
      const auto served = current();
      std::lock_guard lock(exchange_mutex);
      keep_model_ports(kept_details, *served);
    } else {
      std::lock_guard lock(model_mutex);
      last_success = false;
      ++failures;
      spdlog::warn("fabric discovery failed, the previous model stays: {}", result.error().message);
    }
    std::lock_guard lock(model_mutex);
    last_duration = std::chrono::duration<double>(Clock::now() - start).count();
    return last_success;
  }

  void save_state(std::string_view state) {
    const auto saved = save_fabric_state(options.state_file, state);
    if (!saved) spdlog::warn("fabric: the state is not saved: {}", saved.error().message);
    std::lock_guard lock(model_mutex);
    ++(saved ? state_saves : state_save_failures);
  }

  // The state file a previous run saved, if there is one: its model is served and its cable
  // memory is the baseline until the first discovery. One that cannot be used is logged and
  // counted, and the exporter starts without it; the next good discovery overwrites it.
  void load_state() {
    std::error_code error;
    if (!std::filesystem::exists(options.state_file, error) && !error) {
      spdlog::info("fabric: no state file {} yet; the first good discovery writes it",
                   options.state_file.string());
      return;
    }
    auto state = load_fabric_state(options.state_file);
    if (!state) {
      state_load_failed = true;
      spdlog::error("fabric: {}; starting without it", state.error().message);
      return;
    }
    spdlog::info("fabric: state file {}: a model of {} nodes and {} cables remembered",
                 options.state_file.string(), state->model.nodes.size(),
                 state->history.links().size());
    model = std::make_shared<const FabricModel>(std::move(state->model));
    history = std::move(state->history);
  }

  // Discovers, then sleeps until the interval passed or someone asked for a discovery. A
  // request counts as served by the first discovery that started after it was made.
  void run(std::stop_token stop) {
    while (!stop.stop_requested()) {
      std::uint64_t serving = 0;
      {
        std::lock_guard lock(wake_mutex);
        serving = requested;
      }
      const bool success = discover_once(stop);
      {
        std::lock_guard lock(wake_mutex);
        completed = serving;
        last_requested_success = success;
      }
      done.notify_all();
      std::unique_lock lock(wake_mutex);
      wake.wait_for(lock, stop, options.discovery_interval, [&] { return requested > serving; });
    }
  }

  struct PortPlan {
    std::size_t basic = 0;
    std::size_t extended = SIZE_MAX;
    std::size_t fec = SIZE_MAX;
    // Decoded PortCounters (and PortCountersExtended) once both answered.
    std::optional<CounterMap> counters = {};
    DetailChoice details_wanted = {};
    DetailPlan details = {};  // indexes into the second exchange's queries
    mad::FecLayout fec_layout = mad::FecLayout::kBlocks;
  };
  struct SwitchPlan {
    const FabricNode* node;
    mad::ClassPortInfo info;
    std::vector<PortPlan> ports;
  };

  // The far end each port of these switches had when last seen: a port that is down keeps its
  // series and their labels, so a flap reads as one series going down and up.
  std::map<std::pair<std::uint64_t, int>, FabricRemote> remembered_remotes(
      const std::vector<const FabricNode*>& switches) const {
    std::map<std::pair<std::uint64_t, int>, FabricRemote> remotes;
    std::lock_guard lock(model_mutex);
    const auto& links = history.links();
    for (const auto* node : switches) {
      for (auto it = links.lower_bound({node->guid, 0});
           it != links.end() && it->first.first == node->guid; ++it) {
        remotes.emplace(it->first, it->second.remote);
      }
    }
    return remotes;
  }

  // Which ports of the just-asked switches fill PortExtendedSpeedsCounters in its RS-FEC layout:
  // perfquery's is_rsfec_mode_active, asked once per discovery instead of per read. Only PMAs
  // with RS-FEC counters are asked, and only for ports at an extended speed; a port whose
  // PortInfoExtended is not answered is read in the other layout, as perfquery reads it.
  void learn_fec_layouts(MadExchange& exchange, const std::vector<const FabricNode*>& asked) const {
    if (!port.transport->sends_smps()) return;
    std::vector<MadQuery> queries;
    std::vector<std::pair<std::uint64_t, int>> ports;
    for (const auto* node : asked) {
      const auto facts = pma_facts.find(node->guid);
      if (facts == pma_facts.end() ||
          !(facts->second.info.capability_mask & mad::kCapRsFecCounters))
        continue;
      for (const auto& p : node->ports) {
        if (!runs_extended_speed(p)) continue;
        queries.push_back({node->lid, mad::MgmtClass::kSubnLidRouted,
                           mad::Attribute::kPortInfoExtended, 0, true,
                           static_cast<std::uint32_t>(p.number)});
        ports.emplace_back(node->guid, p.number);
      }
    }
    if (queries.empty()) return;
    const auto answers = exchange.run(queries);
    for (std::size_t q = 0; q < queries.size(); ++q) {
      if (!answers[q] || !mad::rs_fec_active(mad::data_of(*answers[q]))) continue;
      pma_facts[ports[q].first].fec_layouts[ports[q].second] = mad::FecLayout::kRsFec;
    }
  }

  // What the PMA's answers to PortExtendedSpeedsCounters in this read say while nothing is known;
  // switched off until the next discovery, said once at debug level (rdma_fabric_fec_counters_up
  // says it per read).
  void learn_fec_support(const SwitchPlan& plan, const std::vector<MadExchange::Answer>& answers,
                         const MadExchange& exchange, FecCountersSupport& support) const {
    std::vector<FecQuery> asked;
    for (const auto& port_plan : plan.ports) {
      if (port_plan.fec != SIZE_MAX) asked.push_back({port_plan.fec, port_plan.basic});
    }
    if (fabric::learn_fec_support(asked, answers, exchange, support)) {
      spdlog::debug(
          "fabric: switch {} ({}) PMA at LID {}: PortExtendedSpeedsCounters {}, not asked again "
          "until the next discovery",
          format_guid(plan.node->guid), plan.node->description, plan.node->lid, support.reason);
    }
  }

  // Per switch whether its FEC counters are read: 1, or 0 with why not. Nothing while its PMA
  // has not been asked yet (or no answer came at all).
  static void add_fec_status(MetricSet& out, const FabricNode& node,
                             const FecCountersSupport& support) {
    constexpr std::string_view kHelp =
        "1 when the switch's PMA answers PortExtendedSpeedsCounters (FEC counters of its ports at "
        "FDR and faster); 0 with `reason` when it is not read: not_supported (the PMA said so), "
        "no_answer (the PMA answered PortCounters but not it), no_extended_speed_port (no port "
        "runs FDR or faster). A switched-off PMA is asked again after the next discovery.";
    constexpr FecCountersSupport kNothingToAsk{FecCountersSupport::State::kUnsupported,
                                               "no_extended_speed_port"};
    const bool any_extended =
        std::any_of(node.ports.begin(), node.ports.end(), runs_extended_speed);
    add_fec_support_sample(
        out, "rdma_fabric_fec_counters_up", kHelp,
        {{"node_guid", format_guid(node.guid)}, {"node_description", node.description}},
        any_extended ? support : kNothingToAsk);
  }

  // A port's counters from both tables, or nothing unless both answered: half a port would read
  // as counters going down.
  static std::optional<CounterMap> decode_port(const mad::ClassPortInfo& info,
                                               const PortPlan& port_plan,
                                               const std::vector<MadExchange::Answer>& answers) {
    const auto basic = port_plan.basic;
    const auto ext = port_plan.extended;
    if (!answers[basic] || (ext != SIZE_MAX && !answers[ext])) return std::nullopt;
    CounterMap counters;
    for (const auto& [name, value, width] :
         mad::decode_counters(mad::data_of(*answers[basic]), mad::port_counters_fields())) {
      counters.try_emplace(std::string(name), RemoteCounter{value, width});
    }
    drop_unsupported_basic(info, counters);
    if (ext != SIZE_MAX) {
      CounterMap extended;
      for (const auto& [name, value, width] : mad::decode_counters(
               mad::data_of(*answers[ext]), mad::port_counters_extended_fields())) {
        extended.try_emplace(std::string(name), RemoteCounter{value, width});
      }
      drop_unsupported_extended(info, extended);
      counters.merge(extended);
    }
    return counters;
  }

  // The detail attributes of the answered ports, in a second exchange after the base counters:
  // each asked where details_to_read says so (every one with
  // --fabric.detail-counters-every-read), the others served from what was kept. Kept values go
  // with a lost or "not supported" answer, so that attribute is asked again by the next read.
  // Called with exchange_mutex held.
  void read_details(std::vector<SwitchPlan>& plans, MadExchange& exchange,
                    std::map<std::pair<std::uint64_t, std::size_t>, CounterMap>& served) const {
    std::vector<MadQuery> queries;
    for (auto& plan : plans) {
      const auto& support = pma_facts[plan.node->guid].details;
      for (std::size_t i = 0; i < plan.ports.size(); ++i) {
        auto& port_plan = plan.ports[i];
        if (!port_plan.counters) continue;
        const int number = plan.node->ports[i].number;
        port_plan.details_wanted =
            options.detail_counters_every_read
                ? DetailChoice{true, true, true}
                : details_to_read(kept_details[{plan.node->guid, number}], *port_plan.counters);
        for (std::size_t a = 0; a < mad::kDetailAttributes.size(); ++a) {
          if (!port_plan.details_wanted[a] || support[a] == DetailSupport::kUnsupported) continue;
          port_plan.details[a].push_back(queries.size());
          queries.push_back({plan.node->lid, mad::MgmtClass::kPerfMgt, mad::kDetailAttributes[a],
                             static_cast<std::uint8_t>(number), true});
        }
      }
    }
    const auto answers =
        queries.empty() ? std::vector<MadExchange::Answer>{} : exchange.run(queries);
    for (const auto& plan : plans) {
      auto& support = pma_facts[plan.node->guid].details;
      for (std::size_t i = 0; i < plan.ports.size(); ++i) {
        const auto& port_plan = plan.ports[i];
        if (!port_plan.counters) continue;
        auto& kept = kept_details[{plan.node->guid, plan.node->ports[i].number}];
        for (std::size_t a = 0; a < mad::kDetailAttributes.size(); ++a) {
          if (!port_plan.details_wanted[a]) continue;
          kept[a].reset();
          if (port_plan.details[a].empty()) continue;
          DetailPlan one{};
          one[a] = port_plan.details[a];
          CounterMap fresh;
          take_detail_answers(one, answers, exchange, support, fresh);
          if (!answers[one[a].front()] || support[a] != DetailSupport::kSupported) continue;
          const auto base = port_plan.counters->find(kDetailBases[a]);
          kept[a] = KeptDetail{base == port_plan.counters->end()
                                   ? std::nullopt
                                   : std::optional<std::uint64_t>(base->second.value),
                               std::move(fresh)};
        }
        for (std::size_t a = 0; a < mad::kDetailAttributes.size(); ++a) {
          if (!kept[a]) continue;
          if (support[a] == DetailSupport::kUnsupported) {
            kept[a].reset();
            continue;
          }
          served[{plan.node->guid, i}].insert(kept[a]->counters.begin(), kept[a]->counters.end());
        }
      }
    }
  }

  // Reads the given switches in one exchange and adds their series.
  void read(const std::vector<const FabricNode*>& switches, milliseconds budget, MetricSet& out,
            ErrorSink& sink) const {
    const auto start = Clock::now();
    CountingErrors errors(sink);
    ExchangeLimits read_limits = limits;
    read_limits.budget = budget;
    std::size_t mads = 0;
    std::size_t ports_read = 0;
    std::vector<SwitchPlan> plans;
    std::vector<MadExchange::Answer> answers;
    // Decoded while the exchange is at hand: its "not supported" answers teach the PMA's facts.
    std::map<std::pair<std::uint64_t, std::size_t>, CounterMap> detail_counters;
    std::map<std::uint64_t, FecCountersSupport> fec_supports;  // by switch GUID
    {
      // Only the exchange needs the port; the series are built after it, beside the next read.
      std::lock_guard lock(exchange_mutex);
      MadExchange exchange(*port.transport, read_limits, start + budget, errors);
      // ClassPortInfo of switches not asked since the last discovery: it decides whether the
      // extended table is there.
      std::vector<MadQuery> info_queries;
      std::vector<const FabricNode*> asked;
      const std::uint64_t generation = model_generation.load();
      for (const auto* node : switches) {
        const auto known = pma_facts.find(node->guid);
        if (known != pma_facts.end() && known->second.model_generation == generation) continue;
        info_queries.push_back(
            {node->lid, mad::MgmtClass::kPerfMgt, mad::Attribute::kClassPortInfo});
        asked.push_back(node);
      }
      if (!info_queries.empty()) {
        const auto answers = exchange.run(info_queries);
        for (std::size_t i = 0; i < answers.size(); ++i) {
          if (answers[i]) {
            pma_facts[asked[i]->guid] =
                PmaFacts{mad::decode_class_port_info(mad::data_of(*answers[i])), {}, generation};
          }
        }
        if (options.extended_speeds_counters) learn_fec_layouts(exchange, asked);
      }
      std::vector<MadQuery> queries;
      for (const auto* node : switches) {
        const auto facts = pma_facts.find(node->guid);
        if (facts == pma_facts.end()) continue;  // its loss is counted already
        SwitchPlan plan{node, facts->second.info, {}};
        const bool extended = has_extended_counters(facts->second.info);
        for (const auto& p : node->ports) {
          const auto number = static_cast<std::uint8_t>(p.number);
          PortPlan port_plan;
          port_plan.basic = queries.size();
          queries.push_back(
              {node->lid, mad::MgmtClass::kPerfMgt, mad::Attribute::kPortCounters, number});
          if (extended) {
            port_plan.extended = queries.size();
            queries.push_back({node->lid, mad::MgmtClass::kPerfMgt,
                               mad::Attribute::kPortCountersExtended, number});
          }
          if (options.extended_speeds_counters && runs_extended_speed(p) &&
              facts->second.fec.state != FecCountersSupport::State::kUnsupported) {
            port_plan.fec = queries.size();
            const auto layout = facts->second.fec_layouts.find(p.number);
            if (layout != facts->second.fec_layouts.end()) port_plan.fec_layout = layout->second;
            queries.push_back({node->lid, mad::MgmtClass::kPerfMgt,
                               mad::Attribute::kPortExtendedSpeedsCounters, number, true});
          }
          plan.ports.push_back(std::move(port_plan));
        }
        plans.push_back(std::move(plan));
      }
      answers = exchange.run(queries);
      for (auto& plan : plans) {
        auto& facts = pma_facts[plan.node->guid];
        learn_fec_support(plan, answers, exchange, facts.fec);
        if (options.extended_speeds_counters) fec_supports.emplace(plan.node->guid, facts.fec);
        for (auto& port_plan : plan.ports)
          port_plan.counters = decode_port(plan.info, port_plan, answers);
      }
      if (options.detail_counters) read_details(plans, exchange, detail_counters);
      mads = exchange.mads_sent();
    }
    // Every port's state comes from the model, so it is shown whether or not its PMA answered.
    const auto remotes = remembered_remotes(switches);
    std::map<std::pair<std::uint64_t, std::size_t>, MetricSet::LabelSet> identities;
    for (const auto* node : switches) {
      for (std::size_t i = 0; i < node->ports.size(); ++i) {
        const FabricPort& fabric_port = node->ports[i];
        auto remote = fabric_port.remote;
        if (!remote) {
          const auto seen = remotes.find({node->guid, fabric_port.number});
          if (seen != remotes.end()) remote = seen->second;
        }
        const auto identity = out.label_set(port_identity(*node, fabric_port.number, remote));
        add_link_series(out, identity, fabric_port);
        identities.emplace(std::pair{node->guid, i}, identity);
      }
    }
    for (const auto& plan : plans) {
      for (std::size_t i = 0; i < plan.ports.size(); ++i) {
        const auto& identity = identities.at({plan.node->guid, i});
        if (!plan.ports[i].counters) continue;
        auto counters = *plan.ports[i].counters;
        // Wait counters of VLs the port does not use never move: no series for them.
        const int vls = plan.node->ports[i].operational_vls;
        std::erase_if(detail_counters[{plan.node->guid, i}], [&](const auto& entry) {
          const auto vl = mad::vl_of_xmit_wait(entry.first);
          return vl && vls > 0 && *vl >= vls;
        });
        counters.merge(detail_counters[{plan.node->guid, i}]);
        add_counter_series(out, identity, counters);
        const auto fec = plan.ports[i].fec;
        if (fec != SIZE_MAX && answers[fec] &&
            fec_supports[plan.node->guid].state == FecCountersSupport::State::kSupported) {
          add_fec_series(out, identity,
                         mad::decode_extended_speeds_counters(mad::data_of(*answers[fec]),
                                                              plan.ports[i].fec_layout),
                         static_cast<std::size_t>(plan.node->ports[i].width_lanes));
        }
        ++ports_read;
      }
      if (options.extended_speeds_counters) {
        add_fec_status(out, *plan.node, fec_supports[plan.node->guid]);
      }
    }
    add_link_history(switches, out);
    mads_sent += mads;
    for (const auto reason : kReasons) {
      const auto lost = errors.count(reason);
      lost_by_reason[static_cast<std::size_t>(reason)] += lost;
      out.add("ibprobe_fabric_scrape_failed_queries",
              "MAD queries of this read that got no usable answer, by reason (timeout: every "
              "retry lost; budget_exceeded: the read's time ran out first).",
              kGauge, {{"reason", std::string(to_string(reason))}}, static_cast<double>(lost));
    }
    out.add("ibprobe_fabric_scrape_mads", "MADs this read sent, retries included.", kGauge, {},
            static_cast<double>(mads));
    out.add("ibprobe_fabric_scrape_ports", "Switch ports whose counters this read answered.",
            kGauge, {}, static_cast<double>(ports_read));
    out.add("ibprobe_fabric_scrape_duration_seconds", "Time this read of switch ports took.",
            kGauge, {}, std::chrono::duration<double>(Clock::now() - start).count());
  }

  // Cables the history has seen on these switches that the latest model lacks, or that run
  // below the best they ran at.
  void add_link_history(const std::vector<const FabricNode*>& switches, MetricSet& out) const {
    std::lock_guard lock(model_mutex);
    for (const auto* node : switches) {
      const auto& links = history.links();
      for (auto it = links.lower_bound({node->guid, 0});
           it != links.end() && it->first.first == node->guid; ++it) {
        const auto& link = it->second;
        const auto identity = out.label_set(port_identity(*node, it->first.second, link.remote));
        out.add("rdma_fabric_link_missing",
                "1 for a cable discovery saw earlier that the latest discovery did not find "
                "(labels name its former far end); 0 while it is there.",
                kGauge, identity, link.present ? 0 : 1);
        if (!link.present) continue;
        out.add(
            "rdma_fabric_link_downgraded",
            "1 when the cable runs narrower or slower than the best it ran at since the "
            "exporter started.",
            kGauge, identity,
            link.width_lanes < link.best_width_lanes || link.lane_gigabits < link.best_lane_gigabits
                ? 1
                : 0);
      }
    }
  }
};

std::expected<std::unique_ptr<Fabric>, Error> Fabric::open(FabricOptions options) {
  auto names = load_node_name_map(options.node_name_map);
  if (!names) return std::unexpected(std::move(names.error()));
  auto impl = std::make_unique<Impl>();
  if (!options.topology_file.empty()) {
    auto plan = load_topology(options.topology_file);
    if (!plan) return std::unexpected(std::move(plan.error()));
    spdlog::info("fabric: topology file {} plans {} cables", options.topology_file.string(),
                 plan->cables.size());
    impl->plan = std::make_shared<const TopologyPlan>(std::move(*plan));
    impl->plan_loaded = true;
  }
  impl->discovery = DiscoveryOptions{options.ca, options.ca_port, options.timeout, options.retries,
                                     std::move(*names)};
  impl->limits =
      ExchangeLimits{options.timeout, options.retries, options.budget, options.concurrency};
  impl->port = open_umad_transport(options.ca, options.ca_port);
  if (!impl->port.transport) {
    return std::unexpected(Error{ErrorKind::kLocalPort, "fabric: " + impl->port.detail +
                                                            " (reason " + impl->port.reason + ")"});
  }
  // Discover from the port the PMA reads go out of.
  impl->discovery.ca = impl->port.ca;
  impl->discovery.ca_port = impl->port.port;
  impl->discovery_command = discovery_child_command(options.discovery_executable, impl->discovery);
  impl->options = std::move(options);
  if (!impl->options.state_file.empty()) impl->load_state();
  return std::unique_ptr<Fabric>(new Fabric(std::move(impl)));
}

Fabric::Fabric(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  impl_->thread = std::jthread([impl = impl_.get()](std::stop_token stop) { impl->run(stop); });
}

Fabric::~Fabric() {
  impl_->thread.request_stop();
  impl_->wake.notify_all();
}

std::expected<void, Error> Fabric::reload_topology() {
  auto& impl = *impl_;
  if (impl.options.topology_file.empty()) return {};
  auto plan = load_topology(impl.options.topology_file);
  std::lock_guard lock(impl.model_mutex);
  impl.plan_loaded = plan.has_value();
  if (!plan) {
    spdlog::error("topology reload refused, the previous plan stays: {}", plan.error().message);
    return std::unexpected(std::move(plan.error()));
  }
  spdlog::info("fabric: topology file {} reloaded, {} cables planned",
               impl.options.topology_file.string(), plan->cables.size());
  impl.plan = std::make_shared<const TopologyPlan>(std::move(*plan));
  return {};
}

bool Fabric::rediscover() {
  auto& impl = *impl_;
  std::unique_lock lock(impl.wake_mutex);
  const std::uint64_t ticket = ++impl.requested;
  impl.wake.notify_all();
  impl.done.wait(lock, [&] { return impl.completed >= ticket; });
  return impl.last_requested_success;
}

std::optional<std::vector<FabricSwitch>> Fabric::switches() const {
  const auto model = impl_->current();
  if (!model) return std::nullopt;
  std::vector<FabricSwitch> result;
  for (const auto& node : model->nodes) {
    if (node.type != FabricNodeType::kSwitch) continue;
    result.push_back({format_guid(node.guid), node.description, node.lid, node.port_count});
  }
  return result;
}

Fabric::Lookup Fabric::collect_switch(std::uint64_t guid, milliseconds budget, MetricSet& out,
                                      ErrorSink& errors) const {
  const auto model = impl_->current();
  if (!model) return Lookup::kNoModel;
  const FabricNode* node = model->find(guid);
  if (!node || node->type != FabricNodeType::kSwitch) return Lookup::kUnknownSwitch;
  if (budget <= milliseconds(0) || budget > impl_->options.budget) budget = impl_->options.budget;
  impl_->read({node}, budget, out, errors);
  return Lookup::kFound;
}

void Fabric::collect_all(MetricSet& out, ErrorSink& errors) const {
  const auto model = impl_->current();
  if (!model) return;
  std::vector<const FabricNode*> switches;
  for (const auto& node : model->nodes) {
    if (node.type == FabricNodeType::kSwitch) switches.push_back(&node);
  }
  impl_->read(switches, impl_->options.budget, out, errors);
}

void Fabric::collect_discovery(MetricSet& out) const {
  const auto& impl = *impl_;
  std::lock_guard lock(impl.model_mutex);
  out.add("ibprobe_fabric_discovery_success",
          "1 when the last discovery succeeded; 0 when it failed and the previous model is "
          "served.",
          kGauge, {}, impl.last_success ? 1 : 0);
  out.add("ibprobe_fabric_discoveries_total", "Discoveries run, by result.", kCounter,
          {{"result", "success"}}, static_cast<double>(impl.successes));
  out.add("ibprobe_fabric_discoveries_total", "Discoveries run, by result.", kCounter,
          {{"result", "failure"}}, static_cast<double>(impl.failures));
  out.add("ibprobe_fabric_discovery_duration_seconds", "Time the last discovery took.", kGauge, {},
          impl.last_duration);
  out.add("ibprobe_fabric_discovery_mads", "SMPs the last successful discovery used.", kGauge, {},
          impl.last_mads);
  constexpr std::array kChanges = {std::pair{LinkHistory::Change::Kind::kVanished, "vanished"},
                                   std::pair{LinkHistory::Change::Kind::kReturned, "returned"},
                                   std::pair{LinkHistory::Change::Kind::kDowngraded, "downgraded"}};
  for (const auto& [kind, name] : kChanges) {
    const auto it = impl.changes.find(kind);
    out.add("ibprobe_fabric_link_changes_total",
            "Cables that vanished, came back, or came back narrower or slower than before, as "
            "discoveries found them.",
            kCounter, {{"change", name}},
            it == impl.changes.end() ? 0 : static_cast<double>(it->second));
  }
  for (const auto reason : kReasons) {
    out.add("ibprobe_fabric_mad_failures_total",
            "PerfMgt queries of switch ports that got no usable answer, by reason.", kCounter,
            {{"reason", std::string(to_string(reason))}},
            static_cast<double>(impl.lost_by_reason[static_cast<std::size_t>(reason)]));
  }
  out.add("ibprobe_fabric_mads_sent_total", "PerfMgt MADs sent to switch ports.", kCounter, {},
          static_cast<double>(impl.mads_sent.load()));
  if (impl.plan) {
    out.add("ibprobe_fabric_topology_load_success",
            "1 when the topology file's latest load or reload parsed; 0 when the last reload "
            "failed and the plan read before stays in use.",
            kGauge, {}, impl.plan_loaded ? 1 : 0);
    out.add("ibprobe_fabric_topology_planned_cables", "Cables of the plan in use.", kGauge, {},
            static_cast<double>(impl.plan->cables.size()));
  }
  if (!impl.options.state_file.empty()) {
    out.add("ibprobe_fabric_state_load_success",
            "0 when the state file found at start could not be read or was no saved state (the "
            "exporter started without it); 1 otherwise.",
            kGauge, {}, impl.state_load_failed ? 0 : 1);
    out.add("ibprobe_fabric_state_saves_total", "Saves of the state file, by result.", kCounter,
            {{"result", "success"}}, static_cast<double>(impl.state_saves));
    out.add("ibprobe_fabric_state_saves_total", "Saves of the state file, by result.", kCounter,
            {{"result", "failure"}}, static_cast<double>(impl.state_save_failures));
  }
  if (!impl.model) return;
  if (impl.plan) add_cable_statuses(*impl.plan, *impl.model, out);
  out.add("ibprobe_fabric_model_timestamp_seconds",
          "When the served fabric model was discovered (Unix time).", kGauge, {},
          seconds_since_epoch(impl.model->discovered_at));
  for (const auto type : {FabricNodeType::kSwitch, FabricNodeType::kCa, FabricNodeType::kRouter}) {
    out.add("ibprobe_fabric_nodes", "Nodes in the served fabric model, by type.", kGauge,
            {{"type", std::string(to_string(type))}}, static_cast<double>(impl.model->count(type)));
  }
  out.add("ibprobe_fabric_links", "Cables in the served fabric model.", kGauge, {},
          static_cast<double>(impl.model->links()));
  add_subnet_managers(*impl.model, out);
}

namespace {

class WholeFabricCollector final : public FabricCollector {
 public:
  WholeFabricCollector(std::shared_ptr<const Fabric> fabric, bool switch_ports)
      : fabric_(std::move(fabric)), switch_ports_(switch_ports) {}
  std::string_view name() const override { return kFabricCollector; }
  void collect(MetricSet& out, ErrorSink& errors) const override {
    if (switch_ports_) fabric_->collect_all(out, errors);
    fabric_->collect_discovery(out);
  }

 private:
  std::shared_ptr<const Fabric> fabric_;
  bool switch_ports_;
};

}  // namespace

std::unique_ptr<FabricCollector> make_fabric_collector(std::shared_ptr<const Fabric> fabric,
                                                       bool switch_ports) {
  return std::make_unique<WholeFabricCollector>(std::move(fabric), switch_ports);
}

}  // namespace ibprobe::fabric
