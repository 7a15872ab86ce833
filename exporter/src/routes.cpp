#include <prometheus/text_serializer.h>

#include <sstream>

#include "ibprobe/exporter.h"

namespace ibprobe::exporter {
namespace {

HttpResponse text(int status, std::string body) {
  HttpResponse response;
  response.status = status;
  response.body = std::move(body);
  return response;
}

prometheus::MetricFamily build_info() {
  prometheus::ClientMetric metric;
  metric.label = {{"version", kVersion}, {"revision", kRevision}, {"compiler", __VERSION__}};
  metric.gauge.value = 1;
  return {"ibprobe_build_info",
          "ibprobe build; value is always 1.",
          prometheus::MetricType::Gauge,
          {metric}};
}

}  // namespace

Routes::Routes(const Config& config, collectors::Scraper& scraper)
    : config_(config), scraper_(scraper) {}

HttpResponse Routes::handle(const HttpRequest& request) const {
  if (request.method != "GET" && request.method != "HEAD") {
    auto response = text(405, "method " + request.method + " not allowed\n");
    response.headers.emplace_back("Allow", "GET, HEAD");
    return response;
  }
  if (request.path == config_.telemetry_path) return metrics();
  if (request.path == "/-/healthy") return text(200, "Healthy\n");
  if (request.path == "/-/ready") {
    return ready_ ? text(200, "Ready\n") : text(503, "Not ready\n");
  }
  if (request.path == "/") return landing_page();
  return text(404, "no handler for " + request.path + "\n");
}

HttpResponse Routes::metrics() const {
  auto families = scraper_.scrape();
  families.push_back(build_info());
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  HttpResponse response;
  response.content_type = "text/plain; version=0.0.4; charset=utf-8";
  response.body = std::move(out).str();
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
</ul>
</body></html>
)";
  return response;
}

}  // namespace ibprobe::exporter
