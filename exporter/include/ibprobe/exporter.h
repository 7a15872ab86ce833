// The exporter: flags, HTTP routes and the civetweb server. The only layer that speaks HTTP.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "ibprobe/collectors.h"
#include "ibprobe/fabric.h"
#include "ibprobe/gids.h"
#include "ibprobe/link_health.h"
#include "ibprobe/remote_pma.h"

namespace ibprobe::collectors {
class Fabric;
}

namespace ibprobe::exporter {

struct WebConfig;

struct Config {
  std::string listen_address = ":9470";
  std::string telemetry_path = "/metrics";
  std::string sysfs_root = "/sys";
  std::string device_include;
  std::string device_exclude;
  std::vector<std::string> enabled_collectors;
  // ethtool collector: every statistic of the netdev, not only the RoCE ones.
  bool ethtool_all_statistics = false;
  // gids collector: how often each port's whole GID table is read again (0: every scrape).
  std::chrono::steady_clock::duration gid_rescan_interval = collectors::kDefaultGidRescanInterval;
  // link_health collector: how often each RoCE port's transceiver module is read.
  std::chrono::steady_clock::duration link_health_module_interval =
      collectors::kDefaultModuleInterval;
  std::string log_level = "info";
  int http_threads = 8;
  // Requests waiting for a probe at once, on workers beyond http_threads (ProbeApi).
  int http_max_waiting = 64;
  int scrape_parallelism = 4;
  // Remote port counters over PerfMgt MADs; off unless asked for, as it needs an IB fabric.
  bool remote_pma = false;
  fabric::RemotePmaOptions remote_pma_options;
  // Fabric discovery and the /fabric endpoints; `fabric_collector` also serves the whole fabric
  // on the metrics page.
  bool fabric = false;
  bool fabric_collector = false;
  fabric::FabricOptions fabric_options;
  // The responder that answers peers' verbs probes; an empty address turns it off.
  std::string probe_responder_address = ":9471";
  std::string probe_device;  // empty: the first device with an ACTIVE port
  int probe_device_port = 1;
  // Shared secret of the probe control protocol (--probe.secret-file): peers prove they hold it.
  std::string probe_shared_secret;
  // TLS and authentication of the HTTP server (--web.config.file), loaded and checked by
  // parse_flags; null: plain HTTP, no authentication.
  std::string web_config_file;
  std::shared_ptr<const WebConfig> web_config;
  // Probe modules, allowed targets and scheduler bounds (YAML); empty: the built-in modules.
  std::string config_file;
  // Alertmanager (http://HOST:PORT) the alert receiver pushes the verdict of each alert-started
  // run to, as an alert of its own; empty: none.
  std::string alertmanager_url;
  // --mesh.plan: print the mesh plan of --mesh.self at --mesh.at (default now) and exit.
  bool mesh_plan = false;
  std::string mesh_peers_file;
  std::string mesh_peers_dns;
  std::string mesh_self;
  std::optional<std::int64_t> mesh_at;  // seconds since 1970
};

// Parses the command line. Returns the exit code when the process should stop right away
// (--help, --version, or a usage error, which is printed).
std::optional<int> parse_flags(int argc, const char* const argv[], Config& config);

// civetweb's "listening_ports" value for a Prometheus-style address (":9470", "host:port",
// "[::1]:9470"); throws std::invalid_argument with the reason for anything else.
std::string civetweb_listening_port(const std::string& listen_address);

struct HttpRequest {
  std::string method;
  std::string path;
  std::string query;
  std::map<std::string, std::string> headers;  // lower-cased names
  std::string body;
  // For handlers that wait: a token that stops when the client disconnects or the server stops.
  // Watching costs a look-up of the connection's socket, so it starts on the first call; a
  // request no server made (tests) gets a token that never stops.
  std::function<std::stop_token()> watch_client = nullptr;
  std::stop_token client_stop() const { return watch_client ? watch_client() : std::stop_token{}; }
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;

  static HttpResponse text(int status, std::string body) {
    HttpResponse response;
    response.status = status;
    response.body = std::move(body);
    return response;
  }
};

class ProbeApi;

// Maps requests to handlers; independent of the server so it can be tested without sockets.
class Routes {
 public:
  // `probes` may be null: the probe endpoints then answer 503.
  Routes(const Config& config, collectors::Scraper& scraper, const ProbeApi* probes = nullptr);
  HttpResponse handle(const HttpRequest& request) const;
  void set_ready(bool ready) { ready_ = ready; }
  // Serves /fabric, /fabric/sd and POST /fabric/discover from `fabric` (null: they answer 503).
  void set_fabric(fabric::Fabric* fabric) { fabric_ = fabric; }
  // Families appended to every /metrics answer (the mesh's); set before serving starts.
  void set_extra_metrics(std::function<collectors::MetricSet()> extra) {
    extra_metrics_ = std::move(extra);
  }
  // The largest request body `path` takes: Alertmanager's webhook carries up to a megabyte (a
  // group of a thousand alerts), every other request a small JSON document.
  static std::size_t max_body_bytes(std::string_view path);
  // Requests the server refused before routing them, counted on /metrics, where a misconfigured
  // Alertmanager or runbook script shows before anyone reads the logs.
  enum class Refusal { kUnauthorized, kBodyTooLarge };
  void count_refused(Refusal refusal) const {
    refused_[static_cast<std::size_t>(refusal)].fetch_add(1, std::memory_order_relaxed);
  }

 private:
  HttpResponse metrics() const;
  HttpResponse landing_page() const;
  HttpResponse probe_route(const HttpRequest& request) const;
  // POST /-/reload: the probe configuration and the fabric's topology file, as SIGHUP.
  HttpResponse reload() const;
  HttpResponse fabric_route(const HttpRequest& request) const;

  const Config& config_;
  collectors::Scraper& scraper_;
  const ProbeApi* probes_;
  fabric::Fabric* fabric_ = nullptr;
  std::function<collectors::MetricSet()> extra_metrics_;
  std::atomic<bool> ready_ = false;
  mutable std::array<std::atomic<std::uint64_t>, 2> refused_ = {};
};

class HttpServer {
 public:
  // Starts serving at once; throws std::runtime_error when the address cannot be bound.
  HttpServer(const std::string& listen_address, int threads, const Routes& routes);
  // With TLS and authentication as `web` says (web_config.h); throws std::runtime_error also
  // when its certificate or key cannot be used.
  HttpServer(const std::string& listen_address, int threads, const Routes& routes,
             const WebConfig& web);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  // The bound port (useful with port 0, which asks the kernel for a free one).
  int port() const;
  HttpServer& operator=(const HttpServer&) = delete;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

extern const char* const kVersion;
extern const char* const kRevision;

}  // namespace ibprobe::exporter
