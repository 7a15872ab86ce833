#include <nlohmann/json.hpp>
#include <optional>

#include "ibprobe/exporter.h"
#include "probe_api.h"

namespace ibprobe::exporter {
namespace {

collectors::MetricSet build_info() {
  collectors::MetricSet info;
  info.add("ibprobe_build_info", "ibprobe build; value is always 1.", prometheus::MetricType::Gauge,
           {{"version", kVersion}, {"revision", kRevision}, {"compiler", __VERSION__}}, 1);
  return info;
}

HttpResponse json_answer(int status, const nlohmann::json& body) {
  HttpResponse response;
  response.status = status;
  response.content_type = "application/json";
  response.body = body.dump() + "\n";
  return response;
}

HttpResponse method_not_allowed(const HttpRequest& request, const std::string& allow) {
  auto response = HttpResponse::text(
      405, "method " + request.method + " not allowed on " + request.path + "\n");
  response.headers.emplace_back("Allow", allow);
  return response;
}

constexpr std::string_view kApiRuns = "/api/v1/probes";
constexpr std::string_view kApiAlerts = "/api/v1/alerts";

}  // namespace

std::size_t Routes::max_body_bytes(std::string_view path) {
  constexpr std::size_t kMaxRequestBodyBytes = 64 * 1024;
  return path == kApiAlerts ? kMaxWebhookBytes : kMaxRequestBodyBytes;
}

Routes::Routes(const Config& config, collectors::Scraper& scraper, const ProbeApi* probes)
    : config_(config), scraper_(scraper), probes_(probes) {}

HttpResponse Routes::probe_route(const HttpRequest& request) const {
  const bool read = request.method == "GET" || request.method == "HEAD";
  if (request.path == "/-/reload") {
    if (request.method != "POST" && request.method != "PUT") {
      return method_not_allowed(request, "POST, PUT");
    }
    return reload();
  }
  if (!probes_) {
    return HttpResponse::text(503,
                              "probes are off on this exporter (no --probe.responder-address or no "
                              "ACTIVE RDMA port)\n");
  }
  if (request.path == "/probes") {
    return read ? probes_->runs_page() : method_not_allowed(request, "GET, HEAD");
  }
  if (request.path == kApiAlerts) {
    return request.method == "POST" ? probes_->alerts(request)
                                    : method_not_allowed(request, "POST");
  }
  if (request.path == "/probe") {
    // Not HEAD: a HEAD request would start a probe whose result nobody reads.
    return request.method == "GET" ? probes_->probe(request) : method_not_allowed(request, "GET");
  }
  if (request.path == kApiRuns) {
    if (request.method == "POST") return probes_->start(request);
    return read ? probes_->list(request) : method_not_allowed(request, "GET, HEAD, POST");
  }
  const auto id = std::string_view(request.path).substr(kApiRuns.size() + 1);
  return read ? probes_->get(request, id) : method_not_allowed(request, "GET, HEAD");
}

HttpResponse Routes::reload() const {
  if (!probes_ && !fabric_) {
    return HttpResponse::text(
        503, "probes and the fabric are off on this exporter: nothing to reload\n");
  }
  const bool probe_file = probes_ && !config_.config_file.empty();
  const auto& topology_file = config_.fabric_options.topology_file;
  if (!fabric_ || topology_file.empty()) {
    return probes_ ? probes_->reload()
                   : HttpResponse::text(400, "no --fabric.topology-file: nothing to reload\n");
  }
  // What SIGHUP reloads, each file on its own: a refused topology file keeps the plan in use
  // and does not hold back the probe configuration.
  const auto topology = fabric_->reload_topology();
  auto probes = probe_file ? std::optional(probes_->reload()) : std::nullopt;
  if (topology) {
    return probes ? *probes
                  : json_answer(200, {{"status", "reloaded"}, {"topology_file", topology_file}});
  }
  return json_answer(400, {{"error",
                            {{"code", "invalid_topology"},
                             {"message", "topology reload refused, the previous plan stays: " +
                                             topology.error().message},
                             {"probe_configuration", !probes                 ? "none"
                                                     : probes->status == 200 ? "reloaded"
                                                                             : "refused"}}}});
}

HttpResponse Routes::handle(const HttpRequest& request) const {
  if (request.path == "/probe" || request.path == "/-/reload" || request.path == kApiRuns ||
      request.path == kApiAlerts || request.path == "/probes" ||
      (request.path.starts_with(kApiRuns) && request.path[kApiRuns.size()] == '/' &&
       request.path.size() > kApiRuns.size() + 1)) {
    return probe_route(request);
  }
  if (request.path == "/fabric" || request.path.starts_with("/fabric/")) {
    if (request.path != "/fabric/discover" && request.method != "GET" && request.method != "HEAD") {
      return method_not_allowed(request, "GET, HEAD");
    }
    if (request.path == "/fabric" || request.path == "/fabric/sd" ||
        request.path == "/fabric/discover") {
      return fabric_route(request);
    }
  }
  if (request.method != "GET" && request.method != "HEAD") {
    return method_not_allowed(request, "GET, HEAD");
  }
  if (request.path == config_.telemetry_path) return metrics();
  if (request.path == "/-/healthy") return HttpResponse::text(200, "Healthy\n");
  if (request.path == "/-/ready") {
    return ready_ ? HttpResponse::text(200, "Ready\n") : HttpResponse::text(503, "Not ready\n");
  }
  if (request.path == "/") return landing_page();
  return HttpResponse::text(404, "no handler for " + request.path + "\n");
}

HttpResponse Routes::metrics() const {
  HttpResponse response;
  response.content_type = "text/plain; version=0.0.4; charset=utf-8";
  scraper_.append_text(response.body);
  auto info = build_info();
  for (const auto& [refusal, reason] : {std::pair{Refusal::kUnauthorized, "unauthorized"},
                                        std::pair{Refusal::kBodyTooLarge, "body_too_large"}}) {
    info.add("ibprobe_http_requests_refused_total",
             "Requests refused before they were handled, by reason: unauthorized (401, missing "
             "or wrong credentials), body_too_large (413).",
             prometheus::MetricType::Counter, {{"reason", reason}},
             static_cast<double>(
                 refused_[static_cast<std::size_t>(refusal)].load(std::memory_order_relaxed)));
  }
  std::vector<const collectors::MetricSet*> sets{&info};
  std::optional<collectors::MetricSet> extra;
  if (extra_metrics_) sets.push_back(&extra.emplace(extra_metrics_()));
  std::optional<collectors::MetricSet> probe_results, alert_results;
  if (probes_) {
    sets.push_back(&probe_results.emplace(probes_->metrics()));
    sets.push_back(&alert_results.emplace(probes_->alert_metrics()));
  }
  collectors::MetricSet::append_text(sets, response.body);
  return response;
}

HttpResponse Routes::landing_page() const {
  HttpResponse response;
  response.content_type = "text/html; charset=utf-8";
  response.body = std::string(R"(<!DOCTYPE html>
<html><head><title>ibprobe exporter</title></head>
<body>
<h1>ibprobe exporter</h1>
<p>Prometheus exporter for InfiniBand and RoCE ports, version )") +
                  kVersion + R"(.</p>
<ul>
<li><a href=")" + config_.telemetry_path +
                  R"(">Metrics</a></li>
<li><a href="/-/healthy">Health</a></li>
<li><a href="/-/ready">Readiness</a></li>
<li><a href="/probes">Recent probe runs</a>, with their triggers, verdicts and failure reasons
(as JSON: <a href="/api/v1/probes">/api/v1/probes</a>; start one: POST /api/v1/probes, or
<code>/probe?target=PEER:9471&amp;module=write_bw</code>)</li>
</ul>
</body></html>
)";
  return response;
}

}  // namespace ibprobe::exporter
