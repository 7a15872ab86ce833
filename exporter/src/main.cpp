#include <malloc.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <atomic>
#include <csignal>
#include <exception>
#include <iostream>

#include "host_collectors.h"
#include "http_post.h"
#include "ibprobe/active_port.h"
#include "ibprobe/exporter.h"
#include "ibprobe/host_port.h"
#include "ibprobe/mesh_runner.h"
#include "ibprobe/verbs_probe.h"
#include "mesh_plan_command.h"
#include "probe_api.h"
#include "probe_service.h"
#include "web_config.h"

namespace {

using namespace ibprobe;

void setup_logging(const std::string& level) {
  auto logger = spdlog::stderr_logger_mt("ibprobe");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %l %v", spdlog::pattern_time_type::utc);
  logger->set_level(spdlog::level::from_str(level));
  spdlog::set_default_logger(logger);
}

// As Go programs do (node_exporter among them): the soft limit of open files up to the hard one.
// Scrapes keep every attribute file open, and a host with many RoCE ports has thousands.
void raise_open_file_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

// Said once; every read that finds no descriptor left is counted by its reason and logged at
// debug like any other dropped input.
void warn_out_of_descriptors(const std::filesystem::path& path) {
  static std::atomic_flag warned;
  if (warned.test_and_set()) return;
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  spdlog::warn(
      "no file descriptor left to read {} (RLIMIT_NOFILE soft {}, hard {}): reads that find none "
      "are dropped and counted in ibprobe_scrape_errors_total{{reason=\"too_many_open_files\"}}; "
      "raise the hard limit (LimitNOFILE= in the systemd unit)",
      path.string(), limit.rlim_cur, limit.rlim_max);
}

collectors::Options collector_options(const exporter::Config& config) {
  collectors::Options options;
  options.sysfs_root = config.sysfs_root;
  options.devices = collectors::DeviceFilter(config.device_include, config.device_exclude);
  options.parallelism = config.scrape_parallelism;
  return options;
}

std::vector<std::unique_ptr<collectors::FabricCollector>> make_fabric_collectors(
    const exporter::Config& config, const std::shared_ptr<fabric::Fabric>& fabric) {
  std::vector<std::unique_ptr<collectors::FabricCollector>> result;
  if (fabric) {
    result.push_back(fabric::make_fabric_collector(fabric, config.fabric_collector));
  }
  if (!config.remote_pma) return result;
  auto remote = fabric::make_remote_pma_collector(config.remote_pma_options);
  // Said once here; scrapes then carry only ibprobe_remote_pma_up 0 and its reason.
  if (!remote.unavailable.empty()) {
    spdlog::warn("remote_pma: {}; the collector stays idle", remote.unavailable);
  }
  result.push_back(std::move(remote.collector));
  return result;
}

// The port probes run on, both ways: the one asked for, or the first ACTIVE one.
std::optional<probes::LocalPort> probe_port(const exporter::Config& config) {
  if (!config.probe_device.empty()) {
    return probes::LocalPort{config.probe_device,
                             static_cast<std::uint8_t>(config.probe_device_port),
                             config.sysfs_root};
  }
  const auto active = collectors::first_active_port(config.sysfs_root);
  if (!active) return std::nullopt;
  return probes::LocalPort{active->device, active->port, active->sysfs_root};
}

// Where the responder listens (parse_flags checked the address).
probes::HostPort responder_address(const exporter::Config& config) {
  const auto address =
      probes::parse_host_port(config.probe_responder_address, probes::HostPortRules::listen());
  if (!address) {
    throw std::invalid_argument("--probe.responder-address '" + config.probe_responder_address +
                                "': " + address.error());
  }
  return *address;
}

// The verbs probe responder, when asked for and when there is a port to probe on.
std::unique_ptr<probes::Responder> start_probe_responder(
    const exporter::Config& config, const std::optional<probes::LocalPort>& local,
    const probes::Limits& limits, std::shared_ptr<probes::ProbeGate> gate,
    std::optional<probes::MeshEndpoint> mesh_endpoint) {
  if (config.probe_responder_address.empty()) return nullptr;
  if (!local) {
    spdlog::info("probe responder off: no RDMA port is ACTIVE");
    return nullptr;
  }
  const auto address = responder_address(config);
  auto responder = std::make_unique<probes::Responder>(
      address.host, std::to_string(address.port), *local,
      probes::ResponderOptions{limits, config.probe_shared_secret, std::move(gate),
                               std::move(mesh_endpoint)});
  spdlog::info("probe responder listening on {} port {} for {} port {}",
               config.probe_responder_address, responder->port(), local->device, local->port);
  return responder;
}

// The mesh, when the configuration turns it on: it needs the port to ping from and the
// responder, which tells peers where this host answers.
std::unique_ptr<mesh::MeshRunner> start_mesh(const exporter::Config& config,
                                             const std::optional<probes::LocalPort>& local,
                                             const mesh::MeshConfig& mesh_config) {
  if (!mesh_config.enabled) return nullptr;
  if (config.probe_responder_address.empty()) {
    throw std::invalid_argument(
        "mesh: enabled needs --probe.responder-address, where peers learn this host's address");
  }
  if (!local) throw std::invalid_argument("mesh: enabled, but no RDMA port is ACTIVE");
  return std::make_unique<mesh::MeshRunner>(
      mesh::MeshRunner::Options{mesh_config, *local, std::to_string(responder_address(config).port),
                                config.probe_shared_secret});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && argv[1] == fabric::kDiscoverOnceFlag) {
    fabric::run_discovery_child(std::vector<std::string_view>(argv + 2, argv + argc));
  }
  // One malloc arena for every thread: each extra arena keeps the pages of the scrapes its
  // thread served. Measured with tests/bench/scrape_benchmark.sh after 1,000 scrapes: RSS
  // 10.3 MiB instead of 11.9, for some lock contention between the collecting threads (futex
  // calls per scrape 29-65 instead of 11). Set before any thread starts.
  mallopt(M_ARENA_MAX, 1);
  // A scrape frees everything it allocated, and glibc gave the top of the heap back to the
  // kernel each time (M_TRIM_THRESHOLD starts at 128 KiB), so the next scrape faulted the same
  // pages in again: 27 page faults per scrape on the benchmark's tree, none with these. Pages
  // up to these sizes stay in the heap for the next scrape; a fabric page of megabytes is still
  // mapped and unmapped on its own.
  mallopt(M_MMAP_THRESHOLD, 512 * 1024);
  mallopt(M_TRIM_THRESHOLD, 1024 * 1024);
  exporter::Config config;
  if (const auto exit_code = exporter::parse_flags(argc, argv, config)) return *exit_code;
  if (config.mesh_plan) return exporter::run_mesh_plan(config, std::cout, std::cerr);
  setup_logging(config.log_level);
  raise_open_file_limit();

  // Block the stop signals before any server thread starts, so only sigwait below sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  try {
    std::shared_ptr<fabric::Fabric> fabric;
    if (config.fabric) {
      auto opened = fabric::Fabric::open(config.fabric_options);
      if (!opened) {
        spdlog::error("{}", opened.error().message);
        return 1;
      }
      fabric = std::move(*opened);
    }
    collectors::Scraper scraper(
        collector_options(config), exporter::make_host_collectors(config),
        [](std::string_view collector, collectors::ReadError reason,
           const std::filesystem::path& path) {
          if (reason == collectors::ReadError::kTooManyOpenFiles) warn_out_of_descriptors(path);
          spdlog::debug("collector={} dropped input path={} reason={}", collector, path.string(),
                        collectors::to_string(reason));
        },
        make_fabric_collectors(config, fabric));
    const auto local = probe_port(config);
    const auto gate = std::make_shared<probes::ProbeGate>();
    exporter::ProbeService probe_service(exporter::ProbeService::Options{
        local, config.probe_shared_secret, config.config_file, gate});
    std::optional<exporter::HttpUrl> alertmanager;
    if (!config.alertmanager_url.empty()) {
      alertmanager = exporter::parse_http_url(config.alertmanager_url).value();
    }
    exporter::ProbeApi probe_api(probe_service, static_cast<std::size_t>(config.http_max_waiting),
                                 exporter::SelfNames::system(), std::move(alertmanager));
    const auto mesh_runner = start_mesh(config, local, probe_service.config()->mesh);
    // Every host's responder listens where this one's does, as the mesh assumes too.
    probe_api.set_peer_directory(
        mesh_runner
            ? exporter::PeerDirectory([&mesh_runner]()
                                          -> std::expected<exporter::PeerList, std::string> {
                return exporter::PeerList{mesh_runner->peers(), "the mesh", mesh_runner->self()};
              })
            : exporter::PeerDirectory(),
        std::to_string(config.probe_responder_address.empty() ? exporter::kDefaultResponderPort
                                                              : responder_address(config).port));
    exporter::Routes routes(config, scraper, &probe_api);
    if (mesh_runner) routes.set_extra_metrics([&mesh_runner] { return mesh_runner->metrics(); });
    // Waiting requests have workers of their own, so --web.threads stay free for the rest.
    exporter::HttpServer server(config.listen_address,
                                config.http_threads + config.http_max_waiting, routes,
                                config.web_config ? *config.web_config : exporter::WebConfig{});
    // Parsed already by the flags: the server would not have started otherwise.
    probe_api.set_listen(
        probes::parse_host_port(config.listen_address, probes::HostPortRules::listen())->host,
        static_cast<std::uint16_t>(server.port()));
    const auto responder =
        start_probe_responder(config, local, probe_service.config()->limits, gate,
                              mesh_runner ? std::optional(mesh_runner->endpoint()) : std::nullopt);
    routes.set_fabric(fabric.get());
    routes.set_ready(true);
    spdlog::info(
        "ibprobe_exporter {} listening on {} port {} (metrics at {}, sysfs at {}, collectors: "
        "{}{}; probes from {})",
        exporter::kVersion, config.listen_address, server.port(), config.telemetry_path,
        config.sysfs_root, fmt::join(config.enabled_collectors, ","),
        std::string(config.remote_pma ? ",remote_pma" : "") +
            (config.fabric_collector ? ",fabric" : ""),
        local ? local->device + " port " + std::to_string(local->port) : "nowhere");
    int signal = 0;
    while (sigwait(&stop_signals, &signal) == 0 && signal == SIGHUP) {
      if (const auto reloaded = probe_service.reload(); !reloaded) {
        spdlog::error("reload refused, the previous configuration stays: {}", reloaded.error());
      } else {
        spdlog::info("configuration reloaded from {}", config.config_file);
      }
      // A refused plan is logged by the fabric, which keeps the previous one.
      if (fabric) (void)fabric->reload_topology();
    }
    spdlog::info("received signal {}, shutting down", signal);
    routes.set_ready(false);
    // A running probe is cancelled and its waiters answered before the server stops.
    probe_service.shutdown();
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
  return 0;
}
