// The whole InfiniBand fabric seen from one local port: discovery (every node, port and cable,
// refreshed on an interval and on demand) and every switch port's counters over PerfMgt MADs,
// each port labelled with the far end of its cable. For one switch per request (Prometheus
// multi-target, sharded by Prometheus itself) or the whole fabric at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <expected>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ibprobe/collectors.h"
#include "ibprobe/fabric_error.h"

namespace ibprobe::fabric {

inline constexpr std::string_view kFabricCollector = "fabric";

struct FabricOptions {
  std::string ca;   // local CA to discover and send from; empty: the first InfiniBand one
  int ca_port = 0;  // 0: the CA's first InfiniBand port
  std::chrono::seconds discovery_interval{300};
  // ibnetdiscover's node-name-map: `GUID "name"` per line; names override node descriptions.
  std::filesystem::path node_name_map;
  std::chrono::milliseconds timeout{300};  // per MAD attempt (discovery SMPs and PMA Gets)
  int retries = 2;                         // further attempts after a timeout
  std::chrono::milliseconds budget{8000};  // one switch's or the whole fabric's read
  int concurrency = 16;                    // PerfMgt MADs in flight at once
  // PortRcvErrorDetails, PortXmitDiscardDetails and PortVLXmitWaitCounters of every switch port
  // whose PMA answers them. Each is read the first time and then only when the base counter it
  // splits (PortRcvErrors, PortXmitDiscards, PortXmitWait) moved, and served from the last read
  // otherwise: no more MADs per port while nothing moves, up to three when all three move.
  bool detail_counters = true;
  // Reads all three every time, as before that (three more MADs per port per read), for a site
  // that does not want to rely on the base counters.
  bool detail_counters_every_read = false;
  // PortExtendedSpeedsCounters (FEC corrected and uncorrectable blocks, corrected symbols, symbol
  // errors per lane) of every switch port running an extended speed (FDR and faster), from PMAs
  // that answer it: one more MAD per such port per read, and after each discovery one
  // PortInfoExtended SMP per such port of a PMA with RS-FEC counters.
  bool extended_speeds_counters = false;
  // Each discovery runs in a child process of this executable (kDiscoverOnceFlag), which exits
  // after it; one that runs longer than `discovery_deadline` is killed.
  std::filesystem::path discovery_executable = "/proc/self/exe";
  std::chrono::seconds discovery_deadline{120};
  // The cabling plan every discovered model is compared with (fabric_topology.h); empty: none.
  std::filesystem::path topology_file;
  // Where each good discovery's model and cable memory are saved, and read back at start:
  // served until the first discovery, the baseline it reports missing and downgraded cables
  // against. Empty: nothing survives a restart.
  std::filesystem::path state_file;
};

// The hidden mode of the exporter's executable that discovers once, writes the result as JSON to
// stdout and exits: the process's memory, what libibnetdisc leaks included, goes with it.
inline constexpr std::string_view kDiscoverOnceFlag = "--fabric.discover-once";

// That mode's main, given the arguments after kDiscoverOnceFlag; exits the process.
[[noreturn]] void run_discovery_child(const std::vector<std::string_view>& args);

// `GUID "name"` lines, `#` comments, as ibnetdiscover reads them. kNodeNameMap names the line of
// the first entry that is not of that form.
std::expected<std::vector<std::pair<std::uint64_t, std::string>>, Error> parse_node_name_map(
    std::string_view text);

// "0x0002c90300100001", "0002c90300100001" or "0002:c903:0010:0001" (as sysfs prints node_guid).
std::optional<std::uint64_t> parse_guid(std::string_view text);
// A GUID as the kernel prints node_guid in sysfs ("0002:c903:0010:0001").
std::string format_guid(std::uint64_t guid);

// One discovered switch, as service discovery lists it.
struct FabricSwitch {
  std::string guid;  // as labels and /fabric?target= spell it ("0002:c903:0010:0001")
  std::string description;
  std::uint16_t lid = 0;
  int ports = 0;
};

class Fabric {
 public:
  enum class Lookup { kFound, kNoModel, kUnknownSwitch };

  // Opens the local port and starts discovering at once, then every `discovery_interval`.
  // kLocalPort when the local port cannot send MADs (why, in one sentence), kNodeNameMap for a
  // node-name-map that cannot be read or parsed, kTopologyFile for a topology file that cannot
  // be read or has a line that does not parse (its path and line number in the message).
  static std::expected<std::unique_ptr<Fabric>, Error> open(FabricOptions options);
  ~Fabric();
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  // Reads the topology file again, logging the outcome; on kTopologyFile the plan read before
  // stays in use.
  std::expected<void, Error> reload_topology();

  // Rediscovers now (the background thread does it) and waits for it to finish; returns whether
  // that discovery succeeded.
  bool rediscover();

  // The switches of the last good model; nullopt before the first discovery succeeded (no
  // model yet, which is not a fabric without switches).
  std::optional<std::vector<FabricSwitch>> switches() const;

  // One switch's port series (counters, link width and speed, far end), read now within
  // `budget` (the options' budget when zero or larger), and the read's own metrics.
  Lookup collect_switch(std::uint64_t guid, std::chrono::milliseconds budget,
                        collectors::MetricSet& out, collectors::ErrorSink& errors) const;
  // Every switch of the model, read in one exchange.
  void collect_all(collectors::MetricSet& out, collectors::ErrorSink& errors) const;
  // Discovery's own metrics: success, age and size of the model, vanished and degraded links,
  // and with a topology file every planned cable's status and every unexpected cable.
  void collect_discovery(collectors::MetricSet& out) const;

 private:
  struct Impl;
  explicit Fabric(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Discovery's metrics on /metrics, and with `switch_ports` every switch port of the fabric too
// (for small sites; large ones scrape /fabric?target= per switch).
std::unique_ptr<collectors::FabricCollector> make_fabric_collector(
    std::shared_ptr<const Fabric> fabric, bool switch_ports);

}  // namespace ibprobe::fabric
