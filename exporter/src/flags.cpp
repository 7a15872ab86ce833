#include <CLI/CLI.hpp>
#include <iostream>
#include <regex>
#include <stdexcept>

#include "http_post.h"
#include "ibprobe/crypto.h"
#include "ibprobe/exporter.h"
#include "ibprobe/host_port.h"
#include "ibprobe/shared_secret.h"
#include "web_config.h"

namespace ibprobe::exporter {
namespace {

// Flags held in another unit or shape than Config holds them (milliseconds as int, targets as
// text, negatable flags as counts) until the command line has been parsed and checked.
struct StagedFlags {
  bool show_version = false;
  std::string probe_secret_file;
  std::vector<int> enabled_collectors;
  int gid_rescan_seconds = 0;
  int module_interval_seconds = 0;
  int remote_pma = 0;
  std::vector<std::string> remote_targets;
  int remote_ca_port = 0, remote_timeout_ms = 0, remote_budget_ms = 0;
  int fabric_collector = 0;
  int discovery_interval = 0, fabric_timeout_ms = 0, fabric_budget_ms = 0, discovery_deadline = 0;
};

// An integer option held to [min, max], whose help shows the value it keeps when not given.
template <typename T>
void add_in_range(CLI::App& app, const std::string& name, T& value, const std::string& help,
                  int min, int max) {
  app.add_option(name, value, help)->capture_default_str()->check(CLI::Range(min, max));
}

// The HTTP server, the probe responder, configuration files, devices and logging.
void add_server_options(CLI::App& app, Config& config, StagedFlags& staged) {
  app.add_flag("--version", staged.show_version, "Print the version and exit");
  app.add_option("--web.listen-address", config.listen_address,
                 "Address to listen on for HTTP requests")
      ->capture_default_str();
  app.add_option("--web.telemetry-path", config.telemetry_path,
                 "Path under which metrics are served")
      ->capture_default_str()
      ->check([](const std::string& path) {
        return path.starts_with("/") ? std::string() : std::string("must start with /");
      });
  add_in_range(app, "--web.threads", config.http_threads, "HTTP worker threads", 1, 256);
  add_in_range(app, "--web.max-waiting-requests", config.http_max_waiting,
               "Requests that wait for a probe (/probe, ?wait=) at once, each on an HTTP worker "
               "added beyond --web.threads; more are answered 503 with Retry-After",
               1, 1024);
  add_in_range(app, "--scrape.parallelism", config.scrape_parallelism,
               "Devices collected concurrently during one scrape", 1, 64);
  app.add_option("--probe.responder-address", config.probe_responder_address,
                 "HOST:PORT the verbs probe responder listens on (default :9471; empty: no "
                 "responder)")
      // "--probe.responder-address=" (nothing after the =) is the empty value, not a missing one.
      ->expected(0, 1)
      ->default_str("");
  app.add_option("--probe.device", config.probe_device,
                 "RDMA device probes run on, both ways (default: the first with an ACTIVE port)");
  add_in_range(app, "--probe.device-port", config.probe_device_port, "Port of --probe.device", 1,
               255);
  app.add_option("--config.file", config.config_file,
                 "Probe modules, allowed targets and scheduler bounds (YAML; reloaded on SIGHUP "
                 "and POST /-/reload); empty: the built-in modules")
      ->check(CLI::ExistingFile);
  app.add_option(
      "--alerts.alertmanager-url", config.alertmanager_url,
      "Alertmanager (http[s]://HOST:PORT) to push the verdict of every alert-started probe "
      "to, as an IbprobeProbeVerdict alert with the original alert's labels");
  app.add_option("--web.config.file", config.web_config_file,
                 "TLS and authentication of the HTTP server (exporter-toolkit web config YAML)");
  app.add_option("--probe.secret-file", staged.probe_secret_file,
                 "File holding the shared secret probe peers must prove they hold (16 bytes at "
                 "least; both the responder and probes sent from here use it)");
  app.add_option("--path.sysfs", config.sysfs_root, "sysfs mount point")->capture_default_str();
  app.add_option("--device.include", config.device_include,
                 "Regular expression of RDMA device names to export (whole name)");
  app.add_option("--device.exclude", config.device_exclude,
                 "Regular expression of RDMA device names to leave out (whole name)");
  app.add_option("--log.level", config.log_level, "Minimum log level")
      ->capture_default_str()
      ->check(CLI::IsMember({"debug", "info", "warn", "error"}));
}

// The host's collectors, each enabled or disabled by name.
void add_collector_options(CLI::App& app, Config& config, StagedFlags& staged) {
  const auto& infos = collectors::available_collectors();
  auto& enabled = staged.enabled_collectors;
  enabled.resize(infos.size());
  for (std::size_t i = 0; i < infos.size(); ++i) {
    const std::string name(infos[i].name);
    app.add_flag("--collector." + name + ",!--no-collector." + name, enabled[i],
                 "Enable the " + name + " collector: " + std::string(infos[i].description) +
                     (infos[i].enabled_by_default ? " (default: on)" : " (default: off)"));
    // CLI11 zeroes a counting flag when it is added: the default goes in afterwards.
    enabled[i] = infos[i].enabled_by_default ? 1 : 0;
  }

  app.add_flag("--collector.ethtool.all", config.ethtool_all_statistics,
               "ethtool collector: export every statistic of the netdev, not only the RoCE ones "
               "(pause, PFC, discards, drops, out of buffer, physical-layer errors)");

  staged.gid_rescan_seconds = static_cast<int>(
      std::chrono::duration_cast<std::chrono::seconds>(config.gid_rescan_interval).count());
  add_in_range(app, "--collector.gids.rescan-interval-seconds", staged.gid_rescan_seconds,
               "gids collector: read each port's whole GID table again after this long; the "
               "scrapes between read only the entries found populated, so a removed or changed "
               "entry shows at once and a new one within this time (0: the whole table on "
               "every scrape)",
               0, 86400);

  staged.module_interval_seconds = static_cast<int>(
      std::chrono::duration_cast<std::chrono::seconds>(config.link_health_module_interval).count());
  add_in_range(app, "--collector.link_health.module-interval-seconds",
               staged.module_interval_seconds,
               "link_health collector: read each RoCE port's transceiver module again after this "
               "long, on the collector's own thread (scrapes serve the last reading); a netdev "
               "without a module or FEC statistics is asked again after this long too",
               1, 86400);
}

// PortCounters of chosen remote ports over PerfMgt MADs.
void add_remote_pma_options(CLI::App& app, Config& config, StagedFlags& staged) {
  app.add_flag("--collector." + std::string(fabric::kRemotePmaCollector) + ",!--no-collector." +
                   std::string(fabric::kRemotePmaCollector),
               staged.remote_pma,
               "Enable the remote_pma collector: PortCounters of remote ports (switches, peers) "
               "over PerfMgt MADs from a local InfiniBand port (default: off)");
  auto& remote = config.remote_pma_options;
  app.add_option("--collector.remote_pma.target", staged.remote_targets,
                 "Remote port to read, LID:PORT or LID:all (repeatable)")
      ->check([](const std::string& text) {
        return fabric::parse_remote_port(text) ? std::string()
                                               : "must be LID:PORT or LID:all, LID 1-49151 "
                                                 "(decimal or 0x-hex), PORT 0-254";
      });
  app.add_option("--collector.remote_pma.ca", remote.ca,
                 "Local CA to send MADs from (default: the first with an InfiniBand port)");
  staged.remote_ca_port = remote.ca_port;
  add_in_range(app, "--collector.remote_pma.ca-port", staged.remote_ca_port,
               "Local port to send MADs from (0: the CA's first InfiniBand port)", 0, 254);
  staged.remote_timeout_ms = static_cast<int>(remote.timeout.count());
  add_in_range(app, "--collector.remote_pma.timeout-ms", staged.remote_timeout_ms,
               "Time to wait for each MAD's answer", 1, 60000);
  add_in_range(app, "--collector.remote_pma.retries", remote.retries,
               "Further attempts after a MAD timed out", 0, 10);
  staged.remote_budget_ms = static_cast<int>(remote.budget.count());
  add_in_range(app, "--collector.remote_pma.budget-ms", staged.remote_budget_ms,
               "Time all remote queries of one scrape may take together", 1, 600000);
  add_in_range(app, "--collector.remote_pma.concurrency", remote.concurrency,
               "MADs in flight at once", 1, 256);
  app.add_flag("--collector.remote_pma.detail-counters,!--no-collector.remote_pma.detail-counters",
               remote.detail_counters,
               "Also read PortRcvErrorDetails, PortXmitDiscardDetails and PortVLXmitWaitCounters "
               "of each target from PMAs that answer them: up to three more MADs per port per "
               "scrape (default: off)");
  app.add_flag(
      "--collector.remote_pma.extended-speeds-counters,!--no-collector.remote_pma.extended-"
      "speeds-counters",
      remote.extended_speeds_counters,
      "Also read PortExtendedSpeedsCounters (FEC counters) of each LID:PORT target from PMAs "
      "that answer it: one more MAD per port per scrape (default: off)");
}

// Discovery of the InfiniBand fabric and the reads of its switches.
void add_fabric_options(CLI::App& app, Config& config, StagedFlags& staged) {
  app.add_flag("--collector." + std::string(fabric::kFabricCollector) + ",!--no-collector." +
                   std::string(fabric::kFabricCollector),
               staged.fabric_collector,
               "Serve every switch port of the fabric on the metrics page (implies "
               "--fabric.enabled; default: off)");
  app.add_flag("--fabric.enabled", config.fabric,
               "Discover the InfiniBand fabric and serve /fabric?target=SWITCH_GUID and "
               "/fabric/sd (default: off)");
  auto& fabric = config.fabric_options;
  app.add_option("--fabric.ca", fabric.ca,
                 "Local CA to discover from and send MADs from (default: the first with an "
                 "InfiniBand port)");
  add_in_range(app, "--fabric.ca-port", fabric.ca_port,
               "Local port of --fabric.ca (0: the CA's first InfiniBand port)", 0, 254);
  staged.discovery_interval = static_cast<int>(fabric.discovery_interval.count());
  add_in_range(app, "--fabric.discovery-interval-seconds", staged.discovery_interval,
               "Time between discoveries (POST /fabric/discover discovers at once)", 1, 86400);
  app.add_option("--fabric.node-name-map", fabric.node_name_map,
                 "Node names by GUID in ibnetdiscover's node-name-map format (GUID \"name\" per "
                 "line); they replace node descriptions in labels")
      ->check(CLI::ExistingFile);
  app.add_option("--fabric.topology-file", fabric.topology_file,
                 "The cabling plan: ibnetdiscover's output or a plain cable list (NODE PORT NODE "
                 "PORT per line); every discovery is compared with it (reloaded on SIGHUP)")
      ->check(CLI::ExistingFile);
  app.add_option("--fabric.state-file", fabric.state_file,
                 "Where each good discovery's model and cable memory are saved (atomically) and "
                 "read back at start, so missing and downgraded cables survive a restart and "
                 "/fabric/sd answers before the first discovery");
  staged.fabric_timeout_ms = static_cast<int>(fabric.timeout.count());
  add_in_range(app, "--fabric.timeout-ms", staged.fabric_timeout_ms,
               "Time to wait for each MAD's answer (discovery and counters)", 1, 60000);
  add_in_range(app, "--fabric.retries", fabric.retries, "Further attempts after a MAD timed out", 0,
               10);
  staged.fabric_budget_ms = static_cast<int>(fabric.budget.count());
  add_in_range(app, "--fabric.budget-ms", staged.fabric_budget_ms,
               "Time one read (a switch, or the whole fabric on the metrics page) may take; "
               "a scrape's own timeout lowers it",
               1, 600000);
  add_in_range(app, "--fabric.concurrency", fabric.concurrency, "PerfMgt MADs in flight at once", 1,
               256);
  app.add_flag("--fabric.detail-counters,!--no-fabric.detail-counters", fabric.detail_counters,
               "Also read PortRcvErrorDetails, PortXmitDiscardDetails and PortVLXmitWaitCounters "
               "of every switch port whose PMA answers them; each is read again only when the "
               "base counter it splits (PortRcvErrors, PortXmitDiscards, PortXmitWait) moved, "
               "and served from its last read otherwise: no MAD more per port while nothing "
               "moves, up to three (default: on)");
  app.add_flag("--fabric.detail-counters-every-read,!--no-fabric.detail-counters-every-read",
               fabric.detail_counters_every_read,
               "Read the three detail attributes of every switch port on every read, whether or "
               "not a base counter moved: three more MADs per port per read, for a site that "
               "does not trust its PMAs' base counters (default: off)");
  app.add_flag("--fabric.extended-speeds-counters,!--no-fabric.extended-speeds-counters",
               fabric.extended_speeds_counters,
               "Also read PortExtendedSpeedsCounters (FEC counters) of every switch port at FDR "
               "or faster whose PMA answers it: one more MAD per such port per read (default: "
               "off)");
  staged.discovery_deadline = static_cast<int>(fabric.discovery_deadline.count());
  add_in_range(app, "--fabric.discovery-deadline-seconds", staged.discovery_deadline,
               "Time one discovery may take; its process is killed after it and the previous "
               "model stays",
               1, 86400);
}

void add_mesh_options(CLI::App& app, Config& config) {
  app.add_flag("--mesh.plan", config.mesh_plan,
               "Print the mesh plan of --mesh.self as JSON lines and exit");
  app.add_option("--mesh.peers-file", config.mesh_peers_file,
                 "Mesh peers in Prometheus file_sd format (labels: tor, gid_family)");
  app.add_option("--mesh.peers-dns", config.mesh_peers_dns,
                 "Mesh peers: NAME:PORT resolving to every peer");
  app.add_option("--mesh.self", config.mesh_self, "This host's target in the peer list ('*': all)");
  app.add_option("--mesh.at", config.mesh_at, "Plan at this time (seconds since 1970)");
}

// What an option names must exist and be usable before the exporter starts: the listen
// addresses and device expressions are checked, the secret and the web configuration loaded.
// An exit status when one is not.
std::optional<int> check_and_load(Config& config, const StagedFlags& staged) {
  try {
    civetweb_listening_port(config.listen_address);
    if (!config.probe_responder_address.empty()) {
      civetweb_listening_port(config.probe_responder_address);
    }
    collectors::DeviceFilter(config.device_include, config.device_exclude);
  } catch (const std::regex_error& e) {
    std::cerr << "ibprobe_exporter: invalid --device.include/--device.exclude regular expression: "
              << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "ibprobe_exporter: " << e.what() << "\n";
    return 2;
  }
  if (!staged.probe_secret_file.empty()) {
    try {
      config.probe_shared_secret = probes::load_shared_secret(staged.probe_secret_file);
      crypto::require();
    } catch (const std::exception& e) {
      std::cerr << "ibprobe_exporter: --probe.secret-file: " << e.what() << "\n";
      return 2;
    }
  }
  if (!config.alertmanager_url.empty()) {
    if (const auto url = parse_http_url(config.alertmanager_url); !url) {
      std::cerr << "ibprobe_exporter: --alerts.alertmanager-url: " << url.error() << "\n";
      return 2;
    }
  }
  if (!config.web_config_file.empty()) {
    auto web = load_web_config(config.web_config_file);
    if (!web) {
      std::cerr << "ibprobe_exporter: --web.config.file: " << web.error() << "\n";
      return 2;
    }
    if (web->auth_required()) {
      try {
        crypto::require();
      } catch (const std::exception& e) {
        std::cerr << "ibprobe_exporter: --web.config.file: checking passwords: " << e.what()
                  << "\n";
        return 2;
      }
    }
    config.web_config = std::make_shared<const WebConfig>(*std::move(web));
  }
  return std::nullopt;
}

// The staged flags into Config; an exit status when they contradict each other.
std::optional<int> apply(Config& config, const StagedFlags& staged) {
  if (staged.remote_pma > 0 && staged.remote_targets.empty()) {
    std::cerr << "ibprobe_exporter: --collector.remote_pma needs at least one "
                 "--collector.remote_pma.target=LID:PORT|LID:all\n";
    return 2;
  }
  config.remote_pma = staged.remote_pma > 0;
  config.gid_rescan_interval = std::chrono::seconds(staged.gid_rescan_seconds);
  config.link_health_module_interval = std::chrono::seconds(staged.module_interval_seconds);
  auto& remote = config.remote_pma_options;
  remote.targets.clear();
  for (const auto& target : staged.remote_targets) {
    remote.targets.push_back(*fabric::parse_remote_port(target));
  }
  remote.ca_port = staged.remote_ca_port;
  remote.timeout = std::chrono::milliseconds(staged.remote_timeout_ms);
  remote.budget = std::chrono::milliseconds(staged.remote_budget_ms);
  config.fabric_collector = staged.fabric_collector > 0;
  config.fabric = config.fabric || config.fabric_collector;
  auto& fabric = config.fabric_options;
  fabric.discovery_interval = std::chrono::seconds(staged.discovery_interval);
  fabric.discovery_deadline = std::chrono::seconds(staged.discovery_deadline);
  fabric.timeout = std::chrono::milliseconds(staged.fabric_timeout_ms);
  fabric.budget = std::chrono::milliseconds(staged.fabric_budget_ms);
  config.enabled_collectors.clear();
  const auto& infos = collectors::available_collectors();
  for (std::size_t i = 0; i < infos.size(); ++i) {
    if (staged.enabled_collectors[i] > 0) config.enabled_collectors.emplace_back(infos[i].name);
  }
  return std::nullopt;
}

}  // namespace

std::string civetweb_listening_port(const std::string& listen_address) {
  const auto address = probes::parse_host_port(listen_address, probes::HostPortRules::listen());
  if (!address) {
    throw std::invalid_argument("listen address '" + listen_address + "': " + address.error());
  }
  if (address->host.empty()) return std::to_string(address->port);
  return probes::to_string(*address);
}

std::optional<int> parse_flags(int argc, const char* const argv[], Config& config) {
  CLI::App app{"ibprobe_exporter: Prometheus exporter for InfiniBand and RoCE ports",
               "ibprobe_exporter"};
  app.get_formatter()->column_width(44);
  StagedFlags staged;
  add_server_options(app, config, staged);
  add_collector_options(app, config, staged);
  add_remote_pma_options(app, config, staged);
  add_fabric_options(app, config, staged);
  add_mesh_options(app, config);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (staged.show_version) {
    std::cout << "ibprobe_exporter " << kVersion << " (revision " << kRevision << ")\n";
    return 0;
  }
  if (const auto status = check_and_load(config, staged)) return status;
  return apply(config, staged);
}

}  // namespace ibprobe::exporter
