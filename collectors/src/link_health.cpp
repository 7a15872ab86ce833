// The transceiver module and the FEC statistics of each RoCE port's netdev, read on the
// collector's own thread and served from what it read last.
//
// Why off the scrape path: a module's pages come over its two-wire (I2C) management bus, at 100
// to 400 kHz (1 MHz at most with CMIS), a few to a few dozen pages of 128 bytes; mlx5 reads them
// through firmware, a few dozen bytes per MCIA register access
// (mlx5_query_module_eeprom_by_page), each a firmware command. FEC statistics are one firmware
// command too on mlx5 (mlx5e_stats_fec_get reads the PPCNT register through
// mlx5_core_access_reg), which waits for the firmware like any command, for as long as the
// command timeout when the firmware is busy. Read on the scrape, either would put the firmware's
// delays into every scrape of every device. Read here, a scrape compares two time points per
// port and writes the series it has.
//
// Reads follow the scrapes: a scrape that finds a port's last read older than its interval asks
// the thread for another, and serves the one it has meanwhile. No scrape, no read: an exporter
// nobody scrapes leaves the modules alone (SFF-8636 and CMIS flags are cleared by reading them).
#include "ibprobe/link_health.h"

#include <spdlog/spdlog.h>

#include <array>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <stop_token>
#include <thread>
#include <utility>

#include "devices.h"
#include "ibprobe/ethtool_netlink.h"
#include "ibprobe/fec_statistics.h"

namespace ibprobe::collectors {
namespace {

using HealthClock = std::chrono::steady_clock;

class NetlinkLinkHealthSource final : public LinkHealthSource {
 public:
  std::expected<ModulePages, std::error_code> module_pages(const std::string& netdev) override {
    auto* ethtool = opened_socket();
    if (!ethtool) return std::unexpected(open_error_);
    return read_module_pages(*ethtool, netdev);
  }

  std::expected<std::vector<std::uint8_t>, std::error_code> fec_reply(
      const std::string& netdev) override {
    auto* ethtool = opened_socket();
    if (!ethtool) return std::unexpected(open_error_);
    return ethtool->fec_reply(netdev);
  }

 private:
  // The socket, opened now if it is not open yet; null (and open_error_ set) when the kernel
  // refused it.
  EthtoolNetlink* opened_socket() {
    if (!ethtool_) {
      auto opened = EthtoolNetlink::open();
      if (!opened) {
        open_error_ = opened.error();
        return nullptr;
      }
      ethtool_.emplace(std::move(*opened));
    }
    return &*ethtool_;
  }

  std::optional<EthtoolNetlink> ethtool_;
  std::error_code open_error_;
};

// Why a read gave no series: `reason` is the label value (a ReadError's name for the errno of a
// refused request, the decoder's error kind for an answer it refused), `detail` says it in words
// for the log, at `level`. `nothing_to_read` marks the netdevs that have no module or FEC
// statistics to give this process (EOPNOTSUPP, ENODEV, EPERM): asked again after the module
// interval only.
struct ReadFailure {
  std::string_view reason;
  std::string detail;
  spdlog::level::level_enum level = spdlog::level::warn;
  bool nothing_to_read = false;
};
using ModuleResult = std::expected<ModuleReading, ReadFailure>;
using FecResult = std::expected<FecStatistics, ReadFailure>;

ReadFailure refused(std::string_view request, const std::error_code& error) {
  const ReadError reason = classify_errno(error.value());
  ReadFailure failure{to_string(reason), std::string(request) + ": " + error.message()};
  switch (reason) {
    case ReadError::kNotSupported:  // a virtio_net, an empty cage
    case ReadError::kNotFound:      // a netdev of another network namespace
      failure.level = spdlog::level::debug;
      failure.nothing_to_read = true;
      break;
    case ReadError::kPermission:
      // The kernel runs ETHTOOL_MSG_MODULE_EEPROM_GET for CAP_NET_ADMIN only
      // (GENL_UNS_ADMIN_PERM in net/ethtool/netlink.c), which the shipped systemd unit and
      // DaemonSet do not grant; FEC statistics need no privilege.
      failure.detail += " (reading a module needs CAP_NET_ADMIN)";
      failure.level = spdlog::level::info;
      failure.nothing_to_read = true;
      break;
    default:
      break;
  }
  return failure;
}

ModuleResult read_module(LinkHealthSource& source, const std::string& netdev) {
  const auto pages = source.module_pages(netdev);
  if (!pages) return std::unexpected(refused("ETHTOOL_MSG_MODULE_EEPROM_GET", pages.error()));
  auto reading = decode_module(*pages);
  if (reading) return std::move(*reading);
  if (reading.error().kind == ModuleErrorKind::kNoDiagnostics) {
    // A module without monitors (a passive copper cable) still says what it is.
    auto identity = decode_module_identity(*pages);
    if (identity) {
      ModuleReading identity_only{.identity = std::move(*identity),
                                  .temperature_celsius = std::nullopt,
                                  .supply_volts = std::nullopt,
                                  .lanes = {},
                                  .thresholds = std::nullopt,
                                  .flags = std::nullopt};
      return identity_only;
    }
    return std::unexpected(
        ReadFailure{to_string(identity.error().kind), std::move(identity.error().message)});
  }
  return std::unexpected(
      ReadFailure{to_string(reading.error().kind), std::move(reading.error().message)});
}

FecResult read_fec(LinkHealthSource& source, const std::string& netdev) {
  const auto reply = source.fec_reply(netdev);
  if (!reply) return std::unexpected(refused("ETHTOOL_MSG_FEC_GET", reply.error()));
  auto statistics = decode_fec_reply(*reply);
  if (statistics) return std::move(*statistics);
  return std::unexpected(
      ReadFailure{to_string(statistics.error().kind), std::move(statistics.error().message)});
}

// ---- the series ------------------------------------------------------------------------------

using prometheus::MetricType;
using LabelSet = MetricSet::LabelSet;

constexpr std::string_view kModuleUp = "rdma_port_module_up";
constexpr std::string_view kModuleUpHelp =
    "1 when the transceiver module of the port's netdev was read and decoded; 0 with `reason` "
    "when it was not (not_supported: no module, or a driver that cannot read one; not_found: no "
    "such netdev here; a decoder's reason for a module image it refused).";
constexpr std::string_view kFecUp = "rdma_port_fec_up";
constexpr std::string_view kFecUpHelp =
    "1 when the FEC statistics of the port's netdev were read and decoded; 0 with `reason` when "
    "they were not (not_supported: a driver without FEC statistics; not_found: no such netdev "
    "here; a decoder's reason for a reply it refused).";

// Each threshold of a ModuleThresholds entry and each flag of a ThresholdFlags, as their
// `threshold` label names them.
constexpr std::array<std::pair<std::string_view, double Thresholds::*>, 4> kThresholds = {{
    {"high_alarm", &Thresholds::high_alarm},
    {"high_warning", &Thresholds::high_warning},
    {"low_warning", &Thresholds::low_warning},
    {"low_alarm", &Thresholds::low_alarm},
}};
constexpr std::array<std::pair<std::string_view, bool ThresholdFlags::*>, 4> kThresholdFlags = {{
    {"high_alarm", &ThresholdFlags::high_alarm},
    {"high_warning", &ThresholdFlags::high_warning},
    {"low_warning", &ThresholdFlags::low_warning},
    {"low_alarm", &ThresholdFlags::low_alarm},
}};

struct ModuleMonitor {
  std::string_view name;  // the `monitor` label of its flags
  std::string_view threshold_family;
  std::string_view threshold_help;
  Thresholds ModuleThresholds::*thresholds;
};
constexpr std::array<ModuleMonitor, 5> kModuleMonitors = {{
    {"temperature", "rdma_port_module_temperature_threshold_celsius",
     "The module's own alarm and warning thresholds of its temperature.",
     &ModuleThresholds::temperature_celsius},
    {"supply_voltage", "rdma_port_module_supply_voltage_threshold_volts",
     "The module's own alarm and warning thresholds of its supply voltage.",
     &ModuleThresholds::supply_volts},
    {"tx_bias", "rdma_port_module_tx_bias_threshold_amperes",
     "The module's own alarm and warning thresholds of each lane's laser bias current.",
     &ModuleThresholds::tx_bias_amperes},
    {"tx_power", "rdma_port_module_tx_power_threshold_watts",
     "The module's own alarm and warning thresholds of each lane's transmitted optical power.",
     &ModuleThresholds::tx_power_watts},
    {"rx_power", "rdma_port_module_rx_power_threshold_watts",
     "The module's own alarm and warning thresholds of each lane's received optical power.",
     &ModuleThresholds::rx_power_watts},
}};

struct LaneMonitor {
  std::string_view name;
  std::string_view family;
  std::string_view help;
  std::optional<double> LaneReading::*value;
  ThresholdFlags LaneFlags::*flags;
};
constexpr std::array<LaneMonitor, 3> kLaneMonitors = {{
    {"tx_bias", "rdma_port_module_tx_bias_amperes", "Laser bias current of a module lane.",
     &LaneReading::tx_bias_amperes, &LaneFlags::tx_bias},
    {"tx_power", "rdma_port_module_tx_power_watts", "Optical power a module lane transmits.",
     &LaneReading::tx_power_watts, &LaneFlags::tx_power},
    {"rx_power", "rdma_port_module_rx_power_watts",
     "Optical power a module lane receives (average power, or modulation amplitude where the "
     "module measures that).",
     &LaneReading::rx_power_watts, &LaneFlags::rx_power},
}};

constexpr std::array<std::pair<std::string_view, bool LaneFlags::*>, 3> kLaneFaults = {{
    {"tx_fault", &LaneFlags::tx_fault},
    {"tx_loss_of_signal", &LaneFlags::tx_loss_of_signal},
    {"rx_loss_of_signal", &LaneFlags::rx_loss_of_signal},
}};

constexpr std::string_view kThresholdFlagFamily = "rdma_port_module_threshold_flag";
constexpr std::string_view kThresholdFlagHelp =
    "1 while the module flags its temperature or supply voltage beyond one of its thresholds; "
    "flags that are clear are not written.";
constexpr std::string_view kLaneThresholdFlagFamily = "rdma_port_module_lane_threshold_flag";
constexpr std::string_view kLaneThresholdFlagHelp =
    "1 while the module flags a lane's bias current, transmitted or received power beyond one of "
    "its thresholds; flags that are clear are not written.";

std::string hex_byte(std::uint8_t value) {
  std::array<char, 5> text{};
  std::snprintf(text.data(), text.size(), "0x%02x", value);
  return text.data();
}

std::string oui_text(const std::array<std::uint8_t, 3>& oui) {
  std::array<char, 9> text{};
  std::snprintf(text.data(), text.size(), "%02x:%02x:%02x", oui[0], oui[1], oui[2]);
  return text.data();
}

void write_set_flags(const ThresholdFlags& flags, std::string_view family, std::string_view help,
                     LabelSet labels, std::string_view lane, std::string_view monitor,
                     MetricSet& out) {
  for (const auto& [threshold, flag] : kThresholdFlags) {
    if (!(flags.*flag)) continue;
    if (lane.empty()) {
      out.add(family, help, MetricType::Gauge, labels,
              {{"monitor", monitor}, {"threshold", threshold}}, 1);
    } else {
      out.add(family, help, MetricType::Gauge, labels,
              {{"lane", lane}, {"monitor", monitor}, {"threshold", threshold}}, 1);
    }
  }
}

void write_lanes(const ModuleReading& reading, LabelSet labels, MetricSet& out) {
  for (std::size_t index = 0; index < reading.lanes.size(); ++index) {
    // Lanes count from 1, as the memory maps and `ethtool -m` number them.
    const std::string lane = std::to_string(index + 1);
    for (const auto& monitor : kLaneMonitors) {
      if (const auto& value = reading.lanes[index].*monitor.value) {
        out.add(monitor.family, monitor.help, MetricType::Gauge, labels, {{"lane", lane}}, *value);
      }
    }
    if (!reading.flags || index >= reading.flags->lanes.size()) continue;
    const LaneFlags& flags = reading.flags->lanes[index];
    for (const auto& monitor : kLaneMonitors) {
      write_set_flags(flags.*monitor.flags, kLaneThresholdFlagFamily, kLaneThresholdFlagHelp,
                      labels, lane, monitor.name, out);
    }
    for (const auto& [fault, flag] : kLaneFaults) {
      if (!(flags.*flag)) continue;
      out.add("rdma_port_module_lane_fault",
              "1 while the module reports a fault on a lane (tx_fault, tx_loss_of_signal, "
              "rx_loss_of_signal); faults that are clear are not written.",
              MetricType::Gauge, labels, {{"lane", lane}, {"fault", fault}}, 1);
    }
  }
}

void write_module(const ModuleResult& result, LabelSet labels, MetricSet& out) {
  if (!result) {
    out.add(kModuleUp, kModuleUpHelp, MetricType::Gauge, labels,
            {{"reason", result.error().reason}}, 0);
    return;
  }
  out.add(kModuleUp, kModuleUpHelp, MetricType::Gauge, labels, 1);
  const ModuleReading& reading = *result;
  const ModuleIdentity& identity = reading.identity;
  out.add("rdma_port_module_info",
          "The transceiver module in the port's cage, as its memory describes it; value is "
          "always 1. family is its memory map (sff8472, sff8636, cmis), identifier its SFF-8024 "
          "identifier.",
          MetricType::Gauge, labels,
          {{"family", to_string(identity.family)},
           {"identifier", hex_byte(identity.identifier)},
           {"vendor", identity.vendor},
           {"vendor_oui", oui_text(identity.vendor_oui)},
           {"part_number", identity.part_number},
           {"revision", identity.revision},
           {"serial_number", identity.serial_number}},
          1);
  if (reading.temperature_celsius) {
    out.add("rdma_port_module_temperature_celsius", "Temperature of the transceiver module.",
            MetricType::Gauge, labels, *reading.temperature_celsius);
  }
  if (reading.supply_volts) {
    out.add("rdma_port_module_supply_voltage_volts", "Supply voltage of the transceiver module.",
            MetricType::Gauge, labels, *reading.supply_volts);
  }
  write_lanes(reading, labels, out);
  if (reading.thresholds) {
    for (const auto& monitor : kModuleMonitors) {
      const Thresholds& limits = (*reading.thresholds).*monitor.thresholds;
      for (const auto& [threshold, limit] : kThresholds) {
        out.add(monitor.threshold_family, monitor.threshold_help, MetricType::Gauge, labels,
                {{"threshold", threshold}}, limits.*limit);
      }
    }
  }
  if (reading.flags) {
    write_set_flags(reading.flags->temperature, kThresholdFlagFamily, kThresholdFlagHelp, labels,
                    {}, "temperature", out);
    write_set_flags(reading.flags->supply, kThresholdFlagFamily, kThresholdFlagHelp, labels, {},
                    "supply_voltage", out);
  }
}

struct FecCounterFamilies {
  std::optional<FecCounter> FecStatistics::*counter;
  FecFamilies families;
};
constexpr std::array<FecCounterFamilies, 3> kFecCounters = {{
    {&FecStatistics::corrected_blocks, kFecCorrectedBlocks},
    {&FecStatistics::uncorrectable_blocks, kFecUncorrectableBlocks},
    {&FecStatistics::corrected_bits, kFecCorrectedBits},
}};

void write_fec(const FecResult& result, LabelSet labels, MetricSet& out) {
  if (!result) {
    out.add(kFecUp, kFecUpHelp, MetricType::Gauge, labels, {{"reason", result.error().reason}}, 0);
    return;
  }
  out.add(kFecUp, kFecUpHelp, MetricType::Gauge, labels, 1);
  if (result->active_mode) {
    out.add("rdma_port_fec_info",
            "The FEC mode active on the port's netdev, as ethtool names it (Off, RS, BaseR, "
            "LLRS); value is always 1.",
            MetricType::Gauge, labels, {{"mode", *result->active_mode}}, 1);
  }
  for (const auto& [member, families] : kFecCounters) {
    const auto& counter = (*result).*member;
    if (!counter) continue;
    out.add(families.total, families.help, MetricType::Counter, labels,
            static_cast<double>(counter->total));
    for (std::size_t lane = 0; lane < counter->lanes.size(); ++lane) {
      // FEC lanes count from 0, as the kernel and the drivers (rx_err_lane_0_phy) number them.
      out.add(families.lane, families.help, MetricType::Counter, labels,
              {{"lane", std::to_string(lane)}}, static_cast<double>(counter->lanes[lane]));
    }
  }
}

// ---- the collector ---------------------------------------------------------------------------

// What one port's netdev gave when last read, and when to read it again.
struct PortHealth {
  std::string netdev;  // behind GID 0; empty: none (an InfiniBand port)
  std::string labels;  // device, port and netdev, rendered
  HealthClock::time_point netdev_due;
  HealthClock::time_point module_due;
  HealthClock::time_point fec_due;
  bool asked = false;  // a read is queued or under way
  std::optional<ModuleResult> module;
  std::optional<FecResult> fec;
};

using PortKey = std::pair<std::string, std::string>;  // device, port

struct ReadRequest {
  PortKey port;
  std::string netdev;
  bool module = false;
  bool fec = false;
};

// Said when a netdev's answer changes kind, not on every read: a failure when it starts (at debug
// level when the netdev has nothing to read, such as a virtio_net or an empty cage), and the
// recovery.
template <typename Result>
void log_change(std::string_view what, const std::string& netdev,
                const std::optional<Result>& before, const Result& now) {
  const bool failed_before = before && !*before;
  if (now) {
    if (failed_before) spdlog::info("link_health: {} {} is read again", netdev, what);
    return;
  }
  if (failed_before && before->error().reason == now.error().reason) return;
  spdlog::log(now.error().level, "link_health: {} {} left out ({}): {}", netdev, what,
              now.error().reason, now.error().detail);
}

class LinkHealthCollector final : public Collector {
 public:
  LinkHealthCollector(LinkHealthOptions options, std::unique_ptr<LinkHealthSource> source)
      : options_(options),
        source_(std::move(source)),
        reader_([this](std::stop_token stop) { read_when_asked(stop); }) {}

  std::string_view name() const override { return kLinkHealthCollector; }

  void collect(const Device& device, MetricSet& out, ErrorSink&) const override {
    const auto now = HealthClock::now();
    bool asked = false;
    {
      std::lock_guard lock(mutex_);
      for (const auto& port : device.ports) {
        const PortKey key{device.name, port.number};
        PortHealth& health = ports_[key];
        if (now >= health.netdev_due) look_up_netdev(device.name, port, health, now);
        if (health.netdev.empty()) continue;
        asked = ask_if_due(key, health, now) || asked;
        const auto labels = out.rendered_label_set(health.labels);
        if (health.module) write_module(*health.module, labels, out);
        if (health.fec) write_fec(*health.fec, labels, out);
      }
    }
    if (asked) wake_.notify_one();
  }

 private:
  // The netdev behind the port's GID 0; a new one starts over, to be read at once.
  void look_up_netdev(const std::string& device, const Port& port, PortHealth& health,
                      HealthClock::time_point now) const {
    auto netdev = roce_netdev(port);
    if (netdev != health.netdev) {
      health = PortHealth{};
      health.labels =
          MetricSet::render_text({{"device", device}, {"port", port.number}, {"netdev", netdev}});
      health.netdev = std::move(netdev);
    }
    health.netdev_due = now + options_.module_interval;
  }

  bool ask_if_due(const PortKey& key, PortHealth& health, HealthClock::time_point now) const {
    if (health.asked) return false;
    ReadRequest request{key, health.netdev, now >= health.module_due, now >= health.fec_due};
    if (!request.module && !request.fec) return false;
    requests_.push_back(std::move(request));
    health.asked = true;
    return true;
  }

  void read_when_asked(std::stop_token stop) {
    std::unique_lock lock(mutex_);
    while (wake_.wait(lock, stop, [&] { return !requests_.empty(); }) && !stop.stop_requested()) {
      const ReadRequest request = std::move(requests_.front());
      requests_.erase(requests_.begin());
      lock.unlock();
      std::optional<ModuleResult> module;
      std::optional<FecResult> fec;
      if (request.module) module = read_module(*source_, request.netdev);
      if (request.fec) fec = read_fec(*source_, request.netdev);
      lock.lock();
      keep(request, std::move(module), std::move(fec), HealthClock::now());
    }
  }

  void keep(const ReadRequest& request, std::optional<ModuleResult> module,
            std::optional<FecResult> fec, HealthClock::time_point now) {
    const auto found = ports_.find(request.port);
    // The port's netdev changed while it was read: the answer is the old netdev's.
    if (found == ports_.end() || found->second.netdev != request.netdev) return;
    PortHealth& health = found->second;
    health.asked = false;
    if (module) {
      log_change("module", request.netdev, health.module, *module);
      health.module = std::move(module);
      health.module_due = now + options_.module_interval;
    }
    if (fec) {
      log_change("FEC statistics", request.netdev, health.fec, *fec);
      const bool nothing_to_read = !*fec && fec->error().nothing_to_read;
      health.fec = std::move(fec);
      health.fec_due = now + (nothing_to_read ? options_.module_interval : options_.fec_interval);
    }
  }

  const LinkHealthOptions options_;
  const std::unique_ptr<LinkHealthSource> source_;  // the reader thread's alone
  mutable std::mutex mutex_;
  mutable std::condition_variable_any wake_;
  // Every port seen, a few hundred bytes each: a device that goes keeps its entries, which no
  // scrape asks to read any more.
  mutable std::map<PortKey, PortHealth> ports_;
  mutable std::vector<ReadRequest> requests_;
  std::jthread reader_;  // last: stopped and joined before the members it uses go
};

}  // namespace

std::unique_ptr<LinkHealthSource> make_netlink_link_health_source() {
  return std::make_unique<NetlinkLinkHealthSource>();
}

std::unique_ptr<Collector> make_link_health_collector(LinkHealthOptions options,
                                                      std::unique_ptr<LinkHealthSource> source) {
  return std::make_unique<LinkHealthCollector>(options, std::move(source));
}

}  // namespace ibprobe::collectors
